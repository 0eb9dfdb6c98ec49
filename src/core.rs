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
//! The file is untrusted: every count, offset and length in it is bounded
//! against the file's size before use, and each way it can be wrong is one
//! [`CoreProblem`].

use crate::error::{CoreProblem, Error, MemError, Result};
use crate::memory::{Memory, MAX_READ};
use crate::procfs::MapEntry;
use crate::target::{Registers, SourceKind, TargetSource};
use crate::wait::SyscallLine;
use object::elf;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The most program headers read (the kernel caps a core's at 65535 VMAs
/// plus a few extra through PN_XNUM; more is corrupt).
const MAX_PHDRS: usize = 1 << 20;
/// The most note bytes read (NT_FILE of a process with 65535 mappings of
/// long paths stays well below this).
const MAX_NOTES: u64 = 128 << 20;
/// The most threads taken from a core.
const MAX_THREADS: usize = 1 << 16;
const PRSTATUS_SIZE: usize = 336;
const PRSTATUS_REG: usize = 112;
const PAGE: u64 = 4096;

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
    /// not read the rest (see [`unrecorded_tail`]).
    recorded: u64,
    /// The file mapped here and the file offset of `vaddr` (from NT_FILE).
    file: Option<(usize, u64)>,
}

/// Where a segment of a core gdb wrote stops holding what the process had.
///
/// gdb's gcore copies each segment in chunks (whole pages from its start)
/// and, when a read of the process fails, stops copying that segment: the
/// rest of it is never written, a hole in the file, which reads as zeros
/// that were never the process's. gdb 13 meets this with the thread stacks
/// of glibc 2.41+, which puts guard regions inside the stacks' mapping
/// (`MADV_GUARD_INSTALL`): the first read fails, and none of those stacks
/// is recorded. gdb writes everything it read, zeros included, so in its
/// cores a hole that runs to a segment's end is that segment's unrecorded
/// tail. (The kernel leaves holes for pages never touched, which do read
/// as zeros: its cores, page-aligned in the file, are not asked.) `offset`
/// and `filesz` are the segment's; the bytes of it recorded.
fn unrecorded_tail(file: &File, offset: u64, filesz: u64) -> u64 {
    use std::os::unix::io::AsRawFd;
    let fd = file.as_raw_fd();
    let end = offset.saturating_add(filesz);
    let seek = |at: u64, whence: i32| -> Option<u64> {
        let at = libc::off_t::try_from(at).ok()?;
        // SAFETY: lseek(2) on a file descriptor this CoreFile owns; it
        // only moves the file position, which reads here never use (they
        // are positional).
        let r = unsafe { libc::lseek(fd, at, whence) };
        u64::try_from(r).ok()
    };
    // The first hole from the segment's start (the end of the file is one).
    let Some(hole) = seek(offset, libc::SEEK_HOLE) else {
        return filesz;
    };
    if hole >= end {
        return filesz;
    }
    // Data after it within the segment: a hole inside, not the tail. (The
    // block holding the segment's end holds the next one's start too.)
    if seek(hole, libc::SEEK_DATA).is_some_and(|d| d < end / PAGE * PAGE) {
        return filesz;
    }
    // The hole starts at a file block; gdb's copy ended at a page of the
    // segment at or before it.
    (hole.saturating_sub(offset) / PAGE * PAGE).min(filesz)
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

/// An ELF image's loadable segments, from its first bytes: (file offset,
/// end of its bytes in the file, flags).
fn file_loads(b: &[u8]) -> Vec<(u64, u64, u32)> {
    if b.get(..4) != Some(&elf::ELFMAG[..]) {
        return Vec::new();
    }
    let phoff = u64_at(b, 0x20) as usize;
    let phentsize = u16_at(b, 0x36) as usize;
    let phnum = u16_at(b, 0x38) as usize;
    if phentsize < 56 {
        return Vec::new();
    }
    (0..phnum.min(256))
        .filter_map(|i| b.get(phoff.checked_add(i * phentsize)?..))
        .filter(|ph| u32_at(ph, 0) == elf::PT_LOAD)
        .map(|ph| {
            let off = u64_at(ph, 8);
            (off, off.saturating_add(u64_at(ph, 32)), u32_at(ph, 4))
        })
        .collect()
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

fn bad(path: &Path, problem: CoreProblem) -> Error {
    Error::BadCore {
        path: path.display().to_string(),
        problem,
    }
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    b.get(o..o + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .unwrap_or(0)
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    crate::memory::le_u32(b, o as u64)
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    crate::memory::le_u64(b, o as u64)
}

fn machine_name(m: u16) -> String {
    match m {
        elf::EM_AARCH64 => "aarch64".into(),
        elf::EM_ARM => "arm".into(),
        elf::EM_386 => "i386".into(),
        elf::EM_RISCV => "riscv".into(),
        elf::EM_PPC64 => "ppc64".into(),
        elf::EM_S390 => "s390".into(),
        elf::EM_LOONGARCH => "loongarch".into(),
        other => format!("e_machine {other}"),
    }
}

/// A C string from a fixed-size field.
fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// One ELF note: its type, name and descriptor.
struct Note<'a> {
    name: &'a [u8],
    kind: u32,
    desc: &'a [u8],
}

/// The notes in `b`, as far as they are well formed; a bad length ends the
/// list (and is reported through `torn`).
fn notes<'a>(b: &'a [u8], torn: &mut bool) -> Vec<Note<'a>> {
    let mut out = Vec::new();
    let mut o = 0usize;
    let pad = |n: usize| n.div_ceil(4) * 4;
    while o + 12 <= b.len() {
        let namesz = u32_at(b, o) as usize;
        let descsz = u32_at(b, o + 4) as usize;
        let kind = u32_at(b, o + 8);
        let name_at = o + 12;
        let Some(desc_at) = name_at.checked_add(pad(namesz)) else {
            *torn = true;
            break;
        };
        let Some(end) = desc_at.checked_add(descsz) else {
            *torn = true;
            break;
        };
        if end > b.len() {
            *torn = true;
            break;
        }
        let name = &b[name_at..name_at + namesz];
        let name = name.strip_suffix(&[0]).unwrap_or(name);
        out.push(Note {
            name,
            kind,
            desc: &b[desc_at..end],
        });
        o = desc_at + pad(descsz);
    }
    out
}

/// The GNU build-id of an ELF image whose first bytes are `b` (its header,
/// program headers and, as linkers place it, the build-id note).
pub(crate) fn build_id_in(b: &[u8]) -> Option<Vec<u8>> {
    if b.get(..4)? != elf::ELFMAG || b.get(4) != Some(&elf::ELFCLASS64) {
        return None;
    }
    let phoff = u64_at(b, 0x20) as usize;
    let phentsize = u16_at(b, 0x36) as usize;
    let phnum = u16_at(b, 0x38) as usize;
    if phentsize < 56 {
        return None;
    }
    for i in 0..phnum.min(256) {
        let ph = b.get(phoff.checked_add(i * phentsize)?..)?;
        if u32_at(ph, 0) != elf::PT_NOTE {
            continue;
        }
        let off = u64_at(ph, 8) as usize;
        let size = u64_at(ph, 32) as usize;
        let Some(seg) = b.get(off..off.saturating_add(size)) else {
            continue;
        };
        let mut torn = false;
        for n in notes(seg, &mut torn) {
            if n.kind == elf::NT_GNU_BUILD_ID && n.name == b"GNU" {
                return Some(n.desc.to_vec());
            }
        }
    }
    None
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Read `len` bytes at `off` of `f`, or fewer at its end.
fn read_upto(f: &File, off: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match f.read_at(&mut v[got..], off + got as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    v.truncate(got);
    v
}

/// A core's program headers, checked against its size.
struct ProgramHeaders {
    bytes: Vec<u8>,
    num: usize,
    entsize: usize,
}

impl ProgramHeaders {
    /// The ELF header (a 64-bit little-endian x86-64 core, or a typed
    /// error saying what the file is instead) and the program headers.
    fn read(path: &Path, file: &File, size: u64) -> Result<ProgramHeaders> {
        let head = read_upto(file, 0, 64);
        if head.len() < 4 || head[..4] != elf::ELFMAG {
            return Err(bad(path, CoreProblem::NotElf));
        }
        if head.len() < 64 {
            return Err(bad(
                path,
                CoreProblem::Truncated("the ELF header is cut short".into()),
            ));
        }
        let machine = u16_at(&head, 18);
        if head[4] != elf::ELFCLASS64 || head[5] != elf::ELFDATA2LSB || machine != elf::EM_X86_64 {
            let arch = if machine == elf::EM_X86_64 {
                "x86-64 but not 64-bit little-endian".to_string()
            } else {
                machine_name(machine)
            };
            // A core of another machine is named as such; another kind of
            // ELF file of another machine is first of all not a core.
            if u16_at(&head, 16) == elf::ET_CORE || u16_at(&head, 16).swap_bytes() == elf::ET_CORE {
                return Err(bad(path, CoreProblem::WrongArchitecture(arch)));
            }
        }
        let etype = u16_at(&head, 16);
        if etype != elf::ET_CORE {
            let what = match etype {
                elf::ET_EXEC => "ET_EXEC, an executable".to_string(),
                elf::ET_DYN => "ET_DYN, a shared library or PIE executable".to_string(),
                elf::ET_REL => "ET_REL, an object file".to_string(),
                t => t.to_string(),
            };
            return Err(bad(path, CoreProblem::NotCore(what)));
        }
        if machine != elf::EM_X86_64 {
            return Err(bad(
                path,
                CoreProblem::WrongArchitecture(machine_name(machine)),
            ));
        }
        let phoff = u64_at(&head, 0x20);
        let phentsize = u16_at(&head, 0x36) as usize;
        let mut phnum = u16_at(&head, 0x38) as usize;
        if phentsize != 56 {
            return Err(bad(
                path,
                CoreProblem::Corrupt(format!("program header size {phentsize}, not 56")),
            ));
        }
        if phnum == elf::PN_XNUM as usize {
            // The real count is in section header 0's sh_info.
            let shoff = u64_at(&head, 0x28);
            let sh0 = read_upto(file, shoff, 64);
            if sh0.len() < 64 {
                return Err(bad(
                    path,
                    CoreProblem::Truncated(
                        "the section header holding the count is missing".into(),
                    ),
                ));
            }
            phnum = u32_at(&sh0, 44) as usize;
        }
        if phnum == 0 || phnum > MAX_PHDRS {
            return Err(bad(
                path,
                CoreProblem::Corrupt(format!("{phnum} program headers")),
            ));
        }
        let ph_len = phnum * phentsize;
        if phoff.saturating_add(ph_len as u64) > size {
            return Err(bad(
                path,
                CoreProblem::Truncated(format!(
                    "its program headers end at byte {}, beyond its {size} bytes",
                    phoff.saturating_add(ph_len as u64)
                )),
            ));
        }
        let phdrs = read_upto(file, phoff, ph_len);
        if phdrs.len() < ph_len {
            return Err(bad(
                path,
                CoreProblem::Truncated("its program headers cannot be read".into()),
            ));
        }
        Ok(ProgramHeaders {
            bytes: phdrs,
            num: phnum,
            entsize: phentsize,
        })
    }

    /// The notes of every `PT_NOTE` segment, each padded to 4 bytes; every
    /// `PT_LOAD` checked to lie in the file.
    fn notes(&self, path: &Path, file: &File, size: u64) -> Result<Vec<u8>> {
        let (phdrs, phnum, phentsize) = (&self.bytes, self.num, self.entsize);
        let mut note_bytes: Vec<u8> = Vec::new();
        for i in 0..phnum {
            let ph = &phdrs[i * phentsize..(i + 1) * phentsize];
            let kind = u32_at(ph, 0);
            let offset = u64_at(ph, 8);
            let vaddr = u64_at(ph, 16);
            let filesz = u64_at(ph, 32);
            let memsz = u64_at(ph, 40);
            let end = offset.checked_add(filesz);
            match kind {
                elf::PT_LOAD => {
                    if filesz > memsz || vaddr.checked_add(memsz).is_none() || end.is_none() {
                        return Err(bad(
                            path,
                            CoreProblem::Corrupt(format!(
                                "segment at 0x{vaddr:x}: {filesz} bytes in the file, {memsz} in memory"
                            )),
                        ));
                    }
                    if end.is_some_and(|e| e > size) {
                        return Err(bad(
                            path,
                            CoreProblem::Truncated(format!(
                                "the memory at 0x{vaddr:x} ends at byte {}, beyond its {size} bytes",
                                end.unwrap_or(u64::MAX)
                            )),
                        ));
                    }
                }
                elf::PT_NOTE => {
                    if end.is_none_or(|e| e > size) {
                        return Err(bad(
                            path,
                            CoreProblem::Truncated(format!(
                                "its notes (threads, registers, mapped files) end beyond its {size} bytes"
                            )),
                        ));
                    }
                    if note_bytes.len() as u64 + filesz > MAX_NOTES {
                        return Err(bad(
                            path,
                            CoreProblem::Corrupt(format!("more than {MAX_NOTES} bytes of notes")),
                        ));
                    }
                    let b = read_upto(file, offset, filesz as usize);
                    // Each segment's notes stand alone: pad to 4 between them.
                    note_bytes.extend_from_slice(&b);
                    while !note_bytes.len().is_multiple_of(4) {
                        note_bytes.push(0);
                    }
                }
                _ => {}
            }
        }
        if note_bytes.is_empty() {
            return Err(bad(
                path,
                CoreProblem::Corrupt("no notes: no threads or registers recorded".into()),
            ));
        }
        Ok(note_bytes)
    }

    /// The memory segments with their flags, by address, checked not to
    /// overlap; gdb's unrecorded tails found.
    fn segments(&self, path: &Path, file: &File) -> Result<Vec<(Segment, u32)>> {
        let (phdrs, phnum, phentsize) = (&self.bytes, self.num, self.entsize);
        // The memory segments, with their flags, by address.
        let mut seg_flags: Vec<(Segment, u32)> = Vec::new();
        {
            for i in 0..phnum {
                let ph = &phdrs[i * phentsize..(i + 1) * phentsize];
                if u32_at(ph, 0) != elf::PT_LOAD || u64_at(ph, 40) == 0 {
                    continue;
                }
                seg_flags.push((
                    Segment {
                        vaddr: u64_at(ph, 16),
                        memsz: u64_at(ph, 40),
                        offset: u64_at(ph, 8),
                        filesz: u64_at(ph, 32),
                        recorded: u64_at(ph, 32),
                        file: None,
                    },
                    u32_at(ph, 4),
                ));
            }
        }
        seg_flags.sort_by_key(|(s, _)| s.vaddr);
        // gdb packs segments in the file; the kernel places each at a page.
        let by_gdb = seg_flags
            .iter()
            .any(|(s, _)| s.filesz > 0 && s.offset % PAGE != s.vaddr % PAGE);
        if by_gdb {
            for (s, _) in &mut seg_flags {
                if s.filesz > 0 {
                    s.recorded = unrecorded_tail(file, s.offset, s.filesz);
                }
            }
        }
        for w in seg_flags.windows(2) {
            if w[0].0.vaddr + w[0].0.memsz > w[1].0.vaddr {
                return Err(bad(
                    path,
                    CoreProblem::Corrupt(format!(
                        "memory segments overlap at 0x{:x}",
                        w[1].0.vaddr
                    )),
                ));
            }
        }
        Ok(seg_flags)
    }
}

/// What a core's `CORE` notes record.
struct CoreNotes<'a> {
    threads: Vec<CoreThread>,
    prpsinfo: Option<&'a [u8]>,
    nt_file: Option<&'a [u8]>,
    auxv: Vec<(u64, u64)>,
    /// The notes end in the middle of one.
    torn: bool,
}

impl<'a> CoreNotes<'a> {
    /// The threads (`NT_PRSTATUS`, with their `NT_SIGINFO`), the process
    /// (`NT_PRPSINFO`), the auxiliary vector and the mapped files' table.
    fn parse(path: &Path, note_bytes: &'a [u8]) -> Result<CoreNotes<'a>> {
        let mut torn = false;
        let mut threads: Vec<CoreThread> = Vec::new();
        let mut prpsinfo: Option<&[u8]> = None;
        let mut nt_file: Option<&[u8]> = None;
        let mut auxv: Vec<(u64, u64)> = Vec::new();
        let all = notes(note_bytes, &mut torn);
        for n in &all {
            if n.name != b"CORE" {
                continue;
            }
            match n.kind {
                elf::NT_PRSTATUS => {
                    if n.desc.len() < PRSTATUS_SIZE - 8 {
                        return Err(bad(
                            path,
                            CoreProblem::Corrupt(format!(
                                "a thread's registers (NT_PRSTATUS) are {} bytes, not {PRSTATUS_SIZE}",
                                n.desc.len()
                            )),
                        ));
                    }
                    if threads.len() >= MAX_THREADS {
                        continue;
                    }
                    let d = n.desc;
                    let reg = |i: usize| u64_at(d, PRSTATUS_REG + i * 8);
                    threads.push(CoreThread {
                        tid: u32_at(d, 32) as i32,
                        regs: Registers {
                            ip: reg(16),
                            sp: reg(19),
                            bp: reg(4),
                        },
                        cursig: u16_at(d, 12) as i32,
                        // orig_rax; rdi, rsi, rdx, r10, r8, r9; rax.
                        call: crate::wait::call_from_registers(
                            reg(15),
                            [reg(14), reg(13), reg(12), reg(7), reg(9), reg(8)],
                        ),
                        asleep: reg(15) != u64::MAX && crate::wait::asleep_in_call(reg(10)),
                        siginfo: None,
                    });
                }
                elf::NT_PRPSINFO => prpsinfo = Some(n.desc),
                elf::NT_SIGINFO => {
                    if let Some(t) = threads.last_mut() {
                        if t.siginfo.is_none() && n.desc.len() >= 24 {
                            t.siginfo = Some(SigInfo {
                                signo: u32_at(n.desc, 0) as i32,
                                code: u32_at(n.desc, 8) as i32,
                                addr: u64_at(n.desc, 16),
                            });
                        }
                    }
                }
                elf::NT_AUXV => {
                    auxv = n
                        .desc
                        .chunks_exact(16)
                        .map(|c| (u64_at(c, 0), u64_at(c, 8)))
                        .take_while(|&(k, _)| k != 0)
                        .collect();
                }
                elf::NT_FILE => nt_file = Some(n.desc),
                _ => {}
            }
        }
        if threads.is_empty() {
            return Err(bad(
                path,
                if torn {
                    CoreProblem::Truncated("its notes are cut short before any thread".into())
                } else {
                    CoreProblem::Corrupt("no thread recorded (no NT_PRSTATUS note)".into())
                },
            ));
        }
        Ok(CoreNotes {
            threads,
            prpsinfo,
            nt_file,
            auxv,
            torn,
        })
    }
}

/// An auxiliary vector's value for key `k`.
fn auxv_value(auxv: &[(u64, u64)], k: u64) -> Option<u64> {
    auxv.iter().find(|(t, _)| *t == k).map(|&(_, v)| v)
}

/// `NT_FILE`: the mapped files' names, and their mappings as (start, end,
/// file offset, name index).
#[allow(clippy::type_complexity)]
fn mapped_files(path: &Path, d: &[u8]) -> Result<(Vec<String>, Vec<(u64, u64, u64, usize)>)> {
    let mut names: Vec<String> = Vec::new();
    let mut file_maps: Vec<(u64, u64, u64, usize)> = Vec::new();
    let count = u64_at(d, 0) as usize;
    let page = u64_at(d, 8);
    let table = 16usize;
    if count > d.len().saturating_sub(table) / 24 || page == 0 || page > 1 << 30 {
        return Err(bad(
            path,
            CoreProblem::Corrupt(format!("NT_FILE lists {count} files in {} bytes", d.len())),
        ));
    }
    let mut strings = d[table + count * 24..].split(|&c| c == 0);
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for i in 0..count {
        let e = table + i * 24;
        let (start, end, pgoff) = (u64_at(d, e), u64_at(d, e + 8), u64_at(d, e + 16));
        let Some(name) = strings.next() else { break };
        let name = String::from_utf8_lossy(name).into_owned();
        if end <= start {
            continue;
        }
        let idx = *by_name.entry(name.clone()).or_insert_with(|| {
            names.push(name);
            names.len() - 1
        });
        file_maps.push((start, end, pgoff.saturating_mul(page), idx));
    }
    Ok((names, file_maps))
}

/// The files behind a core's mappings, as found on this host.
struct FileBacking {
    files: Vec<MappedFile>,
    /// The main program as the target named it.
    exe: String,
    root: PathBuf,
}

impl FileBacking {
    /// Opens each mapped file under `--root` (or `--executable` for the main
    /// program, the file mapped at the entry point); an error if the main
    /// program is not found.
    fn find(
        path: &Path,
        opts: &CoreOptions,
        names: &[String],
        file_maps: &[(u64, u64, u64, usize)],
        auxv: &[(u64, u64)],
        prpsinfo: Option<&[u8]>,
    ) -> Result<FileBacking> {
        let at = |k: u64| auxv_value(auxv, k);
        // The main program: the file mapped at the entry point.
        let exe_idx = at(libc::AT_ENTRY)
            .or(at(libc::AT_PHDR))
            .and_then(|a| file_maps.iter().find(|m| a >= m.0 && a < m.1).map(|m| m.3))
            .or_else(|| file_maps.iter().min_by_key(|m| m.0).map(|m| m.3));
        let root = opts.root.clone().unwrap_or_else(|| PathBuf::from("/"));
        let mut files: Vec<MappedFile> = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let plain = name.strip_suffix(" (deleted)").unwrap_or(name);
            // Under the root first; then, with --root, the path as it is
            // (a gcore taken from outside a container records host paths).
            let candidates: Vec<PathBuf> = match (&opts.executable, Some(i) == exe_idx) {
                (Some(exe), true) => vec![exe.clone()],
                _ => match Path::new(plain).strip_prefix("/") {
                    Ok(rel) if opts.root.is_some() => vec![root.join(rel), PathBuf::from(plain)],
                    Ok(_) => vec![PathBuf::from(plain)],
                    Err(_) => Vec::new(),
                },
            };
            let (host, handle) = candidates
                .into_iter()
                .find_map(|c| File::open(&c).ok().map(|f| (Some(c), Some(f))))
                .unwrap_or((None, None));
            let len = handle
                .as_ref()
                .and_then(|h| h.metadata().ok())
                .map_or(0, |m| m.len());
            files.push(MappedFile {
                len,
                name: name.clone(),
                host,
                handle,
            });
        }
        let exe = match exe_idx {
            Some(i) => names[i].clone(),
            None => prpsinfo
                .map(|p| cstr(p.get(40..56).unwrap_or(&[])))
                .unwrap_or_default(),
        };
        if let Some(i) = exe_idx {
            if files[i].handle.is_none() {
                let where_ = match (&opts.executable, &opts.root) {
                    (Some(p), _) => format!(" (not at {})", p.display()),
                    (None, Some(r)) => format!(" under {}", r.display()),
                    (None, None) => String::new(),
                };
                return Err(bad(
                    path,
                    CoreProblem::ExecutableNotFound {
                        exe: exe.clone(),
                        where_,
                    },
                ));
            }
        }
        Ok(FileBacking { files, exe, root })
    }
}

/// The memory map of a core: each segment with the file mapped there
/// (from `NT_FILE`), and the file mappings the core has no segment for.
fn mappings(
    seg_flags: Vec<(Segment, u32)>,
    file_maps: Vec<(u64, u64, u64, usize)>,
    names: &[String],
    files: &[MappedFile],
    vdso: Option<u64>,
) -> (Vec<Segment>, Vec<FileMap>, Vec<MapEntry>) {
    let mut file_maps: Vec<FileMap> = file_maps
        .into_iter()
        .map(|(start, end, foff, idx)| FileMap {
            start,
            end,
            foff,
            idx,
        })
        .collect();
    file_maps.sort_by_key(|m| m.start);
    let file_map_at = |a: u64| {
        let i = file_maps.partition_point(|m| m.start <= a);
        file_maps.get(i.checked_sub(1)?).filter(|m| a < m.end)
    };
    let mut maps = Vec::with_capacity(seg_flags.len() + file_maps.len());
    let mut segments = Vec::with_capacity(seg_flags.len());
    for (mut s, f) in seg_flags {
        let fm = file_map_at(s.vaddr);
        if let Some(m) = fm {
            s.file = Some((m.idx, m.foff + (s.vaddr - m.start)));
        }
        let path_name = match fm {
            Some(m) => names[m.idx].clone(),
            None if Some(s.vaddr) == vdso => "[vdso]".to_string(),
            None => String::new(),
        };
        maps.push(MapEntry {
            start: s.vaddr,
            end: s.vaddr + s.memsz,
            readable: f & elf::PF_R != 0,
            writable: f & elf::PF_W != 0,
            executable: f & elf::PF_X != 0,
            offset: s.file.map(|(_, o)| o).unwrap_or(0),
            // NT_FILE records no inode: any nonzero one marks a file.
            inode: fm.map(|m| m.idx as u64 + 1).unwrap_or(0),
            path: path_name,
        });
        segments.push(s);
    }
    // File mappings the core has no segment for at all (gdb leaves out
    // unmodified file mappings): their permissions are those of the
    // file's own segment at that offset.
    let mut file_flags: HashMap<usize, Vec<(u64, u64, u32)>> = HashMap::new();
    for m in &file_maps {
        let mut at = m.start;
        while at < m.end {
            let i = segments.partition_point(|s| s.vaddr + s.memsz <= at);
            let next = segments.get(i).map(|s| s.vaddr).unwrap_or(u64::MAX);
            if next <= at {
                at = segments[i].vaddr + segments[i].memsz;
                continue;
            }
            let gap_end = next.min(m.end);
            let foff = m.foff + (at - m.start);
            let loads = file_flags
                .entry(m.idx)
                .or_insert_with(|| match &files[m.idx].handle {
                    Some(h) => file_loads(&read_upto(h, 0, 64 << 10)),
                    None => Vec::new(),
                });
            let f = loads
                .iter()
                .find(|(lo, hi, _)| foff >= lo & !(PAGE - 1) && foff < *hi)
                .map(|l| l.2)
                .unwrap_or(elf::PF_R);
            maps.push(MapEntry {
                start: at,
                end: gap_end,
                readable: f & elf::PF_R != 0,
                writable: f & elf::PF_W != 0,
                executable: f & elf::PF_X != 0,
                offset: foff,
                inode: m.idx as u64 + 1,
                path: names[m.idx].clone(),
            });
            at = gap_end;
        }
    }
    maps.sort_by_key(|m| m.start);
    (segments, file_maps, maps)
}

impl CoreFile {
    pub(crate) fn open(path: &Path, opts: &CoreOptions) -> Result<CoreFile> {
        let file = File::open(path).map_err(|e| {
            bad(
                path,
                CoreProblem::Unreadable(format!("cannot open it: {e}")),
            )
        })?;
        let meta = file
            .metadata()
            .map_err(|e| bad(path, CoreProblem::Unreadable(e.to_string())))?;
        let size = meta.len();
        let core_file_time = meta.modified().ok();
        let phdrs = ProgramHeaders::read(path, &file, size)?;
        let note_bytes = phdrs.notes(path, &file, size)?;
        let notes = CoreNotes::parse(path, &note_bytes)?;
        let CoreNotes {
            threads,
            prpsinfo,
            nt_file,
            auxv,
            torn,
        } = notes;
        let mut warnings = Vec::new();
        if torn {
            warnings.push(format!(
                "the core's notes are cut short after {} threads; later ones are missing",
                threads.len()
            ));
        }
        let (names, file_maps) = match nt_file {
            Some(d) => mapped_files(path, d)?,
            None => (Vec::new(), Vec::new()),
        };
        let backing = FileBacking::find(path, opts, &names, &file_maps, &auxv, prpsinfo)?;
        let seg_flags = phdrs.segments(path, &file)?;
        let (segments, file_maps, maps) = mappings(
            seg_flags,
            file_maps,
            &names,
            &backing.files,
            auxv_value(&auxv, libc::AT_SYSINFO_EHDR),
        );

        let pid = prpsinfo
            .map(|p| u32_at(p, 24) as i32)
            .filter(|&p| p > 0)
            .unwrap_or(threads[0].tid);
        let fname = prpsinfo
            .map(|p| cstr(p.get(40..56).unwrap_or(&[])))
            .unwrap_or_default();
        let psargs = prpsinfo
            .map(|p| cstr(p.get(56..136).unwrap_or(&[])))
            .unwrap_or_default();

        let mut core = CoreFile {
            file,
            segments,
            file_maps,
            files: backing.files,
            maps,
            threads,
            pid,
            command_line: psargs.trim_end().to_string(),
            fname,
            exe: backing.exe,
            root: backing.root,
            warnings,
            written: core_file_time,
        };
        if let Some(full) = core.argv_from_stack(&auxv) {
            core.command_line = full;
        }
        core.check_files();
        Ok(core)
    }

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
        t.asleep.then_some('S')
    }
    fn saved_registers(&self, tid: i32) -> Option<Registers> {
        self.threads.iter().find(|t| t.tid == tid).map(|t| t.regs)
    }
    fn saved_call(&self, tid: i32) -> Option<SyscallLine> {
        match self.threads.iter().find(|t| t.tid == tid)?.call {
            c @ SyscallLine::Blocked { .. } => Some(c),
            _ => None,
        }
    }
    fn recorded_at(&self) -> Option<std::time::SystemTime> {
        self.written
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryExt;

    /// A minimal x86-64 core: one thread's NT_PRSTATUS, an NT_SIGINFO, one
    /// memory segment of 4 KiB at 0x10000 filled with its offset's low byte.
    fn mini_core(machine: u16, etype: u16) -> Vec<u8> {
        mini_core_with(machine, etype, None)
    }

    /// [`mini_core`] with an `NT_FILE` note of the given bytes, when given.
    fn mini_core_with(machine: u16, etype: u16, nt_file: Option<&[u8]>) -> Vec<u8> {
        let mut prstatus = vec![0u8; PRSTATUS_SIZE];
        prstatus[12..14].copy_from_slice(&11u16.to_le_bytes());
        prstatus[32..36].copy_from_slice(&4242u32.to_le_bytes());
        let reg = |i: usize| PRSTATUS_REG + i * 8;
        prstatus[reg(16)..reg(16) + 8].copy_from_slice(&0x10010u64.to_le_bytes());
        prstatus[reg(19)..reg(19) + 8].copy_from_slice(&0x10800u64.to_le_bytes());
        prstatus[reg(4)..reg(4) + 8].copy_from_slice(&0x10900u64.to_le_bytes());
        let mut siginfo = vec![0u8; 128];
        siginfo[0..4].copy_from_slice(&11u32.to_le_bytes());
        siginfo[8..12].copy_from_slice(&1u32.to_le_bytes());
        siginfo[16..24].copy_from_slice(&0x10u64.to_le_bytes());
        let mut notes = Vec::new();
        let mut list: Vec<(u32, &[u8])> =
            vec![(elf::NT_PRSTATUS, &prstatus), (elf::NT_SIGINFO, &siginfo)];
        if let Some(d) = nt_file {
            list.push((elf::NT_FILE, d));
        }
        for (kind, desc) in list {
            notes.extend_from_slice(&5u32.to_le_bytes());
            notes.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            notes.extend_from_slice(&kind.to_le_bytes());
            notes.extend_from_slice(b"CORE\0\0\0\0");
            notes.extend_from_slice(desc);
        }
        let phoff = 64u64;
        let notes_at = phoff + 2 * 56;
        let load_at = (notes_at + notes.len() as u64).div_ceil(PAGE) * PAGE;
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(&elf::ELFMAG);
        b[4] = elf::ELFCLASS64;
        b[5] = elf::ELFDATA2LSB;
        b[6] = 1;
        b[16..18].copy_from_slice(&etype.to_le_bytes());
        b[18..20].copy_from_slice(&machine.to_le_bytes());
        b[0x20..0x28].copy_from_slice(&phoff.to_le_bytes());
        b[0x34..0x36].copy_from_slice(&64u16.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&2u16.to_le_bytes());
        let ph = |kind: u32, flags: u32, off: u64, vaddr: u64, filesz: u64, memsz: u64| {
            let mut p = vec![0u8; 56];
            p[0..4].copy_from_slice(&kind.to_le_bytes());
            p[4..8].copy_from_slice(&flags.to_le_bytes());
            p[8..16].copy_from_slice(&off.to_le_bytes());
            p[16..24].copy_from_slice(&vaddr.to_le_bytes());
            p[32..40].copy_from_slice(&filesz.to_le_bytes());
            p[40..48].copy_from_slice(&memsz.to_le_bytes());
            p
        };
        b.extend(ph(elf::PT_NOTE, 0, notes_at, 0, notes.len() as u64, 0));
        b.extend(ph(
            elf::PT_LOAD,
            elf::PF_R | elf::PF_W,
            load_at,
            0x10000,
            PAGE,
            PAGE,
        ));
        b.extend(&notes);
        b.resize(load_at as usize, 0);
        b.extend((0..PAGE).map(|i| i as u8));
        b
    }

    fn open_bytes(bytes: &[u8]) -> Result<CoreFile> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("core");
        std::fs::write(&p, bytes).unwrap();
        CoreFile::open(&p, &CoreOptions::default())
    }

    fn problem(r: Result<CoreFile>) -> CoreProblem {
        match r {
            Err(Error::BadCore { problem, .. }) => problem,
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("opened"),
        }
    }

    #[test]
    fn a_minimal_core_gives_its_thread_registers_memory_and_crash() {
        let c = open_bytes(&mini_core(elf::EM_X86_64, elf::ET_CORE)).unwrap();
        assert_eq!(c.kind(), SourceKind::Core);
        assert_eq!(c.pid(), 4242);
        assert_eq!(c.threads().unwrap(), vec![4242]);
        let r = c.saved_registers(4242).unwrap();
        assert_eq!((r.ip, r.sp, r.bp), (0x10010, 0x10800, 0x10900));
        assert_eq!(c.read_u8(0x10005).unwrap(), 5);
        assert_eq!(c.read_vec(0x10ffe, 2, 16).unwrap(), vec![0xfe, 0xff]);
        assert!(c.read_u64(0x10ffc).is_err(), "a read past the segment");
        assert!(c.read_u8(0x20000).is_err());
        let m = c.maps().unwrap();
        assert_eq!(m.len(), 1);
        assert!(m[0].readable && m[0].writable && !m[0].executable && !m[0].is_file());
        let crash = c.crash().unwrap();
        assert_eq!((crash.tid, crash.signal_name().as_str()), (4242, "SIGSEGV"));
        assert_eq!(crash.addr, Some(0x10));
    }

    /// The mini core with register `i` of its thread's NT_PRSTATUS set
    /// (its desc follows the note header and the "CORE" name, after the
    /// ELF header and two program headers).
    fn with_reg(mut b: Vec<u8>, i: usize, v: u64) -> Vec<u8> {
        let at = 64 + 2 * 56 + 12 + 8 + PRSTATUS_REG + i * 8;
        b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        b
    }

    #[test]
    fn a_thread_asleep_in_a_call_reads_from_its_registers() {
        // orig_rax 45 (recvfrom), rax -ERESTARTSYS; rdi 3, rsi, rdx 16.
        let mut b = mini_core(elf::EM_X86_64, elf::ET_CORE);
        for (i, v) in [
            (15, 45),
            (10, (-512i64) as u64),
            (14, 3),
            (13, 0x10100),
            (12, 16),
        ] {
            b = with_reg(b, i, v);
        }
        let c = open_bytes(&b).unwrap();
        assert_eq!(c.thread_state(4242), Some('S'));
        assert_eq!(
            c.saved_call(4242),
            Some(SyscallLine::Blocked {
                nr: 45,
                args: [3, 0x10100, 16, 0, 0, 0]
            })
        );
        assert_eq!(c.saved_call(1), None);
        assert!(c.recorded_at().is_some());
        // The one decoder: the same wait a live thread in that call gives,
        // its fd named by number only.
        let mut r = crate::wait::WaitReader::recorded(4242, crate::wait::WaitDetail::Full, 0.0);
        let (w, _) = r.read(4242, 'S', c.saved_call(4242), &c);
        assert_eq!(w.long(), "recvfrom(fd 3: not recorded in a core)");

        // r10, r8, r9 are the fourth to sixth arguments.
        let mut b = mini_core(elf::EM_X86_64, elf::ET_CORE);
        for (i, v) in [(15, 202), (10, (-516i64) as u64), (7, 4), (9, 5), (8, 6)] {
            b = with_reg(b, i, v);
        }
        let c = open_bytes(&b).unwrap();
        assert!(matches!(
            c.saved_call(4242),
            Some(SyscallLine::Blocked {
                nr: 202,
                args: [0, 0, 0, 4, 5, 6]
            })
        ));

        // Not in a call (orig_rax -1: the mini core's thread faulted): no
        // state, no call. On its way out of one (read returned 16): the
        // call, as /proc says it of a stopped thread, but no state.
        let b = with_reg(mini_core(elf::EM_X86_64, elf::ET_CORE), 15, u64::MAX);
        let c = open_bytes(&b).unwrap();
        assert_eq!((c.thread_state(4242), c.saved_call(4242)), (None, None));
        let b = with_reg(
            with_reg(mini_core(elf::EM_X86_64, elf::ET_CORE), 15, 0),
            10,
            16,
        );
        let c = open_bytes(&b).unwrap();
        assert_eq!(c.thread_state(4242), None);
        assert!(matches!(
            c.saved_call(4242),
            Some(SyscallLine::Blocked { nr: 0, .. })
        ));
    }

    #[test]
    fn each_wrong_file_is_named_for_what_it_is() {
        assert_eq!(
            problem(open_bytes(b"hello, not a core")),
            CoreProblem::NotElf
        );
        assert_eq!(problem(open_bytes(b"")), CoreProblem::NotElf);
        assert!(matches!(
            problem(open_bytes(&mini_core(elf::EM_X86_64, elf::ET_DYN))),
            CoreProblem::NotCore(_)
        ));
        assert_eq!(
            problem(open_bytes(&mini_core(elf::EM_AARCH64, elf::ET_CORE))),
            CoreProblem::WrongArchitecture("aarch64".into())
        );
        let full = mini_core(elf::EM_X86_64, elf::ET_CORE);
        for cut in [40, 100, 300, full.len() - 1] {
            assert!(
                matches!(problem(open_bytes(&full[..cut])), CoreProblem::Truncated(_)),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_segment_gdb_stopped_copying_ends_where_it_stopped() {
        use std::io::Write;
        let mut f = tempfile::tempfile().unwrap();
        // A segment of four pages from 0x100: gdb wrote its first page,
        // then nothing (the file is extended past the segment's end).
        f.write_all(&[0xaa; 0x100 + PAGE as usize]).unwrap();
        f.set_len(0x100 + 4 * PAGE + 0x80).unwrap();
        assert_eq!(unrecorded_tail(&f, 0x100, 4 * PAGE), PAGE);
        // Written to its end, with a hole after it: whole.
        assert_eq!(unrecorded_tail(&f, 0, 0x100 + PAGE), 0x100 + PAGE);
        // A hole inside, data after it: whole (zeros another copy left).
        let mut g = tempfile::tempfile().unwrap();
        g.write_all(&[0xaa; PAGE as usize]).unwrap();
        g.write_all_at(&[0xbb; PAGE as usize], 4 * PAGE).unwrap();
        assert_eq!(unrecorded_tail(&g, 0, 5 * PAGE), 5 * PAGE);
    }

    #[test]
    fn corrupt_cores_never_panic() {
        let full = mini_core(elf::EM_X86_64, elf::ET_CORE);
        let mut rng = 0x9e3779b97f4a7c15u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("core");
        let header_end = 64 + 2 * 56 + 2 * (20 + PRSTATUS_SIZE) as u64;
        for _ in 0..400 {
            let mut b = full.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() % header_end) as usize;
                b[at] = next() as u8;
            }
            std::fs::write(&p, &b).unwrap();
            if let Ok(c) = CoreFile::open(&p, &CoreOptions::default()) {
                let _ = c.read_u64(0x10000);
                let _ = c.maps();
                let _ = c.crash();
            }
        }
    }

    /// NT_FILE's count and table against its length: a count that fits the
    /// entries but not the 16-byte header before them, or any short note,
    /// is a corrupt core, never a slice past the note.
    #[test]
    fn a_short_nt_file_is_corrupt_not_a_panic() {
        for count in 0u64..4 {
            for len in 0..96usize {
                let mut d = vec![0u8; len];
                if len >= 16 {
                    d[..8].copy_from_slice(&count.to_le_bytes());
                    d[8..16].copy_from_slice(&PAGE.to_le_bytes());
                }
                let r = open_bytes(&mini_core_with(elf::EM_X86_64, elf::ET_CORE, Some(&d)));
                // Any other length opens or is refused; it never panics.
                if count > 0 && len >= 16 && len < 16 + 24 * count as usize {
                    assert!(
                        matches!(problem(r), CoreProblem::Corrupt(_)),
                        "count {count}, {len} bytes"
                    );
                }
            }
        }
    }

    #[test]
    fn build_id_is_found_in_a_real_binary_header() {
        let exe = std::env::current_exe().unwrap();
        let f = File::open(exe).unwrap();
        let id = build_id_in(&read_upto(&f, 0, 64 << 10));
        // Rust's test binaries are linked with a build-id by default here.
        assert!(id.is_some_and(|b| b.len() >= 8));
        assert_eq!(build_id_in(b"\x7fELF"), None);
    }

    /// A `gcore` of a real process: its program's code (which gcore leaves
    /// out) is read from the file, its command line and thread are there.
    #[test]
    fn a_gcore_of_a_real_process_reads_like_the_process() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        std::thread::sleep(std::time::Duration::from_millis(200));
        let live = crate::target::LiveProcess::new(pid);
        let live_maps = live.maps().unwrap();
        // Read live before the core is taken (gdb attaches while it runs).
        let mut live_pages = Vec::new();
        for m in live_maps
            .iter()
            .filter(|m| m.readable && !m.path.starts_with("[v"))
        {
            for at in [m.start, m.end - PAGE] {
                let mut want = vec![0u8; PAGE as usize];
                live.read(at, &mut want).unwrap();
                live_pages.push((m.clone(), at, want));
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("core");
        let out = std::process::Command::new("gcore")
            .arg("-o")
            .arg(&base)
            .arg(pid.to_string())
            .output()
            .expect("gcore (from gdb) must be installed: .ci/native-workloads");
        let _ = child.kill();
        let _ = child.wait();
        assert!(out.status.success(), "gcore failed: {out:?}");
        let path = PathBuf::from(format!("{}.{pid}", base.display()));
        let c = CoreFile::open(&path, &CoreOptions::default()).unwrap();
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
        assert_eq!(c.pid(), pid);
        assert_eq!(c.threads().unwrap(), vec![pid]);
        assert_eq!(c.command_line().unwrap(), "sleep 30");
        assert!(c.executable().unwrap().ends_with("/sleep"));
        assert_eq!(c.thread_name(pid).as_deref(), Some("sleep"));
        let maps = c.maps().unwrap();
        // Every file mapping of the live process is in the core's map,
        // with its permissions and offset.
        for m in live_maps.iter().filter(|m| m.is_file()) {
            let cm = maps
                .iter()
                .find(|x| x.start == m.start)
                .unwrap_or_else(|| panic!("{m:?} missing"));
            assert_eq!(
                (
                    cm.end,
                    cm.readable,
                    cm.writable,
                    cm.executable,
                    cm.offset,
                    &cm.path
                ),
                (
                    m.end,
                    m.readable,
                    m.writable,
                    m.executable,
                    m.offset,
                    &m.path
                )
            );
            assert!(cm.is_file());
        }
        // Every readable page the live process had reads the same from the
        // core (first and last of each mapping), in the core or not.
        for (m, at, want) in &live_pages {
            if m.path == "[stack]" {
                continue; // the stack below sp moves with gdb's attach
            }
            let got = c
                .read_vec(*at, PAGE as usize, 1 << 20)
                .unwrap_or_else(|e| panic!("{m:?} at 0x{at:x}: {e}"));
            assert!(&got == want, "{m:?} at 0x{at:x}");
        }
        let regs = c.saved_registers(pid).unwrap();
        let code = maps
            .iter()
            .find(|m| m.executable && m.contains(regs.ip))
            .expect("the thread's ip is in code");
        let file = c.mapped_file(code).unwrap();
        let mut want = vec![0u8; 64];
        File::open(file)
            .unwrap()
            .read_exact_at(&mut want, code.offset + (regs.ip - code.start))
            .unwrap();
        assert_eq!(c.read_vec(regs.ip, 64, 64).unwrap(), want);
        assert!(c.crash().is_none());
        assert!(c.read_u64(regs.sp).is_ok(), "the stack is in the core");
    }
}

/// The sampler's whole read (`Target::open_source` and `sample`) on a core
/// file: discovery, the CPython reader and the native unwinder through the
/// core source alone.
#[cfg(test)]
mod sample_tests {
    use super::*;
    use crate::sampler::{
        AsyncMode, Filters, PausePolicy, ReadConfig, SamplerConfig, Schedule, Target,
    };

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
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("core");
        let out = std::process::Command::new("gcore")
            .arg("-o")
            .arg(&base)
            .arg(pid.to_string())
            .output()
            .expect("gcore (from gdb) must be installed: .ci/core-deps");
        let _ = child.kill();
        let _ = child.wait();
        assert!(out.status.success(), "gcore failed: {out:?}");
        let path = PathBuf::from(format!("{}.{pid}", base.display()));
        let core = CoreFile::open(&path, &CoreOptions::default()).unwrap();
        let cfg = SamplerConfig {
            schedule: Schedule {
                rate: 1.0,
                duration: None,
                subprocesses: false,
            },
            pause: PausePolicy { nonblocking: false },
            filter: Filters {
                gil_only: false,
                include_idle: true,
            },
            read: ReadConfig {
                native: true,
                native_all: false,
                native_debug_info: false,
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
