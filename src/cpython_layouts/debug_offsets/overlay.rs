//! The overlay of a target's `_Py_DebugOffsets` on a built-in layout table.
//!
//! [`layout`] overlays the offsets [`read`](super::read) took from the
//! target on the built-in table of the same version, or on the newest table
//! for a later version, one group at a time (runtime, interpreter, thread
//! state, frames, object header, objects, code objects, strings and dicts),
//! and records each field where the two disagree. Fields a version's
//! `_Py_DebugOffsets` does not carry (`interpreters.main`, `md_dict`, the
//! managed-dict constants, code flags and counts, dict keys,
//! `_PyStackChunk.data`; before 3.15 also `tp_basicsize`, `tp_dictoffset`,
//! `ht_cached_keys` and the `PyCompactUnicodeObject` size) stay as in that
//! table.

use super::{
    implausible, BytesObject, CodeObject, DebugOffsets, DictObject, FloatObject, Gc,
    HeapTypeObject, InterpreterFrame, InterpreterState, ListObject, LongObject, Pyobject,
    RuntimeState, ThreadState, TupleObject, TypeObject, UnicodeObject, MAX_STRUCT_SIZE,
};
use crate::cpython_layouts::{
    for_version, newest, CurrentFrame, DictLayout, EntryMarker, GilLocation, InstanceDict,
    InstrPosition, Layout, LongFormat, StringLayout,
};
use crate::error::Error;
/// Records each field that `_Py_DebugOffsets` changes relative to the table.
struct Overlay {
    diffs: Vec<String>,
}

impl Overlay {
    fn set<T: PartialEq + std::fmt::Debug>(&mut self, name: &str, field: &mut T, new: T) {
        if *field != new {
            self.diffs
                .push(format!("{name} (table {field:?}, target {new:?})"));
            *field = new;
        }
    }
    /// `set` to a value computed from the field's current one.
    fn update<T: PartialEq + std::fmt::Debug>(
        &mut self,
        name: &str,
        field: &mut T,
        f: impl FnOnce(&T) -> T,
    ) {
        let new = f(field);
        self.set(name, field, new);
    }
}

/// The layout for a target, from its `_Py_DebugOffsets` and a built-in table.
#[derive(Debug, Clone)]
pub struct Overlaid {
    pub layout: Layout,
    /// The version of the table the fields `_Py_DebugOffsets` lacks came
    /// from: the target's own, or the newest table for a newer target.
    pub table: (u8, u8),
    /// Each field where `_Py_DebugOffsets` and that table disagree, as
    /// "field (table X, target Y)". On the table's own version this means
    /// the table is wrong; on a newer version it is expected.
    pub diffs: Vec<String>,
}

impl Overlaid {
    /// The table is the target's own version.
    pub(crate) fn own_table(&self) -> bool {
        self.table == (self.layout.major, self.layout.minor)
    }
}

/// The layout for the target: the built-in table of the same minor version
/// (or the newest table) with every field that `_Py_DebugOffsets` provides
/// overlaid, and what differs from that table.
pub fn layout(d: &DebugOffsets) -> Result<Overlaid, Error> {
    let base = for_version(d.major(), d.minor())
        .or_else(newest)
        .ok_or(Error::NoLayoutTable)?;
    let mut l = base.clone();
    let mut o = Overlay { diffs: Vec::new() };
    l.major = d.major();
    l.minor = d.minor();
    // Frames that hold a stack pointer (3.14+) hold `_PyStackRef`s: tagged
    // pointers in `f_executable` and in `localsplus`.
    if d.get(InterpreterFrame::Stackpointer).is_some() {
        o.set("frame.pointer_tag_bits", &mut l.frame.pointer_tag_bits, 3);
    }

    runtime(d, base, &mut l, &mut o)?;
    interpreter(d, &mut l, &mut o)?;
    thread_state(d, &mut l, &mut o)?;
    frames(d, &mut l, &mut o)?;
    object_header(d, &mut l, &mut o)?;
    objects(d, &mut l, &mut o)?;
    code_objects(d, &mut l, &mut o)?;
    strings_and_dicts(d, &mut l, &mut o)?;
    Ok(Overlaid {
        layout: l,
        table: (base.major, base.minor),
        diffs: o.diffs,
    })
}

/// The runtime: where the interpreters list starts, and the GIL.
fn runtime(d: &DebugOffsets, base: &Layout, l: &mut Layout, o: &mut Overlay) -> Result<(), Error> {
    // Runtime. `interpreters.main` directly follows `head` in `struct
    // pyinterpreters`, so keep the table's distance between them.
    let head = d.need(RuntimeState::InterpretersHead)?;
    if let (Some(old_head), Some(old_main)) = (
        base.runtime.interpreters_head,
        base.runtime.interpreters_main,
    ) {
        let main = old_main.wrapping_sub(old_head).wrapping_add(head);
        o.set(
            "runtime.interpreters_main",
            &mut l.runtime.interpreters_main,
            Some(main),
        );
    }
    o.set(
        "runtime.interpreters_head",
        &mut l.runtime.interpreters_head,
        Some(head),
    );

    // The reader follows `interp->ceval.gil` to a `_gil_runtime_state`;
    // `_Py_DebugOffsets` gives holder/locked as offsets of the interpreter's
    // embedded `_gil`, so make them relative to that struct.
    let gil = d.need(InterpreterState::GilRuntimeState)?;
    let relative = |member: InterpreterState| -> Result<u64, Error> {
        let v = d.need(member)?;
        v.checked_sub(gil).filter(|r| *r < 4096).ok_or_else(|| {
            implausible(
                member.into(),
                v,
                &format!("not inside the embedded _gil at {gil}"),
            )
        })
    };
    let new_gil = GilLocation::InterpGil {
        ceval_gil: d.need(InterpreterState::CevalGil)?,
        last_holder: relative(InterpreterState::GilRuntimeStateHolder)?,
        locked: relative(InterpreterState::GilRuntimeStateLocked)?,
    };
    o.set("runtime.gil", &mut l.runtime.gil, new_gil);
    Ok(())
}

/// The interpreter state.
fn interpreter(d: &DebugOffsets, l: &mut Layout, o: &mut Overlay) -> Result<(), Error> {
    // Interpreter.
    o.set(
        "interp.next",
        &mut l.interp.next,
        d.need(InterpreterState::Next)?,
    );
    o.set(
        "interp.tstate_head",
        &mut l.interp.tstate_head,
        d.need(InterpreterState::ThreadsHead)?,
    );
    o.set(
        "interp.id",
        &mut l.interp.id,
        Some(d.need(InterpreterState::Id)?),
    );
    o.set(
        "interp.modules",
        &mut l.interp.modules,
        d.need(InterpreterState::ImportsModules)?,
    );
    // `interp->gc` is a `struct _gc_runtime_state`; each offset was checked
    // to lie inside its own struct when read. A field list without them
    // keeps the table's value.
    if let (Some(gc), Some(collecting)) = (d.get(InterpreterState::Gc), d.get(Gc::Collecting)) {
        let at = gc
            .checked_add(collecting)
            .filter(|v| *v < 2 * MAX_STRUCT_SIZE)
            .ok_or_else(|| {
                implausible(
                    Gc::Collecting.into(),
                    collecting,
                    "past the interpreter state",
                )
            })?;
        o.set(
            "interp.gc_collecting",
            &mut l.interp.gc_collecting,
            Some(at),
        );
    }
    Ok(())
}

/// The thread state.
fn thread_state(d: &DebugOffsets, l: &mut Layout, o: &mut Overlay) -> Result<(), Error> {
    // Thread state.
    let t = &mut l.thread;
    o.set("thread.next", &mut t.next, d.need(ThreadState::Next)?);
    o.set("thread.interp", &mut t.interp, d.need(ThreadState::Interp)?);
    let cf = d.need(ThreadState::CurrentFrame)?;
    o.set(
        "thread.current_frame",
        &mut t.current_frame,
        CurrentFrame::Direct(cf),
    );
    o.set(
        "thread.thread_id",
        &mut t.thread_id,
        d.need(ThreadState::ThreadId)?,
    );
    o.set(
        "thread.native_thread_id",
        &mut t.native_thread_id,
        Some(d.need(ThreadState::NativeThreadId)?),
    );
    o.set(
        "thread.datastack_chunk",
        &mut t.datastack_chunk,
        Some(d.need(ThreadState::DatastackChunk)?),
    );
    let need = [t.next, t.interp, cf, t.thread_id]
        .into_iter()
        .chain(t.native_thread_id)
        .chain(t.datastack_chunk)
        .max()
        .unwrap_or(0)
        + 8;
    let thread_size = need.min(d.need(ThreadState::Size)?);
    o.set("thread.size", &mut t.size, thread_size);
    Ok(())
}

/// Frames.
fn frames(d: &DebugOffsets, l: &mut Layout, o: &mut Overlay) -> Result<(), Error> {
    // Frames. The shim threshold is not in `_Py_DebugOffsets`; it is 3 on
    // 3.12–3.14 (CSTACK, then INTERPRETER), kept from the table.
    let f = &mut l.frame;
    o.set("frame.size", &mut f.size, d.need(InterpreterFrame::Size)?);
    o.set(
        "frame.previous",
        &mut f.previous,
        d.need(InterpreterFrame::Previous)?,
    );
    o.set(
        "frame.code",
        &mut f.code,
        d.need(InterpreterFrame::Executable)?,
    );
    o.set(
        "frame.position",
        &mut f.position,
        InstrPosition::InstrPointer(d.need(InterpreterFrame::InstrPtr)?),
    );
    o.set(
        "frame.localsplus",
        &mut f.localsplus,
        d.need(InterpreterFrame::Localsplus)?,
    );
    let shim_from = match f.entry {
        EntryMarker::OwnerShim { shim_from, .. } => shim_from,
        _ => 3,
    };
    o.set(
        "frame.entry",
        &mut f.entry,
        EntryMarker::OwnerShim {
            owner: d.need(InterpreterFrame::Owner)?,
            shim_from,
        },
    );
    Ok(())
}

/// The object header, and what a larger (free-threaded) one moves.
fn object_header(d: &DebugOffsets, l: &mut Layout, o: &mut Overlay) -> Result<(), Error> {
    // Objects. In a free-threaded build the object header is larger; the
    // table's object fields that `_Py_DebugOffsets` does not give sit behind
    // that header, so they move by the same amount.
    let ob_size = d.need(Pyobject::Size)?;
    let delta = ob_size as i64 - 16;
    if delta != 0 {
        let shift = |v: u64| v.wrapping_add_signed(delta);
        let ob = &mut l.object;
        o.update("object.tp_basicsize", &mut ob.tp_basicsize, |v| shift(*v));
        o.update("object.tp_dictoffset", &mut ob.tp_dictoffset, |v| shift(*v));
        o.update("object.ht_cached_keys", &mut ob.ht_cached_keys, |v| {
            v.map(shift)
        });
        o.update("object.module_dict", &mut ob.module_dict, |v| shift(*v));
        let c = &mut l.code;
        o.update("code.posonlyargcount", &mut c.posonlyargcount, |v| {
            v.map(shift)
        });
        o.update("code.kwonlyargcount", &mut c.kwonlyargcount, |v| {
            v.map(shift)
        });
        o.update("code.nlocals", &mut c.nlocals, |v| shift(*v));
        o.update("code.framesize", &mut c.framesize, |v| v.map(shift));
        o.update("code.flags", &mut c.flags, |v| shift(*v));
        if let StringLayout::Pep393 {
            compact_size,
            data_ptr,
            ..
        } = &mut l.string
        {
            o.update("string.compact_size", compact_size, |v| shift(*v));
            o.update("string.data_ptr", data_ptr, |v| shift(*v));
        }
    }
    if d.free_threaded {
        // 3.13 pycore_object.h: with Py_GIL_DISABLED, MANAGED_DICT_OFFSET is
        // one word before the object instead of three.
        if let InstanceDict::Inline313 {
            flag, inline_flag, ..
        } = l.object.instance_dict
        {
            let new = InstanceDict::Inline313 {
                flag,
                inline_flag,
                dict: -8,
            };
            o.set("object.instance_dict", &mut l.object.instance_dict, new);
        }
    }
    Ok(())
}

/// Type, tuple, list, float, int and bytes objects.
fn objects(d: &DebugOffsets, l: &mut Layout, o: &mut Overlay) -> Result<(), Error> {
    // 3.15+ also give the type and heap-type fields and the compact string
    // header size; older versions keep the table's (shifted) values.
    let ob = &mut l.object;
    if let Some(v) = d.get(TypeObject::TpBasicsize) {
        o.set("object.tp_basicsize", &mut ob.tp_basicsize, v);
    }
    if let Some(v) = d.get(TypeObject::TpDictoffset) {
        o.set("object.tp_dictoffset", &mut ob.tp_dictoffset, v);
    }
    if let Some(v) = d.get(HeapTypeObject::HtCachedKeys) {
        o.set("object.ht_cached_keys", &mut ob.ht_cached_keys, Some(v));
    }
    if let (
        Some(v),
        StringLayout::Pep393 {
            compact_size,
            data_ptr,
            ..
        },
    ) = (
        d.get(UnicodeObject::CompactunicodeobjectSize),
        &mut l.string,
    ) {
        // `PyUnicodeObject.data` directly follows its compact header.
        o.set("string.compact_size", compact_size, v);
        o.set("string.data_ptr", data_ptr, v);
    }
    let ob = &mut l.object;
    o.set("object.ob_type", &mut ob.ob_type, d.need(Pyobject::ObType)?);
    o.set(
        "object.ob_size",
        &mut ob.ob_size,
        d.need(TupleObject::ObSize)?,
    );
    o.set(
        "object.tp_name",
        &mut ob.tp_name,
        d.need(TypeObject::TpName)?,
    );
    o.set(
        "object.tp_flags",
        &mut ob.tp_flags,
        d.need(TypeObject::TpFlags)?,
    );
    o.set(
        "object.tuple_items",
        &mut ob.tuple_items,
        d.need(TupleObject::ObItem)?,
    );
    o.set(
        "object.list_items",
        &mut ob.list_items,
        d.need(ListObject::ObItem)?,
    );
    o.set(
        "object.float_value",
        &mut ob.float_value,
        d.need(FloatObject::ObFval)?,
    );
    o.set(
        "object.long",
        &mut ob.long,
        LongFormat::LvTag {
            tag: d.need(LongObject::LvTag)?,
            digits: d.need(LongObject::ObDigit)?,
        },
    );
    o.set(
        "object.bytes_data",
        &mut ob.bytes_data,
        d.need(BytesObject::ObSval)?,
    );
    Ok(())
}

/// Code objects.
fn code_objects(d: &DebugOffsets, l: &mut Layout, o: &mut Overlay) -> Result<(), Error> {
    // Code objects.
    let c = &mut l.code;
    o.set(
        "code.filename",
        &mut c.filename,
        d.need(CodeObject::Filename)?,
    );
    o.set("code.name", &mut c.name, d.need(CodeObject::Name)?);
    o.set(
        "code.qualname",
        &mut c.qualname,
        Some(d.need(CodeObject::Qualname)?),
    );
    o.set(
        "code.linetable",
        &mut c.linetable,
        d.need(CodeObject::Linetable)?,
    );
    o.set(
        "code.firstlineno",
        &mut c.firstlineno,
        d.need(CodeObject::Firstlineno)?,
    );
    o.set(
        "code.argcount",
        &mut c.argcount,
        d.need(CodeObject::Argcount)?,
    );
    o.set(
        "code.varnames",
        &mut c.varnames,
        d.need(CodeObject::Localsplusnames)?,
    );
    o.set(
        "code.localspluskinds",
        &mut c.localspluskinds,
        Some(d.need(CodeObject::Localspluskinds)?),
    );
    o.set(
        "code.code_adaptive",
        &mut c.code_adaptive,
        Some(d.need(CodeObject::CoCodeAdaptive)?),
    );
    let need = [
        c.argcount,
        c.nlocals,
        c.flags,
        c.firstlineno,
        c.varnames,
        c.filename,
        c.name,
        c.linetable,
    ]
    .into_iter()
    .chain(c.posonlyargcount)
    .chain(c.kwonlyargcount)
    .chain(c.localspluskinds)
    .chain(c.qualname)
    .chain(c.code_adaptive)
    .chain(c.framesize)
    .max()
    .unwrap_or(0)
        + 8;
    let code_size = need.min(d.need(CodeObject::Size)?);
    o.set("code.size", &mut c.size, code_size);
    Ok(())
}

/// Strings and dicts.
fn strings_and_dicts(d: &DebugOffsets, l: &mut Layout, o: &mut Overlay) -> Result<(), Error> {
    // Strings and dicts.
    if let StringLayout::Pep393 {
        length,
        state,
        ascii_size,
        ..
    } = &mut l.string
    {
        o.set("string.length", length, d.need(UnicodeObject::Length)?);
        o.set("string.state", state, d.need(UnicodeObject::State)?);
        o.set(
            "string.ascii_size",
            ascii_size,
            d.need(UnicodeObject::AsciiobjectSize)?,
        );
    }
    if let DictLayout::Compact {
        ma_keys, ma_values, ..
    } = &mut l.dict
    {
        o.set("dict.ma_keys", ma_keys, d.need(DictObject::MaKeys)?);
        o.set("dict.ma_values", ma_values, d.need(DictObject::MaValues)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{image, mem, ADDR, LIVE_3_13_0};
    use super::super::{read, DebuggerSupport};
    use super::*;

    #[test]
    fn overlay_on_3_13_changes_nothing() {
        let d = read(&mem(image(0x030d00f0, 0, &LIVE_3_13_0)), ADDR).unwrap();
        let o = layout(&d).unwrap();
        assert!(o.diffs.is_empty(), "{:#?}", o.diffs);
        assert!(o.own_table());
        assert_eq!(&o.layout, for_version(3, 13).unwrap());
    }

    #[test]
    fn gil_holder_must_lie_in_the_embedded_gil() {
        let mut w = LIVE_3_13_0;
        w[15] = 100; // gil_runtime_state_holder before gil_runtime_state (7752)
        let d = read(&mem(image(0x030d00f0, 0, &w)), ADDR).unwrap();
        let e = layout(&d).unwrap_err().to_string();
        assert!(e.contains("gil_runtime_state_holder"), "{e}");
    }

    #[test]
    fn overlay_reports_each_difference() {
        let mut w = LIVE_3_13_0;
        w[20] = 80; // thread_state.current_frame
        w[28] = 64; // interpreter_frame.instr_ptr
        let d = read(&mem(image(0x030d00f0, 0, &w)), ADDR).unwrap();
        let o = layout(&d).unwrap();
        assert_eq!(o.layout.thread.current_frame, CurrentFrame::Direct(80));
        assert_eq!(o.layout.frame.position, InstrPosition::InstrPointer(64));
        assert_eq!(o.diffs.len(), 2, "{:#?}", o.diffs);
        assert!(o.diffs[0].starts_with("thread.current_frame"));
    }

    /// A 3.14 image: 3.13's values with the 3.14 members inserted (values
    /// made up but self-consistent), to check the 3.14 member order is used.
    #[test]
    fn reads_a_3_14_layout() {
        let mut w: Vec<u64> = Vec::new();
        w.extend(&LIVE_3_13_0[..7]); // runtime_state, interp up to threads_head
        w.push(7352); // threads_main
        w.extend(&LIVE_3_13_0[7..16]);
        w.extend([7900, 0]); // code_object_generation, tlbc_generation
        w.extend(&LIVE_3_13_0[16..25]); // thread_state
        w.extend([88, 8, 0, 56, 80, 74, 64, 0]); // interpreter_frame (3.14 shape)
        w.extend(&LIVE_3_13_0[31..41]);
        w.push(0); // co_tlbc
        w.extend(&LIVE_3_13_0[41..50]); // pyobject, type, tuple
        w.extend(&LIVE_3_13_0[50..53]); // list
        w.extend([200, 24, 40, 32]); // set_object
        w.extend(&LIVE_3_13_0[53..70]); // dict .. gc
        w.extend([96, 72, 80, 88]); // gen_object
        w.extend([0, 8]); // llist_node
        w.extend([32, 400, 5000, 0, 8, 512]); // debugger_support
        let d = read(&mem(image(0x030e00f0, 0, &w)), ADDR).unwrap();
        assert_eq!(d.get(InterpreterFrame::Stackpointer), Some(64));
        assert_eq!(d.get(DebuggerSupport::DebuggerScriptPathSize), Some(512));
        let o = layout(&d).unwrap();
        assert_eq!((o.layout.major, o.layout.minor), (3, 14));
        assert_eq!(o.layout.frame.localsplus, 80);
        assert_eq!(
            o.layout.frame.entry,
            EntryMarker::OwnerShim {
                owner: 74,
                shim_from: 3
            }
        );
        // 3.13's values where 3.14's table says otherwise are reported.
        assert!(o.own_table());
        assert!(o
            .diffs
            .iter()
            .any(|s| s.starts_with("runtime.interpreters_head")));
    }

    #[test]
    fn free_threaded_moves_object_fields() {
        let mut w = LIVE_3_13_0;
        w[41] = 32; // pyobject.size
        w[42] = 24; // pyobject.ob_type
        let d = read(&mem(image(0x030d00f0, 1, &w)), ADDR).unwrap();
        assert!(d.free_threaded);
        let o = layout(&d).unwrap();
        assert_eq!(o.layout.object.ob_type, 24);
        assert_eq!(o.layout.object.tp_basicsize, 48);
        assert!(matches!(
            o.layout.object.instance_dict,
            InstanceDict::Inline313 { dict: -8, .. }
        ));
        assert!(o.diffs.iter().any(|s| s.starts_with("object.ob_type")));
    }
}
