//! The whole reader over arbitrary memory: every step bounded, never a panic.

use super::loops::MAX_LOOPS;
use super::objects::{deque_items, py_attr};
use super::registry::weakset_members;
use super::state::*;
use crate::memory::SliceMemory;
use crate::python::objects::ObjReader;
use crate::python::pagecache::PageCache;
use crate::python::process::{GilSource, PythonProcess, Version};
use crate::python::reader::{Reader, ThreadSnapshot};
use crate::stack::{Frame, ThreadStack, ThreadStatus};
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};
use std::time::Instant;

const BASE: u64 = 0x10_0000;

fn reader_for(major: u8, minor: u8) -> Option<Reader> {
    let layout = crate::cpython_layouts::for_version(major, minor)?;
    Some(Reader::new(PythonProcess {
        pid: std::process::id() as i32,
        exe: "python".into(),
        cmdline: String::new(),
        version: Version {
            major,
            minor,
            patch: Some(0),
            suffix: String::new(),
        },
        layout: layout.clone(),
        interp_head_ptr: BASE,
        gil: GilSource::Unknown,
        gil_sync: crate::python::process::GilSyncSource::Unknown,
        warnings: Vec::new(),
        obmalloc_statics: None,
        tracemalloc_globals: None,
    }))
}

fn snapshot(tstate: u64, interp: u64, frames: Vec<u64>) -> ThreadSnapshot {
    ThreadSnapshot {
        stack: ThreadStack {
            thread_id: 1,
            os_thread_id: None,
            name: None,
            interpreter: 0,
            status: ThreadStatus::Idle,
            holds_gil: false,
            frames: frames
                .into_iter()
                .map(|addr| {
                    let mut f = Frame::python("f", "f.py", 1);
                    f.mark = Some(crate::stack::FrameMark {
                        addr,
                        is_entry: false,
                        instr: 0,
                    });
                    f
                })
                .collect(),
            truncated: None,
            native_entry: None,
            name_source: None,
            wait: None,
            asyncio: None,
        },
        anchors: Vec::new(),
        in_gc: false,
        gil_sync: Vec::new(),
        local_refs: Vec::new(),
        tstate,
        interp,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    /// A corrupt or racing target: arbitrary words where tasks, futures,
    /// coroutines, frames, deques and types should be. Every table must
    /// come back with fewer tasks or frames, never a panic or a hang.
    #[test]
    fn arbitrary_memory_never_panics(words in proptest::collection::vec(any::<u64>(), 1024), seed in any::<u64>()) {
        let bytes: Vec<u8> = words
            .iter()
            .flat_map(|w| {
                let v = match (w ^ seed) % 5 {
                    0 | 3 => BASE + ((w % 8192) & !7),
                    1 => u64::MAX - (w % 512),
                    _ => *w,
                };
                v.to_le_bytes()
            })
            .collect();
        let mut mem = SliceMemory::new();
        mem.add(BASE, bytes);
        for l in crate::cpython_layouts::asyncio::ALL {
            let Some(mut reader) = reader_for(l.major, l.minor) else { continue };
            let mut r = AsyncioReader::new(l.major, l.minor);
            // As if AsyncioDebug had been found, so that the lists are walked too.
            r.lists = Some(Lists {
                ts_running_loop: 8,
                ts_running_task: 16,
                ts_tasks_head: 24,
                interp_tasks_head: 32,
            });
            let snaps = vec![snapshot(BASE + 64, BASE + 128, vec![BASE + 256])];
            let want = AsyncRead { limit: 50, max_tasks: 500, running_only: false };
            let _ = r.read(&mut reader, &PageCache::new(&mem), &snaps, want, &Vec::new);
            let pl = reader.process.layout.clone();
            let objr = ObjReader::new(&mem, &pl);
            let addrs: Vec<u64> = (0..64).map(|i| BASE + i * 72).collect();
            let tasks = r.read_tasks(&objr, l, &addrs);
            let index: HashMap<u64, usize> = tasks.iter().enumerate().map(|(k, t)| (t.addr, k)).collect();
            let _ = r.parents(&objr, l, &tasks, &index);
            // Tasks naming every word as their loop: its queues read from garbage.
            let naming: Vec<RawTask> = addrs
                .iter()
                .map(|&a| RawTask {
                    addr: a + 8,
                    loop_: a,
                    state: 0,
                    log_tb: false,
                    cancelling: false,
                    name: 0,
                    coro: 0,
                    waiter: 0,
                    callbacks: Vec::new(),
                    awaited_by: None,
                    via: None,
                })
                .collect();
            let mut scans = HashMap::new();
            let found = r.queued_tasks(&objr, l, &naming, &HashMap::new(), &mut scans, 100);
            prop_assert!(found.len() <= 100 && scans.len() <= MAX_LOOPS);
            let running = HashSet::new();
            let ks: Vec<usize> = (0..tasks.len()).collect();
            let parents = vec![Vec::new(); tasks.len()];
            let mut sleeps = HashMap::new();
            let _ = r.thread_tasks(&mut reader, &objr, l, &tasks, &ks, &parents, &running, &snaps[0], &mut sleeps, 64, false, Vec::new());
            // An earlier sample's tasks over corrupt memory: read again, bounded.
            r.sample_cache = Some(SampleCache {
                at: Instant::now(),
                interp: BASE + 128,
                tasks: tasks.clone(),
                parents: (0..tasks.len()).map(|k| vec![(k + 1) % tasks.len()]).collect(),
                index: tasks.iter().enumerate().map(|(k, t)| (t.addr, k)).collect(),
                frames: tasks.iter().enumerate().map(|(k, t)| (t.coro, k)).collect(),
            });
            let running: HashMap<u64, u64> = tasks.first().map(|t| (t.loop_, t.addr)).into_iter().collect();
            let _ = r.tasks_from_sample_cache(&objr, l, &running, &snaps, &[0]);
            let cache = PageCache::new(&mem);
            for a in addrs {
                if let Some(ms) = l.module_state {
                    let _ = r.module_state_tasks(&cache, &objr, l, &ms, a, 500);
                }
                let _ = weakset_members(&cache, &objr, l, a, 500);
                let _ = r.chain(&mut reader, &objr, l, a, &snaps[0], &HashSet::from([a]));
                let _ = deque_items(&objr, l, a, 1 << 16);
                let _ = r.scan_loop(&objr, l, a, true);
                let _ = py_attr(&objr, l, a, "_state");
            }
        }
    }
}
