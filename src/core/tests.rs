//! The core room's unit tests, against cores built byte by byte.

use super::open::*;
use super::*;
use crate::error::{CoreProblem, Error};
use crate::memory::MemoryExt;
use object::elf;

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

    // Set up by the kernel to restart futex (rax back to 202, the ip on
    // the `syscall`, as a core written while a SIGSTOPped process came
    // back showed): asleep in it. The same registers with the ip after
    // the instruction (futex returned 202, however unlikely): unknown.
    let restart = |ip: u64| {
        let mut b = mini_core(elf::EM_X86_64, elf::ET_CORE);
        for (i, v) in [(15, 202), (10, 202), (16, ip)] {
            b = with_reg(b, i, v);
        }
        let load = b.len() - PAGE as usize;
        b[load + 0x100..load + 0x102].copy_from_slice(&[0x0f, 0x05]);
        open_bytes(&b).unwrap()
    };
    let c = restart(0x10100);
    assert_eq!(c.thread_state(4242), Some('S'));
    assert!(matches!(
        c.saved_call(4242),
        Some(SyscallLine::Blocked { nr: 202, .. })
    ));
    assert_eq!(restart(0x10102).thread_state(4242), None);
    // The other restart: a call with a timeout goes on through
    // restart_syscall (219); orig_rax still names the call.
    let mut b = mini_core(elf::EM_X86_64, elf::ET_CORE);
    for (i, v) in [(15, 230), (10, 219), (16, 0x10100)] {
        b = with_reg(b, i, v);
    }
    let load = b.len() - PAGE as usize;
    b[load + 0x100..load + 0x102].copy_from_slice(&[0x0f, 0x05]);
    let c = open_bytes(&b).unwrap();
    assert_eq!(c.thread_state(4242), Some('S'));
}

#[test]
fn a_thread_asleep_in_restart_syscall_is_named_by_the_call_it_resumes() {
    let blocked = |c: &CoreFile| match c.saved_call(4242) {
        Some(SyscallLine::Blocked { nr, .. }) => nr,
        other => panic!("{other:?}"),
    };
    // libc's wrapper: `mov $230, %eax; syscall`, the ip past it.
    let mut b = mini_core(elf::EM_X86_64, elf::ET_CORE);
    for (i, v) in [(15, 219), (16, 0x10107)] {
        b = with_reg(b, i, v);
    }
    let load = b.len() - PAGE as usize;
    b[load + 0x100..load + 0x107].copy_from_slice(&[0xb8, 0xe6, 0, 0, 0, 0x0f, 0x05]);
    assert_eq!(blocked(&open_bytes(&b).unwrap()), 230);
    // No such code: the arguments' shape, here a timed futex wait
    // (uaddr, FUTEX_WAIT_BITSET_PRIVATE, val, timeout).
    let mut b = mini_core(elf::EM_X86_64, elf::ET_CORE);
    for (i, v) in [(15, 219), (14, 0x10200), (13, 0x89), (12, 0), (7, 0x10300)] {
        b = with_reg(b, i, v);
    }
    assert_eq!(blocked(&open_bytes(&b).unwrap()), 202);
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
/// A core of `child` written by gdb's gcore (in a directory of its own,
/// returned to be kept while the core is read); then `child` is ended.
pub(super) fn gcore_then_end(child: &mut std::process::Child) -> (tempfile::TempDir, PathBuf) {
    let pid = child.id();
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
    (dir, path)
}

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
    let (_dir, path) = gcore_then_end(&mut child);
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
