//! Native stacks: registers, CFI unwinding, symbols, and merging with Python frames.
//!
//! [`NativeUnwinder`] unwinds one stopped thread at a time (or a copy of
//! its stack): this file keeps the target's modules (which file is mapped
//! where, each loaded on first use); `walk.rs` goes from the registers to
//! the outermost frame, CFI through framehop where a function has it, and
//! a frame-pointer walk cross-checked by a validated stack scan where it
//! does not (hand-written assembly, JIT code), so the chain reaches the
//! Python frames; `naming.rs` names frames. Unwinding names frames from the
//! symbol tables only; DWARF file:line and inlined frames are added by
//! [`NativeUnwinder::add_lines`] for the frames that get printed, because
//! parsing a large library's DWARF costs far more than unwinding.

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
mod naming;
pub(crate) mod pools;
pub(crate) mod scan;
mod stack_copy;
mod symbols;
mod walk;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use framehop::x86_64::{CacheX86_64, UnwinderX86_64};
use framehop::Unwinder;

use crate::error::Error;
use crate::mapping::MapEntry as Mapping;
use crate::memory::MemoryExt;
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
pub(crate) use stack_copy::StackCopy;

/// Least time between two reads of the maps for addresses outside every
/// module (see [`NativeUnwinder::module_for`]).
const MISS_REFRESH_INTERVAL: Duration = Duration::from_secs(1);
/// Bound on the pages remembered as outside every module.
const MAX_KNOWN_MISSES: usize = 1 << 16;

/// Deepest stack we walk; deeper ones are cut (and the cut is visible as a
/// stack that does not end in a thread entry point).
pub(crate) const MAX_FRAMES: usize = 2048;
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
    tail_cache: BoundedMap<(u64, u64), Option<Arc<[NativeFrame]>>>,
    /// Why the last unwind ended early (see [`ended_early`](Self::ended_early)).
    ended: Option<String>,
    /// Whether this unwind re-read the maps for [`is_code`](Self::is_code).
    refreshed_in_unwind: bool,
    /// When a miss last re-read the maps (None: none has yet).
    miss_refreshed: Option<Instant>,
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
            miss_refreshed: None,
            jit: jit::JitCode::default(),
        };
        u.refresh()?;
        Ok(u)
    }

    /// Re-read /proc/PID/maps; modules still mapped at the same place keep
    /// their caches, vanished ones are dropped, and the caches of
    /// addresses are emptied only when a module came or went.
    fn refresh(&mut self) -> Result<(), Error> {
        let maps = self.source.maps()?;
        let mut old: HashMap<(u64, String, u64), ModEntry> = self
            .modules
            .drain(..)
            .map(|m| ((m.start, m.path.clone(), m.inode), m))
            .collect();
        let mut modules = Vec::new();
        let mut changed = false;
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
                let known = old.remove(&key);
                changed |= known.is_none();
                let entry = known.unwrap_or_else(|| ModEntry {
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
            changed = true;
            if matches!(gone.state, LoadState::Loaded(_)) {
                self.fh.remove_module(gone.start);
            }
        }
        self.modules = modules;
        self.maps = maps;
        if changed {
            self.known_misses.clear();
            self.ra_cache.clear();
            self.tail_cache.clear();
        }
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

    /// The module containing `addr`, re-reading the maps when no module
    /// does (a library loaded after we started): once for a page, and at
    /// most once a second.
    fn module_for(&mut self, addr: u64) -> Option<usize> {
        if let Some(i) = self.find_module(addr) {
            return Some(i);
        }
        let page = addr >> 12;
        if self.known_misses.contains(&page) {
            return None;
        }
        // A stack scan meets words outside every module in most unwinds:
        // the maps are read again at most once a second for them.
        if self
            .miss_refreshed
            .is_some_and(|t| t.elapsed() < MISS_REFRESH_INTERVAL)
        {
            return None;
        }
        self.miss_refreshed = Some(Instant::now());
        if self.refresh().is_err() {
            return None;
        }
        let r = self.find_module(addr);
        if r.is_none() {
            if self.known_misses.len() >= MAX_KNOWN_MISSES {
                self.known_misses.clear();
            }
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
