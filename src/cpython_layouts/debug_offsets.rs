//! `_Py_DebugOffsets` (3.13+): the interpreter's own description of its layout.
//!
//! CPython 3.13 put a table of struct sizes and field offsets at the very
//! start of `_PyRuntime` (so `&_PyRuntime == &_PyRuntime.debug_offsets`):
//! an 8-byte cookie `xdebugpy`, `PY_VERSION_HEX`, a free-threading flag,
//! then one sub-struct of `uint64_t` per CPython struct. The outer struct has
//! no length or layout version of its own and changes between minor
//! versions, so each known minor version has its field list below ([`V3_13`],
//! [`V3_14`], [`V3_15`]). A version newer than all of them is read with the
//! newest list: every size and offset must still be plausible, and the
//! caller then proves the result on the live interpreter (interpreter →
//! thread → frame → code chain, names decoding) before using it.
//!
//! Everything here comes from the target and is untrusted: sizes must be
//! at most [`MAX_STRUCT_SIZE`] and every offset must lie inside its struct.
//!
//! [`layout`] overlays these offsets on the built-in table of the same
//! version, or on the newest table for a later version. Fields a version's
//! `_Py_DebugOffsets` does not carry (`interpreters.main`, `md_dict`, the
//! managed-dict constants, code flags and counts, dict keys,
//! `_PyStackChunk.data`; before 3.15 also `tp_basicsize`, `tp_dictoffset`,
//! `ht_cached_keys` and the `PyCompactUnicodeObject` size) stay as in that
//! table.
//!
//! 3.14+: `f_executable`, `f_funcobj` and the `localsplus` slots are
//! `_PyStackRef`, tagged pointers whose low bits must be cleared before use;
//! and the frame owner enum gained `FRAME_OWNED_BY_INTERPRETER = 3` (the
//! eval-loop entry frame) with `FRAME_OWNED_BY_CSTACK` moving to 4, so
//! "owner >= 3 is a shim" (`shim_from: 3`) still holds. Both are in the
//! 3.14 and 3.15 tables, proven by tests/layouts.rs.

use super::{
    for_version, CurrentFrame, EntryMarker, GilLocation, InstanceDict, InstrPosition, Layout,
    LongFormat, StringLayout,
};
use crate::error::Error;
use crate::memory::Memory;

pub(crate) const COOKIE: &[u8; 8] = b"xdebugpy";

/// No CPython struct described here comes near this; a larger value means
/// we are not looking at `_Py_DebugOffsets`.
pub(crate) const MAX_STRUCT_SIZE: u64 = 1 << 20;

/// cookie, version, free_threaded.
const HEADER_LEN: u64 = 24;

/// Declares each sub-struct of `_Py_DebugOffsets` as an enum of its
/// members (every member any known version has), with their C names: code
/// names a member by its variant, so a misspelt member does not compile.
macro_rules! groups {
    ($($group:ident = $section:literal { $($member:ident = $c:literal,)* })*) => {
        $(
            #[derive(Debug, Clone, Copy, PartialEq, Eq)]
            pub enum $group {
                $($member,)*
            }
            impl $group {
                /// The sub-struct's name in C.
                pub(crate) const SECTION: &'static str = $section;
                /// Every member, for tests that check the names.
                #[cfg(test)]
                const ALL: &'static [$group] = &[$($group::$member,)*];
                /// The member's name in C.
                pub(crate) const fn c_name(self) -> &'static str {
                    match self {
                        $($group::$member => $c,)*
                    }
                }
            }
            impl From<$group> for Member {
                fn from(m: $group) -> Member {
                    Member::$group(m)
                }
            }
        )*
        /// One `uint64_t` member of `_Py_DebugOffsets`: its sub-struct and
        /// which member of it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Member {
            $($group($group),)*
        }
        impl Member {
            /// The sub-struct's name in C, e.g. `interpreter_frame`.
            pub(crate) const fn section(self) -> &'static str {
                match self {
                    $(Member::$group(_) => $group::SECTION,)*
                }
            }
            /// The member's name in C, e.g. `stackpointer`.
            pub(crate) const fn name(self) -> &'static str {
                match self {
                    $(Member::$group(m) => m.c_name(),)*
                }
            }
            #[cfg(test)]
            fn all() -> Vec<Member> {
                let mut all = Vec::new();
                $(all.extend($group::ALL.iter().map(|&m| Member::$group(m)));)*
                all
            }
        }
    };
}

groups! {
    RuntimeState = "runtime_state" {
        Size = "size",
        Finalizing = "finalizing",
        InterpretersHead = "interpreters_head",
    }
    InterpreterState = "interpreter_state" {
        Size = "size",
        Id = "id",
        Next = "next",
        ThreadsHead = "threads_head",
        Gc = "gc",
        ImportsModules = "imports_modules",
        Sysdict = "sysdict",
        Builtins = "builtins",
        CevalGil = "ceval_gil",
        GilRuntimeState = "gil_runtime_state",
        GilRuntimeStateEnabled = "gil_runtime_state_enabled",
        GilRuntimeStateLocked = "gil_runtime_state_locked",
        GilRuntimeStateHolder = "gil_runtime_state_holder",
        ThreadsMain = "threads_main",
        CodeObjectGeneration = "code_object_generation",
        TlbcGeneration = "tlbc_generation",
    }
    ThreadState = "thread_state" {
        Size = "size",
        Prev = "prev",
        Next = "next",
        Interp = "interp",
        CurrentFrame = "current_frame",
        ThreadId = "thread_id",
        NativeThreadId = "native_thread_id",
        DatastackChunk = "datastack_chunk",
        Status = "status",
        BaseFrame = "base_frame",
        LastProfiledFrame = "last_profiled_frame",
        LastProfiledFrameSeq = "last_profiled_frame_seq",
        HoldsGil = "holds_gil",
        GilRequested = "gil_requested",
        CurrentException = "current_exception",
        ExcState = "exc_state",
    }
    InterpreterFrame = "interpreter_frame" {
        Size = "size",
        Previous = "previous",
        Executable = "executable",
        InstrPtr = "instr_ptr",
        Localsplus = "localsplus",
        Owner = "owner",
        Stackpointer = "stackpointer",
        TlbcIndex = "tlbc_index",
    }
    CodeObject = "code_object" {
        Size = "size",
        Filename = "filename",
        Name = "name",
        Qualname = "qualname",
        Linetable = "linetable",
        Firstlineno = "firstlineno",
        Argcount = "argcount",
        Localsplusnames = "localsplusnames",
        Localspluskinds = "localspluskinds",
        CoCodeAdaptive = "co_code_adaptive",
        CoTlbc = "co_tlbc",
    }
    Pyobject = "pyobject" {
        Size = "size",
        ObType = "ob_type",
    }
    TypeObject = "type_object" {
        Size = "size",
        TpName = "tp_name",
        TpRepr = "tp_repr",
        TpFlags = "tp_flags",
        TpBasicsize = "tp_basicsize",
        TpDictoffset = "tp_dictoffset",
    }
    TupleObject = "tuple_object" {
        Size = "size",
        ObItem = "ob_item",
        ObSize = "ob_size",
    }
    ListObject = "list_object" {
        Size = "size",
        ObItem = "ob_item",
        ObSize = "ob_size",
    }
    DictObject = "dict_object" {
        Size = "size",
        MaKeys = "ma_keys",
        MaValues = "ma_values",
    }
    FloatObject = "float_object" {
        Size = "size",
        ObFval = "ob_fval",
    }
    LongObject = "long_object" {
        Size = "size",
        LvTag = "lv_tag",
        ObDigit = "ob_digit",
    }
    BytesObject = "bytes_object" {
        Size = "size",
        ObSize = "ob_size",
        ObSval = "ob_sval",
    }
    UnicodeObject = "unicode_object" {
        Size = "size",
        State = "state",
        Length = "length",
        AsciiobjectSize = "asciiobject_size",
        CompactunicodeobjectSize = "compactunicodeobject_size",
    }
    Gc = "gc" {
        Size = "size",
        Collecting = "collecting",
        Frame = "frame",
        GenerationStatsSize = "generation_stats_size",
        GenerationStats = "generation_stats",
    }
    SetObject = "set_object" {
        Size = "size",
        Used = "used",
        Table = "table",
        Mask = "mask",
    }
    GenObject = "gen_object" {
        Size = "size",
        GiName = "gi_name",
        GiIframe = "gi_iframe",
        GiFrameState = "gi_frame_state",
    }
    LlistNode = "llist_node" {
        Next = "next",
        Prev = "prev",
    }
    DebuggerSupport = "debugger_support" {
        EvalBreaker = "eval_breaker",
        RemoteDebuggerSupport = "remote_debugger_support",
        RemoteDebuggingEnabled = "remote_debugging_enabled",
        DebuggerPendingCall = "debugger_pending_call",
        DebuggerScriptPath = "debugger_script_path",
        DebuggerScriptPathSize = "debugger_script_path_size",
    }
    ErrStackitem = "err_stackitem" {
        ExcValue = "exc_value",
    }
    HeapTypeObject = "heap_type_object" {
        Size = "size",
        HtCachedKeys = "ht_cached_keys",
    }
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One version's member list: each sub-struct and its members in
/// declaration order, e.g. `members![RuntimeState [Size, Finalizing]]`.
macro_rules! members {
    ($($group:ident [$($member:ident),* $(,)?],)*) => {
        &[$(($group::SECTION, &[$(Member::$group($group::$member)),*])),*]
    };
}

/// One sub-struct of `_Py_DebugOffsets`: its name and its `uint64_t`
/// members in declaration order. When the first member is `size`, every
/// other member is an offset inside a struct of that size.
type Section = (&'static str, &'static [Member]);

/// `Include/internal/pycore_runtime.h` of 3.13.0: `tests/layouts.rs` proves
/// each member's offset against that header and reads a live 3.13.0.
pub(crate) const V3_13: &[Section] = members![
    RuntimeState [Size, Finalizing, InterpretersHead],
    InterpreterState [
        Size, Id, Next, ThreadsHead, Gc, ImportsModules, Sysdict, Builtins, CevalGil,
        GilRuntimeState, GilRuntimeStateEnabled, GilRuntimeStateLocked, GilRuntimeStateHolder
    ],
    ThreadState [
        Size, Prev, Next, Interp, CurrentFrame, ThreadId, NativeThreadId, DatastackChunk, Status
    ],
    InterpreterFrame [Size, Previous, Executable, InstrPtr, Localsplus, Owner],
    CodeObject [
        Size, Filename, Name, Qualname, Linetable, Firstlineno, Argcount, Localsplusnames,
        Localspluskinds, CoCodeAdaptive
    ],
    Pyobject [Size, ObType],
    TypeObject [Size, TpName, TpRepr, TpFlags],
    TupleObject [Size, ObItem, ObSize],
    ListObject [Size, ObItem, ObSize],
    DictObject [Size, MaKeys, MaValues],
    FloatObject [Size, ObFval],
    LongObject [Size, LvTag, ObDigit],
    BytesObject [Size, ObSize, ObSval],
    UnicodeObject [Size, State, Length, AsciiobjectSize],
    Gc [Size, Collecting],
];

/// `Include/internal/pycore_debug_offsets.h` of 3.14 (proven against
/// Debian's 3.14 headers by tests/layouts.rs). Differences from 3.13: `threads_main`, `code_object_generation`, `tlbc_generation`,
/// `stackpointer`, `tlbc_index`, `co_tlbc`, and the `set_object`,
/// `gen_object`, `llist_node`, `debugger_support` sections (the last two
/// without a `size`).
pub(crate) const V3_14: &[Section] = members![
    RuntimeState [Size, Finalizing, InterpretersHead],
    InterpreterState [
        Size, Id, Next, ThreadsHead, ThreadsMain, Gc, ImportsModules, Sysdict, Builtins, CevalGil,
        GilRuntimeState, GilRuntimeStateEnabled, GilRuntimeStateLocked, GilRuntimeStateHolder,
        CodeObjectGeneration, TlbcGeneration
    ],
    ThreadState [
        Size, Prev, Next, Interp, CurrentFrame, ThreadId, NativeThreadId, DatastackChunk, Status
    ],
    InterpreterFrame [
        Size, Previous, Executable, InstrPtr, Localsplus, Owner, Stackpointer, TlbcIndex
    ],
    CodeObject [
        Size, Filename, Name, Qualname, Linetable, Firstlineno, Argcount, Localsplusnames,
        Localspluskinds, CoCodeAdaptive, CoTlbc
    ],
    Pyobject [Size, ObType],
    TypeObject [Size, TpName, TpRepr, TpFlags],
    TupleObject [Size, ObItem, ObSize],
    ListObject [Size, ObItem, ObSize],
    SetObject [Size, Used, Table, Mask],
    DictObject [Size, MaKeys, MaValues],
    FloatObject [Size, ObFval],
    LongObject [Size, LvTag, ObDigit],
    BytesObject [Size, ObSize, ObSval],
    UnicodeObject [Size, State, Length, AsciiobjectSize],
    Gc [Size, Collecting],
    GenObject [Size, GiName, GiIframe, GiFrameState],
    LlistNode [Next, Prev],
    DebuggerSupport [
        EvalBreaker, RemoteDebuggerSupport, RemoteDebuggingEnabled, DebuggerPendingCall,
        DebuggerScriptPath, DebuggerScriptPathSize
    ],
];

/// `Include/internal/pycore_debug_offsets.h` of 3.15 (proven against
/// Debian's 3.15 headers by tests/layouts.rs). Differences from 3.14: four
/// thread-state members before `thread_id` and four after `status`, an
/// `err_stackitem` section (no `size`), `tp_basicsize`/`tp_dictoffset`, a
/// `heap_type_object` section, `compactunicodeobject_size`, and three `gc`
/// members.
pub(crate) const V3_15: &[Section] = members![
    RuntimeState [Size, Finalizing, InterpretersHead],
    InterpreterState [
        Size, Id, Next, ThreadsHead, ThreadsMain, Gc, ImportsModules, Sysdict, Builtins, CevalGil,
        GilRuntimeState, GilRuntimeStateEnabled, GilRuntimeStateLocked, GilRuntimeStateHolder,
        CodeObjectGeneration, TlbcGeneration
    ],
    ThreadState [
        Size, Prev, Next, Interp, CurrentFrame, BaseFrame, LastProfiledFrame, LastProfiledFrameSeq,
        ThreadId, NativeThreadId, DatastackChunk, Status, HoldsGil, GilRequested, CurrentException,
        ExcState
    ],
    ErrStackitem [ExcValue],
    InterpreterFrame [
        Size, Previous, Executable, InstrPtr, Localsplus, Owner, Stackpointer, TlbcIndex
    ],
    CodeObject [
        Size, Filename, Name, Qualname, Linetable, Firstlineno, Argcount, Localsplusnames,
        Localspluskinds, CoCodeAdaptive, CoTlbc
    ],
    Pyobject [Size, ObType],
    TypeObject [Size, TpName, TpRepr, TpFlags, TpBasicsize, TpDictoffset],
    HeapTypeObject [Size, HtCachedKeys],
    TupleObject [Size, ObItem, ObSize],
    ListObject [Size, ObItem, ObSize],
    SetObject [Size, Used, Table, Mask],
    DictObject [Size, MaKeys, MaValues],
    FloatObject [Size, ObFval],
    LongObject [Size, LvTag, ObDigit],
    BytesObject [Size, ObSize, ObSval],
    UnicodeObject [Size, State, Length, AsciiobjectSize, CompactunicodeobjectSize],
    Gc [Size, Collecting, Frame, GenerationStatsSize, GenerationStats],
    GenObject [Size, GiName, GiIframe, GiFrameState],
    LlistNode [Next, Prev],
    DebuggerSupport [
        EvalBreaker, RemoteDebuggerSupport, RemoteDebuggingEnabled, DebuggerPendingCall,
        DebuggerScriptPath, DebuggerScriptPathSize
    ],
];

/// Every known member list, oldest first: (major, minor, members).
pub const KNOWN: &[(u8, u8, &[Section])] = &[(3, 13, V3_13), (3, 14, V3_14), (3, 15, V3_15)];

/// Members that hold a size, not an offset into their section's struct
/// (they may equal the struct size).
const SIZE_LIKE: &[Member] = &[
    Member::UnicodeObject(UnicodeObject::AsciiobjectSize),
    Member::UnicodeObject(UnicodeObject::CompactunicodeobjectSize),
];

/// Members that hold the size of some other struct: bounded like a size.
const OTHER_SIZE: &[Member] = &[Member::Gc(Gc::GenerationStatsSize)];

/// Parsed from the first bytes of `_PyRuntime` (3.13+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugOffsets {
    /// `PY_VERSION_HEX` of the target, e.g. `0x030d00f0` for 3.13.0.
    pub version_hex: u64,
    /// A free-threaded (`Py_GIL_DISABLED`, "3.13t") build.
    pub free_threaded: bool,
    /// The version whose member list was used to parse it: the target's
    /// own, or for a newer target the newest known (then unproven until the
    /// caller validates the result on the live interpreter).
    pub members_of: (u8, u8),
    /// (member, value) in declaration order.
    fields: Vec<(Member, u64)>,
}

impl DebugOffsets {
    pub fn major(&self) -> u8 {
        (self.version_hex >> 24) as u8
    }
    pub fn minor(&self) -> u8 {
        (self.version_hex >> 16) as u8
    }
    /// A member, e.g. `get(InterpreterFrame::Stackpointer)`; `None` if this
    /// version's `_Py_DebugOffsets` has no such member.
    pub(crate) fn get(&self, member: impl Into<Member>) -> Option<u64> {
        let member = member.into();
        self.fields
            .iter()
            .find(|(m, _)| *m == member)
            .map(|&(_, v)| v)
    }
    /// Like [`get`](Self::get) for members every supported version has.
    fn need(&self, member: impl Into<Member>) -> Result<u64, Error> {
        let member = member.into();
        self.get(member).ok_or_else(|| Error::BadDebugOffsets {
            why: format!(
                "_Py_DebugOffsets of Python {}.{} has no {}.{}",
                self.major(),
                self.minor(),
                member.section(),
                member.name(),
            ),
        })
    }
}

/// The member list for a version: its own, or for a newer version the
/// newest one known. `PYINSPECT_NEWEST_DEBUG_OFFSETS=3.X` (tests only)
/// withholds the lists of later versions, as if this build predated them.
fn sections_for(major: u8, minor: u8) -> Option<(u8, u8, &'static [Section])> {
    let newest = super::test_override("PYINSPECT_NEWEST_DEBUG_OFFSETS");
    KNOWN
        .iter()
        .copied()
        .filter(|&(a, b, _)| newest.is_none_or(|n| (a, b) <= n))
        .rfind(|&(a, b, _)| (a, b) <= (major, minor))
}

pub(crate) fn version_string(v: u64) -> String {
    format!(
        "{}.{}.{}",
        (v >> 24) & 0xff,
        (v >> 16) & 0xff,
        (v >> 8) & 0xff
    )
}

/// Read and check `_Py_DebugOffsets` at `runtime_addr` (the address of `_PyRuntime`).
pub fn read(mem: &dyn Memory, runtime_addr: u64) -> Result<DebugOffsets, Error> {
    let mut header = [0u8; HEADER_LEN as usize];
    mem.read(runtime_addr, &mut header)?;
    if &header[..8] != COOKIE {
        return Err(Error::BadDebugOffsets {
            why: format!(
                "no _Py_DebugOffsets at 0x{runtime_addr:x}: cookie is {:?}, expected \"xdebugpy\" \
             (not a Python 3.13+ _PyRuntime)",
                String::from_utf8_lossy(&header[..8])
            ),
        });
    }
    let version_hex = u64::from_le_bytes(header[8..16].try_into().unwrap_or_default());
    let free_threaded = u64::from_le_bytes(header[16..24].try_into().unwrap_or_default());
    let (major, minor) = ((version_hex >> 24) as u8, (version_hex >> 16) as u8);
    if version_hex >> 32 != 0 || major != 3 || minor < 13 {
        return Err(Error::BadDebugOffsets {
            why: format!(
                "_Py_DebugOffsets at 0x{runtime_addr:x} claims version 0x{version_hex:x}; \
             expected Python 3.13 or newer"
            ),
        });
    }
    let Some((members_major, members_minor, sections)) = sections_for(major, minor) else {
        return Err(Error::BadDebugOffsets {
            why: format!(
                "_Py_DebugOffsets of Python {}: no member list to read it with",
                version_string(version_hex)
            ),
        });
    };
    if free_threaded > 1 {
        return Err(Error::BadDebugOffsets {
 why: format!(
            "_Py_DebugOffsets at 0x{runtime_addr:x}: free_threaded is {free_threaded}, expected 0 or 1"
        ),
});
    }

    // For a version newer than every member list, say which list was used.
    let ctx = if (members_major, members_minor) == (major, minor) {
        String::new()
    } else {
        format!(
            " (Python {} read with the {members_major}.{members_minor} member list)",
            version_string(version_hex)
        )
    };
    let implausible = |section: &str, member: &str, value: u64, why: &str| Error::BadDebugOffsets {
        why: format!("_Py_DebugOffsets looks corrupt{ctx}: {section}.{member} = {value} is {why}"),
    };
    let count: usize = sections.iter().map(|(_, m)| m.len()).sum();
    let mut body = vec![0u8; count * 8];
    mem.read(runtime_addr + HEADER_LEN, &mut body)?;
    let mut words = body
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()));
    let mut fields = Vec::with_capacity(count);
    for &(section, members) in sections {
        let values: Vec<u64> = words.by_ref().take(members.len()).collect();
        let size = (members.first().map(|m| m.name()) == Some("size"))
            .then(|| values.first().copied())
            .flatten();
        if let Some(size) = size {
            if size == 0 || size > MAX_STRUCT_SIZE {
                return Err(implausible(section, "size", size, "must be 1..=1 MiB"));
            }
        }
        for (i, (&member, &v)) in members.iter().zip(&values).enumerate() {
            let ok = match size {
                _ if i == 0 && size.is_some() => true,
                _ if OTHER_SIZE.contains(&member) => v <= MAX_STRUCT_SIZE,
                Some(size) if SIZE_LIKE.contains(&member) => v <= size,
                Some(size) => v < size,
                None => v < MAX_STRUCT_SIZE,
            };
            if !ok {
                let why = match size {
                    Some(size) => format!("outside its struct of {size} bytes"),
                    None => "larger than 1 MiB".to_string(),
                };
                return Err(implausible(section, member.name(), v, &why));
            }
            fields.push((member, v));
        }
    }
    let d = DebugOffsets {
        version_hex,
        free_threaded: free_threaded == 1,
        members_of: (members_major, members_minor),
        fields,
    };
    // The object header is 16 bytes (32 free-threaded) with `ob_type` last:
    // a list read at the wrong positions rarely gets this right.
    let header_ok = match (d.get(Pyobject::Size), d.get(Pyobject::ObType)) {
        (Some(size), Some(ob_type)) => (size == 16 || size == 32) && ob_type == size - 8,
        _ => false,
    };
    if !header_ok {
        return Err(Error::BadDebugOffsets {
            why: format!(
            "_Py_DebugOffsets of Python {} read with the {members_major}.{members_minor} member \
             list: pyobject.size/ob_type = {:?}/{:?} is not a CPython object header",
            version_string(version_hex),
            d.get(Pyobject::Size),
            d.get(Pyobject::ObType),
        ),
        });
    }
    Ok(d)
}

fn implausible(member: Member, value: u64, why: &str) -> Error {
    Error::BadDebugOffsets {
        why: format!(
            "_Py_DebugOffsets looks corrupt: {}.{} = {value} is {why}",
            member.section(),
            member.name()
        ),
    }
}

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
        .or_else(super::newest)
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
    if let super::DictLayout::Compact {
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
    use super::*;
    use crate::memory::SliceMemory;

    /// The 70 members after the header, read from `_PyRuntime` of a live
    /// pyenv 3.13.0 (x86-64, GIL build) through /proc/PID/mem.
    const LIVE_3_13_0: [u64; 70] = [
        283320, 608, 632, // runtime_state
        194968, 7272, 7264, 7344, 7400, 7656, 7640, 7648, 16, 7752, 0, 7768, 7760, // interp
        304, 0, 8, 16, 72, 152, 160, 232, 32, // thread_state
        80, 8, 0, 56, 72, 70, // interpreter_frame
        208, 112, 120, 128, 136, 68, 52, 96, 104, 200, // code_object
        16, 8, // pyobject
        416, 24, 88, 168, // type_object
        32, 24, 16, // tuple
        40, 24, 16, // list
        48, 32, 40, // dict
        24, 16, // float
        32, 16, 24, // long
        40, 16, 32, // bytes
        64, 32, 16, 40, // unicode
        240, 200, // gc
    ];
    const ADDR: u64 = 0x7f00_0000_0000;

    fn image(version: u64, free_threaded: u64, words: &[u64]) -> Vec<u8> {
        let mut b = COOKIE.to_vec();
        b.extend(version.to_le_bytes());
        b.extend(free_threaded.to_le_bytes());
        for w in words {
            b.extend(w.to_le_bytes());
        }
        b
    }

    fn mem(bytes: Vec<u8>) -> SliceMemory {
        let mut m = SliceMemory::new();
        m.add(ADDR, bytes);
        m
    }

    fn err(r: Result<DebugOffsets, Error>) -> String {
        r.expect_err("should be refused").to_string()
    }

    #[test]
    fn section_lists_have_the_header_sizes() {
        let words = |s: &[Section]| s.iter().map(|(_, m)| m.len()).sum::<usize>();
        // 3.13: sizeof(_Py_DebugOffsets) == 584 (gc section ends there).
        assert_eq!(HEADER_LEN as usize + 8 * words(V3_13), 584);
        assert_eq!(words(V3_13), LIVE_3_13_0.len());
        assert_eq!(words(V3_14) - words(V3_13), 3 + 2 + 1 + 4 + 4 + 2 + 6);
    }

    /// Each member a version lists belongs to the sub-struct it is listed
    /// under, and every member the code can name is in some version's list
    /// (whose C names tests/layouts.rs proves against the headers).
    #[test]
    fn every_member_is_listed_under_its_section() {
        for (_, _, sections) in KNOWN {
            for (section, members) in *sections {
                assert!(members.iter().all(|m| m.section() == *section));
            }
        }
        for m in Member::all() {
            assert!(
                KNOWN
                    .iter()
                    .any(|(_, _, s)| s.iter().any(|(_, ms)| ms.contains(&m))),
                "{}.{m} is in no member list",
                m.section()
            );
        }
    }

    #[test]
    fn parses_live_3_13_0() {
        let d = read(&mem(image(0x030d00f0, 0, &LIVE_3_13_0)), ADDR).unwrap();
        assert_eq!((d.major(), d.minor(), d.free_threaded), (3, 13, false));
        assert_eq!(d.get(RuntimeState::InterpretersHead), Some(632));
        assert_eq!(d.get(InterpreterState::GilRuntimeStateHolder), Some(7760));
        assert_eq!(d.get(ThreadState::CurrentFrame), Some(72));
        assert_eq!(d.get(Gc::Collecting), Some(200));
        assert_eq!(d.get(InterpreterFrame::Stackpointer), None);
    }

    #[test]
    fn overlay_on_3_13_changes_nothing() {
        let d = read(&mem(image(0x030d00f0, 0, &LIVE_3_13_0)), ADDR).unwrap();
        let o = layout(&d).unwrap();
        assert!(o.diffs.is_empty(), "{:#?}", o.diffs);
        assert!(o.own_table());
        assert_eq!(&o.layout, for_version(3, 13).unwrap());
    }

    #[test]
    fn refuses_wrong_cookie_and_version() {
        let mut b = image(0x030d00f0, 0, &LIVE_3_13_0);
        b[0] = b'X';
        assert!(err(read(&mem(b), ADDR)).contains("cookie"));
        assert!(err(read(&mem(image(0x030c01f0, 0, &LIVE_3_13_0)), ADDR)).contains("3.13 or newer"));
        assert!(err(read(&mem(image(0x020d00f0, 0, &LIVE_3_13_0)), ADDR)).contains("3.13 or newer"));
        // A newer version is read with the newest member list, not refused
        // for being newer: here 3.13's words under a 3.99 header do not fit
        // the 3.15 list, and the error says which list it tried.
        let mut padded = LIVE_3_13_0.to_vec();
        padded.resize(200, 0);
        let newer = err(read(&mem(image(0x036300a1, 0, &padded)), ADDR));
        assert!(
            newer.contains("3.99.0") && newer.contains("3.15 member list"),
            "{newer}"
        );
        assert!(err(read(&mem(image(0x030d00f0, 7, &LIVE_3_13_0)), ADDR)).contains("free_threaded"));
        // Too short a region is a memory error, not a panic.
        let short = image(0x030d00f0, 0, &LIVE_3_13_0[..10]);
        assert!(read(&mem(short), ADDR).is_err());
    }

    #[test]
    fn refuses_corrupt_sizes_and_offsets() {
        let corrupt = |i: usize, v: u64| {
            let mut w = LIVE_3_13_0;
            w[i] = v;
            err(read(&mem(image(0x030d00f0, 0, &w)), ADDR))
        };
        // runtime_state.size beyond 1 MiB, and zero.
        assert!(corrupt(0, 2 << 20).contains("runtime_state.size"));
        assert!(corrupt(0, 0).contains("runtime_state.size"));
        // interpreters_head outside _PyRuntimeState.
        assert!(corrupt(2, 283320).contains("interpreters_head"));
        // thread_state.current_frame outside PyThreadState.
        assert!(corrupt(20, u64::MAX).contains("thread_state.current_frame"));
        // asciiobject_size may equal the struct size but not exceed it.
        let mut w = LIVE_3_13_0;
        w[67] = 64;
        assert!(read(&mem(image(0x030d00f0, 0, &w)), ADDR).is_ok());
        assert!(corrupt(67, 65).contains("asciiobject_size"));
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
