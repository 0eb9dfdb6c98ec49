//! Native stacks: registers, CFI unwinding, symbols, and merging with Python frames.
//!
//! [`NativeUnwinder`] unwinds one ptrace-stopped thread at a time: CFI from
//! `.eh_frame`/`.debug_frame` through framehop where a function has it, and a
//! frame-pointer walk cross-checked by a validated stack scan where it does
//! not (hand-written assembly), so the chain reaches the Python frames.
//! Unwinding names frames from the symbol tables only; DWARF file:line and
//! inlined frames are added by [`NativeUnwinder::add_lines`] for the frames
//! that get printed, because parsing a large library's DWARF costs far more
//! than unwinding.

mod backing;
mod cache;
mod callsites;
mod cfi;
mod dwarf;
mod file;
mod frame;
mod jit;
mod merge;
mod module;
mod names;
pub(crate) mod pools;
pub(crate) mod scan;
mod symbols;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{FrameAddress, Unwinder};

use crate::error::Error;
use crate::mapping::MapEntry as Mapping;
use crate::memory::{Memory, MemoryExt};
use crate::target::TargetSource;
use backing::Backing;
use cache::BoundedMap;
use cfi::SectionData;
use module::LoadedModule;
use std::rc::Rc;

pub(crate) use frame::cuda_tag;
#[cfg(test)]
pub(crate) use frame::test_frame;
pub use frame::{display_name, NativeFrame, UnwindMethod};
pub(crate) use merge::native_entry_frame;
pub use merge::{
    is_eval_frame, is_interpreter_plumbing, is_python_module, merge, native_entry, MergeMethod,
    Merged, PyFrameForMerge,
};
pub(crate) use names::short_name;

/// Deepest stack we walk; deeper ones are cut (and the cut is visible as a
/// stack that does not end in a thread entry point).
pub(crate) const MAX_FRAMES: usize = 2048;
/// Stack bytes fetched per read: most stacks need a handful.
const CHUNK: u64 = 4096;
/// Bound on stack bytes read for one unwind (chunks).
const MAX_CHUNKS: usize = 1024;
/// How far above the stack pointer the scan looks for a return address.
const SCAN_WORDS: u64 = 4096;
/// A frame pointer further than this above the stack pointer is not trusted.
const FP_MAX_FRAME: u64 = 1 << 20;
/// Saved-rbp candidates tried after a stack-scanned frame.
const MAX_BP_CANDIDATES: usize = 16;
/// Frames of CFI unwinding tried to judge an rbp candidate.
const CHAIN_LOOKAHEAD: usize = 16;

enum LoadState {
    NotLoaded,
    Loaded(Box<LoadedModule>),
    /// Could not be opened or parsed: frames show module+offset (warned once).
    Failed,
}

/// A file (or the vdso) with executable code in the target.
struct ModEntry {
    name: String,
    path: String,
    inode: u64,
    start: u64,
    end: u64,
    /// An executable mapping: (start, end, file offset).
    exec: (u64, u64, u64),
    state: LoadState,
}

/// Unwinds threads of one target process; keeps per-module caches.
pub struct NativeUnwinder {
    /// Where the maps, the mapped files and the vdso's bytes come from.
    source: Rc<dyn TargetSource>,
    maps: Vec<Mapping>,
    modules: Vec<ModEntry>,
    fh: UnwinderX86_64<SectionData>,
    cache: CacheX86_64,
    warnings: Vec<String>,
    warned: HashSet<String>,
    /// Pages found outside every module even after re-reading the maps, so
    /// that code outside files (JIT) does not cost a maps read per sample.
    known_misses: HashSet<u64>,
    /// Validated return-address checks of stack words (file-backed code only).
    ra_cache: BoundedMap<u64, bool>,
    /// Whether [`add_lines`](Self::add_lines) may read DWARF from separate
    /// debug files (see [`set_debug_file_lines`](Self::set_debug_file_lines)).
    debug_file_lines: bool,
    /// Tail-call frames between a callee and its caller, by (caller's
    /// return address, callee's lookup address).
    tail_cache: BoundedMap<(u64, u64), Arc<[NativeFrame]>>,
    /// Why the last unwind ended early (see [`ended_early`](Self::ended_early)).
    ended: Option<String>,
    /// Whether this unwind re-read the maps for [`is_code`](Self::is_code).
    refreshed_in_unwind: bool,
    /// Names of code compiled at run time (gdb's JIT interface).
    jit: jit::JitCode,
}

impl NativeUnwinder {
    pub fn new(source: Rc<dyn TargetSource>) -> Result<Self, Error> {
        let mut u = NativeUnwinder {
            source,
            maps: Vec::new(),
            modules: Vec::new(),
            fh: UnwinderX86_64::new(),
            cache: CacheX86_64::new(),
            warnings: Vec::new(),
            warned: HashSet::new(),
            known_misses: HashSet::new(),
            ra_cache: BoundedMap::default(),
            tail_cache: BoundedMap::default(),
            debug_file_lines: false,
            ended: None,
            refreshed_in_unwind: false,
            jit: jit::JitCode::default(),
        };
        u.refresh()?;
        Ok(u)
    }

    /// Re-read /proc/PID/maps; modules still mapped at the same place keep
    /// their caches, vanished ones are dropped.
    fn refresh(&mut self) -> Result<(), Error> {
        let maps = self.source.maps()?;
        let mut old: HashMap<(u64, String, u64), ModEntry> = self
            .modules
            .drain(..)
            .map(|m| ((m.start, m.path.clone(), m.inode), m))
            .collect();
        let mut modules = Vec::new();
        let mut i = 0;
        while i < maps.len() {
            let m = &maps[i];
            let mut j = i + 1;
            while j < maps.len() && maps[j].path == m.path && maps[j].inode == m.inode {
                j += 1;
            }
            let group = &maps[i..j];
            let eligible = m.is_file() || m.path == "[vdso]";
            if let Some(x) = group.iter().find(|g| g.executable).filter(|_| eligible) {
                let start = group[0].start;
                let key = (start, m.path.clone(), m.inode);
                let entry = old.remove(&key).unwrap_or_else(|| ModEntry {
                    name: m
                        .file_path()
                        .rsplit('/')
                        .next()
                        .unwrap_or(&m.path)
                        .to_string(),
                    path: m.file_path().to_string(),
                    inode: m.inode,
                    start,
                    end: group[group.len() - 1].end,
                    exec: (x.start, x.end, x.offset),
                    state: LoadState::NotLoaded,
                });
                modules.push(entry);
            }
            i = j;
        }
        for (_, gone) in old {
            if matches!(gone.state, LoadState::Loaded(_)) {
                self.fh.remove_module(gone.start);
            }
        }
        self.modules = modules;
        self.maps = maps;
        self.known_misses.clear();
        self.ra_cache.clear();
        self.tail_cache.clear();
        Ok(())
    }

    fn warn(&mut self, msg: String) {
        if self.warned.insert(msg.clone()) {
            self.warnings.push(msg);
        }
    }

    /// Warnings collected so far (a module that could not be opened or
    /// parsed: once per module).
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    fn find_module(&self, addr: u64) -> Option<usize> {
        let i = self
            .modules
            .partition_point(|m| m.start <= addr)
            .checked_sub(1)?;
        (addr < self.modules[i].end).then_some(i)
    }

    /// The module containing `addr`, re-reading the maps once when no module
    /// does (a library loaded after we started).
    fn module_for(&mut self, addr: u64) -> Option<usize> {
        if let Some(i) = self.find_module(addr) {
            return Some(i);
        }
        let page = addr >> 12;
        if self.known_misses.contains(&page) || self.refresh().is_err() {
            return None;
        }
        let r = self.find_module(addr);
        if r.is_none() {
            self.known_misses.insert(page);
        }
        r
    }

    /// Load module `i` on first use; None when it cannot be used.
    fn loaded(&mut self, i: usize) -> Option<&mut LoadedModule> {
        if matches!(self.modules[i].state, LoadState::NotLoaded) {
            let state = match self.load_module(i) {
                Ok((lm, fh)) => {
                    self.fh.add_module(fh);
                    LoadState::Loaded(Box::new(lm))
                }
                Err(why) => {
                    let m = &self.modules[i];
                    let msg = format!("native frames in {} show module+offset only: {why}", m.path);
                    self.warn(msg);
                    LoadState::Failed
                }
            };
            self.modules[i].state = state;
        }
        match &mut self.modules[i].state {
            LoadState::Loaded(lm) => Some(lm),
            _ => None,
        }
    }

    fn load_module(
        &self,
        i: usize,
    ) -> Result<(LoadedModule, framehop::Module<SectionData>), String> {
        let m = &self.modules[i];
        let (xs, xe, xoff) = m.exec;
        let bytes = if m.path == "[vdso]" {
            // The vdso exists only in memory; it is one or two pages.
            let len = (m.end - m.start) as usize;
            let v = self
                .source
                .read_vec(m.start, len, 1 << 20)
                .map_err(|e| e.to_string())?;
            Backing::Owned(v)
        } else {
            // As the target sees it: a deleted file, a file inside a
            // container, or one under a core's --root.
            let exec_map = Mapping {
                start: xs,
                end: xe,
                readable: true,
                writable: false,
                executable: true,
                offset: xoff,
                inode: m.inode,
                path: m.path.clone(),
            };
            let file = self
                .source
                .mapped_file(&exec_map)
                .ok_or_else(|| "cannot open it: the file is not found".to_string())?;
            Backing::open(&file).map_err(|e| format!("cannot open it: {e}"))?
        };
        let root = self.source.root().to_string_lossy().into_owned();
        let dir = m.path.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        let (xs_map, off) = if m.path == "[vdso]" {
            (m.start, 0)
        } else {
            (xs, xoff)
        };
        LoadedModule::load(
            Arc::new(bytes),
            &m.name,
            m.start..m.end,
            xs_map,
            off,
            &root,
            dir,
        )
    }

    fn mapping(&self, addr: u64) -> Option<&Mapping> {
        let i = self
            .maps
            .partition_point(|m| m.start <= addr)
            .checked_sub(1)?;
        Some(&self.maps[i]).filter(|m| m.contains(addr))
    }

    /// A frame for `ip`, named from the symbol tables only.
    fn frame(&mut self, ip: u64, return_address: bool, how: UnwindMethod) -> NativeFrame {
        let lookup = if return_address {
            ip.saturating_sub(1)
        } else {
            ip
        };
        let mut f = NativeFrame {
            ip,
            function: None,
            range_start: None,
            module: String::new(),
            module_path: String::new(),
            offset: ip,
            file: None,
            line: None,
            inlined: false,
            tail_call: false,
            tag: None,
            how,
            exported: false,
            return_address,
            sp: 0,
            cfa: 0,
        };
        if let Some(i) = self.module_for(lookup) {
            f.module = self.modules[i].name.clone();
            f.module_path = self.modules[i].path.clone();
            f.tag = cuda_tag(&f.module);
            let start = self.modules[i].start;
            match self.loaded(i) {
                Some(lm) => {
                    let bias = lm.bias;
                    f.offset = ip.wrapping_sub(bias);
                    let svma = lookup.wrapping_sub(bias);
                    if let Some((name, exported)) = lm.symbol(svma) {
                        f.function = Some(name.to_string());
                        f.exported = exported;
                    } else {
                        f.range_start = lm.cfi_start(svma);
                    }
                }
                None => f.offset = ip - start,
            }
        } else if let Some(m) = self.mapping(lookup) {
            f.module = if m.path.is_empty() {
                "[anon]".to_string()
            } else {
                m.path.clone()
            };
            f.module_path = m.path.clone();
            f.offset = ip - m.start;
        } else {
            f.module = "[unknown]".to_string();
        }
        f
    }

    /// Let [`add_lines`](Self::add_lines) read DWARF from separate debug files
    /// too (off by default). Their symbol tables are always used, which is
    /// what names libc's internal functions; but their DWARF is compressed
    /// (Debian's libc6-dbg: about 6 MB of `.debug_info` to inflate, some
    /// 50-100 ms) for file:line of C runtime internals a reader rarely needs,
    /// which would blow a one-shot dump's time budget several times over.
    pub fn set_debug_file_lines(&mut self, enabled: bool) {
        self.debug_file_lines = enabled;
        for m in &mut self.modules {
            if let LoadState::Loaded(lm) = &mut m.state {
                lm.forget_lines();
            }
        }
        self.tail_cache.clear();
    }

    /// The frames of functions that tail-called their way from `caller`
    /// (the next frame out of `callee`, from [`unwind`](Self::unwind)) to
    /// `callee`, innermost first, where DWARF call-site records prove them,
    /// as gdb does: when the caller's return address is a call site calling
    /// G while the callee runs in another function H, and the tail-call
    /// sites from G give exactly one chain G -> ... -> H, the functions of
    /// that chain (`tail_call` set). Only where DWARF is read for file:line
    /// anyway (the module's own, or its debug file's with
    /// [`set_debug_file_lines`](Self::set_debug_file_lines)); a direct call
    /// to H itself is told from the code's bytes without DWARF. Cached per
    /// pair of addresses.
    pub fn tail_calls_between(
        &mut self,
        callee: &NativeFrame,
        caller: &NativeFrame,
    ) -> Arc<[NativeFrame]> {
        if !caller.return_address || callee.tail_call || caller.tail_call {
            return Arc::from(Vec::new());
        }
        let key = (caller.ip, callee.lookup_ip());
        if let Some(f) = self.tail_cache.get(&key) {
            return f.clone();
        }
        let frames: Arc<[NativeFrame]> = self
            .find_tail_frames(callee, caller)
            .unwrap_or_default()
            .into();
        self.tail_cache.insert(key, frames.clone());
        frames
    }

    fn find_tail_frames(
        &mut self,
        callee: &NativeFrame,
        caller: &NativeFrame,
    ) -> Option<Vec<NativeFrame>> {
        let debug_files = self.debug_file_lines;
        let ci = self.find_module(caller.lookup_ip())?;
        let hi = self.find_module(callee.lookup_ip())?;
        // H: the function the callee's frame runs.
        let h_lm = self.loaded(hi)?;
        let h_bias = h_lm.bias;
        let h = h_lm.function_start(callee.lookup_ip().wrapping_sub(h_bias))?;
        // A direct call to H itself (what most frames are), told from the
        // code without DWARF: no tail call in between. So is a call to
        // H's PLT stub from another library.
        let c_lm = self.loaded(ci)?;
        // Without the caller's DWARF there are no call-site records to
        // find a chain in: nothing more to look at (and no need to index a
        // big library's names for the stub check below).
        if !c_lm.may_have_lines(debug_files) {
            return None;
        }
        let ret = caller.ip.wrapping_sub(c_lm.bias);
        let called = c_lm.direct_call_target(ret);
        if ci == hi && called == Some(h) {
            return None;
        }
        let stub = called
            .filter(|_| ci != hi)
            .and_then(|t| c_lm.symbol(t))
            .and_then(|(n, _)| n.strip_suffix("@plt").map(str::to_string));
        if let Some(name) = stub {
            if self.loaded(hi)?.exported_function(&name) == Some(h) {
                return None;
            }
        }
        // G: what the caller's call site calls.
        let c_lm = self.loaded(ci)?;
        let site = c_lm.call_site(caller.ip.wrapping_sub(c_lm.bias), debug_files)?;
        if site.tail {
            return None;
        }
        let target = site.target?;
        let g = match c_lm.resolve_target(&target, debug_files) {
            Some(g) if ci == hi => g,
            Some(_) => return None,
            // A declaration of a function in another library: the callee's,
            // if that is where it is defined (the C library's
            // `pthread_mutex_unlock`, which tail-calls its internals).
            None if ci != hi => {
                let name = c_lm.target_name(&target, debug_files)?;
                self.loaded(hi)?.exported_function(&name)?
            }
            None => return None,
        };
        let chain = self.loaded(hi)?.tail_chain(g, h, debug_files)?;
        let mut out = Vec::with_capacity(chain.len());
        for &ret in chain.iter().rev() {
            let mut f = self.frame(ret.wrapping_add(h_bias), true, callee.how);
            // Named as gdb names it: by the innermost function at the jump,
            // which may be one inlined into the function that jumped.
            let lines = self.loaded(hi)?.lines(ret.wrapping_sub(1), debug_files);
            if let Some(l) = lines.first() {
                // The function itself keeps the symbol table's name, as
                // add_lines keeps it.
                if l.function.is_some() && (l.inlined || f.function.is_none()) {
                    f.function = l.function.clone();
                    f.exported = false;
                }
                f.file = l.file.clone();
                f.line = l.line;
            }
            f.tail_call = true;
            // No stack of its own: an empty range at the callee's end.
            f.sp = callee.cfa;
            f.cfa = callee.cfa;
            out.push(f);
        }
        Some(out)
    }

    /// Expand a frame from [`unwind`](Self::unwind) with DWARF file:line and
    /// the functions inlined at that point (innermost first). Cached per
    /// address; DWARF is parsed on first use per module. A frame without
    /// DWARF comes back unchanged.
    pub fn add_lines(&mut self, frame: &NativeFrame) -> Vec<NativeFrame> {
        let lookup = frame.lookup_ip();
        let debug_files = self.debug_file_lines;
        let lines = match self.find_module(lookup) {
            Some(i) => match self.loaded(i) {
                Some(lm) => {
                    let svma = lookup.wrapping_sub(lm.bias);
                    lm.lines(svma, debug_files)
                }
                None => return vec![frame.clone()],
            },
            None => return vec![self.jit_frame(frame)],
        };
        if lines.is_empty() {
            return vec![frame.clone()];
        }
        lines
            .iter()
            .map(|l| {
                let mut f = frame.clone();
                f.file = l.file.clone();
                f.line = l.line;
                f.inlined = l.inlined;
                // The outermost entry is the real function: keep the symbol
                // table's name (what merging classified) when there is one.
                if l.inlined || f.function.is_none() {
                    f.function = l.function.clone().or(f.function);
                }
                if l.inlined {
                    f.exported = false;
                }
                f
            })
            .collect()
    }

    /// `frame`, named from the target's JIT interface when it is code
    /// outside every file that a JIT announced there (see [`jit`]). The
    /// modules loaded so far (those on the stacks unwound) are searched
    /// for the JIT's descriptor, each once.
    fn jit_frame(&mut self, frame: &NativeFrame) -> NativeFrame {
        let mut f = frame.clone();
        if f.function.is_some() || f.module != "[anon]" {
            return f;
        }
        for m in &self.modules {
            let key = (m.path.clone(), m.start);
            if let LoadState::Loaded(lm) = &m.state {
                if self.jit.wants_module(&key) {
                    let d = lm
                        .data_symbol(jit::DESCRIPTOR, jit::DESCRIPTOR_SIZE)
                        .map(|svma| svma.wrapping_add(lm.bias));
                    self.jit.searched_module(key, d);
                }
            }
        }
        if let Some(name) = self.jit.name(&*self.source, f.lookup_ip()) {
            f.function = Some(name.to_string());
            f.module = "[jit]".to_string();
        }
        f
    }

    /// Unwind thread `tid`, which the caller has stopped with ptrace
    /// (PTRACE_SEIZE + PTRACE_INTERRUPT + waitpid), over live memory.
    /// Innermost first. The samplers take the registers from the pauser and
    /// unwind a copy of the stack instead (see `sampler/read/native.rs`).
    pub fn unwind(&mut self, tid: i32, mem: &dyn Memory) -> Result<Vec<NativeFrame>, Error> {
        let regs =
            nix::sys::ptrace::getregs(nix::unistd::Pid::from_raw(tid)).map_err(|e| match e {
                nix::errno::Errno::ESRCH => Error::NotStoppedByUs { tid },
                errno => Error::Registers { tid, errno },
            })?;
        Ok(self.unwind_from_regs(regs.rip, regs.rsp, regs.rbp, mem))
    }

    /// Unwind from explicit registers over `mem`: the samplers pass a copy
    /// of the stack taken while the thread was stopped (a core file later).
    pub(crate) fn unwind_from_regs(
        &mut self,
        ip: u64,
        sp: u64,
        bp: u64,
        mem: &dyn Memory,
    ) -> Vec<NativeFrame> {
        let mut stack = StackReader::new(mem);
        let mut regs = UnwindRegsX86_64::new(ip, sp, bp);
        let mut addr = FrameAddress::from_instruction_pointer(ip);
        let mut out: Vec<NativeFrame> = Vec::new();
        self.ended = None;
        self.refreshed_in_unwind = false;
        while out.len() < MAX_FRAMES {
            let pc = addr.address();
            let mut f = self.frame(pc, addr.is_return_address(), UnwindMethod::Cfi);
            let old_sp = regs.sp();
            f.sp = old_sp;
            out.push(f);
            let (next, how) = self.step(addr, &mut regs, &mut stack, mem);
            if let Some(last) = out.last_mut() {
                last.how = how;
            }
            let Some(ra) = next else {
                // CFI that says "no caller" is the outermost frame (`_start`,
                // `clone3`); anything else is an unwind that could not go on.
                if how != UnwindMethod::Cfi {
                    self.ended = Some(format!(
                        "no caller of 0x{pc:x} could be confirmed (code without unwind information)"
                    ));
                }
                break;
            };
            // A caller must live higher on the stack, in code: anything else
            // is a loop or garbage, and is not shown as a frame.
            if regs.sp() <= old_sp || !self.is_code(ra.wrapping_sub(1)) {
                if ra != 0 {
                    self.ended = Some(format!(
                        "the caller of 0x{pc:x} is not in code (return address 0x{ra:x})"
                    ));
                }
                break;
            }
            let Some(a) = FrameAddress::from_return_address(ra) else {
                break;
            };
            if let Some(last) = out.last_mut() {
                last.cfa = regs.sp();
            }
            addr = a;
        }
        out
    }

    /// Why the last [`unwind`](Self::unwind) stopped short of the thread's
    /// entry point, when it did.
    pub(crate) fn ended_early(&self) -> Option<&str> {
        self.ended.as_deref()
    }

    /// `addr` is in an executable mapping. When no mapping holds it, the
    /// maps are read again, at most once per unwind (a library loaded since;
    /// the stack scan asks about many words that are not code at all).
    fn is_code(&mut self, addr: u64) -> bool {
        match self.mapping(addr) {
            Some(m) => m.executable,
            None if !self.refreshed_in_unwind => {
                self.refreshed_in_unwind = true;
                self.module_for(addr).is_some() && self.mapping(addr).is_some_and(|m| m.executable)
            }
            None => false,
        }
    }

    /// Find the caller of the frame at `addr`: its return address and how.
    fn step(
        &mut self,
        addr: FrameAddress,
        regs: &mut UnwindRegsX86_64,
        stack: &mut StackReader,
        mem: &dyn Memory,
    ) -> (Option<u64>, UnwindMethod) {
        let lookup = addr.address_for_lookup();
        let mut covered = false;
        let mut callee_start = None;
        if let Some(i) = self.module_for(lookup) {
            if let Some(lm) = self.loaded(i) {
                let svma = lookup.wrapping_sub(lm.bias);
                covered = lm.has_cfi(svma);
                if !covered {
                    callee_start = lm.function_start(svma).map(|s| s.wrapping_add(lm.bias));
                }
            }
        }
        if covered {
            // Broken CFI (or a stack we could not read) falls through to the
            // rest, and so does CFI that leads outside code or down the
            // stack: hand-written kernels with an FDE that does not follow
            // their stack pointer (OpenBLAS's dgemm kernels).
            let before = *regs;
            match self.cfi_step(addr, regs, stack) {
                // "No caller" is believed from a thread's or the process's
                // entry point; elsewhere it is a frame-pointer guess that hit
                // rbp = 0 in code that uses rbp for data.
                Ok(None) if self.is_entry_point(lookup) => return (None, UnwindMethod::Cfi),
                Ok(None) => *regs = before,
                Ok(Some(ra)) if regs.sp() > before.sp() && self.is_code(ra.wrapping_sub(1)) => {
                    return (Some(ra), UnwindMethod::Cfi)
                }
                _ => *regs = before,
            }
        }
        // Code in no file (a JIT's: XLA's kernels) has neither CFI nor
        // symbols, and the JITs that emit it keep a frame pointer: rbp is
        // believed there when it leads to a return address the unwind can
        // go on from, as gdb believes it. A stale return address left lower
        // on the stack would otherwise win the scan and invent a frame.
        if !covered && self.module_for(lookup).is_none() {
            if let Some(ra) = self.frame_pointer_step(regs, stack, mem, true) {
                return (Some(ra), UnwindMethod::FramePointer);
            }
        }
        // No CFI here: a frame pointer is believed only when the scan agrees
        // that the nearest return address on the stack is the one it names;
        // otherwise the scan's return address wins (hand-written assembly
        // keeps rbp as a general register).
        let sp = regs.sp();
        let bp = regs.bp();
        let stack_end = self.mapping(sp).map(|m| m.end).unwrap_or(sp);
        if let Some((slot, ra)) = self.scan(sp, bp, stack_end, callee_start, stack, mem) {
            if slot == bp.wrapping_add(8) && bp >= sp {
                if let Ok(saved_bp) = stack.read_u64(bp) {
                    regs.set_sp(bp.wrapping_add(16));
                    regs.set_bp(saved_bp);
                    return (Some(ra), UnwindMethod::FramePointer);
                }
            }
            regs.set_sp(slot + 8);
            // Callers that keep a frame pointer need rbp back, and the
            // frame-less function may have used rbp for data after saving
            // the caller's copy somewhere in its frame. Candidates: rbp as it
            // is, and every word of the frame that points into an older
            // frame (the saved copy nearest the return address first, where
            // prologues push it). The one that lets CFI unwind the furthest
            // from the return address wins; ties keep that order.
            let older = |v: u64| v > slot && v < stack_end && v.is_multiple_of(8);
            let mut candidates = Vec::new();
            if older(bp) {
                candidates.push(bp);
            }
            let mut a = slot;
            while a > sp && candidates.len() < MAX_BP_CANDIDATES {
                a -= 8;
                if let Ok(v) = stack.read_u64(a) {
                    if older(v) && !candidates.contains(&v) {
                        candidates.push(v);
                    }
                }
            }
            if !older(bp) {
                candidates.push(bp);
            }
            if candidates.len() > 1 {
                let mut best = (0, candidates[0]);
                for &c in &candidates {
                    let score = self.chain_score(ra, slot + 8, c, stack);
                    if score > best.0 {
                        best = (score, c);
                    }
                }
                regs.set_bp(best.1);
            } else if let Some(&c) = candidates.first() {
                regs.set_bp(c);
            }
            return (Some(ra), UnwindMethod::Scan);
        }
        // Nothing within the scan window: a large frame with a frame pointer.
        match self.frame_pointer_step(regs, stack, mem, false) {
            Some(ra) => (Some(ra), UnwindMethod::FramePointer),
            None => (None, UnwindMethod::Scan),
        }
    }

    /// The caller of a frame by its frame pointer: rbp within
    /// [`FP_MAX_FRAME`] above the stack pointer, the word above it a return
    /// address, from which, when `go_on` is asked, the unwind can go on
    /// (see [`Self::consistent`]). Moves `regs` to the caller when found.
    fn frame_pointer_step(
        &mut self,
        regs: &mut UnwindRegsX86_64,
        stack: &mut StackReader,
        mem: &dyn Memory,
        go_on: bool,
    ) -> Option<u64> {
        let (sp, bp) = (regs.sp(), regs.bp());
        if !(bp > sp && bp - sp < FP_MAX_FRAME && bp.is_multiple_of(8)) {
            return None;
        }
        let slot = bp.checked_add(8)?;
        let ra = stack.read_u64(slot).ok()?;
        let saved_bp = stack.read_u64(bp).ok()?;
        if !self.is_return_address(ra, mem) {
            return None;
        }
        if go_on {
            let stack_end = self.mapping(sp).map(|m| m.end).unwrap_or(sp);
            if !self.consistent(ra, slot, saved_bp, stack_end, stack) {
                return None;
            }
        }
        regs.set_sp(slot + 8);
        regs.set_bp(saved_bp);
        Some(ra)
    }

    /// The stack slot at or above `sp` holding the return address of the
    /// frame-less function starting at `callee_start` (when known): (slot,
    /// value). Stale return addresses left in a frame's uninitialised slots
    /// are the danger, so a direct call that provably targets another
    /// function is passed over, and so is a direct call to something that
    /// is not code. A candidate must also keep the unwind consistent: where
    /// CFI covers it, unwinding its frame must give a higher stack pointer
    /// and a return address in code (or the end of the stack). No candidate
    /// surviving that ends the unwind: nothing is invented.
    fn scan(
        &mut self,
        sp: u64,
        bp: u64,
        stack_end: u64,
        callee_start: Option<u64>,
        stack: &mut StackReader,
        mem: &dyn Memory,
    ) -> Option<(u64, u64)> {
        if !sp.is_multiple_of(8) {
            return None;
        }
        let limit = stack_end.min(sp.saturating_add(SCAN_WORDS * 8));
        let mut slot = sp;
        while slot + 8 <= limit {
            let Ok(v) = stack.read_u64(slot) else { break };
            if self.is_return_address(v, mem)
                && call_plausible(v, callee_start, mem, |a| self.is_code(a))
                && self.consistent(v, slot, bp, stack_end, stack)
            {
                return Some((slot, v));
            }
            slot += 8;
        }
        None
    }

    /// Whether `addr` is in `_start`, `clone3`, `start_thread` and kin.
    fn is_entry_point(&mut self, addr: u64) -> bool {
        let Some(i) = self.module_for(addr) else {
            return false;
        };
        let Some(lm) = self.loaded(i) else {
            return false;
        };
        let svma = addr.wrapping_sub(lm.bias);
        lm.symbol(svma)
            .is_some_and(|(name, _)| merge::is_start_frame(&name))
    }

    /// One CFI step (the frame at `addr` is known to be covered): CFA
    /// expressions evaluated here, every other rule by framehop.
    fn cfi_step(
        &mut self,
        addr: FrameAddress,
        regs: &mut UnwindRegsX86_64,
        stack: &mut StackReader,
    ) -> Result<Option<u64>, ()> {
        let lookup = addr.address_for_lookup();
        if let Some(i) = self.find_module(lookup) {
            let (sp, bp) = (regs.sp(), regs.bp());
            if let Some(lm) = self.loaded(i) {
                let svma = lookup.wrapping_sub(lm.bias);
                // framehop parses the FDE too: its pages are read first.
                lm.prepare_cfi(svma);
                let mut read = |a: u64| stack.read_u64(a).ok();
                match lm.expression_step(svma, sp, bp, &mut read) {
                    None => {}
                    Some(None) => return Err(()),
                    Some(Some((ra, cfa, new_bp))) => {
                        regs.set_sp(cfa);
                        regs.set_bp(new_bp);
                        return Ok(Some(ra));
                    }
                }
            }
        }
        let mut read = |a: u64| stack.read_u64(a);
        self.fh
            .unwind_frame(addr, regs, &mut self.cache, &mut read)
            .map_err(|_| ())
    }

    /// How many frames CFI unwinds from return address `ra` with stack
    /// pointer `sp` and frame pointer `bp` (up to [`CHAIN_LOOKAHEAD`]; the
    /// whole lookahead when it reaches the end of the stack cleanly).
    fn chain_score(&mut self, ra: u64, sp: u64, bp: u64, stack: &mut StackReader) -> usize {
        let mut regs = UnwindRegsX86_64::new(ra, sp, bp);
        let Some(mut addr) = FrameAddress::from_return_address(ra) else {
            return 0;
        };
        for n in 0..CHAIN_LOOKAHEAD {
            if !self.has_cfi(addr.address_for_lookup()) {
                return n;
            }
            let old_sp = regs.sp();
            match self.cfi_step(addr, &mut regs, stack) {
                Ok(None) => return CHAIN_LOOKAHEAD,
                Ok(Some(next)) if regs.sp() > old_sp && self.is_code(next.wrapping_sub(1)) => {
                    match FrameAddress::from_return_address(next) {
                        Some(a) => addr = a,
                        None => return n,
                    }
                }
                _ => return n,
            }
        }
        CHAIN_LOOKAHEAD
    }

    /// Whether CFI covers the code at `lookup` (in a module that loads).
    fn has_cfi(&mut self, lookup: u64) -> bool {
        let Some(i) = self.module_for(lookup) else {
            return false;
        };
        self.loaded(i)
            .is_some_and(|lm| lm.has_cfi(lookup.wrapping_sub(lm.bias)))
    }

    /// Whether return address `ra` found at `slot` lets CFI unwinding go on:
    /// true when no CFI covers it (nothing to check), or when its frame
    /// unwinds to a caller higher on the stack that is in code, with rbp as
    /// it is or as the nearest saved copy below the slot.
    fn consistent(
        &mut self,
        ra: u64,
        slot: u64,
        bp: u64,
        stack_end: u64,
        stack: &mut StackReader,
    ) -> bool {
        let Some(addr) = FrameAddress::from_return_address(ra) else {
            return false;
        };
        if !self.has_cfi(addr.address_for_lookup()) {
            return true;
        }
        let mut bps = vec![bp];
        let mut a = slot;
        while a > slot.saturating_sub(64 * 8) {
            a -= 8;
            if let Ok(v) = stack.read_u64(a) {
                if v > slot && v < stack_end && v.is_multiple_of(8) {
                    bps.push(v);
                    break;
                }
            }
        }
        for b in bps {
            let mut regs = UnwindRegsX86_64::new(ra, slot + 8, b);
            match self.cfi_step(addr, &mut regs, stack) {
                Ok(None) => return true,
                Ok(Some(next)) if regs.sp() > slot && self.is_code(next.wrapping_sub(1)) => {
                    return true
                }
                _ => {}
            }
        }
        false
    }

    /// `v` points into executable code just after a call instruction.
    fn is_return_address(&mut self, v: u64, mem: &dyn Memory) -> bool {
        if !self.is_code(v.wrapping_sub(1)) {
            return false;
        }
        let Some(m) = self.mapping(v.wrapping_sub(1)) else {
            return false;
        };
        let file_backed = m.is_file();
        let from = v.saturating_sub(scan::CALL_WINDOW as u64).max(m.start);
        if file_backed {
            if let Some(&r) = self.ra_cache.get(&v) {
                return r;
            }
        }
        let mut buf = [0u8; scan::CALL_WINDOW];
        let n = (v - from) as usize;
        let r = mem.read(from, &mut buf[..n]).is_ok() && scan::follows_call(&buf[..n]);
        if file_backed {
            self.ra_cache.insert(v, r);
        }
        r
    }
}

/// Whether the call instruction that ends at `ra` is a plausible call of
/// the frame-less function starting at `callee` (when known): see
/// [`call_may_target`]; with no known callee, a direct call must at least
/// target code.
fn call_plausible(
    ra: u64,
    callee: Option<u64>,
    mem: &dyn Memory,
    mut is_code: impl FnMut(u64) -> bool,
) -> bool {
    match callee {
        Some(c) => call_may_target(ra, c, mem),
        None => {
            let mut b = [0u8; 5];
            if mem.read(ra.wrapping_sub(5), &mut b).is_err() || b[0] != 0xE8 {
                return true;
            }
            let rel = i32::from_le_bytes([b[1], b[2], b[3], b[4]]) as i64;
            is_code(ra.wrapping_add(rel as u64))
        }
    }
}

/// Whether the call instruction that ends at `ra` can have called the
/// function starting at `callee`: indirect calls can, a direct `call rel32`
/// only if its target is `callee` or a PLT stub that jumps there.
fn call_may_target(ra: u64, callee: u64, mem: &dyn Memory) -> bool {
    let mut b = [0u8; 5];
    if mem.read(ra.wrapping_sub(5), &mut b).is_err() || b[0] != 0xE8 {
        return true;
    }
    let rel = i32::from_le_bytes([b[1], b[2], b[3], b[4]]) as i64;
    let target = ra.wrapping_add(rel as u64);
    if target == callee {
        return true;
    }
    // PLT stub: [endbr64] [bnd] jmp *disp32(%rip)
    let mut p = [0u8; 16];
    if mem.read(target, &mut p).is_err() {
        return false;
    }
    let mut i = if p[..4] == [0xF3, 0x0F, 0x1E, 0xFA] {
        4
    } else {
        0
    };
    if p[i] == 0xF2 {
        i += 1;
    }
    if p[i..i + 2] != [0xFF, 0x25] {
        return false;
    }
    let disp = i32::from_le_bytes([p[i + 2], p[i + 3], p[i + 4], p[i + 5]]) as i64;
    let got = target
        .wrapping_add((i + 6) as u64)
        .wrapping_add(disp as u64);
    mem.read_u64(got).is_ok_and(|t| t == callee)
}

/// Reads the target's stack in page-sized chunks: one syscall serves many
/// frames. Bounded in the number of chunks per unwind.
struct StackReader<'m> {
    mem: &'m dyn Memory,
    chunks: Vec<(u64, Option<Box<[u8]>>)>,
}

impl<'m> StackReader<'m> {
    fn new(mem: &'m dyn Memory) -> Self {
        StackReader {
            mem,
            chunks: Vec::new(),
        }
    }

    fn read_u64(&mut self, addr: u64) -> Result<u64, ()> {
        let base = addr & !(CHUNK - 1);
        let off = (addr - base) as usize;
        if off + 8 > CHUNK as usize {
            return self.mem.read_u64(addr).map_err(|_| ());
        }
        let idx = match self.chunks.iter().position(|(b, _)| *b == base) {
            Some(i) => i,
            None => {
                if self.chunks.len() >= MAX_CHUNKS {
                    return Err(());
                }
                let mut buf = vec![0u8; CHUNK as usize].into_boxed_slice();
                let ok = self.mem.read(base, &mut buf).is_ok();
                self.chunks.push((base, ok.then_some(buf)));
                self.chunks.len() - 1
            }
        };
        match &self.chunks[idx].1 {
            Some(b) => Ok(crate::memory::le_u64(b, off as u64)),
            None => self.mem.read_u64(addr).map_err(|_| ()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_libraries_are_tagged() {
        assert_eq!(cuda_tag("libcuda.so.1"), Some("cuda"));
        assert_eq!(cuda_tag("libcublasLt.so.12"), Some("cuda"));
        assert_eq!(cuda_tag("libtorch_cuda.so"), Some("cuda"));
        assert_eq!(cuda_tag("libnccl.so.2"), Some("cuda"));
        assert_eq!(cuda_tag("libc.so.6"), None);
        assert_eq!(cuda_tag("libcurl.so.4"), None);
    }

    #[test]
    fn unnamed_frames_show_module_and_offset() {
        let f = NativeFrame {
            ip: 0x7f00_0000_1234,
            module_path: "/x/libfoo.so".into(),
            offset: 0x1234,
            ..test_frame("", "libfoo.so")
        };
        assert_eq!(f.name(), "libfoo.so+0x1234");
        assert_eq!(f.lookup_ip(), 0x7f00_0000_1233);
    }
}
