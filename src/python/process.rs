//! Finding the interpreter in a target: its binaries, version and layout,
//! and where the interpreter list and the GIL holder are recorded.

use crate::cpython_layouts::{self, debug_offsets, GilLocation, GilSync, Layout};
use crate::elf::{self, BinaryInfo};
use crate::error::{Error, Result};
use crate::mapping::MapEntry;
use crate::memory::{Memory, MemoryExt};
use crate::target::TargetSource;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Version {
    pub(crate) major: u8,
    pub(crate) minor: u8,
    /// None when only the file name told us the version.
    pub(crate) patch: Option<u8>,
    /// Release level and serial, e.g. "rc1"; empty for a final release.
    pub(crate) suffix: String,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.patch {
            Some(p) => write!(f, "{}.{}.{}{}", self.major, self.minor, p, self.suffix),
            None => write!(f, "{}.{}", self.major, self.minor),
        }
    }
}

impl Version {
    /// From a `PY_VERSION_HEX` value such as 0x030c01f0.
    pub(crate) fn from_hex(v: u64) -> Option<Version> {
        let major = ((v >> 24) & 0xff) as u8;
        let minor = ((v >> 16) & 0xff) as u8;
        let patch = ((v >> 8) & 0xff) as u8;
        let level = ((v >> 4) & 0xf) as u8;
        let serial = (v & 0xf) as u8;
        if !(2..=3).contains(&major) || minor > 60 {
            return None;
        }
        let suffix = match level {
            0xa => format!("a{serial}"),
            0xb => format!("b{serial}"),
            0xc => format!("rc{serial}"),
            0xf => String::new(),
            _ => return None,
        };
        Some(Version {
            major,
            minor,
            patch: Some(patch),
            suffix,
        })
    }

    /// From the start of a version string such as "3.9.18 (main, …)".
    pub(crate) fn parse_prefix(s: &[u8]) -> Option<Version> {
        let text = std::str::from_utf8(s.split(|b| *b == 0).next()?).ok()?;
        let word = text.split([' ', '+']).next()?;
        let mut parts = word.splitn(3, '.');
        let major: u8 = parts.next()?.parse().ok()?;
        let minor: u8 = parts.next()?.parse().ok()?;
        let rest = parts.next()?;
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        let patch: u8 = digits.parse().ok()?;
        let suffix = rest[digits.len()..].to_string();
        if !(2..=3).contains(&major) || suffix.len() > 8 {
            return None;
        }
        // A real version string continues with " (" (build info).
        if !text[word.len()..].starts_with(" (") {
            return None;
        }
        Some(Version {
            major,
            minor,
            patch: Some(patch),
            suffix,
        })
    }
}

/// Where the GIL holder can be read.
#[derive(Debug, Clone, Copy)]
pub(crate) enum GilSource {
    /// A global or runtime field holding the running tstate pointer.
    TstatePtr(u64),
    /// Per interpreter, through `interp->ceval.gil`.
    PerInterp {
        ceval_gil: u64,
        last_holder: u64,
        locked: u64,
    },
    Unknown,
}

/// Where the GIL's mutex and condition variables are in this process.
#[derive(Debug, Clone)]
pub(crate) enum GilSyncSource {
    /// Fixed address ranges (statics, `_PyRuntime` fields).
    Ranges(Vec<(u64, u64)>),
    /// A pointer at `ptr` to a lock of `size` bytes (2.7).
    Pointer {
        ptr: u64,
        size: u64,
    },
    /// Per interpreter: `[start, end)` inside what `interp + ceval_gil` points at.
    PerInterp {
        ceval_gil: u64,
        start: u64,
        end: u64,
    },
    Unknown,
}

pub(crate) struct PythonProcess {
    pub(crate) pid: i32,
    pub(crate) exe: String,
    pub(crate) cmdline: String,
    pub(crate) version: Version,
    pub(crate) layout: Layout,
    /// Address of the word pointing at the newest interpreter.
    pub(crate) interp_head_ptr: u64,
    pub(crate) gil: GilSource,
    pub(crate) gil_sync: GilSyncSource,
    pub(crate) warnings: Vec<String>,
    /// The obmalloc statics `arenas`, `maxarenas`,
    /// `narenas_currently_allocated` (3.8–3.11; symbol table only), where
    /// one binary has all three.
    pub(crate) obmalloc_statics: Option<[u64; 3]>,
    /// tracemalloc's `_Py_tracemalloc_config`, `tracemalloc_traces`,
    /// `tracemalloc_domains` (3.9–3.11; the tables are statics, in the
    /// symbol table only), where one binary has all three.
    pub(crate) tracemalloc_globals: Option<[u64; 3]>,
}

const WANTED: &[&str] = &[
    "_PyRuntime",
    "Py_Version",
    "interp_head",
    "_PyThreadState_Current",
    "Py_GetVersion.version",
    "version.0",
    "version",
    // The GIL's lock objects of 2.7 and 3.6 (statics: symbol table only).
    "interpreter_lock",
    "gil_cond",
    "gil_mutex",
    "switch_cond",
    "switch_mutex",
    // obmalloc's arena table before 3.12 (statics: symbol table only).
    "arenas",
    "maxarenas",
    "narenas_currently_allocated",
    // tracemalloc's state before 3.12 (its tables: statics, symbol table only).
    "_Py_tracemalloc_config",
    "tracemalloc_traces",
    "tracemalloc_domains",
];

struct Binary {
    info: BinaryInfo,
    name: String,
    maps: Vec<MapEntry>,
}

fn is_libpython(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with("libpython2") || name.starts_with("libpython3")
}

/// "python3.9" / "libpython3.6m.so.1.0" → (3, 9).
fn version_from_name(path: &str) -> Option<(u8, u8)> {
    let name = path.rsplit('/').next()?;
    let i = name.find("python")? + "python".len();
    let rest = &name[i..];
    let mut it = rest.splitn(2, '.');
    let major: u8 = it.next()?.parse().ok()?;
    let minor: String = it
        .next()?
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    Some((major, minor.parse().ok()?))
}

impl PythonProcess {
    /// Find the interpreter in `source`: a live process or a core file.
    pub(crate) fn open(source: &dyn TargetSource) -> Result<PythonProcess> {
        let pid = source.pid();
        let mem: &dyn Memory = source;
        let exe = source.executable()?;
        let cmdline = source.command_line().unwrap_or_default();
        let maps = source.maps()?;
        let exe_path = exe.strip_suffix(" (deleted)").unwrap_or(&exe).to_string();
        let mut warnings = Vec::new();
        let (paths, bins) = load_binaries(source, &maps, &exe_path, &mut warnings);
        if !looks_python(&bins, &exe_path) {
            return Err(Error::NotPython { pid, exe: exe_path });
        }
        let version = find_version(mem, &bins)
            .or_else(|| version_from_paths(&paths))
            .ok_or_else(|| Error::UnknownVersion {
                pid,
                exe: exe_path.clone(),
            })?;
        let runtime = find_runtime(mem, &bins);
        let (layout, unproven) = choose_layout(pid, mem, &version, runtime, &mut warnings)?;
        let interp_head_ptr = interp_head(pid, mem, &version, &layout, unproven, &bins, runtime)?;
        Ok(PythonProcess {
            obmalloc_statics: one_each(
                &bins,
                ["arenas", "maxarenas", "narenas_currently_allocated"],
            ),
            tracemalloc_globals: one_each(
                &bins,
                [
                    "_Py_tracemalloc_config",
                    "tracemalloc_traces",
                    "tracemalloc_domains",
                ],
            ),
            pid,
            exe: exe_path,
            cmdline,
            version,
            gil: gil_source(&layout, &bins, runtime),
            gil_sync: gil_sync_source(&layout, &bins, runtime),
            layout,
            interp_head_ptr,
            warnings,
        })
    }
}

/// The candidate binaries, libpython first (shared builds), then the
/// executable: their paths, and those whose ELF could be read.
fn load_binaries(
    source: &dyn TargetSource,
    maps: &[MapEntry],
    exe_path: &str,
    warnings: &mut Vec<String>,
) -> (Vec<String>, Vec<Binary>) {
    let mut paths: Vec<String> = Vec::new();
    for m in maps {
        if m.is_file() && is_libpython(&m.path) && !paths.contains(&m.path) {
            paths.push(m.path.clone());
        }
    }
    if !paths.iter().any(|p| p == exe_path) {
        paths.push(exe_path.to_string());
    }
    let mut bins = Vec::new();
    for p in &paths {
        let file_maps: Vec<&MapEntry> = maps.iter().filter(|m| &m.path == p).collect();
        let Some(first) = file_maps.iter().min_by_key(|m| m.offset) else {
            continue;
        };
        let Some(file) = source.mapped_file(first) else {
            warnings.push(format!("cannot open {p}"));
            continue;
        };
        match elf::load(&file, &file_maps, WANTED) {
            Ok(info) => bins.push(Binary {
                info,
                name: p.rsplit('/').next().unwrap_or(p).to_string(),
                maps: file_maps.into_iter().cloned().collect(),
            }),
            Err(e) => warnings.push(e.to_string()),
        }
    }
    (paths, bins)
}

/// Whether the binaries (or the executable's name) say Python.
fn looks_python(bins: &[Binary], exe_path: &str) -> bool {
    bins.iter().any(|b| {
        is_libpython(&b.name)
            || b.info.symbol("_PyRuntime").is_some()
            || b.info.symbol("interp_head").is_some()
            || b.info.symbol("Py_Version").is_some()
    }) || version_from_name(exe_path).is_some_and(|(m, _)| m == 2 || m == 3)
}

/// The version the binaries' names give, where their memory gave none.
fn version_from_paths(paths: &[String]) -> Option<Version> {
    paths.iter().find_map(|p| {
        let (major, minor) = version_from_name(p)?;
        Some(Version {
            major,
            minor,
            patch: None,
            suffix: String::new(),
        })
    })
}

/// Where `_PyRuntime` is: its symbol or section, or (3.13+ without either)
/// the `_Py_DebugOffsets` cookie it starts with, in the binaries' data.
fn find_runtime(mem: &dyn Memory, bins: &[Binary]) -> Option<u64> {
    bins.iter()
        .find_map(|b| {
            b.info
                .symbol("_PyRuntime")
                .or(b.info.pyruntime.map(|r| r.addr))
        })
        .or_else(|| {
            let ranges = bins
                .iter()
                .flat_map(|b| b.maps.iter())
                .filter(|m| m.writable)
                .map(|m| (m.start, m.end));
            find_debug_cookie(mem, ranges)
        })
}

/// Where the interpreter list's head pointer is; with a layout read from
/// `_Py_DebugOffsets` (`unproven`: the table it borrowed from), only once
/// the chain it leads to validated.
fn interp_head(
    pid: i32,
    mem: &dyn Memory,
    version: &Version,
    layout: &Layout,
    unproven: Option<(u8, u8)>,
    bins: &[Binary],
    runtime: Option<u64>,
) -> Result<u64> {
    let unproven_error = |why: String| Error::UnprovenLayout {
        pid,
        version: version.to_string(),
        newest: newest_table(),
        why,
    };
    let interp_head_ptr = match find_interp_head(mem, layout, bins, runtime) {
        Some(p) => p,
        None if unproven.is_some() => {
            return Err(unproven_error(
                "no interpreter validated at its _Py_DebugOffsets' interpreters_head".into(),
            ))
        }
        None => {
            return Err(Error::NoInterpreter {
                pid,
                why: "no _PyRuntime or interp_head symbol validated, and scanning the \
                      binaries' data found no interpreter"
                    .into(),
            })
        }
    };
    if let Some((a, b)) = unproven {
        match validate_chain(pid, mem, layout, interp_head_ptr) {
            Ok(()) => {}
            Err(Error::ChainNotValid { why }) => {
                return Err(unproven_error(format!(
                    "read through its _Py_DebugOffsets (fields it lacks from the {a}.{b} \
                     table), {why}"
                )))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(interp_head_ptr)
}

/// Where the GIL's holder is found.
fn gil_source(layout: &Layout, bins: &[Binary], runtime: Option<u64>) -> GilSource {
    match &layout.runtime.gil {
        GilLocation::CurrentSymbol => bins
            .iter()
            .find_map(|b| b.info.symbol("_PyThreadState_Current"))
            .map(GilSource::TstatePtr)
            .unwrap_or(GilSource::Unknown),
        GilLocation::RuntimeTstateCurrent(off) => runtime
            .map(|r| GilSource::TstatePtr(r + off))
            .unwrap_or(GilSource::Unknown),
        GilLocation::InterpGil {
            ceval_gil,
            last_holder,
            locked,
        } => GilSource::PerInterp {
            ceval_gil: *ceval_gil,
            last_holder: *last_holder,
            locked: *locked,
        },
    }
}

/// Where the GIL's mutex and condition variables are.
fn gil_sync_source(layout: &Layout, bins: &[Binary], runtime: Option<u64>) -> GilSyncSource {
    let symbol_range = |name: &str| {
        bins.iter()
            .find_map(|b| b.info.symbols.get(name).and_then(|v| v.first()).copied())
    };
    match (&layout.gil_sync, &layout.runtime.gil) {
        (Some(GilSync::LockPointer { symbol, size }), _) => match symbol_range(symbol) {
            Some(r) => GilSyncSource::Pointer {
                ptr: r.addr,
                size: *size,
            },
            None => GilSyncSource::Unknown,
        },
        (Some(GilSync::Statics(names)), _) => {
            let ranges: Vec<(u64, u64)> = names
                .iter()
                .filter_map(|n| symbol_range(n))
                .filter(|r| r.size > 0)
                .map(|r| (r.addr, r.addr.wrapping_add(r.size)))
                .collect();
            if ranges.is_empty() {
                GilSyncSource::Unknown
            } else {
                GilSyncSource::Ranges(ranges)
            }
        }
        (Some(GilSync::Runtime { start, end }), _) => match runtime {
            Some(r) => GilSyncSource::Ranges(vec![(r.wrapping_add(*start), r.wrapping_add(*end))]),
            None => GilSyncSource::Unknown,
        },
        (Some(GilSync::InterpGil { start, end }), GilLocation::InterpGil { ceval_gil, .. }) => {
            GilSyncSource::PerInterp {
                ceval_gil: *ceval_gil,
                start: *start,
                end: *end,
            }
        }
        _ => GilSyncSource::Unknown,
    }
}

/// The addresses of `names` in the one binary that has each of them
/// exactly once (statics such as obmalloc's arena table).
fn one_each(bins: &[Binary], names: [&str; 3]) -> Option<[u64; 3]> {
    bins.iter().find_map(|b| {
        let one = |n: &str| match b.info.symbols.get(n).map(Vec::as_slice) {
            Some([r]) => Some(r.addr),
            _ => None,
        };
        Some([one(names[0])?, one(names[1])?, one(names[2])?])
    })
}

fn find_version(mem: &dyn Memory, bins: &[Binary]) -> Option<Version> {
    for b in bins {
        if let Some(a) = b.info.symbol("Py_Version") {
            if let Some(v) = mem
                .read_u32(a)
                .ok()
                .and_then(|h| Version::from_hex(h as u64))
            {
                return Some(v);
            }
        }
    }
    // The buffer Py_GetVersion() fills at start-up (sys.version).
    for b in bins {
        for name in ["Py_GetVersion.version", "version.0", "version"] {
            for r in b.info.symbols.get(name).into_iter().flatten() {
                let mut buf = [0u8; 64];
                if mem.read(r.addr, &mut buf).is_ok() {
                    if let Some(v) = Version::parse_prefix(&buf) {
                        return Some(v);
                    }
                }
            }
        }
    }
    // Stripped builds: look for that buffer in the writable data.
    for b in bins {
        for r in [b.info.bss, b.info.data].into_iter().flatten() {
            if let Some(v) = scan_for_version(mem, r.addr, r.size) {
                return Some(v);
            }
        }
    }
    None
}

fn scan_for_version(mem: &dyn Memory, addr: u64, size: u64) -> Option<Version> {
    const CHUNK: u64 = 1 << 20;
    let size = size.min(32 << 20);
    let mut off = 0;
    while off < size {
        let n = CHUNK.min(size - off) as usize;
        let mut buf = vec![0u8; n];
        if mem.read(addr.wrapping_add(off), &mut buf).is_ok() {
            for i in 0..n.saturating_sub(8) {
                let c = buf[i];
                if (c == b'2' || c == b'3') && buf[i + 1] == b'.' && (i == 0 || buf[i - 1] == 0) {
                    if let Some(v) = Version::parse_prefix(&buf[i..(i + 64).min(n)]) {
                        return Some(v);
                    }
                }
            }
        }
        off += CHUNK;
    }
    None
}

/// Address of a `_Py_DebugOffsets` cookie (`xdebugpy`) followed by a
/// plausible 3.13+ version, in the given writable ranges (bounded scan).
fn find_debug_cookie(mem: &dyn Memory, ranges: impl Iterator<Item = (u64, u64)>) -> Option<u64> {
    const CHUNK: u64 = 1 << 20;
    let mut budget: u64 = 64 << 20;
    for (start, end) in ranges {
        let mut at = start;
        while at < end && budget > 0 {
            let n = CHUNK.min(end - at).min(budget);
            budget -= n;
            let mut buf = vec![0u8; n as usize + 16];
            let len = if mem.read(at, &mut buf).is_ok() {
                buf.len()
            } else if mem.read(at, &mut buf[..n as usize]).is_ok() {
                n as usize
            } else {
                at += n;
                continue;
            };
            for i in (0..n as usize).step_by(8) {
                if buf[i..].starts_with(debug_offsets::COOKIE) && i + 16 <= len {
                    let v = crate::memory::le_u64(&buf, i as u64 + 8);
                    if Version::from_hex(v).is_some_and(|v| (v.major, v.minor) >= (3, 13)) {
                        return Some(at + i as u64);
                    }
                }
            }
            at += n;
        }
    }
    None
}

fn newest_table() -> String {
    cpython_layouts::newest()
        .map(|l| format!("{}.{}", l.major, l.minor))
        .unwrap_or_default()
}

/// The layout for the target, and for a version newer than every table the
/// version of the table it was built on: the caller must prove such a
/// layout on the live interpreter ([`validate_chain`]) before using it.
fn choose_layout(
    pid: i32,
    mem: &dyn Memory,
    version: &Version,
    runtime: Option<u64>,
    warnings: &mut Vec<String>,
) -> Result<(Layout, Option<(u8, u8)>)> {
    let builtin = cpython_layouts::for_version(version.major, version.minor);
    let newer = builtin.is_none()
        && cpython_layouts::newest()
            .is_some_and(|n| (version.major, version.minor) > (n.major, n.minor));
    let unproven = |why: String| Error::UnprovenLayout {
        pid,
        version: version.to_string(),
        newest: newest_table(),
        why,
    };
    // The interpreter's own offsets, wherever it carries them (3.13+):
    // `_PyRuntime` then starts with their cookie. Older runtimes start with
    // other data, and the table is the only source.
    let mut carries = false;
    if let Some(rt) = runtime {
        let mut cookie = [0u8; 8];
        carries = mem.read(rt, &mut cookie).is_ok() && &cookie == debug_offsets::COOKIE;
        if carries {
            match debug_offsets::read(mem, rt).and_then(|d| debug_offsets::overlay::layout(&d)) {
                Ok(o) if o.own_table() => {
                    // The table is proven against this version's headers: a
                    // difference means one of the two is wrong. Say so once.
                    if !o.diffs.is_empty() {
                        warnings.push(format!(
                            "_Py_DebugOffsets of Python {version} disagrees with pyinspect's \
                             {}.{} table on {}; using the target's values",
                            o.table.0,
                            o.table.1,
                            o.diffs.join(", ")
                        ));
                    }
                    return Ok((o.layout, None));
                }
                Ok(o) => return Ok((o.layout, Some(o.table))),
                Err(e) if builtin.is_none() => {
                    return Err(if newer {
                        unproven(format!("its _Py_DebugOffsets could not be read: {e}"))
                    } else {
                        Error::UnsupportedVersion {
                            pid,
                            version: format!("{version} ({e})"),
                            newest: newest_table(),
                        }
                    })
                }
                Err(e) => warnings.push(format!(
                    "_Py_DebugOffsets unusable, using the built-in table: {e}"
                )),
            }
        }
    }
    match builtin {
        Some(b) => Ok((b.clone(), None)),
        None if newer => Err(unproven(if carries || runtime.is_none() {
            "no _Py_DebugOffsets found (no _PyRuntime symbol or section, and no \"xdebugpy\" \
             cookie in its data)"
                .to_string()
        } else {
            "its _PyRuntime does not start with _Py_DebugOffsets".to_string()
        })),
        None => Err(Error::UnsupportedVersion {
            pid,
            version: version.to_string(),
            newest: newest_table(),
        }),
    }
}

/// How many times a racing target may fail [`validate_chain`] before the
/// layout is called wrong: frames come and go while it is read.
const VALIDATE_TRIES: usize = 5;
/// Thread states and frames looked at per try.
const VALIDATE_THREADS: usize = 64;
const VALIDATE_FRAMES: usize = 64;

/// Proves a layout built from an unproven `_Py_DebugOffsets` on the live
/// interpreter: the interpreter's thread states point back at it, and in
/// every thread that has a Python frame, the first such frame holds a code
/// object whose name and file name decode as `str`. Returns what did not
/// hold, or `NotInitialized` when there is no interpreter or thread yet.
fn validate_chain(pid: i32, mem: &dyn Memory, layout: &Layout, head_ptr: u64) -> Result<()> {
    let mut why = String::new();
    for attempt in 0..VALIDATE_TRIES {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        match validate_once(mem, layout, head_ptr) {
            Ok(true) => return Ok(()),
            Ok(false) => return Err(Error::NotInitialized { pid }),
            Err(e) => why = e,
        }
    }
    Err(Error::ChainNotValid { why })
}

/// One try of [`validate_chain`]: `Ok(false)` when there is nothing to check yet.
fn validate_once(
    mem: &dyn Memory,
    layout: &Layout,
    head_ptr: u64,
) -> std::result::Result<bool, String> {
    let interp = word(mem, head_ptr, "the interpreter list head")?;
    if interp == 0 {
        return Ok(false);
    }
    let first = word(
        mem,
        interp.wrapping_add(layout.interp.tstate_head),
        "threads.head",
    )?;
    if first == 0 {
        return Ok(false);
    }
    if !valid_interp(mem, layout, interp) {
        return Err(format!(
            "the interpreter at 0x{interp:x} lists thread state 0x{first:x}, which does not \
             point back at it (interpreter_state.threads_head or thread_state.interp is wrong)"
        ));
    }
    let objr = super::objects::ObjReader::new(mem, layout);
    let mut ts = first;
    for _ in 0..VALIDATE_THREADS {
        if ts == 0 {
            break;
        }
        validate_thread(mem, layout, &objr, interp, ts)?;
        ts = word(
            mem,
            ts.wrapping_add(layout.thread.next),
            "thread_state.next",
        )?;
    }
    Ok(true)
}

/// The word at `a`, or why `what` there is unreadable.
fn word(mem: &dyn Memory, a: u64, what: &str) -> std::result::Result<u64, String> {
    mem.read_u64(a)
        .map_err(|e| format!("{what} at 0x{a:x} is unreadable: {e}"))
}

/// One thread state of [`validate_once`]: it points back at `interp`, and
/// the first frame of its chain that holds a code object holds a real one.
fn validate_thread(
    mem: &dyn Memory,
    layout: &Layout,
    objr: &super::objects::ObjReader<'_>,
    interp: u64,
    ts: u64,
) -> std::result::Result<(), String> {
    use crate::cpython_layouts::{CurrentFrame, EntryMarker};
    if word(
        mem,
        ts.wrapping_add(layout.thread.interp),
        "thread_state.interp",
    )? != interp
    {
        return Err(format!(
            "thread state 0x{ts:x} does not point back at its interpreter 0x{interp:x}"
        ));
    }
    let mut f = match layout.thread.current_frame {
        CurrentFrame::Direct(o) => word(mem, ts.wrapping_add(o), "thread_state.current_frame")?,
        CurrentFrame::ViaCFrame {
            cframe,
            current_frame,
            ..
        } => match word(mem, ts.wrapping_add(cframe), "thread_state.cframe")? {
            0 => 0,
            cf => word(mem, cf.wrapping_add(current_frame), "cframe.current_frame")?,
        },
    };
    for _ in 0..VALIDATE_FRAMES {
        if f == 0 {
            break;
        }
        let shim = match layout.frame.entry {
            EntryMarker::OwnerShim { owner, shim_from } => {
                let mut b = [0u8; 1];
                mem.read(f.wrapping_add(owner), &mut b)
                    .map_err(|e| format!("frame 0x{f:x} is unreadable: {e}"))?;
                b[0] >= shim_from
            }
            _ => false,
        };
        let code = word(
            mem,
            f.wrapping_add(layout.frame.code),
            "interpreter_frame.executable",
        )? & !layout.frame.pointer_tag_bits;
        if !shim && code != 0 {
            return validate_code(mem, layout, objr, ts, f, code);
        }
        f = word(
            mem,
            f.wrapping_add(layout.frame.previous),
            "interpreter_frame.previous",
        )?;
    }
    Ok(())
}

/// The code object `code` of frame `f`: a `code` whose name, file name and
/// (3.11+) qualified name are non-empty strings.
fn validate_code(
    mem: &dyn Memory,
    layout: &Layout,
    objr: &super::objects::ObjReader<'_>,
    ts: u64,
    f: u64,
    code: u64,
) -> std::result::Result<(), String> {
    match objr.type_name(code) {
        Ok(t) if t == "code" => {}
        Ok(t) => {
            return Err(format!(
                "frame 0x{f:x} of thread state 0x{ts:x} holds a {t:?} where its \
                 code object should be (interpreter_frame.executable is wrong)"
            ))
        }
        Err(e) => {
            return Err(format!(
                "frame 0x{f:x} of thread state 0x{ts:x}: its code object is \
                 unreadable: {e}"
            ))
        }
    }
    let str_field = |off: u64, what: &str| -> std::result::Result<(), String> {
        let p = word(mem, code.wrapping_add(off), what)?;
        match objr.type_name(p) {
            Ok(t) if t == "str" => {}
            Ok(t) => {
                return Err(format!(
                    "{what} of code object 0x{code:x} is a {t:?}, not a str"
                ))
            }
            Err(e) => return Err(format!("{what} of code object 0x{code:x}: {e}")),
        }
        match objr.string(p, 4096) {
            Ok((s, _)) if !s.is_empty() => Ok(()),
            Ok(_) => Err(format!("{what} of code object 0x{code:x} is empty")),
            Err(e) => Err(format!(
                "{what} of code object 0x{code:x} does not decode: {e}"
            )),
        }
    };
    str_field(layout.code.name, "co_name")?;
    str_field(layout.code.filename, "co_filename")?;
    if let Some(q) = layout.code.qualname {
        str_field(q, "co_qualname")?;
    }
    Ok(())
}

/// True when `interp` looks like a live `PyInterpreterState`: its first
/// thread state points back at it.
pub(crate) fn valid_interp(mem: &dyn Memory, layout: &Layout, interp: u64) -> bool {
    if interp == 0 || !interp.is_multiple_of(8) {
        return false;
    }
    let Ok(ts) = mem.read_u64(interp.wrapping_add(layout.interp.tstate_head)) else {
        return false;
    };
    ts != 0
        && ts.is_multiple_of(8)
        && mem.read_u64(ts.wrapping_add(layout.thread.interp)).ok() == Some(interp)
}

fn find_interp_head(
    mem: &dyn Memory,
    layout: &Layout,
    bins: &[Binary],
    runtime: Option<u64>,
) -> Option<u64> {
    let mut candidates: Vec<u64> = Vec::new();
    if let (Some(rt), Some(off)) = (runtime, layout.runtime.interpreters_head) {
        candidates.push(rt + off);
    }
    for b in bins {
        if let Some(a) = b.info.symbol("interp_head") {
            candidates.push(a);
        }
        if let (Some(r), Some(off)) = (b.info.pyruntime, layout.runtime.interpreters_head) {
            candidates.push(r.addr + off);
        }
    }
    for c in &candidates {
        if mem.read_u64(*c).is_ok_and(|i| valid_interp(mem, layout, i)) {
            return Some(*c);
        }
    }
    // The symbol or section is authoritative: an empty list there means the
    // interpreter is not up yet (or is gone), and the caller says so. A scan
    // now could latch onto some other pointer to the interpreter.
    if let Some(c) = candidates.iter().find(|c| mem.read_u64(**c).is_ok()) {
        return Some(*c);
    }
    // Stripped and without a .PyRuntime section: a word in the binaries'
    // data that points at something that validates as an interpreter.
    for b in bins {
        for r in [b.info.bss, b.info.data].into_iter().flatten() {
            if let Some(a) = scan_for_interp(mem, layout, r.addr, r.size) {
                return Some(a);
            }
        }
    }
    None
}

fn scan_for_interp(mem: &dyn Memory, layout: &Layout, addr: u64, size: u64) -> Option<u64> {
    let size = size.min(16 << 20) as usize & !7;
    let mut buf = vec![0u8; size];
    mem.read(addr, &mut buf).ok()?;
    for (i, w) in buf.chunks_exact(8).enumerate() {
        let v = u64::from_le_bytes(w.try_into().ok()?);
        if v > 0x10000 && v.is_multiple_of(8) && valid_interp(mem, layout, v) {
            return Some(addr + (i * 8) as u64);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake 3.15 interpreter → thread → frame → code chain for
    /// [`validate_once`]; `code_type` names the code object's type.
    fn fake_chain(code_type: &str, threads: bool) -> crate::memory::SliceMemory {
        let l = cpython_layouts::for_version(3, 15).unwrap();
        let (head, interp, ts, frame, code, ty, str_ty, name) = (
            0x1000u64, 0x10000u64, 0x20000u64, 0x30000u64, 0x40000u64, 0x50000u64, 0x51000u64,
            0x60000u64,
        );
        let put = |buf: &mut Vec<u8>, off: u64, v: u64| {
            buf[off as usize..off as usize + 8].copy_from_slice(&v.to_le_bytes())
        };
        let mut m = crate::memory::SliceMemory::new();
        m.add(head, interp.to_le_bytes().to_vec());
        let mut b = vec![0u8; 8192];
        put(&mut b, l.interp.tstate_head, if threads { ts } else { 0 });
        m.add(interp, b);
        let mut b = vec![0u8; 512];
        put(&mut b, l.thread.interp, interp);
        let crate::cpython_layouts::CurrentFrame::Direct(cf) = l.thread.current_frame else {
            panic!("3.15 has a direct current_frame")
        };
        put(&mut b, cf, frame);
        m.add(ts, b);
        let mut b = vec![0u8; 128];
        put(&mut b, l.frame.code, code | 1); // a tagged _PyStackRef
        m.add(frame, b);
        let mut b = vec![0u8; 256];
        put(&mut b, l.object.ob_type, ty);
        for off in [l.code.name, l.code.filename, l.code.qualname.unwrap()] {
            put(&mut b, off, name);
        }
        m.add(code, b);
        for (t, tname) in [(ty, code_type), (str_ty, "str")] {
            let mut b = vec![0u8; 256];
            put(&mut b, l.object.tp_name, t + 128);
            b[128..128 + tname.len()].copy_from_slice(tname.as_bytes());
            m.add(t, b);
        }
        // A compact ASCII str "run" (kind 1, compact, ascii).
        let mut b = vec![0u8; 128];
        put(&mut b, l.object.ob_type, str_ty);
        if let crate::cpython_layouts::StringLayout::Pep393 {
            length,
            state,
            ascii_size,
            ..
        } = l.string
        {
            put(&mut b, length, 3);
            b[state as usize] = (1 << 2) | (1 << 5) | (1 << 6);
            b[ascii_size as usize..ascii_size as usize + 3].copy_from_slice(b"run");
        }
        m.add(name, b);
        m
    }

    #[test]
    fn validates_the_chain_of_a_live_interpreter() {
        let l = cpython_layouts::for_version(3, 15).unwrap();
        assert_eq!(
            validate_once(&fake_chain("code", true), l, 0x1000),
            Ok(true)
        );
        // No thread yet: nothing to prove, the caller waits.
        assert_eq!(
            validate_once(&fake_chain("code", false), l, 0x1000),
            Ok(false)
        );
        // The frame's "code object" is something else: the layout is wrong.
        let e = validate_once(&fake_chain("dict", true), l, 0x1000).unwrap_err();
        assert!(e.contains("\"dict\"") && e.contains("executable"), "{e}");
        // A thread state that does not point back at its interpreter.
        let mut wrong = l.clone();
        wrong.thread.interp += 8;
        let e = validate_once(&fake_chain("code", true), &wrong, 0x1000).unwrap_err();
        assert!(e.contains("point back"), "{e}");
    }

    #[test]
    fn finds_the_debug_cookie_only_with_a_plausible_version() {
        use crate::memory::SliceMemory;
        let mut region = vec![0u8; 8192];
        // A stray copy of the cookie with garbage after it, then the real one.
        region[64..72].copy_from_slice(b"xdebugpy");
        region[4096..4104].copy_from_slice(b"xdebugpy");
        region[4104..4112].copy_from_slice(&0x030d00f0u64.to_le_bytes());
        let mut m = SliceMemory::new();
        m.add(0x40000, region);
        let found = find_debug_cookie(&m, [(0x40000u64, 0x42000u64)].into_iter());
        assert_eq!(found, Some(0x41000));
        assert_eq!(
            find_debug_cookie(&m, [(0x40000u64, 0x41000u64)].into_iter()),
            None
        );
    }

    #[test]
    fn versions_from_hex_strings_and_names() {
        assert_eq!(Version::from_hex(0x030c01f0).unwrap().to_string(), "3.12.1");
        assert_eq!(
            Version::from_hex(0x030d00c3).unwrap().to_string(),
            "3.13.0rc3"
        );
        assert!(Version::from_hex(0xdeadbeef).is_none());
        assert_eq!(
            Version::parse_prefix(b"3.9.18 (main, Jan  1 2024) [GCC]")
                .unwrap()
                .to_string(),
            "3.9.18"
        );
        assert_eq!(
            Version::parse_prefix(b"2.7.18 (default, x)\0junk")
                .unwrap()
                .to_string(),
            "2.7.18"
        );
        assert!(Version::parse_prefix(b"3.9.18").is_none());
        assert!(Version::parse_prefix(b"\xff\xfe").is_none());
        assert_eq!(
            version_from_name("/usr/lib/libpython3.6m.so.1.0"),
            Some((3, 6))
        );
        assert_eq!(version_from_name("/usr/bin/python3.11"), Some((3, 11)));
        assert_eq!(version_from_name("/bin/sleep"), None);
    }
}
