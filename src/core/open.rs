//! Opening a core: its ELF and program headers, its notes (threads,
//! registers, the process, the auxiliary vector, the mapped files), the
//! files it maps found on this host, and its memory map, each step bounded
//! against the file's size and each way it can be wrong one [`CoreProblem`].

use super::{CoreFile, CoreOptions, CoreThread, FileMap, MappedFile, Segment, SigInfo};
use crate::error::{CoreProblem, Error, Result};
use crate::procfs::MapEntry;
use crate::target::Registers;
use object::elf;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The most program headers read (the kernel caps a core's at 65535 VMAs
/// plus a few extra through PN_XNUM; more is corrupt).
pub(super) const MAX_PHDRS: usize = 1 << 20;
/// The most note bytes read (NT_FILE of a process with 65535 mappings of
/// long paths stays well below this).
pub(super) const MAX_NOTES: u64 = 128 << 20;
/// The most threads taken from a core.
pub(super) const MAX_THREADS: usize = 1 << 16;
pub(super) const PRSTATUS_SIZE: usize = 336;
pub(super) const PRSTATUS_REG: usize = 112;
pub(super) const PAGE: u64 = 4096;

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
pub(super) fn unrecorded_tail(file: &File, offset: u64, filesz: u64) -> u64 {
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

/// An ELF image's loadable segments, from its first bytes: (file offset,
/// end of its bytes in the file, flags).
pub(super) fn file_loads(b: &[u8]) -> Vec<(u64, u64, u32)> {
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

pub(super) fn bad(path: &Path, problem: CoreProblem) -> Error {
    Error::BadCore {
        path: path.display().to_string(),
        problem,
    }
}

pub(super) fn u16_at(b: &[u8], o: usize) -> u16 {
    b.get(o..o + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .unwrap_or(0)
}
pub(super) fn u32_at(b: &[u8], o: usize) -> u32 {
    crate::memory::le_u32(b, o as u64)
}
pub(super) fn u64_at(b: &[u8], o: usize) -> u64 {
    crate::memory::le_u64(b, o as u64)
}

pub(super) fn machine_name(m: u16) -> String {
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
pub(super) fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// One ELF note: its type, name and descriptor.
pub(super) struct Note<'a> {
    name: &'a [u8],
    kind: u32,
    desc: &'a [u8],
}

/// The notes in `b`, as far as they are well formed; a bad length ends the
/// list (and is reported through `torn`).
pub(super) fn notes<'a>(b: &'a [u8], torn: &mut bool) -> Vec<Note<'a>> {
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

pub(super) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Read `len` bytes at `off` of `f`, or fewer at its end.
pub(super) fn read_upto(f: &File, off: u64, len: usize) -> Vec<u8> {
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
pub(super) struct ProgramHeaders {
    bytes: Vec<u8>,
    num: usize,
    entsize: usize,
}

impl ProgramHeaders {
    /// The ELF header (a 64-bit little-endian x86-64 core, or a typed
    /// error saying what the file is instead) and the program headers.
    pub(super) fn read(path: &Path, file: &File, size: u64) -> Result<ProgramHeaders> {
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
    pub(super) fn notes(&self, path: &Path, file: &File, size: u64) -> Result<Vec<u8>> {
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
    pub(super) fn segments(&self, path: &Path, file: &File) -> Result<Vec<(Segment, u32)>> {
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
pub(super) struct CoreNotes<'a> {
    pub(super) threads: Vec<CoreThread>,
    pub(super) prpsinfo: Option<&'a [u8]>,
    pub(super) nt_file: Option<&'a [u8]>,
    pub(super) auxv: Vec<(u64, u64)>,
    /// The notes end in the middle of one.
    pub(super) torn: bool,
}

impl<'a> CoreNotes<'a> {
    /// The threads (`NT_PRSTATUS`, with their `NT_SIGINFO`), the process
    /// (`NT_PRPSINFO`), the auxiliary vector and the mapped files' table.
    pub(super) fn parse(path: &Path, note_bytes: &'a [u8]) -> Result<CoreNotes<'a>> {
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
                        // Checked against the code in `thread_state`.
                        restarting: crate::wait::restart_pending(reg(15), reg(10)),
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
pub(super) fn auxv_value(auxv: &[(u64, u64)], k: u64) -> Option<u64> {
    auxv.iter().find(|(t, _)| *t == k).map(|&(_, v)| v)
}

/// `NT_FILE`: the mapped files' names, and their mappings as (start, end,
/// file offset, name index).
#[allow(clippy::type_complexity)]
pub(super) fn mapped_files(
    path: &Path,
    d: &[u8],
) -> Result<(Vec<String>, Vec<(u64, u64, u64, usize)>)> {
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
pub(super) struct FileBacking {
    pub(super) files: Vec<MappedFile>,
    /// The main program as the target named it.
    pub(super) exe: String,
    pub(super) root: PathBuf,
}

impl FileBacking {
    /// Opens each mapped file under `--root` (or `--executable` for the main
    /// program, the file mapped at the entry point); an error if the main
    /// program is not found.
    pub(super) fn find(
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
pub(super) fn mappings(
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
}
