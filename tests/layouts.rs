//! Proves every built-in layout table (`src/cpython_layouts/v*.rs`) against
//! the C headers of the interpreters installed on this machine.
//!
//! For each interpreter (every pyenv version plus Debian's
//! `/usr/bin/python3.11`) the test writes a small C program that includes that
//! interpreter's own headers (with `Py_BUILD_CORE` and the internal headers
//! where the structs live), compiles it with gcc and runs it. The program
//! prints `offsetof`/`sizeof`/macro values under the same names that
//! [`table_fields`] gives the table's fields, and every difference is reported
//! at once, naming the interpreter, the field, the table value and the header
//! value.
//!
//! How to make a table for a new CPython version:
//! 1. add its C expressions to [`probe`] (start from the newest version's
//!    branch; a field the new headers lack fails to compile, which tells you
//!    what moved), add it to the required versions in `tests/common/mod.rs`;
//! 2. copy the newest `src/cpython_layouts/v3_*.rs` to the new version, list it
//!    in `ALL`, and run `cargo test --test layouts`: the failure lists every
//!    field whose value differs, with the header's value — copy those in;
//! 3. fields the test cannot see in headers (none on 3.11+) need a live check
//!    like [`live_dict_keys`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pyinspect::cpython_layouts::{
    self, CurrentFrame, DictKeysLayout, DictLayout, EntryMarker, GilLocation, GilSync,
    InstanceDict, InstrPosition, Layout, LongFormat, StringLayout,
};

mod common;

const DEBIAN_PYTHON: &str = "/usr/bin/python3.11";
const DEBIAN_HEADERS_PACKAGE: &str = "libpython3.11-dev (or python3.11-dev)";

#[derive(Debug, Clone)]
struct Interpreter {
    label: String,
    python: PathBuf,
    major: u8,
    minor: u8,
    includes: Vec<PathBuf>,
}

/// Ask the interpreter for its version and header directories (2.7-compatible code).
fn describe(label: String, python: PathBuf) -> Result<Interpreter, String> {
    let code = "import sys; sys.stdout.write('%d %d' % sys.version_info[:2])";
    let out = Command::new(&python)
        .args(["-c", code])
        .output()
        .map_err(|e| format!("{label}: cannot run {}: {e}", python.display()))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut ver = text.split_whitespace().map(|s| s.parse().ok());
    let (Some(Some(major)), Some(Some(minor))) = (ver.next(), ver.next()) else {
        return Err(format!(
            "{label}: unexpected answer {text:?} ({})",
            String::from_utf8_lossy(&out.stderr)
        ));
    };
    let includes = common::c_include_dirs(&python).map_err(|e| format!("{label}: {e}"))?;
    Ok(Interpreter {
        label,
        python,
        major,
        minor,
        includes,
    })
}

/// Every interpreter the test must cover (the shared harness fails when an
/// expected one is missing), with its header directories; missing headers
/// are errors, not skips.
fn interpreters() -> Result<Vec<Interpreter>, Vec<String>> {
    let mut found = Vec::new();
    let mut errors = Vec::new();
    for i in common::interpreters() {
        match describe(i.label.clone(), i.python.clone()) {
            Ok(d) if !d.includes.iter().any(|p| p.join("Python.h").exists()) => {
                let fix = if i.python == Path::new(DEBIAN_PYTHON) {
                    format!("install the apt package {DEBIAN_HEADERS_PACKAGE}")
                } else {
                    "reinstall it with its headers".to_string()
                };
                errors.push(format!(
                    "the headers of {} are missing (no Python.h in {:?}): {fix}",
                    i.label, d.includes
                ));
            }
            Ok(d) => found.push(d),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(found)
    } else {
        Err(errors)
    }
}

/// What the C probe for one version includes and prints.
struct Probe {
    defines: &'static [&'static str],
    includes: Vec<&'static str>,
    /// (field name as in [`table_fields`], C expression).
    exprs: Vec<(&'static str, &'static str)>,
}

/// The C side: for each field of the table, where the headers of this
/// version define it. Names under `sizeof.` are struct sizes used to check
/// the tables' `size` fields.
fn probe(major: u8, minor: u8) -> Probe {
    let v = (major, minor);
    let mut p = Probe {
        defines: if v >= (3, 7) {
            &["Py_BUILD_CORE 1", "NDEBUG 1"]
        } else {
            &["NDEBUG 1"]
        },
        includes: vec!["Python.h", "stddef.h", "stdio.h"],
        exprs: vec![
            ("object.ob_type", "offsetof(PyObject, ob_type)"),
            ("object.ob_size", "offsetof(PyVarObject, ob_size)"),
            ("object.tp_name", "offsetof(PyTypeObject, tp_name)"),
            (
                "object.tp_basicsize",
                "offsetof(PyTypeObject, tp_basicsize)",
            ),
            (
                "object.tp_dictoffset",
                "offsetof(PyTypeObject, tp_dictoffset)",
            ),
            ("object.tp_flags", "offsetof(PyTypeObject, tp_flags)"),
            ("object.tuple_items", "offsetof(PyTupleObject, ob_item)"),
            ("object.list_items", "offsetof(PyListObject, ob_item)"),
            ("object.float_value", "offsetof(PyFloatObject, ob_fval)"),
            ("object.set_mask", "offsetof(PySetObject, mask)"),
            ("object.set_table", "offsetof(PySetObject, table)"),
            ("object.set_entry_key", "offsetof(setentry, key)"),
            ("object.set_entry_size", "sizeof(setentry)"),
            ("object.cell_ref", "offsetof(PyCellObject, ob_ref)"),
            ("sizeof.thread", "sizeof(PyThreadState)"),
            ("sizeof.code", "sizeof(PyCodeObject)"),
        ],
    };
    let inc = &mut p.includes;
    let e = &mut p.exprs;

    // Where the interpreter/runtime structs live.
    match v {
        (3, 7) => inc.push("internal/pystate.h"),
        (3, 8) => inc.push("internal/pycore_pystate.h"),
        v if v >= (3, 9) => inc.extend(["internal/pycore_interp.h", "internal/pycore_runtime.h"]),
        _ => {}
    }
    if v >= (3, 11) {
        inc.extend([
            "internal/pycore_frame.h",
            "internal/pycore_dict.h",
            "internal/pycore_object.h",
        ]);
    }
    if v >= (3, 12) {
        inc.push("internal/pycore_gil.h");
    }
    if v >= (3, 14) {
        inc.push("internal/pycore_stackref.h");
    }
    if v >= (3, 10) {
        inc.push("internal/pycore_moduleobject.h");
        e.push(("object.module_dict", "offsetof(PyModuleObject, md_dict)"));
    } else {
        // Objects/moduleobject.c keeps PyModuleObject private; md_dict is the
        // first member after PyObject_HEAD.
        e.push(("object.module_dict", "sizeof(PyObject)"));
    }
    if v <= (3, 10) {
        inc.extend(["frameobject.h", "longintrepr.h"]);
    }

    // Runtime and interpreter.
    if v >= (3, 7) {
        e.extend([
            (
                "runtime.interpreters_head",
                "offsetof(_PyRuntimeState, interpreters.head)",
            ),
            (
                "runtime.interpreters_main",
                "offsetof(_PyRuntimeState, interpreters.main)",
            ),
            ("interp.id", "offsetof(PyInterpreterState, id)"),
        ]);
    }
    // Whether the collector runs: runtime-wide on 3.7 and 3.8, per
    // interpreter from 3.9.
    match v {
        (3, 7) | (3, 8) => e.push((
            "runtime.gc_collecting",
            "offsetof(_PyRuntimeState, gc.collecting)",
        )),
        v if v >= (3, 9) => e.push((
            "interp.gc_collecting",
            "offsetof(PyInterpreterState, gc.collecting)",
        )),
        _ => {}
    }
    if ((3, 7)..=(3, 11)).contains(&v) {
        e.push((
            "runtime.gil.tstate_current",
            "offsetof(_PyRuntimeState, gilstate.tstate_current)",
        ));
    }
    if v >= (3, 12) {
        e.extend([
            (
                "runtime.gil.ceval_gil",
                "offsetof(PyInterpreterState, ceval.gil)",
            ),
            (
                "runtime.gil.last_holder",
                "offsetof(struct _gil_runtime_state, last_holder)",
            ),
            (
                "runtime.gil.locked",
                "offsetof(struct _gil_runtime_state, locked)",
            ),
            (
                "interp.modules",
                "offsetof(PyInterpreterState, imports.modules)",
            ),
        ]);
    } else {
        e.push(("interp.modules", "offsetof(PyInterpreterState, modules)"));
    }
    e.push(("interp.next", "offsetof(PyInterpreterState, next)"));
    if v >= (3, 11) {
        e.push((
            "interp.tstate_head",
            "offsetof(PyInterpreterState, threads.head)",
        ));
    } else {
        e.push((
            "interp.tstate_head",
            "offsetof(PyInterpreterState, tstate_head)",
        ));
    }

    // Thread state.
    e.extend([
        ("thread.next", "offsetof(PyThreadState, next)"),
        ("thread.interp", "offsetof(PyThreadState, interp)"),
        ("thread.thread_id", "offsetof(PyThreadState, thread_id)"),
    ]);
    match v {
        v if v <= (3, 10) => e.push(("thread.frame", "offsetof(PyThreadState, frame)")),
        (3, 11) | (3, 12) => e.extend([
            ("thread.cframe", "offsetof(PyThreadState, cframe)"),
            (
                "thread.cframe.current_frame",
                "offsetof(_PyCFrame, current_frame)",
            ),
            ("thread.cframe.previous", "offsetof(_PyCFrame, previous)"),
        ]),
        _ => e.push(("thread.frame", "offsetof(PyThreadState, current_frame)")),
    }
    if v >= (3, 11) {
        e.extend([
            (
                "thread.native_thread_id",
                "offsetof(PyThreadState, native_thread_id)",
            ),
            (
                "thread.datastack_chunk",
                "offsetof(PyThreadState, datastack_chunk)",
            ),
        ]);
    }

    // Frames.
    if v <= (3, 10) {
        e.extend([
            ("frame.previous", "offsetof(PyFrameObject, f_back)"),
            ("frame.code", "offsetof(PyFrameObject, f_code)"),
            ("frame.localsplus", "offsetof(PyFrameObject, f_localsplus)"),
            ("sizeof.frame", "sizeof(PyFrameObject)"),
        ]);
        if v == (3, 10) {
            e.push(("frame.lasti_units", "offsetof(PyFrameObject, f_lasti)"));
        } else {
            e.push(("frame.lasti_bytes", "offsetof(PyFrameObject, f_lasti)"));
        }
    } else {
        e.extend([
            ("frame.previous", "offsetof(_PyInterpreterFrame, previous)"),
            (
                "frame.localsplus",
                "offsetof(_PyInterpreterFrame, localsplus)",
            ),
            (
                "frame.stack_chunk.previous",
                "offsetof(_PyStackChunk, previous)",
            ),
            ("frame.stack_chunk.size", "offsetof(_PyStackChunk, size)"),
            ("frame.stack_chunk.top", "offsetof(_PyStackChunk, top)"),
            ("frame.stack_chunk.data", "offsetof(_PyStackChunk, data)"),
            ("sizeof.frame", "sizeof(_PyInterpreterFrame)"),
        ]);
        match v {
            (3, 11) => e.extend([
                ("frame.code", "offsetof(_PyInterpreterFrame, f_code)"),
                (
                    "frame.instr_ptr",
                    "offsetof(_PyInterpreterFrame, prev_instr)",
                ),
                ("frame.is_entry", "offsetof(_PyInterpreterFrame, is_entry)"),
            ]),
            (3, 12) => e.extend([
                ("frame.code", "offsetof(_PyInterpreterFrame, f_code)"),
                (
                    "frame.instr_ptr",
                    "offsetof(_PyInterpreterFrame, prev_instr)",
                ),
            ]),
            _ => e.extend([
                ("frame.code", "offsetof(_PyInterpreterFrame, f_executable)"),
                (
                    "frame.instr_ptr",
                    "offsetof(_PyInterpreterFrame, instr_ptr)",
                ),
            ]),
        }
        // The lowest owner value that is not a Python frame: the C-stack
        // shim (3.12, 3.13), then the interpreter's entry frame (3.14+).
        if v >= (3, 14) {
            e.extend([
                ("frame.owner", "offsetof(_PyInterpreterFrame, owner)"),
                ("frame.shim_from", "FRAME_OWNED_BY_INTERPRETER"),
                ("frame.pointer_tag_bits", "Py_TAG_BITS"),
            ]);
        } else if v >= (3, 12) {
            e.extend([
                ("frame.owner", "offsetof(_PyInterpreterFrame, owner)"),
                ("frame.shim_from", "FRAME_OWNED_BY_CSTACK"),
            ]);
        }
    }

    // Code objects.
    e.extend([
        ("code.argcount", "offsetof(PyCodeObject, co_argcount)"),
        ("code.nlocals", "offsetof(PyCodeObject, co_nlocals)"),
        ("code.flags", "offsetof(PyCodeObject, co_flags)"),
        ("code.firstlineno", "offsetof(PyCodeObject, co_firstlineno)"),
        ("code.filename", "offsetof(PyCodeObject, co_filename)"),
        ("code.name", "offsetof(PyCodeObject, co_name)"),
    ]);
    if v >= (3, 0) {
        e.push((
            "code.kwonlyargcount",
            "offsetof(PyCodeObject, co_kwonlyargcount)",
        ));
    }
    if v >= (3, 8) {
        e.push((
            "code.posonlyargcount",
            "offsetof(PyCodeObject, co_posonlyargcount)",
        ));
    }
    if v >= (3, 10) {
        e.push(("code.linetable", "offsetof(PyCodeObject, co_linetable)"));
    } else {
        e.push(("code.linetable", "offsetof(PyCodeObject, co_lnotab)"));
    }
    if v >= (3, 11) {
        e.extend([
            (
                "code.varnames",
                "offsetof(PyCodeObject, co_localsplusnames)",
            ),
            (
                "code.localspluskinds",
                "offsetof(PyCodeObject, co_localspluskinds)",
            ),
            ("code.qualname", "offsetof(PyCodeObject, co_qualname)"),
            (
                "code.code_adaptive",
                "offsetof(PyCodeObject, co_code_adaptive)",
            ),
            (
                "object.ht_cached_keys",
                "offsetof(PyHeapTypeObject, ht_cached_keys)",
            ),
        ]);
    } else {
        e.push(("code.varnames", "offsetof(PyCodeObject, co_varnames)"));
    }
    if v >= (3, 12) {
        e.push(("code.framesize", "offsetof(PyCodeObject, co_framesize)"));
    }

    // Numbers, strings, bytes.
    if v >= (3, 12) {
        e.extend([
            (
                "object.long.lv_tag",
                "offsetof(PyLongObject, long_value.lv_tag)",
            ),
            (
                "object.long.digits",
                "offsetof(PyLongObject, long_value.ob_digit)",
            ),
        ]);
    } else {
        e.push(("object.long.digits", "offsetof(PyLongObject, ob_digit)"));
    }
    if v < (3, 0) {
        e.extend([
            ("object.int_value", "offsetof(PyIntObject, ob_ival)"),
            ("object.bytes_data", "offsetof(PyStringObject, ob_sval)"),
            (
                "string.py2.unicode_length",
                "offsetof(PyUnicodeObject, length)",
            ),
            ("string.py2.unicode_str", "offsetof(PyUnicodeObject, str)"),
            ("dict.py2.mask", "offsetof(PyDictObject, ma_mask)"),
            ("dict.py2.table", "offsetof(PyDictObject, ma_table)"),
        ]);
    } else {
        e.extend([
            ("object.bytes_data", "offsetof(PyBytesObject, ob_sval)"),
            ("string.length", "offsetof(PyASCIIObject, length)"),
            ("string.state", "offsetof(PyASCIIObject, state)"),
            ("string.ascii_size", "sizeof(PyASCIIObject)"),
            ("string.compact_size", "sizeof(PyCompactUnicodeObject)"),
            ("string.data_ptr", "offsetof(PyUnicodeObject, data)"),
            ("dict.ma_keys", "offsetof(PyDictObject, ma_keys)"),
            ("dict.ma_values", "offsetof(PyDictObject, ma_values)"),
        ]);
    }

    // Dicts and instance dicts.
    if v >= (3, 11) {
        e.extend([
            ("dict.values_array", "offsetof(PyDictValues, values)"),
            (
                "dict.keys.dk_log2_size",
                "offsetof(PyDictKeysObject, dk_log2_size)",
            ),
            (
                "dict.keys.dk_log2_index_bytes",
                "offsetof(PyDictKeysObject, dk_log2_index_bytes)",
            ),
            ("dict.keys.dk_kind", "offsetof(PyDictKeysObject, dk_kind)"),
            (
                "dict.keys.dk_nentries",
                "offsetof(PyDictKeysObject, dk_nentries)",
            ),
            (
                "dict.keys.dk_indices",
                "offsetof(PyDictKeysObject, dk_indices)",
            ),
            ("object.instance_dict.flag", "Py_TPFLAGS_MANAGED_DICT"),
        ]);
    } else if v >= (3, 6) {
        // `ma_values` is a plain `PyObject **`.
        e.push(("dict.values_array", "0"));
    }
    // The GIL's mutex and condition variables (a futex inside them is a
    // GIL wait): from `cond` to the end of `switch_mutex`, the struct's tail.
    match v {
        (2, 7) => {
            // `interpreter_lock` points at a POSIX semaphore (thread_pthread.h).
            inc.push("semaphore.h");
            e.push(("gil_sync.lock_size", "sizeof(sem_t)"));
        }
        v if ((3, 7)..=(3, 11)).contains(&v) => e.extend([
            (
                "gil_sync.runtime.start",
                "offsetof(_PyRuntimeState, ceval.gil.cond)",
            ),
            (
                "gil_sync.runtime.end",
                "offsetof(_PyRuntimeState, ceval.gil.switch_mutex) \
                 + sizeof(((_PyRuntimeState *)0)->ceval.gil.switch_mutex)",
            ),
        ]),
        v if v >= (3, 12) => e.extend([
            (
                "gil_sync.interp_gil.start",
                "offsetof(struct _gil_runtime_state, cond)",
            ),
            (
                "gil_sync.interp_gil.end",
                "offsetof(struct _gil_runtime_state, switch_mutex) \
                 + sizeof(((struct _gil_runtime_state *)0)->switch_mutex)",
            ),
        ]),
        _ => {}
    }
    // The managed-dict offsets are computed by the headers' own accessors
    // on a fake object, so a change in how they compute them shows up here.
    match v {
        (3, 11) => e.extend([
            (
                "object.instance_dict.dict",
                "(char *)_PyObject_ManagedDictPointer(FAKE) - (char *)FAKE",
            ),
            (
                "object.instance_dict.values",
                "(char *)_PyObject_ValuesPointer(FAKE) - (char *)FAKE",
            ),
        ]),
        (3, 12) => e.push((
            "object.instance_dict.dict_or_values",
            "(char *)_PyObject_DictOrValuesPointer(FAKE) - (char *)FAKE",
        )),
        v if v >= (3, 13) => e.extend([
            (
                "object.instance_dict.inline_flag",
                "Py_TPFLAGS_INLINE_VALUES",
            ),
            (
                "object.instance_dict.dict",
                "(char *)_PyObject_ManagedDictPointer(FAKE) - (char *)FAKE",
            ),
        ]),
        _ => {}
    }
    p
}

fn probe_source(p: &Probe) -> String {
    let mut s = String::new();
    for d in p.defines {
        s += &format!("#define {d}\n");
    }
    for i in &p.includes {
        s += &format!("#include <{i}>\n");
    }
    s += "static char fake_object[256];\n#define FAKE ((PyObject *)(fake_object + 128))\n";
    s += "int main(void) {\n";
    for (k, expr) in &p.exprs {
        s += &format!("    printf(\"%s %lld\\n\", \"{k}\", (long long)({expr}));\n");
    }
    s += "    return 0;\n}\n";
    s
}

/// Compile and run the probe; returns field name -> value.
fn run_probe(interp: &Interpreter, dir: &Path) -> Result<BTreeMap<String, i64>, String> {
    let src = probe_source(&probe(interp.major, interp.minor));
    common::run_c_probe(dir, &interp.label, &src, &interp.includes)
        .map_err(|e| format!("{}: {e}", interp.label))
}

/// 3.6–3.10 keep `PyDictKeysObject` in Objects/dict-common.h, which is not
/// installed, so its offsets are checked on a live dict instead: the
/// interpreter builds a 3-entry dict and reports where it finds dk_size (8),
/// dk_nentries (3), and the first entry's key (right after 8 one-byte indices).
fn live_dict_keys(interp: &Interpreter, ma_keys: u64) -> Result<BTreeMap<String, i64>, String> {
    let code = format!(
        "import ctypes, sys\n\
         k = 'pyinspect_first_key'\n\
         d = {{}}\n\
         d[k] = 1; d['b'] = 2; d['c'] = 3\n\
         keys = ctypes.c_void_p.from_address(id(d) + {ma_keys}).value\n\
         w = [ctypes.c_ssize_t.from_address(keys + 8 * i).value for i in range(16)]\n\
         sys.stdout.write('dict.keys.dk_size %d\\n' % (8 * w.index(8)))\n\
         sys.stdout.write('dict.keys.dk_nentries %d\\n' % (8 * w.index(3)))\n\
         sys.stdout.write('dict.keys.dk_indices %d\\n' % (8 * w.index(id(k)) - 8 - 8))\n"
    );
    let out = Command::new(&interp.python)
        .args(["-c", &code])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "{}: live dict check failed: {}",
            interp.label,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect())
}

/// The table's fields under the probe's names. Enum variants map to
/// different names, so a wrong variant shows up as a missing/extra field.
fn table_fields(l: &Layout) -> BTreeMap<String, i64> {
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: i64| {
        m.insert(k.to_string(), v);
    };
    let r = &l.runtime;
    if let Some(v) = r.interpreters_head {
        put("runtime.interpreters_head", v as i64);
    }
    if let Some(v) = r.interpreters_main {
        put("runtime.interpreters_main", v as i64);
    }
    if let Some(v) = r.gc_collecting {
        put("runtime.gc_collecting", v as i64);
    }
    if let Some(v) = l.interp.gc_collecting {
        put("interp.gc_collecting", v as i64);
    }
    match r.gil {
        GilLocation::CurrentSymbol => {}
        GilLocation::RuntimeTstateCurrent(o) => put("runtime.gil.tstate_current", o as i64),
        GilLocation::InterpGil {
            ceval_gil,
            last_holder,
            locked,
        } => {
            put("runtime.gil.ceval_gil", ceval_gil as i64);
            put("runtime.gil.last_holder", last_holder as i64);
            put("runtime.gil.locked", locked as i64);
        }
    }
    put("interp.next", l.interp.next as i64);
    put("interp.tstate_head", l.interp.tstate_head as i64);
    if let Some(v) = l.interp.id {
        put("interp.id", v as i64);
    }
    put("interp.modules", l.interp.modules as i64);

    match &l.gil_sync {
        Some(GilSync::LockPointer { size, .. }) => put("gil_sync.lock_size", *size as i64),
        Some(GilSync::Runtime { start, end }) => {
            put("gil_sync.runtime.start", *start as i64);
            put("gil_sync.runtime.end", *end as i64);
        }
        Some(GilSync::InterpGil { start, end }) => {
            put("gil_sync.interp_gil.start", *start as i64);
            put("gil_sync.interp_gil.end", *end as i64);
        }
        // 3.6's statics are sized by the symbol table: nothing to prove.
        Some(GilSync::Statics(_)) | None => {}
    }

    let t = &l.thread;
    put("thread.next", t.next as i64);
    put("thread.interp", t.interp as i64);
    put("thread.thread_id", t.thread_id as i64);
    match t.current_frame {
        CurrentFrame::Direct(o) => put("thread.frame", o as i64),
        CurrentFrame::ViaCFrame {
            cframe,
            current_frame,
            previous,
        } => {
            put("thread.cframe", cframe as i64);
            put("thread.cframe.current_frame", current_frame as i64);
            put("thread.cframe.previous", previous as i64);
        }
    }
    if let Some(v) = t.native_thread_id {
        put("thread.native_thread_id", v as i64);
    }
    if let Some(v) = t.datastack_chunk {
        put("thread.datastack_chunk", v as i64);
    }

    let f = &l.frame;
    put("frame.previous", f.previous as i64);
    put("frame.code", f.code as i64);
    put("frame.localsplus", f.localsplus as i64);
    match f.position {
        InstrPosition::LastiBytes(o) => put("frame.lasti_bytes", o as i64),
        InstrPosition::LastiCodeUnits(o) => put("frame.lasti_units", o as i64),
        InstrPosition::InstrPointer(o) => put("frame.instr_ptr", o as i64),
    }
    match f.entry {
        EntryMarker::EveryFrame => {}
        EntryMarker::IsEntry(o) => put("frame.is_entry", o as i64),
        EntryMarker::OwnerShim { owner, shim_from } => {
            put("frame.owner", owner as i64);
            put("frame.shim_from", shim_from as i64);
        }
    }
    if let Some(c) = &f.stack_chunk {
        put("frame.stack_chunk.previous", c.previous as i64);
        put("frame.stack_chunk.size", c.size as i64);
        put("frame.stack_chunk.top", c.top as i64);
        put("frame.stack_chunk.data", c.data as i64);
    }
    // Only 3.14+ tag their frame pointers; the probe asks the headers there.
    if f.pointer_tag_bits != 0 {
        put("frame.pointer_tag_bits", f.pointer_tag_bits as i64);
    }

    let c = &l.code;
    put("code.argcount", c.argcount as i64);
    put("code.nlocals", c.nlocals as i64);
    put("code.flags", c.flags as i64);
    put("code.firstlineno", c.firstlineno as i64);
    put("code.varnames", c.varnames as i64);
    put("code.filename", c.filename as i64);
    put("code.name", c.name as i64);
    put("code.linetable", c.linetable as i64);
    for (k, v) in [
        ("code.posonlyargcount", c.posonlyargcount),
        ("code.kwonlyargcount", c.kwonlyargcount),
        ("code.localspluskinds", c.localspluskinds),
        ("code.qualname", c.qualname),
        ("code.code_adaptive", c.code_adaptive),
        ("code.framesize", c.framesize),
    ] {
        if let Some(v) = v {
            put(k, v as i64);
        }
    }

    let o = &l.object;
    put("object.ob_type", o.ob_type as i64);
    put("object.ob_size", o.ob_size as i64);
    put("object.tp_name", o.tp_name as i64);
    put("object.tp_basicsize", o.tp_basicsize as i64);
    put("object.tp_dictoffset", o.tp_dictoffset as i64);
    put("object.tp_flags", o.tp_flags as i64);
    if let Some(v) = o.ht_cached_keys {
        put("object.ht_cached_keys", v as i64);
    }
    put("object.tuple_items", o.tuple_items as i64);
    put("object.list_items", o.list_items as i64);
    put("object.float_value", o.float_value as i64);
    match o.long {
        LongFormat::ObSize { digits } => put("object.long.digits", digits as i64),
        LongFormat::LvTag { tag, digits } => {
            put("object.long.lv_tag", tag as i64);
            put("object.long.digits", digits as i64);
        }
    }
    if let Some(v) = o.int_value {
        put("object.int_value", v as i64);
    }
    put("object.bytes_data", o.bytes_data as i64);
    put("object.module_dict", o.module_dict as i64);
    put("object.set_mask", o.set_mask as i64);
    put("object.set_table", o.set_table as i64);
    put("object.set_entry_key", o.set_entry_key as i64);
    put("object.set_entry_size", o.set_entry_size as i64);
    put("object.cell_ref", o.cell_ref as i64);
    match o.instance_dict {
        InstanceDict::DictOffset => {}
        InstanceDict::Managed311 { flag, dict, values } => {
            put("object.instance_dict.flag", flag as i64);
            put("object.instance_dict.dict", dict);
            put("object.instance_dict.values", values);
        }
        InstanceDict::Managed312 {
            flag,
            dict_or_values,
        } => {
            put("object.instance_dict.flag", flag as i64);
            put("object.instance_dict.dict_or_values", dict_or_values);
        }
        InstanceDict::Inline313 {
            flag,
            inline_flag,
            dict,
        } => {
            put("object.instance_dict.flag", flag as i64);
            put("object.instance_dict.inline_flag", inline_flag as i64);
            put("object.instance_dict.dict", dict);
        }
    }

    match l.string {
        StringLayout::Pep393 {
            length,
            state,
            ascii_size,
            compact_size,
            data_ptr,
        } => {
            put("string.length", length as i64);
            put("string.state", state as i64);
            put("string.ascii_size", ascii_size as i64);
            put("string.compact_size", compact_size as i64);
            put("string.data_ptr", data_ptr as i64);
        }
        StringLayout::Py2 {
            unicode_length,
            unicode_str,
        } => {
            put("string.py2.unicode_length", unicode_length as i64);
            put("string.py2.unicode_str", unicode_str as i64);
        }
    }
    match &l.dict {
        DictLayout::Py2 { mask, table } => {
            put("dict.py2.mask", *mask as i64);
            put("dict.py2.table", *table as i64);
        }
        DictLayout::Compact {
            ma_keys,
            ma_values,
            keys,
            values_array,
        } => {
            put("dict.ma_keys", *ma_keys as i64);
            put("dict.ma_values", *ma_values as i64);
            put("dict.values_array", *values_array as i64);
            match *keys {
                DictKeysLayout::Sized {
                    dk_size,
                    dk_nentries,
                    dk_indices,
                } => {
                    put("dict.keys.dk_size", dk_size as i64);
                    put("dict.keys.dk_nentries", dk_nentries as i64);
                    put("dict.keys.dk_indices", dk_indices as i64);
                }
                DictKeysLayout::Log2 {
                    dk_log2_size,
                    dk_log2_index_bytes,
                    dk_kind,
                    dk_nentries,
                    dk_indices,
                } => {
                    put("dict.keys.dk_log2_size", dk_log2_size as i64);
                    put("dict.keys.dk_log2_index_bytes", dk_log2_index_bytes as i64);
                    put("dict.keys.dk_kind", dk_kind as i64);
                    put("dict.keys.dk_nentries", dk_nentries as i64);
                    put("dict.keys.dk_indices", dk_indices as i64);
                }
            }
        }
    }
    m
}

/// The `size` fields are "bytes to copy so every field below is inside":
/// at least the last used offset + 8 (inline arrays need only their start),
/// and no more than the C struct, so a copy never runs past the object.
fn check_sizes(
    label: &str,
    l: &Layout,
    fields: &BTreeMap<String, i64>,
    header: &BTreeMap<String, i64>,
    problems: &mut Vec<String>,
) {
    let groups: [(&str, u64, &[&str], &[&str]); 3] = [
        (
            "thread",
            l.thread.size,
            &["thread.cframe.current_frame", "thread.cframe.previous"],
            &[],
        ),
        (
            "frame",
            l.frame.size,
            &[
                "frame.shim_from",
                "frame.stack_chunk.previous",
                "frame.stack_chunk.size",
                "frame.stack_chunk.top",
                "frame.stack_chunk.data",
                "frame.pointer_tag_bits",
            ],
            &["frame.localsplus"],
        ),
        ("code", l.code.size, &[], &["code.code_adaptive"]),
    ];
    for (group, size, skip, arrays) in groups {
        let prefix = format!("{group}.");
        let need = fields
            .iter()
            .filter(|(k, _)| k.starts_with(&prefix) && !skip.contains(&k.as_str()))
            .map(|(k, &v)| {
                if arrays.contains(&k.as_str()) {
                    v
                } else {
                    v + 8
                }
            })
            .max()
            .unwrap_or(0);
        if (size as i64) < need {
            problems.push(format!(
                "{label}: {group}.size = {size} does not cover its fields (needs >= {need})"
            ));
        }
        if let Some(&sizeof) = header.get(&format!("sizeof.{group}")) {
            if size as i64 > sizeof {
                problems.push(format!(
                    "{label}: {group}.size = {size} is larger than the struct (sizeof = {sizeof})"
                ));
            }
        }
    }
}

fn check(interp: &Interpreter, dir: &Path) -> Result<usize, Vec<String>> {
    let label = format!(
        "{} ({}, Python {}.{})",
        interp.label,
        interp.python.display(),
        interp.major,
        interp.minor
    );
    let Some(table) = cpython_layouts::for_version(interp.major, interp.minor) else {
        return Err(vec![format!("{label}: no built-in table for this version")]);
    };
    let mut header = run_probe(interp, dir).map_err(|e| vec![e])?;
    let fields = table_fields(table);
    if let DictLayout::Compact {
        ma_keys,
        keys: DictKeysLayout::Sized { .. },
        ..
    } = table.dict
    {
        header.extend(live_dict_keys(interp, ma_keys).map_err(|e| vec![e])?);
    }
    let mut problems = Vec::new();
    for (k, &hv) in header.iter().filter(|(k, _)| !k.starts_with("sizeof.")) {
        match fields.get(k) {
            Some(&tv) if tv != hv => {
                problems.push(format!("{label}: {k}: table {tv}, header {hv}"))
            }
            Some(_) => {}
            None => problems.push(format!(
                "{label}: {k}: the table has no such field (wrong variant or None?), header {hv}"
            )),
        }
    }
    for (k, tv) in &fields {
        if !header.contains_key(k) {
            problems.push(format!(
                "{label}: {k}: table {tv}, but the probe finds no such field in this version"
            ));
        }
    }
    check_sizes(&label, table, &fields, &header, &mut problems);
    if problems.is_empty() {
        Ok(fields.len())
    } else {
        Err(problems)
    }
}

#[test]
fn tables_match_interpreter_headers() {
    let interps = match interpreters() {
        Ok(i) => i,
        Err(e) => panic!("expected interpreters are missing:\n  {}", e.join("\n  ")),
    };
    let dir = tempfile::tempdir().unwrap();
    let results: Vec<(Interpreter, Result<usize, Vec<String>>)> = std::thread::scope(|s| {
        let handles: Vec<_> = interps
            .iter()
            .map(|i| {
                let d = dir.path();
                s.spawn(move || (i.clone(), check(i, d)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut problems = Vec::new();
    for (i, r) in &results {
        match r {
            Ok(n) => println!(
                "covered {} {} (Python {}.{}): {n} fields match",
                i.label,
                i.python.display(),
                i.major,
                i.minor
            ),
            Err(p) => problems.extend(p.iter().cloned()),
        }
    }
    assert!(
        problems.is_empty(),
        "{} layout problem(s):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

fn pyenv_interpreter(major: u8, minor: u8) -> Interpreter {
    let i = common::interpreters()
        .iter()
        .find(|i| i.version == (major as u32, minor as u32) && i.label.starts_with("pyenv"))
        .unwrap_or_else(|| panic!("no pyenv interpreter {major}.{minor}"));
    describe(i.label.clone(), i.python.clone()).unwrap_or_else(|e| panic!("{e}"))
}

/// `debug_offsets::KNOWN` lists the members of each version's
/// `_Py_DebugOffsets` in order; prove each lands at the offset the header
/// gives it, for every interpreter of those versions (debug builds included).
#[test]
fn debug_offsets_member_lists_match_headers() {
    use pyinspect::cpython_layouts::debug_offsets::KNOWN;
    let interps = match interpreters() {
        Ok(i) => i,
        Err(e) => panic!("expected interpreters are missing:\n  {}", e.join("\n  ")),
    };
    let dir = tempfile::tempdir().unwrap();
    let mut covered = Vec::new();
    for (major, minor, sections) in KNOWN {
        let chosen: Vec<&Interpreter> = interps
            .iter()
            .filter(|i| (i.major, i.minor) == (*major, *minor))
            .collect();
        assert!(
            !chosen.is_empty(),
            "no {major}.{minor} interpreter to prove its member list"
        );
        let header_file = if (*major, *minor) >= (3, 14) {
            "internal/pycore_debug_offsets.h"
        } else {
            "internal/pycore_runtime.h"
        };
        let mut src = format!(
            "#define Py_BUILD_CORE 1\n#include <Python.h>\n#include <stddef.h>\n#include <stdio.h>\n\
             #include <{header_file}>\nint main(void) {{\n"
        );
        let mut expected = BTreeMap::new();
        let mut at = 24i64;
        for (section, members) in *sections {
            for m in *members {
                let k = format!("{section}.{m}");
                src += &format!(
                    "    printf(\"{k} %zu\\n\", offsetof(_Py_DebugOffsets, {section}.{m}));\n"
                );
                expected.insert(k, at);
                at += 8;
            }
        }
        src += "    printf(\"sizeof %zu\\n\", sizeof(_Py_DebugOffsets));\n    return 0;\n}\n";
        expected.insert("sizeof".to_string(), at);
        for interp in chosen {
            let header = common::run_c_probe(dir.path(), &interp.label, &src, &interp.includes)
                .unwrap_or_else(|e| panic!("{}: {e}", interp.label));
            assert_eq!(header, expected, "{}", interp.label);
            covered.push(interp.label.clone());
        }
    }
    println!("member lists proven on: {}", covered.join(", "));
}

/// Kills the child when the test ends, pass or fail.
struct KillOnDrop(std::process::Child);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `_PyRuntime` of a live process: the dynamic symbol's value in libpython
/// plus the address where libpython's first page (file offset 0, whose first
/// PT_LOAD has vaddr 0) is mapped.
fn pyruntime_address(pid: u32, interp: &Interpreter) -> u64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (base, lib) = loop {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        let hit = maps.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let path = *f.get(5)?;
            (path.contains("libpython3.13") && f[2] == "00000000").then(|| {
                let start = u64::from_str_radix(f[0].split('-').next()?, 16).ok()?;
                Some((start, path.to_string()))
            })?
        });
        if let Some(h) = hit {
            break h;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} (pid {pid}) never mapped libpython3.13",
            interp.python.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let nm = Command::new("nm").args(["-D", &lib]).output().expect("nm");
    let value = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2] == "_PyRuntime").then(|| u64::from_str_radix(f[0], 16).ok())?
        })
        .unwrap_or_else(|| panic!("no _PyRuntime symbol in {lib}"));
    base + value
}

/// A live 3.13 process: its `_Py_DebugOffsets` parse and agree with the table.
#[test]
fn live_3_13_debug_offsets_agree_with_table() {
    use pyinspect::cpython_layouts::debug_offsets;
    use pyinspect::memory::ProcessMemory;
    let interp = pyenv_interpreter(3, 13);
    let child = KillOnDrop(
        Command::new(&interp.python)
            .args(["-c", "import time; time.sleep(30)"])
            .stdin(Stdio::null())
            .spawn()
            .expect("start python3.13"),
    );
    let pid = child.0.id();
    let addr = pyruntime_address(pid, &interp);
    let mem = ProcessMemory::new(pid as i32);
    let d = debug_offsets::read(&mem, addr).expect("read _Py_DebugOffsets");
    assert_eq!((d.major(), d.minor()), (3, 13));
    assert!(!d.free_threaded);
    let o = debug_offsets::overlay::layout(&d).expect("overlay");
    assert!(
        o.diffs.is_empty(),
        "differences from the 3.13 table: {:#?}",
        o.diffs
    );
    assert_eq!(&o.layout, cpython_layouts::for_version(3, 13).unwrap());
    println!(
        "live {} pid {pid}: _Py_DebugOffsets at 0x{addr:x}, version 0x{:x}, no differences",
        interp.python.display(),
        d.version_hex
    );
}
