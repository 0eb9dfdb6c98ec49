//! The Firefox Profiler's processed profile format
//! (https://github.com/firefox-devtools/profiler/blob/main/docs-developer/processed-profile-format.md),
//! which profiler.firefox.com opens directly: one thread track per sampled
//! thread with its name, samples at their real times (a run of equal samples
//! is one sample weighted by its count), stacks coloured by category (Python,
//! native, idle) and native frames attributed to their library.
//!
//! Written as a stream of column tables; per thread the frame, function and
//! stack tables are built from the profile's interned stacks.

use std::collections::HashMap;
use std::io::{self, Write};

use super::profile::FrameClass;
use super::{Profile, EXPORTER};

/// The processed format version written (what CPython 3.15's sampler writes
/// too); the profiler upgrades older versions itself but not newer ones.
const PROCESSED_VERSION: u32 = 57;
/// The Gecko (raw) format version recorded alongside.
const GECKO_VERSION: u32 = 32;

/// Category indices into [`CATEGORIES`].
const CAT_OTHER: u32 = 0;
const CAT_IDLE: u32 = 1;
const CAT_PYTHON: u32 = 2;
const CAT_NATIVE: u32 = 3;
const CATEGORIES: [(&str, &str); 4] = [
    ("Other", "grey"),
    ("Idle", "transparent"),
    ("Python", "yellow"),
    ("Native", "blue"),
];

/// Strings of the whole file (`shared.stringArray`), each once.
#[derive(Default)]
struct Strings {
    list: Vec<String>,
    index: HashMap<String, u32>,
}

impl Strings {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// One library of the native frames (`libs`), by its mapped path.
struct Libs {
    paths: Vec<String>,
    index: HashMap<u32, u32>,
}

/// One thread's tables, in the column layout of the format.
#[derive(Default)]
struct ThreadTables {
    // funcTable
    func_name: Vec<u32>,
    func_file: Vec<Option<u32>>,
    func_line: Vec<Option<u32>>,
    func_resource: Vec<i64>,
    func_index: HashMap<(u32, Option<u32>, Option<u32>), u32>,
    // frameTable
    frame_func: Vec<u32>,
    frame_category: Vec<u32>,
    frame_line: Vec<Option<u32>>,
    frame_index: HashMap<(u32, bool), u32>,
    // stackTable
    stack_prefix: Vec<Option<u32>>,
    stack_frame: Vec<u32>,
    stack_category: Vec<u32>,
    stack_index: HashMap<(Option<u32>, u32), u32>,
    // resourceTable
    res_lib: Vec<u32>,
    res_name: Vec<u32>,
    res_index: HashMap<u32, u32>,
    /// Profile stack id (and idle) → this thread's stack node.
    leaf_of: HashMap<(u32, bool), u32>,
}

impl ThreadTables {
    fn resource(&mut self, lib: u32, name: u32) -> u32 {
        if let Some(&r) = self.res_index.get(&lib) {
            return r;
        }
        let r = self.res_lib.len() as u32;
        self.res_lib.push(lib);
        self.res_name.push(name);
        self.res_index.insert(lib, r);
        r
    }

    fn func(
        &mut self,
        name: u32,
        file: Option<u32>,
        line: Option<u32>,
        resource: Option<u32>,
    ) -> u32 {
        // One function per (name, file, first line or library): its lines
        // differ per frame.
        let key = (name, file, resource.or(line));
        if let Some(&f) = self.func_index.get(&key) {
            return f;
        }
        let f = self.func_name.len() as u32;
        self.func_name.push(name);
        self.func_file.push(file);
        self.func_line.push(None);
        self.func_resource.push(resource.map_or(-1, i64::from));
        self.func_index.insert(key, f);
        f
    }
}

fn frame_node(
    p: &Profile,
    t: &mut ThreadTables,
    strings: &mut Strings,
    libs: &mut Libs,
    frame: u32,
    idle: bool,
) -> u32 {
    if let Some(&f) = t.frame_index.get(&(frame, idle)) {
        return f;
    }
    let info = &p.frames[frame as usize];
    let (func, category, line) = match info.kind {
        FrameClass::Python => {
            let name = strings.id(p.strings.get(info.function));
            let file = info.file.map(|f| strings.id(p.strings.get(f)));
            let line = (info.line > 0).then_some(info.line);
            (t.func(name, file, None, None), CAT_PYTHON, line)
        }
        FrameClass::Native => {
            let function = p.strings.get(info.function);
            let name = if function.is_empty() {
                p.label(frame)
            } else {
                function
            };
            let name = strings.id(name);
            let resource = info.module.map(|m| {
                let next = libs.paths.len() as u32;
                let lib = *libs.index.entry(m).or_insert_with(|| {
                    libs.paths.push(p.strings.get(m).to_string());
                    next
                });
                let path = p.strings.get(m);
                let short = strings.id(path.rsplit('/').next().unwrap_or(path));
                t.resource(lib, short)
            });
            (t.func(name, None, None, resource), CAT_NATIVE, None)
        }
        FrameClass::Synthetic => {
            let name = strings.id(p.label(frame));
            (t.func(name, None, None, None), CAT_OTHER, None)
        }
    };
    let category = if idle { CAT_IDLE } else { category };
    let f = t.frame_func.len() as u32;
    t.frame_func.push(func);
    t.frame_category.push(category);
    t.frame_line.push(line);
    t.frame_index.insert((frame, idle), f);
    f
}

fn stack_node(
    p: &Profile,
    t: &mut ThreadTables,
    strings: &mut Strings,
    libs: &mut Libs,
    stack: u32,
    idle: bool,
) -> u32 {
    if let Some(&s) = t.leaf_of.get(&(stack, idle)) {
        return s;
    }
    let mut prefix: Option<u32> = None;
    for &frame in p.stacks.get(stack) {
        let f = frame_node(p, t, strings, libs, frame, idle);
        let next = t.stack_frame.len() as u32;
        let node = *t.stack_index.entry((prefix, f)).or_insert(next);
        if node == next {
            t.stack_prefix.push(prefix);
            t.stack_frame.push(f);
            t.stack_category.push(t.frame_category[f as usize]);
        }
        prefix = Some(node);
    }
    // An empty stack (cannot come from the sampler) becomes an Other root.
    let leaf = match prefix {
        Some(n) => n,
        None => {
            let name = strings.id("[empty]");
            let func = t.func(name, None, None, None);
            let f = t.frame_func.len() as u32;
            t.frame_func.push(func);
            t.frame_category.push(CAT_OTHER);
            t.frame_line.push(None);
            let n = t.stack_frame.len() as u32;
            t.stack_prefix.push(None);
            t.stack_frame.push(f);
            t.stack_category.push(CAT_OTHER);
            n
        }
    };
    t.leaf_of.insert((stack, idle), leaf);
    leaf
}

fn column<T: serde::Serialize>(out: &mut dyn Write, name: &str, values: &[T]) -> io::Result<()> {
    write!(out, "\"{name}\":")?;
    serde_json::to_writer(&mut *out, values)?;
    out.write_all(b",")
}

fn repeated(out: &mut dyn Write, name: &str, value: &str, n: usize) -> io::Result<()> {
    write!(out, "\"{name}\":[")?;
    for i in 0..n {
        if i > 0 {
            out.write_all(b",")?;
        }
        out.write_all(value.as_bytes())?;
    }
    out.write_all(b"],")
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

pub(super) fn write(p: &Profile, out: &mut dyn Write, title: &str) -> io::Result<()> {
    let start_ms = p
        .started
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0);
    let interval_ms = 1000.0 / p.opts.rate.max(f64::MIN_POSITIVE);
    let mut strings = Strings::default();
    let mut libs = Libs {
        paths: Vec::new(),
        index: HashMap::new(),
    };

    // Threads first (they fill the string array and the library list),
    // into memory: the head of the file needs the libraries.
    let mut threads_json: Vec<u8> = Vec::new();
    let mut first = true;
    for (ti, runs) in super::chrometrace::runs_by_thread(p).iter().enumerate() {
        if runs.is_empty() {
            continue;
        }
        if !first {
            threads_json.push(b',');
        }
        first = false;
        write_thread(p, ti, runs, &mut strings, &mut libs, &mut threads_json)?;
    }

    out.write_all(b"{\"meta\":{")?;
    write!(
        out,
        "\"interval\":{interval_ms},\"startTime\":{start_ms},\"processType\":0,\
         \"version\":{GECKO_VERSION},\"preprocessedProfileVersion\":{PROCESSED_VERSION},\
         \"symbolicated\":true,\"stackwalk\":{},\"platform\":\"Linux\",\"oscpu\":\"Linux\",\
         \"abi\":\"{}\",\"toolkit\":\"\",\"appBuildID\":\"\",\"misc\":\"\",\
         \"physicalCPUs\":0,\"logicalCPUs\":0,\"CPUName\":\"\",\"pausedRanges\":[],\
         \"markerSchema\":[],\
         \"extensions\":{{\"id\":[],\"name\":[],\"baseURL\":[],\"length\":0}},",
        u8::from(!libs.paths.is_empty()),
        std::env::consts::ARCH
    )?;
    out.write_all(b"\"product\":")?;
    serde_json::to_writer(&mut *out, title)?;
    out.write_all(b",\"importedFrom\":")?;
    serde_json::to_writer(&mut *out, EXPORTER)?;
    out.write_all(b",\"categories\":[")?;
    for (i, (name, color)) in CATEGORIES.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        write!(
            out,
            "{{\"name\":\"{name}\",\"color\":\"{color}\",\"subcategories\":[\"Other\"]}}"
        )?;
    }
    out.write_all(b"]},\"libs\":[")?;
    for (i, path) in libs.paths.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        let name = path.rsplit('/').next().unwrap_or(path);
        out.write_all(b"{\"name\":")?;
        serde_json::to_writer(&mut *out, name)?;
        out.write_all(b",\"path\":")?;
        serde_json::to_writer(&mut *out, path)?;
        out.write_all(b",\"debugName\":")?;
        serde_json::to_writer(&mut *out, name)?;
        out.write_all(b",\"debugPath\":")?;
        serde_json::to_writer(&mut *out, path)?;
        write!(
            out,
            ",\"breakpadId\":\"\",\"codeId\":null,\"arch\":\"{}\"}}",
            std::env::consts::ARCH
        )?;
    }
    out.write_all(b"],\"threads\":[")?;
    out.write_all(&threads_json)?;
    out.write_all(b"],\"pages\":[],\"counters\":[],\"shared\":{\"stringArray\":")?;
    serde_json::to_writer(&mut *out, &strings.list)?;
    out.write_all(b",\"sources\":{\"length\":0,\"uuid\":[],\"filename\":[]}}}")?;
    Ok(())
}

fn write_thread(
    p: &Profile,
    ti: usize,
    runs: &[u32],
    strings: &mut Strings,
    libs: &mut Libs,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    let thread = &p.threads[ti];
    let mut t = ThreadTables::default();
    // Samples: one per run, weighted by its sample count; where the thread
    // went unsampled, an empty sample ends the previous run.
    let mut time: Vec<f64> = Vec::with_capacity(runs.len());
    let mut stack: Vec<Option<u32>> = Vec::with_capacity(runs.len());
    let mut weight: Vec<u32> = Vec::with_capacity(runs.len());
    let mut prev_end: Option<u64> = None;
    for &r in runs {
        let run = &p.runs[r as usize];
        if let Some(end) = prev_end {
            if run.after_gap && run.start_ns > end {
                time.push(ms(end));
                stack.push(None);
                weight.push(0);
            }
        }
        time.push(ms(run.start_ns));
        stack.push(Some(stack_node(
            p, &mut t, strings, libs, run.stack, run.idle,
        )));
        weight.push(run.count);
        prev_end = Some(run.start_ns.saturating_add(run.dur_ns));
    }
    let first_ms = time.first().copied().unwrap_or(0.0);

    let name = match thread.name {
        Some(n) => p.strings.get(n).to_string(),
        None if thread.os_tid == Some(thread.pid as u32) => "MainThread".to_string(),
        None => format!("Thread {}", thread.display_id()),
    };
    let cmdline = p
        .processes
        .iter()
        .find(|pr| pr.pid == thread.pid)
        .map(|pr| p.strings.get(pr.cmdline).to_string())
        .unwrap_or_default();
    let tid = thread.os_tid.map_or(thread.ident, u64::from);
    out.write_all(b"{\"name\":")?;
    serde_json::to_writer(&mut *out, &name)?;
    write!(
        out,
        ",\"isMainThread\":{},\"processType\":\"default\",\"processStartupTime\":0,\
         \"processShutdownTime\":null,\"registerTime\":{first_ms},\"unregisterTime\":null,\
         \"pausedRanges\":[],\"pid\":\"{}\",\"tid\":{tid},\"processName\":",
        thread.os_tid == Some(thread.pid as u32),
        thread.pid
    )?;
    serde_json::to_writer(&mut *out, &cmdline)?;

    let n = time.len();
    out.write_all(b",\"samples\":{")?;
    column(out, "stack", &stack)?;
    column(out, "time", &time)?;
    column(out, "weight", &weight)?;
    write!(out, "\"weightType\":\"samples\",\"length\":{n}}}")?;

    let n = t.stack_frame.len();
    out.write_all(b",\"stackTable\":{")?;
    column(out, "frame", &t.stack_frame)?;
    column(out, "prefix", &t.stack_prefix)?;
    column(out, "category", &t.stack_category)?;
    repeated(out, "subcategory", "0", n)?;
    write!(out, "\"length\":{n}}}")?;

    let n = t.frame_func.len();
    out.write_all(b",\"frameTable\":{")?;
    repeated(out, "address", "-1", n)?;
    repeated(out, "inlineDepth", "0", n)?;
    column(out, "category", &t.frame_category)?;
    repeated(out, "subcategory", "0", n)?;
    column(out, "func", &t.frame_func)?;
    repeated(out, "nativeSymbol", "null", n)?;
    repeated(out, "innerWindowID", "null", n)?;
    repeated(out, "implementation", "null", n)?;
    column(out, "line", &t.frame_line)?;
    repeated(out, "column", "null", n)?;
    write!(out, "\"length\":{n}}}")?;

    let n = t.func_name.len();
    out.write_all(b",\"funcTable\":{")?;
    column(out, "name", &t.func_name)?;
    repeated(out, "isJS", "false", n)?;
    repeated(out, "relevantForJS", "false", n)?;
    column(out, "resource", &t.func_resource)?;
    column(out, "fileName", &t.func_file)?;
    column(out, "lineNumber", &t.func_line)?;
    repeated(out, "columnNumber", "null", n)?;
    write!(out, "\"length\":{n}}}")?;

    let n = t.res_lib.len();
    out.write_all(b",\"resourceTable\":{")?;
    column(out, "lib", &t.res_lib)?;
    column(out, "name", &t.res_name)?;
    repeated(out, "host", "null", n)?;
    repeated(out, "type", "1", n)?;
    write!(out, "\"length\":{n}}}")?;

    out.write_all(
        b",\"nativeSymbols\":{\"libIndex\":[],\"address\":[],\"name\":[],\"functionSize\":[],\"length\":0}\
          ,\"markers\":{\"data\":[],\"name\":[],\"startTime\":[],\"endTime\":[],\"phase\":[],\"category\":[],\"length\":0}}",
    )?;
    Ok(())
}
