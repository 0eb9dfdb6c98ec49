//! A core file as a [`TargetSource`]: a `gcore` snapshot or a kernel core
//! (systemd-coredump's, or `core_pattern`'s) of an x86-64 Linux process.
//!
//! Memory comes from the `PT_LOAD` segments. Where the core left bytes out
//! (`p_filesz < p_memsz`: the kernel and gdb skip read-only file mappings,
//! keeping only their first page), they are read from the mapped file
//! itself, named by `NT_FILE` and found on this host, under `--root`, or,
//! for the main program, at `--executable`. Threads and registers come from
//! each `NT_PRSTATUS`, the command line from `NT_PRPSINFO` (or, whole, from
//! the argument strings on the recorded stack), the signal that killed it
//! from `NT_SIGINFO`.
//!
//! `open.rs` reads the file into a [`CoreFile`] in named steps; this file
//! holds the source itself: memory, threads, the crash, the files it maps.
//!
//! The file is untrusted: every count, offset and length in it is bounded
//! against the file's size before use, and each way it can be wrong is one
//! [`CoreProblem`].

mod open;

use crate::error::{MemError, Result};
use crate::memory::{Memory, MAX_READ};
use crate::procfs::MapEntry;
use crate::target::{Registers, SourceKind, TargetSource};
use crate::wait::SyscallLine;
use open::{build_id_in, hex, read_upto, PAGE};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Where to find what a core names but does not contain.
#[derive(Debug, Clone, Default)]
pub struct CoreOptions {
    /// The main program, when it is not at the path the core recorded.
    pub executable: Option<PathBuf>,
    /// The target's `/` on this host (a container's or another machine's
    /// sysroot): every recorded path is looked up under it.
    pub root: Option<PathBuf>,
}

/// One thread as its `NT_PRSTATUS` recorded it.
#[derive(Debug, Clone)]
pub(crate) struct CoreThread {
    pub(crate) tid: i32,
    pub(crate) regs: Registers,
    /// The signal the thread was stopped or killed by (`pr_cursig`).
    pub(crate) cursig: i32,
    /// The system call its registers say it was in, and whether it was
    /// asleep in it (see [`crate::wait::call_from_registers`]).
    pub(crate) call: SyscallLine,
    pub(crate) asleep: bool,
    /// rax is what the kernel sets when it restarts the call (see
    /// [`crate::wait::restart_pending`], [`CoreFile::restarting_asleep`]).
    pub(crate) restarting: bool,
    /// From the `NT_SIGINFO` that follows this thread's `NT_PRSTATUS`.
    pub(crate) siginfo: Option<SigInfo>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SigInfo {
    pub(crate) signo: i32,
    pub(crate) code: i32,
    /// `si_addr`: the faulting address for SIGSEGV, SIGBUS, SIGILL, SIGFPE.
    pub(crate) addr: u64,
}

/// The thread that crashed, and how.
#[derive(Debug, Clone)]
pub(crate) struct Crash {
    pub(crate) tid: i32,
    pub(crate) signal: i32,
    /// The faulting address, for the signals that have one.
    pub(crate) addr: Option<u64>,
    pub(crate) ip: u64,
}

impl Crash {
    /// SIGSEGV, SIGABRT…
    pub(crate) fn signal_name(&self) -> String {
        signal_name(self.signal)
    }
}

pub(crate) fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

#[derive(Debug, Clone)]
struct Segment {
    vaddr: u64,
    memsz: u64,
    offset: u64,
    filesz: u64,
    /// Bytes of `filesz` the core's writer recorded: less where gdb could
    /// not read the rest (see [`open::unrecorded_tail`]).
    recorded: u64,
    /// The file mapped here and the file offset of `vaddr` (from NT_FILE).
    file: Option<(usize, u64)>,
}

#[derive(Debug, Clone, Copy)]
struct FileMap {
    start: u64,
    end: u64,
    /// The file offset of `start`.
    foff: u64,
    /// Into `CoreFile::files`.
    idx: usize,
}

struct MappedFile {
    /// As the target named it.
    name: String,
    /// Where it was found on this host.
    host: Option<PathBuf>,
    handle: Option<File>,
    /// Its size, as found.
    len: u64,
}

pub(crate) struct CoreFile {
    file: File,
    /// Sorted by address, not overlapping.
    segments: Vec<Segment>,
    /// NT_FILE's mappings, sorted by address.
    file_maps: Vec<FileMap>,
    files: Vec<MappedFile>,
    maps: Vec<MapEntry>,
    /// In the core's order (the dumping or signalled thread first).
    threads: Vec<CoreThread>,
    pid: i32,
    command_line: String,
    /// `pr_fname`: the main thread's kernel name.
    fname: String,
    exe: String,
    root: PathBuf,
    warnings: Vec<String>,
    /// When the core file was last written (its modification time).
    written: Option<std::time::SystemTime>,
}

impl CoreFile {
    /// The command line from the argument strings on the stack (psargs
    /// keeps only 80 bytes): below the auxiliary vector lie envp's and
    /// argv's pointer arrays, each ending in NULL, and argc.
    fn argv_from_stack(&self, auxv: &[(u64, u64)]) -> Option<String> {
        let execfn = auxv.iter().find(|(k, _)| *k == libc::AT_EXECFN)?.1;
        let seg = self.segment_at(execfn)?;
        // The auxv as it lies on the stack, searched for in the stack's
        // dumped bytes (bounded: at most the top 1 MiB).
        let want: Vec<u8> = auxv
            .iter()
            .take(4)
            .flat_map(|&(k, v)| k.to_le_bytes().into_iter().chain(v.to_le_bytes()))
            .collect();
        let top = seg.vaddr + seg.filesz.min(seg.memsz);
        let lo = top.saturating_sub(1 << 20).max(seg.vaddr);
        let mut stack = vec![0u8; (top - lo) as usize];
        self.read(lo, &mut stack).ok()?;
        let pos = stack.windows(want.len()).rposition(|w| w == want)?;
        let words: Vec<u64> = stack[..pos]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        // Unaligned auxv: not the one the kernel wrote.
        if pos % 8 != 0 {
            return None;
        }
        let mut i = words.len().checked_sub(1)?;
        if words[i] != 0 {
            return None;
        }
        // envp
        i = i.checked_sub(1)?;
        while words[i] != 0 {
            i = i.checked_sub(1)?;
        }
        // argv, back to argc
        let argv_end = i;
        let mut n = 0usize;
        loop {
            i = i.checked_sub(1)?;
            if words[i] as usize == n && n > 0 {
                break;
            }
            if words[i] == 0 || n > 100_000 {
                return None;
            }
            n += 1;
        }
        let mut args = Vec::with_capacity(n);
        for &p in &words[i + 1..argv_end] {
            let mut buf = vec![0u8; 4096];
            let mut s = Vec::new();
            // One argument: up to 128 KiB (the kernel's MAX_ARG_STRLEN).
            let mut at = p;
            'arg: while s.len() < 128 << 10 {
                let n = (PAGE - at % PAGE) as usize;
                let chunk = &mut buf[..n];
                if self.read(at, chunk).is_err() {
                    return None;
                }
                for &c in chunk.iter() {
                    if c == 0 {
                        break 'arg;
                    }
                    s.push(c);
                }
                at += n as u64;
            }
            args.push(String::from_utf8_lossy(&s).into_owned());
        }
        Some(args.join(" "))
    }

    /// Each ELF file's build-id as the core recorded it (its first page,
    /// when that page is in the core) against the file found; one warning
    /// per file that differs, and one per file not found at all.
    fn check_files(&mut self) {
        let mut warnings = Vec::new();
        for f in &self.files {
            if f.handle.is_none() {
                let under = if self.root != Path::new("/") {
                    format!(" under {}", self.root.display())
                } else {
                    String::new()
                };
                warnings.push(format!(
                    "{} was not found{under}: what the core left out of it cannot be read",
                    f.name
                ));
            }
        }
        for s in &self.segments {
            let Some((idx, 0)) = s.file else { continue };
            let f = &self.files[idx];
            let Some(handle) = &f.handle else { continue };
            if s.filesz == 0 {
                continue;
            }
            let recorded = read_upto(&self.file, s.offset, s.filesz.min(PAGE) as usize);
            let Some(core_id) = build_id_in(&recorded) else {
                continue;
            };
            match build_id_in(&read_upto(handle, 0, 64 << 10)) {
                Some(id) if id == core_id => {}
                found => warnings.push(format!(
                    "{} ({}) is not the file the core was taken with: build-id {} in the core, {} in the file; its frames may be wrong",
                    f.name,
                    f.host.as_deref().unwrap_or(Path::new("?")).display(),
                    hex(&core_id),
                    found.map(|b| hex(&b)).unwrap_or_else(|| "none".into())
                )),
            }
        }
        self.warnings.extend(warnings);
    }

    fn segment_at(&self, addr: u64) -> Option<&Segment> {
        let i = self.segments.partition_point(|s| s.vaddr <= addr);
        let s = self.segments.get(i.checked_sub(1)?)?;
        (addr - s.vaddr < s.memsz).then_some(s)
    }

    /// What the core says that the user should hear (files not found,
    /// build-ids that differ, notes cut short).
    pub(crate) fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The thread a fatal signal stopped, when one did (a kernel core of a
    /// crash; a `gcore` taken at the fault under gdb).
    pub(crate) fn crash(&self) -> Option<Crash> {
        use nix::sys::signal::Signal::*;
        let fatal = |s: i32| {
            [
                SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS, SIGTRAP, SIGQUIT,
            ]
            .iter()
            .any(|f| *f as i32 == s)
        };
        let t = self.threads.iter().find(|t| {
            t.siginfo.is_some_and(|s| fatal(s.signo)) || (t.siginfo.is_none() && fatal(t.cursig))
        })?;
        let signal = t.siginfo.map(|s| s.signo).unwrap_or(t.cursig);
        let has_addr = [SIGSEGV, SIGBUS, SIGILL, SIGFPE]
            .iter()
            .any(|f| *f as i32 == signal)
            // si_code > 0: sent by the kernel for a fault, not by kill().
            && t.siginfo.is_some_and(|s| s.code > 0);
        Some(Crash {
            tid: t.tid,
            signal,
            addr: if has_addr {
                t.siginfo.map(|s| s.addr)
            } else {
                None
            },
            ip: t.regs.ip,
        })
    }

    /// `module+0xOFFSET` for an address: the file's name and the offset in
    /// it, as native frames without a symbol are named.
    pub(crate) fn place(&self, addr: u64) -> Option<String> {
        let m = self.maps.iter().find(|m| m.contains(addr))?;
        let name = m.path.rsplit('/').next().unwrap_or(&m.path);
        if name.is_empty() {
            return None;
        }
        Some(format!("{name}+0x{:x}", addr - m.start + m.offset))
    }
}

impl CoreFile {
    fn file_map_at(&self, a: u64) -> Option<&FileMap> {
        let i = self.file_maps.partition_point(|m| m.start <= a);
        self.file_maps.get(i.checked_sub(1)?).filter(|m| a < m.end)
    }

    /// Bytes of a mapped file, from the file itself.
    fn read_mapped(&self, a: u64, out: &mut [u8]) -> Option<()> {
        let m = self.file_map_at(a)?;
        if a + out.len() as u64 > m.end {
            return None;
        }
        let f = &self.files[m.idx];
        let h = f.handle.as_ref()?;
        let off = m.foff + (a - m.start);
        let end = off + out.len() as u64;
        // The last page of a mapping reads as zeros past the file's end;
        // a page wholly past it would be SIGBUS in the process.
        if end > f.len.div_ceil(PAGE) * PAGE {
            return None;
        }
        let have = f.len.saturating_sub(off).min(out.len() as u64) as usize;
        h.read_exact_at(&mut out[..have], off).ok()?;
        out[have..].fill(0);
        Some(())
    }

    /// Whether the thread was caught between the kernel's restart of a call
    /// it slept in and entering that call again: a thread that came out of
    /// a stop (the SIGCONT after a SIGSTOP, as the core was being written)
    /// has rax set back to the call's number (or to `restart_syscall`'s) and
    /// its ip moved back onto the `syscall` instruction (0f 05). A call that
    /// merely returned that number leaves the ip after the instruction.
    fn restarting_asleep(&self, t: &CoreThread) -> bool {
        let mut code = [0u8; 2];
        t.restarting && self.read(t.regs.ip, &mut code).is_ok() && code == [0x0f, 0x05]
    }

    /// The call thread `t`, asleep in `restart_syscall`, goes on with. Its
    /// code says so where the call's number is set just before the
    /// `syscall` instruction its ip is past (`mov $nr, %eax`, as libc's
    /// wrappers have it); otherwise the arguments its registers still
    /// hold say, by their shape.
    fn resumed_call(&self, t: &CoreThread, args: &[u64; 6]) -> i64 {
        let mut code = [0u8; 7];
        if let Some(at) = t.regs.ip.checked_sub(code.len() as u64) {
            if self.read(at, &mut code).is_ok() && code[0] == 0xb8 && code[5..] == [0x0f, 0x05] {
                let nr = u32::from_le_bytes([code[1], code[2], code[3], code[4]]) as i64;
                if crate::wait::resumable(nr) {
                    return nr;
                }
            }
        }
        crate::wait::resumed_call(args, "")
    }
}

impl Memory for CoreFile {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let len = buf.len();
        if len > MAX_READ {
            return Err(MemError::TooLarge { addr, len });
        }
        let unmapped = || MemError::Unmapped { addr, len };
        let mut done = 0usize;
        while done < len {
            let a = addr.checked_add(done as u64).ok_or_else(unmapped)?;
            let left = len - done;
            if let Some(s) = self.segment_at(a) {
                let rel = a - s.vaddr;
                let n = ((s.memsz - rel).min(left as u64)) as usize;
                let out = &mut buf[done..done + n];
                let in_core = (s.filesz.saturating_sub(rel)).min(n as u64) as usize;
                if in_core > 0 && rel + in_core as u64 > s.recorded {
                    // Not recorded: zeros in the file, not the process's.
                    return Err(unmapped());
                }
                if in_core > 0 {
                    self.file
                        .read_exact_at(&mut out[..in_core], s.offset + rel)
                        .map_err(|_| unmapped())?;
                }
                if in_core < n {
                    // What the core left out of a file mapping.
                    s.file.ok_or_else(unmapped)?;
                    self.read_mapped(a + in_core as u64, &mut out[in_core..])
                        .ok_or_else(unmapped)?;
                }
                done += n;
                continue;
            }
            // A file mapping with no segment: up to the next segment or
            // the mapping's end.
            let m = self.file_map_at(a).ok_or_else(unmapped)?;
            let i = self.segments.partition_point(|s| s.vaddr <= a);
            let next = self.segments.get(i).map(|s| s.vaddr).unwrap_or(u64::MAX);
            let n = (next.min(m.end) - a).min(left as u64) as usize;
            self.read_mapped(a, &mut buf[done..done + n])
                .ok_or_else(unmapped)?;
            done += n;
        }
        Ok(())
    }
}

impl TargetSource for CoreFile {
    fn kind(&self) -> SourceKind {
        SourceKind::Core
    }
    fn pid(&self) -> i32 {
        self.pid
    }
    fn executable(&self) -> Result<String> {
        Ok(self.exe.clone())
    }
    fn command_line(&self) -> Result<String> {
        Ok(self.command_line.clone())
    }
    fn maps(&self) -> Result<Vec<MapEntry>> {
        Ok(self.maps.clone())
    }
    fn mapped_file(&self, map: &MapEntry) -> Option<PathBuf> {
        let f = self.files.iter().find(|f| f.name == map.path)?;
        f.host.clone()
    }
    fn root(&self) -> PathBuf {
        self.root.clone()
    }
    fn threads(&self) -> Result<Vec<i32>> {
        let mut t: Vec<i32> = self.threads.iter().map(|t| t.tid).collect();
        t.sort_unstable();
        t.dedup();
        Ok(t)
    }
    fn namespaced_tids(&self) -> Option<HashMap<u32, u32>> {
        None
    }
    fn thread_name(&self, tid: i32) -> Option<String> {
        // A core records the process's name only (the main thread's).
        (tid == self.pid && !self.fname.is_empty()).then(|| self.fname.clone())
    }
    /// A core keeps no scheduler state (gdb's `pr_sname` is the state of
    /// the process it has stopped itself, 't'; the kernel's is that of the
    /// task writing the dump). What the registers justify: a thread whose
    /// system call was interrupted asleep was sleeping in it, 'S'. One that
    /// ran code, or was stopped, cannot be told from the other: unknown.
    fn thread_state(&self, tid: i32) -> Option<char> {
        let t = self.threads.iter().find(|t| t.tid == tid)?;
        (t.asleep || self.restarting_asleep(t)).then_some('S')
    }
    fn saved_registers(&self, tid: i32) -> Option<Registers> {
        self.threads.iter().find(|t| t.tid == tid).map(|t| t.regs)
    }
    fn saved_call(&self, tid: i32) -> Option<SyscallLine> {
        let t = self.threads.iter().find(|t| t.tid == tid)?;
        match t.call {
            SyscallLine::Blocked { nr, args } if nr == crate::wait::RESTART_SYSCALL => {
                Some(SyscallLine::Blocked {
                    nr: self.resumed_call(t, &args),
                    args,
                })
            }
            c @ SyscallLine::Blocked { .. } => Some(c),
            _ => None,
        }
    }
    fn recorded_at(&self) -> Option<std::time::SystemTime> {
        self.written
    }
}

#[cfg(test)]
mod tests;

/// The sampler's whole read (`Target::open_source` and `sample`) on a core
/// file: discovery, the CPython reader and the native unwinder through the
/// core source alone.
#[cfg(test)]
mod sample_tests {
    use super::*;
    use crate::sampler::{AsyncMode, Filters, PausePolicy, ReadConfig, Target, TargetConfig};

    #[test]
    fn target_samples_a_gcore_of_a_python_process() {
        let script = "import time\n\
                      def innermost_sleeper():\n    time.sleep(60)\n\
                      def outer_caller():\n    innermost_sleeper()\n\
                      print('READY', flush=True)\nouter_caller()\n";
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 on PATH");
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "READY");
        let pid = child.id() as i32;
        let (_dir, path) = super::tests::gcore_then_end(&mut child);
        let core = CoreFile::open(&path, &CoreOptions::default()).unwrap();
        let cfg = TargetConfig {
            pause: PausePolicy { nonblocking: false },
            filter: Filters {
                gil_only: false,
                include_idle: true,
            },
            read: ReadConfig {
                native: true,
                native_all: false,
                native_debug_info: false,
                loop_turns: false,
                full_names: false,
                function_lines: false,
                locals: 0,
                statuses: true,
                gc_frames: false,
                positions: false,
                waits: crate::wait::WaitDetail::Full,
                asyncio: AsyncMode::Off,
            },
        };
        let mut target = Target::open_source(Box::new(core), &cfg).unwrap();
        let threads = target.sample(&cfg).unwrap();
        assert_eq!(threads.len(), 1, "{threads:?}");
        let t = &threads[0];
        assert_eq!(t.os_thread_id, Some(pid as u32));
        let python: Vec<&str> = t
            .frames
            .iter()
            .filter(|f| f.kind == crate::stack::FrameKind::Python)
            .map(|f| &*f.function)
            .collect();
        assert_eq!(
            python,
            ["innermost_sleeper", "outer_caller", "<module>"],
            "{t:?}"
        );
        // Native frames, merged: the sleep's C call sits above the Python
        // frame that made it.
        assert!(
            t.frames
                .iter()
                .any(|f| f.kind == crate::stack::FrameKind::Native),
            "{t:?}"
        );
    }
}
