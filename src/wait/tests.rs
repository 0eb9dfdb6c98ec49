//! The wait room's unit tests, against texts and memory as the kernel and
//! a target showed them.

use super::fd::*;
use super::live::*;
use super::syscall::*;
use super::*;
use crate::memory::SliceMemory as Bytes;

#[test]
fn a_call_resumed_by_restart_syscall_is_named_as_the_call() {
    // As /proc showed them here after a stop: a timed Lock acquire, a
    // poll with a timeout, libc's nanosleep (clock_nanosleep on
    // CLOCK_REALTIME), a relative clock_nanosleep, a raw nanosleep.
    let futex = [0x558a28d4dd10, 0x89, 0, 0x7fff10, 0, 0xffffffff];
    assert_eq!(resumed_call(&futex, "futex_do_wait"), 202);
    let poll = [0x7fdf3ca60b70, 1, 0x36ee80, 0, 0, 0];
    assert_eq!(resumed_call(&poll, "poll_schedule_timeout.constprop.0"), 7);
    assert_eq!(resumed_call(&poll, "do_sys_poll"), 7);
    let realtime = [0, 0, 0x7fdf3c586b20, 0, 0, 0];
    assert_eq!(resumed_call(&realtime, "do_syscall_64"), 230);
    let monotonic = [1, 0, 0x7fdf3c586a20, 0, 0, 0];
    assert_eq!(resumed_call(&monotonic, "hrtimer_nanosleep_restart"), 230);
    let raw = [0x7ffd1000, 0x7ffd1010, 0, 0, 0, 0];
    assert_eq!(resumed_call(&raw, "do_nanosleep"), 35);
    // No wchan (a core records none): the arguments' shape alone.
    assert_eq!(resumed_call(&futex, ""), 202);
    assert_eq!(resumed_call(&poll, ""), 7);
    assert_eq!(resumed_call(&realtime, ""), 230);
    assert_eq!(resumed_call(&monotonic, ""), 230);
    assert_eq!(resumed_call(&raw, ""), 35);
    let raw_no_remain = [0x7ffd1000, 0, 0, 0, 0, 0];
    assert_eq!(resumed_call(&raw_no_remain, ""), 35);
}

#[test]
fn syscall_lines() {
    assert_eq!(parse_syscall("running\n"), Some(SyscallLine::Running));
    assert_eq!(
        parse_syscall("-1 0x7ffd5e0 0x7f01\n"),
        Some(SyscallLine::NotInSyscall)
    );
    let l = "45 0x3 0x7f2a1c000b70 0x400 0x0 0x0 0x0 0x7f2a2a7fd8f8 0x7f2a2bb2c7e2\n";
    assert_eq!(
        parse_syscall(l),
        Some(SyscallLine::Blocked {
            nr: 45,
            args: [3, 0x7f2a1c000b70, 0x400, 0, 0, 0]
        })
    );
    assert_eq!(parse_syscall("garbage"), None);
    assert_eq!(parse_syscall("45 0x3"), None);
    assert_eq!(syscall_name(202), Some("futex"));
    assert_eq!(syscall_name(9999), None);
}

// Recorded from a test run: a client connected to a loopback server, and the listener.
const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:A1B3 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 419514 1 0000000000000000 100 0 0 10 0
   1: 0100007F:9C5E 0100007F:A1B3 01 00000000:00000000 00:00000000 00000000     0        0 419516 1 0000000000000000 20 4 30 10 -1
";
const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 17781 1 0000000000000000 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:1F90 0000000000000000FFFF00000100007F:D1C2 01 00000000:00000000 00:00000000 00000000  1000        0 5555 1 0000000000000000 20 4 30 10 -1
";
const UNIX: &str = "Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 22466 /run/systemd/notify
0000000000000000: 00000003 00000000 00000000 0001 03 31337
0000000000000000: 00000002 00000000 00010000 0005 01 4242 @abstract
";

#[test]
fn inet_tables() {
    let t = parse_inet_table(TCP, true);
    assert_eq!(t.len(), 2);
    assert_eq!(t[0].local, "127.0.0.1:41395");
    assert_eq!(t[0].state, "LISTEN");
    assert_eq!(t[1].remote, "127.0.0.1:41395");
    assert_eq!(t[1].local, "127.0.0.1:40030");
    assert_eq!(t[1].state, "ESTABLISHED");
    assert_eq!(t[1].inode, 419516);
    let t6 = parse_inet_table(TCP6, true);
    assert_eq!(t6[0].local, "[::1]:22");
    assert_eq!(t6[1].local, "127.0.0.1:8080");
    assert_eq!(t6[1].remote, "127.0.0.1:53698");
    assert!(parse_inet_table("header\nnot a line\n", true).is_empty());
}

#[test]
fn unix_table() {
    let u = parse_unix_table(UNIX);
    assert_eq!(u.len(), 3);
    assert_eq!(u[0].path.as_deref(), Some("/run/systemd/notify"));
    assert_eq!(u[0].kind, "stream");
    assert_eq!(u[1].path, None);
    assert_eq!(u[1].inode, 31337);
    assert_eq!(u[2].kind, "seqpacket");
    assert_eq!(u[2].path.as_deref(), Some("@abstract"));
}

#[test]
fn epoll_fdinfo() {
    let text = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\n\
                    tfd:        5 events:       19 data:                5  pos:0 ino:3e8 sdev:d\n\
                    tfd:        7 events:        1 data:                7  pos:0 ino:3e9 sdev:d\n";
    assert_eq!(parse_epoll_fdinfo(text), (vec![5, 7], 0));
    assert_eq!(parse_epoll_fdinfo("pos: 0\n"), (vec![], 0));
    let many: String = (0..MAX_SET_FDS + 5)
        .map(|fd| format!("tfd: {fd:8} events: 19 data: {fd} pos:0 ino:3e8 sdev:d\n"))
        .collect();
    let (fds, more) = parse_epoll_fdinfo(&many);
    assert_eq!((fds.len(), more), (MAX_SET_FDS, 5));
}

#[test]
fn fds_described() {
    let tables = std::rc::Rc::new(SocketTables::from_texts(&[
        ("tcp", Some(TCP.to_string())),
        ("tcp6", Some(TCP6.to_string())),
        ("unix", Some(UNIX.to_string())),
    ]));
    let mut get = || Some(tables.clone());
    let d = describe_fd(3, Some("socket:[419516]"), &mut get);
    assert_eq!(d.kind, "tcp");
    assert_eq!(d.short(), "127.0.0.1:41395");
    assert_eq!(
        d.long(usize::MAX),
        "fd 3: TCP 127.0.0.1:40030 → 127.0.0.1:41395 (ESTABLISHED)"
    );
    let l = describe_fd(4, Some("socket:[419514]"), &mut get);
    assert_eq!(l.short(), "listen 127.0.0.1:41395");
    let u = describe_fd(5, Some("socket:[22466]"), &mut get);
    assert_eq!(u.kind, "unix");
    assert_eq!(u.short(), "/run/systemd/notify");
    let gone = describe_fd(6, Some("socket:[1]"), &mut get);
    assert_eq!(gone.kind, "socket");
    assert_eq!(describe_fd(7, Some("pipe:[99]"), &mut get).kind, "pipe");
    assert_eq!(
        describe_fd(8, Some("anon_inode:[eventfd]"), &mut get).kind,
        "eventfd"
    );
    assert_eq!(
        describe_fd(9, Some("anon_inode:[eventpoll]"), &mut get).kind,
        "epoll"
    );
    let f = describe_fd(10, Some("/data/x.bin"), &mut get);
    assert_eq!(f.short(), "/data/x.bin");
    assert_eq!(describe_fd(11, None, &mut get).kind, "closed");
}

#[test]
fn timeouts_and_sets_from_memory() {
    let mut m = Bytes::new();
    // timespec {3600, 0} at 0x1000; timeval {1, 500000} at 0x2000.
    let mut ts = Vec::new();
    ts.extend_from_slice(&3600u64.to_le_bytes());
    ts.extend_from_slice(&0u64.to_le_bytes());
    m.add(0x1000, ts);
    let mut tv = Vec::new();
    tv.extend_from_slice(&1u64.to_le_bytes());
    tv.extend_from_slice(&500_000u64.to_le_bytes());
    m.add(0x2000, tv);
    // fd_set with fds 3 and 9.
    let mut set = vec![0u8; 128];
    set[0] = 1 << 3;
    set[1] = 1 << 1;
    m.add(0x3000, set);
    // pollfd array: fd 4, fd -1, fd 6.
    let mut p = Vec::new();
    for fd in [4i32, -1, 6] {
        p.extend_from_slice(&fd.to_le_bytes());
        p.extend_from_slice(&[1, 0, 0, 0]);
    }
    m.add(0x4000, p);
    m.add(0x5000, b"/tmp/some fifo\0".to_vec());

    let c = decode_call(35, &[0x1000, 0, 0, 0, 0, 0], &m, true);
    assert_eq!(c.name, "nanosleep");
    assert_eq!(c.timeout, Some(Timeout::Relative { seconds: 3600.0 }));
    let c = decode_call(230, &[1, 0, 0x1000, 0, 0, 0], &m, true);
    assert_eq!(c.timeout, Some(Timeout::Relative { seconds: 3600.0 }));
    // An absolute deadline far in the past of CLOCK_MONOTONIC's epoch? No:
    // 3600 s after boot is a time; the answer is only checked to be a deadline.
    let c = decode_call(230, &[1, 1, 0x1000, 0, 0, 0], &m, true);
    assert!(matches!(c.timeout, Some(Timeout::Deadline { .. })));
    let c = decode_call(23, &[10, 0x3000, 0, 0, 0x2000, 0], &m, true);
    assert_eq!(c.set, vec![3, 9]);
    assert_eq!(c.timeout, Some(Timeout::Relative { seconds: 1.5 }));
    let c = decode_call(23, &[10, 0x3000, 0, 0, 0, 0], &m, true);
    assert_eq!(c.timeout, Some(Timeout::None));
    let c = decode_call(7, &[0x4000, 3, u32::MAX as u64, 0, 0, 0], &m, true);
    assert_eq!(c.set, vec![4, 6]);
    assert_eq!(c.timeout, Some(Timeout::None));
    let c = decode_call(232, &[5, 0, 1, 250, 0, 0], &m, true);
    assert_eq!(c.fd, Some(5));
    assert_eq!(c.timeout, Some(Timeout::Relative { seconds: 0.25 }));
    let c = decode_call(257, &[u32::MAX as u64 - 99, 0x5000, 0, 0, 0, 0], &m, true);
    assert_eq!(c.path.as_deref(), Some("/tmp/some fifo"));
    let c = decode_call(61, &[1234, 0, 0, 0, 0, 0], &m, true);
    assert_eq!(c.child, Some(1234));
    let c = decode_call(61, &[u32::MAX as u64, 0, 0, 0, 0, 0], &m, true);
    assert_eq!(c.child, Some(-1));
    let c = decode_call(202, &[0xdead0, 0x189, 0, 0, 0, 0], &m, false);
    assert_eq!(c.futex, Some(0xdead0));
    // Unreadable pointers give no answer, never an error.
    let c = decode_call(35, &[0x9999000, 0, 0, 0, 0, 0], &m, true);
    assert_eq!(c.timeout, None);
    let c = decode_call(23, &[u64::MAX, 0x9999000, 0, 0, 0, 0], &m, true);
    assert!(c.set.is_empty());
    assert_eq!(decode_call(1000, &[0; 6], &m, true).name, "syscall_1000");
}

#[test]
fn calls_from_saved_registers() {
    let args = [3, 0x7f00_0000_1000, 16, 0, 0, 0];
    assert_eq!(
        call_from_registers(45, args),
        SyscallLine::Blocked { nr: 45, args }
    );
    // In no call (orig_rax -1): running code, or a fault.
    assert_eq!(
        call_from_registers(u64::MAX, args),
        SyscallLine::NotInSyscall
    );
    // Asleep when the stop came: each restart code, EINTR (epoll_wait
    // after a stop), and a timed wait that ran out while stopped.
    for ret in [-4i64, -110, -512, -513, -514, -516] {
        assert!(asleep_in_call(ret as u64), "{ret}");
    }
    // A call that had returned (3 bytes read; -EAGAIN; woken, 0).
    for ret in [3i64, -11, 0, -515, -517] {
        assert!(!asleep_in_call(ret as u64), "{ret}");
    }
}

#[test]
fn a_recorded_call_is_decoded_as_a_live_one_without_proc() {
    let mut m = Bytes::new();
    // An absolute CLOCK_MONOTONIC deadline an hour from now.
    let mut ts = vec![0u8; 16];
    let now = clock_now(libc::CLOCK_MONOTONIC).unwrap();
    ts[..8].copy_from_slice(&((now as u64) + 3600).to_le_bytes());
    m.add(0x1000, ts);
    // A pid no process has: nothing of /proc may be read for a core.
    let mut core = WaitReader::recorded(i32::MAX, WaitDetail::Full, 100.0);
    let mut live = WaitReader::new(i32::MAX, WaitDetail::Full);
    let sleep = Some(SyscallLine::Blocked {
        nr: 230,
        args: [1, 1, 0x1000, 0, 0, 0],
    });
    let (cw, _) = core.read(7, 'S', sleep, &m);
    let (lw, _) = live.read(7, 'S', sleep, &m);
    assert_eq!(cw.syscall.as_deref(), Some("clock_nanosleep"));
    assert_eq!(cw.syscall, lw.syscall);
    // Counted from when the core was written, 100 s ago.
    match (cw.timeout, lw.timeout) {
        (
            Some(Timeout::Deadline { seconds_left: c }),
            Some(Timeout::Deadline { seconds_left: l }),
        ) => assert!((c - l - 100.0).abs() < 1.0, "{c} {l}"),
        t => panic!("{t:?}"),
    }
    let recv = Some(SyscallLine::Blocked {
        nr: 45,
        args: [3, 0x2000, 16, 0, 0, 0],
    });
    let (w, call) = core.read(8, 'S', recv, &m);
    assert_eq!(call.unwrap().fd, Some(3));
    let fd = w.fd.clone().unwrap();
    assert_eq!((fd.fd, fd.kind.as_str(), fd.target), (3, UNRECORDED, None));
    assert_eq!(w.long(), "recvfrom(fd 3: not recorded in a core)");
    assert_eq!(w.short(), "recv fd 3");
    // A futex: the address, for the caller's GIL and lock checks.
    let futex = Some(SyscallLine::Blocked {
        nr: 202,
        args: [0x5000, 0x80, 0, 0, 0, 0],
    });
    let (w, call) = core.read(9, 'S', futex, &m);
    assert_eq!(call.unwrap().futex, Some(0x5000));
    assert_eq!(w.long(), "futex(0x5000, no timeout)");
    // A set of fds: each named by number.
    let mut set = vec![0u8; 8];
    set[0] = 1 << 4;
    m.add(0x3000, set);
    let select = Some(SyscallLine::Blocked {
        nr: 23,
        args: [5, 0x3000, 0, 0, 0, 0],
    });
    let (w, _) = core.read(10, 'S', select, &m);
    assert_eq!(
        w.long(),
        "select({fd 4: not recorded in a core}, no timeout)"
    );
    // Whatever a corrupt core's registers say: every call number with
    // wild pointers and counts decodes, bounded, without a panic.
    for nr in -1..=460 {
        for args in [[u64::MAX; 6], [0x1000, u64::MAX, 0x3000, 0x3000, 0x1000, 1]] {
            let (w, _) = core.read(11, 'S', Some(SyscallLine::Blocked { nr, args }), &m);
            assert!(w.fds.len() <= MAX_SET_FDS);
        }
    }
}

#[test]
fn kernel_state_texts() {
    assert_eq!(parse_wchan("0"), None);
    assert_eq!(
        parse_wchan("nfs_wait_bit_killable"),
        Some("nfs_wait_bit_killable".into())
    );
    let stack = "[<0>] nfs_wait_bit_killable+0x1c/0x90 [nfs]\n[<0>] __wait_on_bit+0x7a/0xa0\n[<0>] do_syscall_64+0x5b/0x1b0\n";
    assert_eq!(
        parse_kernel_stack(stack),
        vec!["nfs_wait_bit_killable", "__wait_on_bit", "do_syscall_64"]
    );
    // A posix_spawn parent whose vfork child blocks opening a FIFO, as
    // recorded here: state D, wchan kernel_clone, in clone3.
    let line =
        parse_syscall("435 0x7ffd0a1b2c30 0x58 0x0 0x0 0x0 0x0 0x7f632c8c4e08 0x7f632cd2b6ab");
    let Some(SyscallLine::Blocked { nr, .. }) = line else {
        panic!("{line:?}")
    };
    let w = Wait {
        state: "D".into(),
        syscall: syscall_name(nr).map(str::to_string),
        syscall_nr: Some(nr),
        wchan: parse_wchan("kernel_clone"),
        kernel_stack: parse_kernel_stack(
            "[<0>] wait_for_vfork_done+0x2a/0x40\n[<0>] kernel_clone+0x1ba/0x3f0\n",
        ),
        ..Default::default()
    };
    assert_eq!(w.short(), "D: kernel_clone");
    assert_eq!(w.long(), "clone3(), uninterruptible in kernel_clone");
    let s = summary(&[(1, None, &w), (2, None, &w)]);
    assert_eq!(s, vec!["2 threads in D state (kernel_clone)"]);
}

#[test]
fn short_and_long_forms() {
    let gil = Wait {
        state: "S".into(),
        syscall: Some("futex".into()),
        futex: Some("0x7f00".into()),
        gil: Some(GilWait {
            holder: Some(42),
            holder_name: Some("MainThread".into()),
        }),
        ..Default::default()
    };
    assert_eq!(gil.short(), "GIL wait");
    assert_eq!(
        gil.long(),
        "futex(0x7f00) waiting for the GIL (held by thread 42 \"MainThread\")"
    );
    let s = summary(&[(1, None, &gil), (2, None, &gil)]);
    assert_eq!(
        s,
        vec!["2 threads wait for the GIL held by 42 'MainThread'"]
    );
    let sleep = Wait {
        state: "S".into(),
        syscall: Some("clock_nanosleep".into()),
        timeout: Some(Timeout::Relative { seconds: 3600.0 }),
        ..Default::default()
    };
    assert_eq!(sleep.short(), "sleep");
    assert_eq!(sleep.long(), "clock_nanosleep(timeout 3600s)");
    let running = Wait {
        state: "R".into(),
        ..Default::default()
    };
    assert_eq!(running.short(), "");
    assert!(!running.off_cpu());
    let wait = Wait {
        state: "S".into(),
        syscall: Some("wait4".into()),
        child: Some(77),
        ..Default::default()
    };
    assert_eq!(wait.short(), "wait4 77");
    assert_eq!(wait.long(), "wait4(child 77)");
}

fn tcp(fd: i32, local: &str, remote: &str, state: &str) -> FdDesc {
    FdDesc {
        fd,
        kind: "tcp".into(),
        target: Some(format!("socket:[{}]", 1000 + fd)),
        local: Some(local.into()),
        remote: Some(remote.into()),
        state: Some(state.into()),
        ..Default::default()
    }
}

#[test]
fn a_large_set_is_summarised_in_the_header_and_kept_whole() {
    let mut fds = vec![tcp(5, "127.0.0.1:8080", "0.0.0.0:0", "LISTEN")];
    for i in 0..30 {
        let port = 51000 + i;
        fds.push(tcp(
            6 + i,
            "127.0.0.1:8080",
            &format!("127.0.0.1:{port}"),
            "ESTABLISHED",
        ));
    }
    for fd in [40, 41] {
        fds.push(FdDesc {
            fd,
            kind: "pipe".into(),
            target: Some("pipe:[77]".into()),
            peers: (0..16)
                .map(|p| format!("pid {p} \"worker\" fd 9 (write end)"))
                .collect(),
            ..Default::default()
        });
    }
    let epoll = FdDesc {
        fd: 4,
        kind: "epoll".into(),
        target: Some("anon_inode:[eventpoll]".into()),
        watches: fds.iter().map(|d| d.fd).collect(),
        ..Default::default()
    };
    let w = Wait {
        state: "S".into(),
        syscall: Some("epoll_wait".into()),
        fd: Some(epoll),
        fds: fds.clone(),
        timeout: Some(Timeout::None),
        ..Default::default()
    };
    let text = w.long_within(200);
    assert_eq!(
        text,
        "epoll_wait(fd 4: epoll watching 33 fds {1 listening TCP 127.0.0.1:8080; \
             30 TCP to 127.0.0.1:51000, 127.0.0.1:51001, 127.0.0.1:51002 and 27 more; \
             2 pipes}, no timeout)"
    );
    // Less room: fewer examples, never more than the room.
    for room in [0, 60, 80, 100, 120, 200, 400] {
        let t = w.long_within(room);
        assert!(t.chars().count() <= room.max(WAIT_TEXT_MIN), "{room}: {t}");
        assert!(
            t.starts_with("epoll_wait(fd 4: epoll watching 33 fds"),
            "{t}"
        );
    }
    // JSON lists every fd.
    let json = serde_json::to_value(&w).unwrap();
    assert_eq!(json["fds"].as_array().unwrap().len(), 33);
    // A select set: the count first; past the bound, what was not listed.
    let select = Wait {
        state: "S".into(),
        syscall: Some("select".into()),
        fds,
        fds_unlisted: 7,
        timeout: Some(Timeout::Relative { seconds: 5.0 }),
        ..Default::default()
    };
    assert_eq!(
        select.long_within(200),
        "select({40 fds: 1 listening TCP 127.0.0.1:8080; 30 TCP to 127.0.0.1:51000, \
             127.0.0.1:51001, 127.0.0.1:51002 and 27 more; 2 pipes; 7 not listed}, timeout 5s)"
    );
    // A few fds fit whole, peers bounded.
    let few = Wait {
        state: "S".into(),
        syscall: Some("poll".into()),
        fds: select.fds[31..].to_vec(),
        ..Default::default()
    };
    assert_eq!(
        few.long_within(400),
        "poll({fd 40: pipe:[77] (other end: pid 0 \"worker\" fd 9 (write end), \
             pid 1 \"worker\" fd 9 (write end) and 14 more); fd 41: pipe:[77] (other end: \
             pid 0 \"worker\" fd 9 (write end), pid 1 \"worker\" fd 9 (write end) and 14 more)})"
    );
    assert_eq!(few.long_within(120), "poll({2 fds: 2 pipes})");
    assert!(few.long_within(120).chars().count() <= 120);
    // Many peers of one address: counted, not repeated.
    let same: Vec<FdDesc> = (0..40)
        .map(|i| {
            tcp(
                10 + i,
                &format!("127.0.0.1:{}", 40000 + i),
                "10.0.0.1:5432",
                "ESTABLISHED",
            )
        })
        .collect();
    let db = Wait {
        state: "S".into(),
        syscall: Some("poll".into()),
        fds: same,
        ..Default::default()
    };
    assert_eq!(
        db.long_within(200),
        "poll({40 fds: 40 TCP to 10.0.0.1:5432})"
    );
    // A core's fds: named by number.
    let core = Wait {
        syscall: Some("select".into()),
        fds: (3..43)
            .map(|fd| FdDesc {
                fd,
                kind: UNRECORDED.into(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    assert_eq!(
        core.long_within(200),
        "select({40 fds: 40 not recorded in a core: fds 3, 4, 5 and 37 more})"
    );
    // A long path is clipped in the middle.
    let long_path = format!("/data/{}/x.bin", "d".repeat(4000));
    let open = Wait {
        state: "D".into(),
        syscall: Some("openat".into()),
        path: Some(long_path),
        wchan: Some("nfs_wait".into()),
        ..Default::default()
    };
    let t = open.long_within(150);
    assert!(
        t.chars().count() <= 150 && t.contains("…") && t.ends_with("nfs_wait"),
        "{t}"
    );
}

/// A thread of this process first blocked in one call, then in another.
/// A probe whose CPU counts are those read before the text kept takes the
/// kept call and state without reading the file (the thread cannot have
/// moved); other counts read the file, and find the new call.
#[test]
fn unchanged_cpu_counts_keep_the_call_without_a_read() {
    use std::sync::mpsc;
    let (tid_tx, tid_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        // SAFETY: gettid takes no arguments.
        tid_tx.send(unsafe { libc::gettid() }).unwrap();
        go_rx.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(600));
    });
    let tid = tid_rx.recv().unwrap();
    let pid = std::process::id() as i32;
    let mut r = WaitReader::new(pid, WaitDetail::Short);
    let call_nr = |r: &mut WaitReader| match r.syscall(tid) {
        Some(SyscallLine::Blocked { nr, .. }) => nr,
        l => panic!("{l:?}"),
    };
    // One instant for every probe: the kept state stays within its time
    // to live, however slow the machine.
    let t0 = std::time::Instant::now();
    let now = || t0;
    // Blocked in recv's futex (polled until the thread is off its CPU).
    let mut tries = 0;
    loop {
        if r.probe(tid, now(), Some((1, 1))) != CallProbe::Running {
            r.set_state(tid, 'S', now());
            if call_nr(&mut r) == 202 {
                break;
            }
        }
        tries += 1;
        assert!(tries < 1000, "never seen in its futex");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert!(r.wants_counts(tid));
    assert_eq!(r.probe(tid, now(), Some((1, 1))), CallProbe::Same('S'));
    assert_eq!(r.quiet_counts(tid), Some((1, 1)));
    // Now asleep in clock_nanosleep.
    go_tx.send(()).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    // The same counts: the file is not read, the futex is kept.
    assert_eq!(r.probe(tid, now(), Some((1, 1))), CallProbe::Same('S'));
    assert_eq!(call_nr(&mut r), 202);
    // Other counts: the file is read, and says the new call.
    assert_eq!(r.probe(tid, now(), Some((2, 2))), CallProbe::Read);
    assert_eq!(call_nr(&mut r), 230);
    assert_eq!(r.quiet_counts(tid), Some((2, 2)));
    // No counts (a caller that could not read them): the file is read.
    assert_eq!(r.probe(tid, now(), None), CallProbe::Read);
    assert_eq!(r.quiet_counts(tid), None);
    t.join().unwrap();
}
