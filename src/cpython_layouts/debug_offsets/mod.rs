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
//! This module names the members and reads them; [`overlay::layout`]
//! lays what was read over a built-in table.
//!
//! 3.14+: `f_executable`, `f_funcobj` and the `localsplus` slots are
//! `_PyStackRef`, tagged pointers whose low bits must be cleared before use;
//! and the frame owner enum gained `FRAME_OWNED_BY_INTERPRETER = 3` (the
//! eval-loop entry frame) with `FRAME_OWNED_BY_CSTACK` moving to 4, so
//! "owner >= 3 is a shim" (`shim_from: 3`) still holds. Both are in the
//! 3.14 and 3.15 tables, proven by tests/layouts.rs.

use crate::error::Error;
use crate::memory::Memory;

pub mod overlay;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::SliceMemory;

    /// The 70 members after the header, read from `_PyRuntime` of a live
    /// pyenv 3.13.0 (x86-64, GIL build) through /proc/PID/mem.
    pub(super) const LIVE_3_13_0: [u64; 70] = [
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
    pub(super) const ADDR: u64 = 0x7f00_0000_0000;

    pub(super) fn image(version: u64, free_threaded: u64, words: &[u64]) -> Vec<u8> {
        let mut b = COOKIE.to_vec();
        b.extend(version.to_le_bytes());
        b.extend(free_threaded.to_le_bytes());
        for w in words {
            b.extend(w.to_le_bytes());
        }
        b
    }

    pub(super) fn mem(bytes: Vec<u8>) -> SliceMemory {
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
}
