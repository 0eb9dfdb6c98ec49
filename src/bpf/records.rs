//! The program's side of the engine, as user space sees it: the layout it
//! walks with (`struct layout`), the records it writes to the ring buffer
//! (`struct sample`, and with `--native` `struct native`), and their flags
//! and kinds. Each number here is the
//! one of the same name in `bpf/pyinspect.bpf.c`.

use crate::memory::{le_u32, le_u64};
use crate::python::reader::bpf::WalkOffsets;

/// Frames a sample holds at most (the program's MAX_FRAMES).
pub(super) const MAX_FRAMES: usize = 128;

// The program's sample flags.
pub(super) const F_TRUNCATED: u32 = 1;
pub(super) const F_READ_ERROR: u32 = 2;
pub(super) const F_NO_TSTATE: u32 = 4;

// The program's record kinds.
pub(super) const K_SAMPLE: u32 = 0;
pub(super) const K_OFF: u32 = 1;
pub(super) const K_ON: u32 = 2;
pub(super) const K_NATIVE: u32 = 3;

/// Where a record's kind is, in both kinds of record.
const KIND_AT: usize = 24;

/// User stack bytes the program copies at most (its STACK_MAX).
pub(super) const STACK_MAX: u32 = 64 << 10;
/// In a native record's frame addresses: an entry frame (its A_ENTRY).
const A_ENTRY: u64 = 1;
/// Bytes of `struct native` before its stack bytes.
const NATIVE_HEADER: usize = 72 + 2 * 8 * MAX_FRAMES;

/// Bytes before a record's frames (`struct sample` up to `frames`).
pub(super) const HEADER: usize = 88;
/// Frame-chain steps the program takes at most (its MAX_STEPS).
pub(super) const MAX_STEPS: usize = 160;

/// The program's `struct layout`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct LayoutC {
    tstate_frame: u32,
    via_cframe: u32,
    cframe_current: u32,
    frame_previous: u32,
    frame_code: u32,
    frame_pos: u32,
    owner: u32,
    shim_from: u32,
    pub(super) switches: u32,
    block_from: u32,
    block_len: u32,
    entry: u32,
    cframe_previous: u32,
    /// With --native: user stack bytes to copy at a sample.
    pub(super) stack_bytes: u32,
    /// With --mode gil: only the GIL holder is sampled, told by the
    /// holder's pointer and the GIL's `locked` flag at these addresses.
    pub(super) gil_only: u32,
    /// With --async: a native record with the frames' addresses alone.
    pub(super) frame_addrs: u32,
    pub(super) gil_holder: u64,
    pub(super) gil_locked: u64,
}

// SAFETY: plain integer fields, no padding (16 u32s, then the u64s).
unsafe impl aya::Pod for LayoutC {}

/// Bytes of a frame the program reads at once at most (its BLOCK_MAX).
const BLOCK_MAX: u32 = 128;

impl From<WalkOffsets> for LayoutC {
    fn from(w: WalkOffsets) -> LayoutC {
        // The frame's fields in one read, when they lie within BLOCK_MAX
        // bytes of each other (a read each else).
        let words = [w.frame_code, w.frame_pos, w.frame_previous];
        let bytes = w.owner.map(|(o, _)| o).into_iter().chain(w.entry);
        let from = words.iter().copied().chain(bytes.clone()).min();
        let end = words
            .iter()
            .map(|o| o + 8)
            .chain(bytes.map(|o| o + 1))
            .max();
        let (block_from, block_len) = match (from, end) {
            (Some(a), Some(b)) if b - a <= BLOCK_MAX => (a, b - a),
            _ => (0, 0),
        };
        LayoutC {
            tstate_frame: w.tstate_frame,
            via_cframe: u32::from(w.via_cframe),
            cframe_current: w.cframe_current,
            frame_previous: w.frame_previous,
            frame_code: w.frame_code,
            frame_pos: w.frame_pos,
            owner: w.owner.map_or(u32::MAX, |(o, _)| o),
            shim_from: w.owner.map_or(u32::MAX, |(_, s)| u32::from(s)),
            switches: 0,
            block_from,
            block_len,
            entry: w.entry.unwrap_or(u32::MAX),
            cframe_previous: w.cframe_previous,
            stack_bytes: 0,
            gil_only: 0,
            frame_addrs: 0,
            gil_holder: 0,
            gil_locked: 0,
        }
    }
}

/// The kind of a record of the program's, before it is parsed.
pub(super) fn kind_of(b: &[u8]) -> Option<u32> {
    (b.len() >= KIND_AT + 4).then(|| le_u32(b, KIND_AT as u64))
}

/// A native record (`struct native`): the registers and stack bytes of the
/// sample of the same thread and time after it, and where its frames were.
pub(super) struct RawNative {
    pub(super) tid: u32,
    pub(super) time: u64,
    /// ip, sp, bp.
    pub(super) regs: (u64, u64, u64),
    /// The address of `stack[0]`.
    pub(super) base: u64,
    /// 3.11/3.12: the thread state's innermost `_PyCFrame` (on the C
    /// stack, chained by `previous`), 0 otherwise.
    pub(super) cframe: u64,
    pub(super) stack: Vec<u8>,
    /// Per Python frame kept, innermost first: its address, whether it is
    /// the first its eval-loop call ran, the shim frame after it (0: none).
    pub(super) frames: Vec<(u64, bool, u64)>,
}

impl RawNative {
    pub(super) fn parse(b: &[u8]) -> Option<RawNative> {
        if b.len() < NATIVE_HEADER {
            return None;
        }
        let u32_at = |o: usize| le_u32(b, o as u64);
        let u64_at = |o: usize| le_u64(b, o as u64);
        let n = (u32_at(16) as usize).min(MAX_FRAMES);
        let len = (u32_at(20) as usize)
            .min(STACK_MAX as usize)
            .min(b.len() - NATIVE_HEADER);
        Some(RawNative {
            tid: u32_at(4),
            time: u64_at(8),
            regs: (u64_at(32), u64_at(40), u64_at(48)),
            base: u64_at(56),
            cframe: u64_at(64),
            stack: b[NATIVE_HEADER..NATIVE_HEADER + len].to_vec(),
            frames: (0..n)
                .map(|i| {
                    let a = u64_at(72 + 8 * i);
                    let shim = u64_at(72 + 8 * MAX_FRAMES + 8 * i);
                    (a & !A_ENTRY, a & A_ENTRY != 0, shim)
                })
                .collect(),
        })
    }
}

/// One record of the program's, copied out of the ring buffer.
pub(super) struct RawRecord {
    pub(super) kind: u32,
    pub(super) tgid: u32,
    pub(super) tid: u32,
    pub(super) time: u64,
    pub(super) flags: u32,
    pub(super) state: u32,
    pub(super) call: u64,
    pub(super) args: [u64; 6],
    pub(super) frames: Vec<(u64, u64)>,
}

impl RawRecord {
    pub(super) fn parse(b: &[u8]) -> Option<RawRecord> {
        if b.len() < HEADER {
            return None;
        }
        let u32_at = |o: usize| le_u32(b, o as u64);
        let u64_at = |o: usize| le_u64(b, o as u64);
        let n = (u32_at(16) as usize)
            .min(MAX_FRAMES)
            .min((b.len() - HEADER) / 16);
        Some(RawRecord {
            tgid: u32_at(0),
            tid: u32_at(4),
            time: u64_at(8),
            flags: u32_at(20),
            kind: u32_at(24),
            state: u32_at(28),
            call: u64_at(32),
            args: std::array::from_fn(|i| u64_at(40 + 8 * i)),
            frames: (0..n)
                .map(|i| (u64_at(HEADER + 16 * i), u64_at(HEADER + 8 + 16 * i)))
                .collect(),
        })
    }
}

/// Whether a kernel release string (`6.1.0-18-amd64`) is at least `want`.
pub(super) fn kernel_at_least(release: &str, want: (u32, u32)) -> bool {
    let mut it = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = it.next().and_then(|v| v.parse::<u32>().ok());
    let minor = it.next().and_then(|v| v.parse::<u32>().ok());
    match (major, minor) {
        (Some(a), Some(b)) => (a, b) >= want,
        // Unreadable: let the kernel's own checks decide.
        _ => true,
    }
}

/// The scheduler state a thread left its CPU in, as /proc writes it:
/// `prev_state` of sched_switch (0 when it was preempted, runnable).
pub(super) fn state_char(state: u32) -> char {
    if state & 2 != 0 {
        'D'
    } else if state & 1 != 0 {
        'S'
    } else if state & 4 != 0 {
        'T'
    } else if state & 8 != 0 {
        't'
    } else if state == 0 {
        'R'
    } else {
        'S'
    }
}

#[cfg(test)]
mod tests {
    use super::{
        kernel_at_least, kind_of, state_char, RawNative, RawRecord, HEADER, K_NATIVE, NATIVE_HEADER,
    };

    #[test]
    fn kernel_releases() {
        assert!(kernel_at_least("6.18.44-fc-v1300", (5, 18)));
        assert!(kernel_at_least("5.18.0", (5, 18)));
        assert!(!kernel_at_least("5.15.0-91-generic", (5, 18)));
        assert!(!kernel_at_least("4.19.0-26-amd64\n", (5, 18)));
        assert!(kernel_at_least("", (5, 18)));
    }

    #[test]
    fn switch_states() {
        assert_eq!(state_char(0), 'R');
        assert_eq!(state_char(1), 'S');
        assert_eq!(state_char(2), 'D');
        assert_eq!(state_char(2 | 0x400), 'D');
        assert_eq!(state_char(4), 'T');
        assert_eq!(state_char(8), 't');
    }

    #[test]
    fn records_are_bounded_by_their_bytes() {
        let mut b = vec![0u8; HEADER + 16];
        b[4..8].copy_from_slice(&7u32.to_le_bytes());
        // It claims 1000 frames; one is there.
        b[16..20].copy_from_slice(&1000u32.to_le_bytes());
        b[24..28].copy_from_slice(&1u32.to_le_bytes());
        b[HEADER..HEADER + 8].copy_from_slice(&0xabcu64.to_le_bytes());
        let r = RawRecord::parse(&b).unwrap();
        assert_eq!((r.tid, r.kind, r.frames.len()), (7, 1, 1));
        assert_eq!(r.frames[0].0, 0xabc);
        assert!(RawRecord::parse(&b[..HEADER - 1]).is_none());
    }

    #[test]
    fn native_records_are_bounded_by_their_bytes() {
        let mut b = vec![0u8; NATIVE_HEADER + 16];
        b[4..8].copy_from_slice(&9u32.to_le_bytes());
        // 1000 frames and 60000 stack bytes claimed; 16 bytes there.
        b[16..20].copy_from_slice(&1000u32.to_le_bytes());
        b[20..24].copy_from_slice(&60000u32.to_le_bytes());
        b[24..28].copy_from_slice(&K_NATIVE.to_le_bytes());
        b[64..72].copy_from_slice(&0x6000u64.to_le_bytes());
        b[72..80].copy_from_slice(&0x7000_0001u64.to_le_bytes());
        b[72 + 8 * 128..80 + 8 * 128].copy_from_slice(&0x5000u64.to_le_bytes());
        assert_eq!(kind_of(&b), Some(K_NATIVE));
        let r = RawNative::parse(&b).unwrap();
        assert_eq!((r.tid, r.frames.len(), r.stack.len()), (9, 128, 16));
        assert_eq!(r.frames[0], (0x7000_0000, true, 0x5000));
        assert_eq!(r.cframe, 0x6000);
        assert!(RawNative::parse(&b[..NATIVE_HEADER - 1]).is_none());
        assert_eq!(kind_of(&b[..20]), None);
    }
}
