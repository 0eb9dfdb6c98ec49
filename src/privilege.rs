//! Capability scope: what pyinspect may inspect when it runs with more
//! rights than its user has.
//!
//! A copy of pyinspect given `cap_sys_ptrace` as a file capability (the
//! README's advice for Yama's `ptrace_scope=1`) can read every process on the
//! machine, secrets of root's processes included (`--locals` shows them), to
//! anyone who can run it. So when the invoking user is not root and the
//! process runs with capabilities or a set-uid, only processes wholly of the
//! invoking user's real uid are inspected, unless `--allow-any-user` says
//! otherwise. The launched program (`record -- prog`) never inherits any of
//! it: the launcher drops every capability and set-uid before the exec.

use crate::error::{Error, Result};
use crate::procfs;
use std::sync::atomic::{AtomicBool, Ordering};

static ALLOW_ANY_USER: AtomicBool = AtomicBool::new(false);

/// `--allow-any-user`: lift the scope (the capability's owner decided so).
pub fn set_allow_any_user(allow: bool) {
    ALLOW_ANY_USER.store(allow, Ordering::SeqCst);
}

/// Whether this process has rights its real user has not: a non-root real
/// uid with effective capabilities, or a set-uid/set-gid.
pub(crate) fn elevated() -> bool {
    // SAFETY: plain id getters.
    let (ruid, euid, rgid, egid) = unsafe {
        (
            libc::getuid(),
            libc::geteuid(),
            libc::getgid(),
            libc::getegid(),
        )
    };
    if ruid == 0 {
        return false;
    }
    euid != ruid || egid != rgid || procfs::effective_caps(std::process::id() as i32) != Some(0)
}

/// Refuse a target that is not wholly the invoking user's, when
/// [`elevated`] and not `--allow-any-user`.
pub(crate) fn check_target(pid: i32) -> Result<()> {
    if ALLOW_ANY_USER.load(Ordering::SeqCst) || !elevated() {
        return Ok(());
    }
    // SAFETY: plain id getter.
    let uid = unsafe { libc::getuid() };
    let uids = procfs::uids(pid).ok_or_else(|| procfs::absent(pid))?;
    match uids.iter().find(|u| **u != uid) {
        None => Ok(()),
        Some(_) => Err(Error::OtherUser {
            pid,
            owner: uids[0],
            uid,
        }),
    }
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Give up every capability and set-uid/set-gid of the current process, for
/// good: called in the launcher's own process before it starts the program.
/// Only raw system calls (safe between fork and exec). A root invoking user
/// keeps root (the program would get it back at exec anyway).
pub(crate) fn drop_all() {
    // SAFETY: plain system calls with valid, owned arguments.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let (ruid, rgid) = (libc::getuid(), libc::getgid());
        if ruid == 0 {
            return;
        }
        let _ = libc::setresgid(rgid, rgid, rgid);
        let _ = libc::setresuid(ruid, ruid, ruid);
        let mut hdr = CapHeader {
            version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
            pid: 0,
        };
        let data = [CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr());
    }
}
