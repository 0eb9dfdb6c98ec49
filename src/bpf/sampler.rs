//! The eBPF engine's sampler: loads and attaches the program, keeps its
//! maps in line with the processes followed (one, or with `--all` every
//! Python process on the host, new ones picked up), drains the ring buffer
//! and hands each record on as a [`Tick`].

use super::followed::{Followed, TstateMap};
use super::latest::Latest;
use super::records::{
    kernel_at_least, kind_of, state_char, LayoutC, RawNative, RawRecord, F_NO_TSTATE, K_NATIVE,
    K_OFF, K_ON, K_SAMPLE,
};
use crate::error::Error;
use crate::sampler::{ProcessSample, RateHealth, SamplerConfig, Tick};
use crate::stack::ThreadStack;
use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::perf_event::{
    PerfEvent, PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent,
};
use foldhash::{HashMap, HashMapExt, HashSet};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The compiled program (built by `bpf/build.sh`, checked by `.ci/run`).
static PROGRAM: &[u8] = aya::include_bytes_aligned!("../../bpf/pyinspect.bpf.o");

/// How often the ring buffer is drained: each wake-up costs some 20 µs
/// before any work on this machine, and each drain checks again the code
/// objects its samples name, so rarely. The ring buffer (4 MiB) holds more
/// than a second of 10 kHz samples on a few CPUs; up to 2 kHz, four times
/// as long.
/// With --native a sample carries its stack's top (16 KiB or more), with
/// --async its frames' addresses (2 KiB): the ring buffer is larger, and
/// drained every 100 ms at any rate.
const DRAIN_EVERY: Duration = Duration::from_millis(100);
const DRAIN_EVERY_SLOW: Duration = Duration::from_millis(250);
const NATIVE_RING_BYTES: u32 = 32 << 20;
/// With `--async-mode all`: the waiting tasks and greenlets are read after
/// a nap of a period on average (see `read_waiting`), but not shorter than
/// this, nor so short that reading them would take more than a tenth of the
/// time. The naps are drawn between half and one and a half of that, so
/// that the reads do not keep in step with periodic work in the target.
const WAITING_EVERY_MIN: Duration = Duration::from_millis(2);
const WAITING_SHARE: u32 = 10;
/// How long a just-launched program gets to bring its interpreter up.
const STARTUP_WAIT: Duration = Duration::from_secs(5);
/// Most samples kept waiting to be handed on (the ring buffer holds the rest).
const MAX_PENDING: usize = 1 << 16;
/// Processes followed at once (the program's MAX_TARGETS).
const MAX_TARGETS: u32 = 256;
/// Host-wide: how often /proc is scanned for new Python processes.
const SCAN_EVERY: Duration = Duration::from_secs(1);
/// Host-wide: processes remembered as not Python (by pid and start time).
const MAX_PASSED_OVER: usize = 65536;

fn monotonic_ns() -> u64 {
    // SAFETY: clock_gettime fills the timespec we pass.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

fn load_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::BpfUnavailable(format!("{what}: {e}"))
}

/// A thread off its CPU: its process, since when (the program's clock), and
/// the stack it left with, until it comes back.
struct Away {
    tid: u32,
    pid: i32,
    label: Arc<str>,
    version: String,
    since: u64,
    stack: ThreadStack,
}

/// With `--async-mode all`: when the waiting tasks and greenlets were last
/// read (the program's clock), the part of a period carried, how long the
/// latest read took, and since the start: the time between reads, the naps
/// before them, and the time the reads have counted for.
struct Waiting {
    last: u64,
    carry: f64,
    took: Duration,
    between: Duration,
    napped: Duration,
    counted: Duration,
}

/// The eBPF engine following one process, or every Python process.
pub(crate) struct BpfSampler {
    /// Holds the programs and their perf events: dropped, all is detached.
    ebpf: aya::Ebpf,
    ring: RingBuf<MapData>,
    tstates: TstateMap,
    targets: BpfHashMap<MapData, u32, u32>,
    layouts: Array<MapData, LayoutC>,
    off_map: BpfHashMap<MapData, u32, u64>,
    counters: PerCpuArray<MapData, u64>,
    cfg: SamplerConfig,
    /// Every Python process on the host (`--all`), not one.
    host_wide: bool,
    /// With --subprocesses: the root whose Python descendants are followed
    /// too (the root itself need not be Python).
    family: Option<i32>,
    followed: HashMap<i32, Followed>,
    free_slots: Vec<u32>,
    /// Host-wide: processes found not to be Python, by pid, with their
    /// identity (a pid used again, or a process that execs, is looked at
    /// again).
    passed_over: HashMap<i32, crate::procfs::Identity>,
    scanned: Instant,
    /// The sched_switch program is attached (off-CPU intervals are taken).
    switches: bool,
    /// Samples come with their native stacks (--native).
    native: bool,
    /// Samples are attributed to asyncio tasks (--async).
    tasks: bool,
    /// Samples come with their frames' addresses (--async, watch).
    addrs: bool,
    /// For watch: every thread's latest state, handed on whole at each
    /// tick rather than record by record.
    latest: Option<Latest>,
    away: HashMap<u32, Away>,
    /// With --native, --async or watch: each thread's native record (its
    /// frames' addresses, its registers and stack bytes), written just
    /// before its sample, until the sample is read: a drain can come
    /// between the two.
    natives: HashMap<u32, RawNative>,
    /// Per thread, the part of a period its off-CPU intervals have added
    /// up to beyond whole samples: a wait of 0.3 periods counts as no
    /// sample, and the next one's share carries it.
    carry: HashMap<u32, f64>,
    /// With `--async-mode all`: the reads of waiting tasks and greenlets.
    waiting: Option<Waiting>,
    pending: VecDeque<Tick>,
    rate: f64,
    weight: Duration,
    duration: Option<Duration>,
    started: Instant,
    /// CLOCK_MONOTONIC (the program's `bpf_ktime_get_ns`) at the start.
    start_ns: u64,
    /// The process ended (said once, then sampling stops; one process only).
    ended: Option<Error>,
    /// No more samples: the end was said, or sampling was asked to stop.
    done: bool,
    taken: u64,
    /// With --native: how samples' native and Python frames were merged.
    merges: crate::python::native::MergeCounts,
}

impl BpfSampler {
    /// Follow `pid` (with --subprocesses, its Python descendants too), or
    /// with `host_wide` every Python process there is (`pid` unused). With
    /// `watch`, each tick is every thread of each process, as they are at
    /// the tick (see [`Latest`]).
    pub(crate) fn new(
        pid: i32,
        cfg: SamplerConfig,
        host_wide: bool,
        watch: bool,
    ) -> Result<BpfSampler, Error> {
        let family = (!host_wide && cfg.schedule.subprocesses).then_some(pid);
        let first = if host_wide {
            None
        } else {
            crate::privilege::check_target(pid)?;
            // A program just launched may not have its interpreter up yet.
            let deadline = Instant::now() + STARTUP_WAIT;
            loop {
                match Followed::open(pid, 0, &cfg, false) {
                    Ok(ok) => break Some(ok),
                    Err(Error::NotInitialized { .. } | Error::NoInterpreter { .. })
                        if Instant::now() < deadline =>
                    {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    // A shell or a launcher: its Python children are what
                    // is followed.
                    Err(_) if family.is_some() => break None,
                    Err(e) => return Err(e),
                }
            }
        };
        let switches = cfg.target.filter.include_idle;
        if switches {
            let release = crate::procfs::kernel_release().unwrap_or_default();
            if !kernel_at_least(&release, (5, 18)) {
                return Err(Error::BpfUnavailable(format!(
                    "its off-CPU modes need Linux 5.18 or later (sched_switch passing the \
                     task's state); this kernel is {release}"
                )));
            }
        }

        let native = cfg.target.read.native;
        let tasks = cfg.target.read.asyncio != crate::sampler::AsyncMode::Off;
        let all_tasks = cfg.target.read.asyncio == crate::sampler::AsyncMode::Stitch { all: true };
        // watch reads the turns of asyncio loops from their frames.
        let addrs = tasks || watch;
        let mut loader = aya::EbpfLoader::new();
        if native || addrs {
            // Two native records per CPU (a tick's, a switch's), by the
            // CPU's number.
            let cpus = aya::util::nr_cpus().map_err(|(what, e)| load_error(what, e))?;
            loader.map_max_entries("natives", 2 * cpus.max(1) as u32);
            loader.map_max_entries("samples", NATIVE_RING_BYTES);
        }
        let mut ebpf = loader
            .load(PROGRAM)
            .map_err(|e| load_error("loading the program", e))?;
        let mut take = |name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| load_error("the program", format!("no {name} map")))
        };
        let layouts =
            Array::try_from(take("layouts")?).map_err(|e| load_error("the layouts map", e))?;
        let targets =
            BpfHashMap::try_from(take("targets")?).map_err(|e| load_error("the targets map", e))?;
        let tstates =
            BpfHashMap::try_from(take("tstates")?).map_err(|e| load_error("the tstates map", e))?;
        let off_map =
            BpfHashMap::try_from(take("off_cpu")?).map_err(|e| load_error("the off_cpu map", e))?;
        let ring = RingBuf::try_from(take("samples")?)
            .map_err(|e| load_error("the samples ring buffer", e))?;
        let counters = PerCpuArray::try_from(take("counters")?)
            .map_err(|e| load_error("the counters map", e))?;

        let latest = watch.then(|| Latest::new(cfg.schedule.rate));
        let mut s = BpfSampler {
            ebpf,
            ring,
            tstates,
            targets,
            layouts,
            off_map,
            counters,
            rate: cfg.schedule.rate,
            weight: Duration::from_secs_f64(1.0 / cfg.schedule.rate),
            duration: cfg.schedule.duration,
            cfg,
            host_wide,
            family,
            followed: HashMap::new(),
            free_slots: (0..MAX_TARGETS).rev().collect(),
            passed_over: HashMap::new(),
            scanned: Instant::now(),
            switches: false,
            native,
            tasks,
            addrs,
            latest,
            away: HashMap::new(),
            natives: HashMap::new(),
            carry: HashMap::new(),
            waiting: None,
            pending: VecDeque::new(),
            started: Instant::now(),
            start_ns: monotonic_ns(),
            ended: None,
            done: false,
            taken: 0,
            merges: Default::default(),
        };
        if let Some((f, threads)) = first {
            s.add(f, threads)?;
        }
        if host_wide || family.is_some() {
            s.scan();
        }

        let period = (1e9 / s.rate).round().max(1.0) as u64;
        let cpus = aya::util::online_cpus().map_err(|(what, e)| load_error(what, e))?;
        let prog: &mut PerfEvent = s
            .ebpf
            .program_mut("on_sample")
            .ok_or_else(|| load_error("the program", "no on_sample"))?
            .try_into()
            .map_err(|e| load_error("the program", e))?;
        prog.load()
            .map_err(|e| load_error("the kernel refused the program", e))?;
        for cpu in cpus {
            prog.attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::AllProcessesOneCpu { cpu },
                SamplePolicy::Period(period),
                false,
            )
            .map_err(|e| load_error("attaching to the CPU clock", e))?;
        }
        s.start_ns = monotonic_ns();
        if all_tasks && !watch {
            s.waiting = Some(Waiting {
                last: s.start_ns,
                carry: 0.0,
                took: Duration::ZERO,
                between: Duration::ZERO,
                napped: Duration::ZERO,
                counted: Duration::ZERO,
            });
        }
        if switches {
            s.attach_switches()?;
        }
        s.started = Instant::now();
        Ok(s)
    }

    /// Give the program a process to follow.
    fn add(
        &mut self,
        mut f: Followed,
        threads: Vec<crate::python::reader::bpf::ThreadEntry>,
    ) -> Result<(), Error> {
        let Some(offsets) = f.offsets() else {
            return Err(Error::BpfUnavailable(format!(
                "Python {} has a frame layout the eBPF program cannot walk",
                f.version
            )));
        };
        let Some(slot) = self.free_slots.pop() else {
            return Err(Error::BpfUnavailable(format!(
                "it follows {MAX_TARGETS} processes at most"
            )));
        };
        f.slot = slot;
        let mut layout = LayoutC::from(offsets);
        layout.switches = u32::from(self.cfg.target.filter.include_idle);
        layout.stack_bytes = f.stack_bytes;
        layout.frame_addrs = u32::from(self.addrs);
        if self.cfg.target.filter.gil_only {
            let Some((holder, locked)) = f.gil_words() else {
                self.free_slots.push(slot);
                return Err(Error::BpfUnavailable(format!(
                    "it cannot tell the GIL's holder in Python {} (--mode gil)",
                    f.version
                )));
            };
            layout.gil_only = 1;
            layout.gil_holder = holder;
            layout.gil_locked = locked;
        }
        f.layout = layout;
        self.layouts
            .set(slot, layout, 0)
            .map_err(|e| load_error("the layouts map", e))?;
        f.set_threads(&mut self.tstates, threads);
        if let Err(e) = self.targets.insert(f.pid as u32, slot, 0) {
            f.forget(&mut self.tstates);
            self.free_slots.push(slot);
            return Err(load_error("the targets map", e));
        }
        if self.switches {
            self.count_sleepers(&mut f, monotonic_ns());
        }
        self.followed.insert(f.pid, f);
        Ok(())
    }

    /// Stop following `pid`: its threads still away are counted to now.
    fn remove(&mut self, pid: i32) {
        let Some(mut f) = self.followed.remove(&pid) else {
            return;
        };
        let _ = self.targets.remove(&(pid as u32));
        let threads = f.forget(&mut self.tstates);
        self.free_slots.push(f.slot);
        if let Some(l) = self.latest.as_mut() {
            l.forget_process(pid);
        }
        // Its threads still away are counted to now.
        let now = monotonic_ns();
        let mut gone: Vec<u32> = self
            .away
            .iter()
            .filter(|(_, a)| a.pid == pid)
            .map(|(t, _)| *t)
            .collect();
        gone.sort_unstable();
        for tid in &gone {
            if let Some(a) = self.away.remove(tid) {
                let t = self.interval_tick(a, now);
                self.pending.push_back(t);
            }
        }
        for tid in gone.iter().chain(&threads) {
            let _ = self.off_map.remove(tid);
            self.carry.remove(tid);
            self.natives.remove(tid);
        }
    }

    /// Threads of a process followed that have exited: nothing of them is
    /// waited for any more (an interval open when a thread exits ends
    /// unseen; the program drops a dead task's own last switch).
    fn forget_threads(&mut self, tids: &[u32]) {
        for tid in tids {
            if let Some(l) = self.latest.as_mut() {
                l.forget(*tid);
            }
            self.natives.remove(tid);
            self.away.remove(tid);
            self.carry.remove(tid);
            let _ = self.off_map.remove(tid);
        }
    }

    /// Follow each Python process not followed yet: on the host, or among
    /// the root's descendants.
    fn scan(&mut self) {
        self.scanned = Instant::now();
        let me = std::process::id() as i32;
        let pids = match self.family {
            Some(root) => std::iter::once(root)
                .chain(crate::procfs::descendants(root))
                .collect(),
            None => crate::procfs::pids(),
        };
        if self.passed_over.len() > MAX_PASSED_OVER {
            self.passed_over.clear();
        }
        for pid in pids {
            if pid == me || self.followed.contains_key(&pid) {
                continue;
            }
            let Some(id) = crate::procfs::identity(pid) else {
                continue;
            };
            if self.passed_over.get(&pid) == Some(&id) {
                continue;
            }
            match Followed::open(pid, 0, &self.cfg, self.host_wide) {
                Ok((f, threads)) => {
                    if self.add(f, threads).is_err() {
                        self.passed_over.insert(pid, id);
                    }
                }
                // Python still starting: looked at again at the next scan.
                Err(Error::NotInitialized { .. } | Error::NoInterpreter { .. }) => {}
                Err(_) => {
                    self.passed_over.insert(pid, id);
                }
            }
        }
    }

    /// Load and attach the sched_switch program, then count the threads
    /// asleep from the start (attached first: a thread that wakes after it
    /// is counted, is seen coming back).
    fn attach_switches(&mut self) -> Result<(), Error> {
        self.switches = true;
        let prog: &mut aya::programs::RawTracePoint = self
            .ebpf
            .program_mut("on_switch")
            .ok_or_else(|| load_error("the program", "no on_switch"))?
            .try_into()
            .map_err(|e| load_error("the program", e))?;
        prog.load()
            .map_err(|e| load_error("the kernel refused the sched_switch program", e))?;
        prog.attach("sched_switch")
            .map_err(|e| load_error("attaching to sched_switch", e))?;
        let now = self.start_ns;
        let pids: Vec<i32> = self.followed.keys().copied().collect();
        for pid in pids {
            if let Some(mut f) = self.followed.remove(&pid) {
                self.count_sleepers(&mut f, now);
                self.followed.insert(pid, f);
            }
        }
        Ok(())
    }

    /// The threads of `f` asleep now, counted as away since `now`: each is
    /// put in the program's map, so that its coming back ends the interval
    /// as any other's does.
    fn count_sleepers(&mut self, f: &mut Followed, now: u64) {
        self.sleepers_among(f, now, |_| true);
    }

    /// [`BpfSampler::count_sleepers`] for the threads `among` picks; for
    /// watch, their stacks are their latest.
    ///
    /// Each thread goes into the program's map before its state is read:
    /// one that woke between the read and its entry would never be seen
    /// coming back, and would stay asleep as read (a CI run's watch held a
    /// thread in the wait it had left until the thread was gone). With the
    /// entry in first, a thread that comes back after it writes its return
    /// as any other does; one found running keeps the entry until it next
    /// leaves its CPU, which writes its own.
    fn sleepers_among(&mut self, f: &mut Followed, now: u64, among: impl Fn(u32) -> bool) {
        let entered: HashSet<u32> = f
            .thread_ids()
            .filter(|t| among(*t))
            .filter(|t| self.off_map.insert(*t, now, 0).is_ok())
            .collect();
        for (tid, stack) in f.asleep_now(|t| entered.contains(&t)) {
            if let Some(l) = self.latest.as_mut() {
                l.set(f.pid, tid, now, stack);
                continue;
            }
            self.away.insert(
                tid,
                Away {
                    tid,
                    pid: f.pid,
                    label: f.label.clone(),
                    version: f.version.clone(),
                    since: now,
                    stack,
                },
            );
        }
    }

    /// A tick of one stack of process `pid`.
    #[allow(clippy::too_many_arguments)]
    fn tick(
        &self,
        pid: i32,
        label: Arc<str>,
        version: String,
        at_ns: u64,
        weight: Duration,
        samples: u64,
        stack: ThreadStack,
        errors: Vec<Error>,
    ) -> Tick {
        let at = Duration::from_nanos(at_ns.saturating_sub(self.start_ns));
        Tick {
            timestamp: at,
            weight,
            samples,
            late: Duration::ZERO,
            missed: 0,
            processes: vec![ProcessSample {
                pid,
                cmdline: label,
                python_version: version,
                threads: vec![stack],
                loop_turns: Vec::new(),
                read_at: at,
            }],
            errors,
            ended: Vec::new(),
        }
    }

    /// The tick of an off-CPU interval to `until`: its weight the interval,
    /// counting as that many whole periods (with what its thread's earlier
    /// intervals left over; the rest is carried to its next one).
    fn interval_tick(&mut self, a: Away, until: u64) -> Tick {
        let since = a.since.max(self.start_ns);
        let weight = Duration::from_nanos(until.saturating_sub(since));
        let samples = whole_periods(self.carry.entry(a.tid).or_insert(0.0), weight, self.rate);
        self.tick(
            a.pid,
            a.label,
            a.version,
            since,
            weight,
            samples,
            a.stack,
            Vec::new(),
        )
    }

    /// With `--async-mode all`: the waiting tasks and suspended greenlets
    /// of each process, read now, after a nap of `nap`, as one tick that
    /// counts for that nap scaled by the time between reads over the naps
    /// since the start (as that many whole periods, the rest carried to the
    /// next); never for more than the time not counted yet, and the last
    /// read (`nap` None) for all of it, so that the reads together count
    /// for the whole recording, as the threads' own samples do. Not for the
    /// time since the previous read: when pyinspect waits for a CPU, which
    /// is likelier while the target runs, all of that wait would go to what
    /// the read finds once the target has stopped running; the naps are
    /// drawn, whatever the target does.
    fn read_waiting(&mut self, now: u64, nap: Option<Duration>) {
        let Some(w) = self.waiting.as_mut() else {
            return;
        };
        let began = Instant::now();
        let since = std::mem::replace(&mut w.last, now);
        w.between += Duration::from_nanos(now.saturating_sub(since));
        let owed = w.between.saturating_sub(w.counted);
        let weight = match nap {
            Some(nap) => {
                w.napped += nap;
                let ratio = w.between.as_secs_f64() / w.napped.as_secs_f64().max(1e-9);
                nap.mul_f64(ratio).min(owed)
            }
            None => owed,
        };
        w.counted += weight;
        let samples = whole_periods(&mut w.carry, weight, self.rate);
        let at = Duration::from_nanos(now.saturating_sub(self.start_ns));
        let mut processes = Vec::new();
        for f in self.followed.values_mut() {
            let threads = f.waiting_stacks();
            if !threads.is_empty() {
                processes.push(ProcessSample {
                    pid: f.pid,
                    cmdline: f.label.clone(),
                    python_version: f.version.clone(),
                    threads,
                    loop_turns: Vec::new(),
                    read_at: at,
                });
            }
        }
        if let Some(w) = self.waiting.as_mut() {
            w.took = began.elapsed();
        }
        if !processes.is_empty() {
            self.pending.push_back(Tick {
                timestamp: at,
                weight,
                samples,
                late: Duration::ZERO,
                missed: 0,
                processes,
                errors: Vec::new(),
                ended: Vec::new(),
            });
        }
    }

    /// The threads still off their CPU at the end: counted until `end`.
    fn close_intervals(&mut self, end: u64) {
        let mut away: Vec<Away> = std::mem::take(&mut self.away).into_values().collect();
        away.sort_by_key(|a| a.since);
        for a in away {
            let t = self.interval_tick(a, end);
            self.pending.push_back(t);
        }
    }

    /// Turn the ring buffer's records into ticks.
    fn drain(&mut self) {
        for f in self.followed.values_mut() {
            f.new_batch();
        }
        // Copied out first, as the ring buffer's items borrow it.
        let mut raw: Vec<RawRecord> = Vec::new();
        let mut native_of = Vec::new();
        while let Some(item) = self.ring.next() {
            if kind_of(&item) == Some(K_NATIVE) {
                if let Some(n) = RawNative::parse(&item) {
                    self.natives.insert(n.tid, n);
                }
                continue;
            }
            if let Some(r) = RawRecord::parse(&item) {
                if self.native || self.addrs {
                    let n = self.natives.remove(&r.tid).filter(|n| n.time == r.time);
                    native_of.push(n);
                }
                raw.push(r);
            }
            if raw.len() >= MAX_PENDING {
                break;
            }
        }
        if self.native || self.addrs {
            // Each sample has native frames or frame addresses of its own:
            // none is folded.
            for (r, n) in raw.into_iter().zip(native_of) {
                self.take(r, 1, n);
            }
            self.grow_stack_copies();
            return;
        }
        // A thread's samples in a row with the same stack (a hot loop) are
        // resolved and handed on once, as that many samples: the same
        // profile, for a fraction of the work.
        let mut held: HashMap<u32, (RawRecord, u64)> = HashMap::new();
        for r in raw {
            if r.kind == K_SAMPLE {
                if let Some((h, n)) = held.get_mut(&r.tid) {
                    if h.tgid == r.tgid && h.flags == r.flags && h.frames == r.frames {
                        *n += 1;
                        continue;
                    }
                }
                if let Some((h, n)) = held.insert(r.tid, (r, 1)) {
                    self.take(h, n, None);
                }
                continue;
            }
            // Anything else of a thread comes after its samples held.
            if let Some((h, n)) = held.remove(&r.tid) {
                self.take(h, n, None);
            }
            self.take(r, 1, None);
        }
        let mut rest: Vec<(RawRecord, u64)> = held.into_values().collect();
        rest.sort_by_key(|(r, _)| r.time);
        for (r, n) in rest {
            self.take(r, n, None);
        }
    }

    /// With --native: the processes whose unwinds read past their stack
    /// copies get deeper ones.
    fn grow_stack_copies(&mut self) {
        for f in self.followed.values_mut() {
            if std::mem::take(&mut f.stack_bytes_grew) {
                f.layout.stack_bytes = f.stack_bytes;
                let _ = self.layouts.set(f.slot, f.layout, 0);
            }
            let m = f.take_merge_counts();
            self.merges.address += m.address;
            self.merges.name += m.name;
            self.merges.fallback += m.fallback;
        }
    }

    /// Hand on one record of the program's (`n` samples in a row of one
    /// thread, with one stack, for a tick record), with its native record.
    fn take(&mut self, r: RawRecord, n: u64, native: Option<RawNative>) {
        if r.kind == K_ON {
            if let Some(l) = self.latest.as_mut() {
                l.back(r.tid, r.time);
                return;
            }
            if let Some(a) = self.away.remove(&r.tid) {
                let t = self.interval_tick(a, r.time);
                self.pending.push_back(t);
            }
            return;
        }
        let pid = r.tgid as i32;
        let Some(f) = self.followed.get_mut(&pid) else {
            return;
        };
        if r.flags & F_NO_TSTATE != 0 {
            f.unknown(r.tid as i32);
            if let Some(l) = self.latest.as_mut() {
                l.unknown(r.tid, r.time);
            }
            return;
        }
        let mut errors = Vec::new();
        let marks = native.as_ref().map_or(&[][..], |n| &n.frames[..]);
        let Some(mut stack) = f.stack_of(r.tid, r.flags, r.frames, marks, &mut errors) else {
            return;
        };
        if self.native && (r.kind == K_SAMPLE || r.kind == K_OFF) {
            stack = f.with_native(stack, native, &mut errors);
        }
        // A thread that left its CPU in a task (preempted, or waiting in a
        // call the task made) is in that task, as a sampled one.
        if self.tasks && (r.kind == K_SAMPLE || r.kind == K_OFF) {
            stack = f.with_tasks(stack);
        }
        // With --mode gil the program samples the GIL's holder alone.
        stack.holds_gil = r.kind == K_SAMPLE && self.cfg.target.filter.gil_only;
        self.taken += n;
        if r.kind == K_OFF {
            let call = crate::wait::call_from_registers(r.call, r.args);
            stack = f.off_stack(stack, r.tid as i32, state_char(r.state), Some(call));
        }
        if let Some(l) = self.latest.as_mut() {
            l.set(pid, r.tid, r.time, stack);
            return;
        }
        let (label, version) = (f.label.clone(), f.version.clone());
        if r.kind == K_OFF {
            // An interval whose end was never seen (the thread was asleep
            // before the program was attached, and woke before it was) is
            // replaced.
            let away = Away {
                tid: r.tid,
                pid,
                label,
                version,
                since: r.time,
                stack,
            };
            self.away.insert(r.tid, away);
        } else if r.kind == K_SAMPLE {
            let weight = self.weight * n as u32;
            let t = self.tick(pid, label, version, r.time, weight, n, stack, errors);
            self.pending.push_back(t);
        }
    }

    /// Read the thread lists that are due; a process that ended is
    /// dropped (host-wide) or ends the recording.
    fn refresh(&mut self) {
        let due: Vec<i32> = self
            .followed
            .iter()
            .filter(|(_, f)| f.due())
            .map(|(p, _)| *p)
            .collect();
        for pid in due {
            let Some(f) = self.followed.get_mut(&pid) else {
                continue;
            };
            match f.refresh(&mut self.tstates) {
                Ok(gone) => self.forget_threads(&gone),
                Err(e) => {
                    if !self.host_wide && self.family.is_none() {
                        self.ended = Some(e);
                    }
                    self.remove(pid);
                }
            }
        }
        if (self.host_wide || self.family.is_some()) && self.scanned.elapsed() >= SCAN_EVERY {
            self.scan();
        }
        // A family ends with its root, once no Python process of it is left.
        if let Some(root) = self.family {
            let gone = matches!(
                crate::procfs::thread_state(root, root),
                None | Some('Z' | 'X')
            );
            if gone && self.followed.is_empty() && self.ended.is_none() {
                self.ended = Some(Error::ProcessExited { pid: root });
            }
        }
    }

    /// With --native: samples merged by stack address, by eval-loop names,
    /// or that fell back.
    pub(crate) fn merge_counts(&self) -> crate::python::native::MergeCounts {
        self.merges
    }

    pub(crate) fn duration_over(&self) -> bool {
        self.duration.is_some_and(|d| self.started.elapsed() >= d)
    }

    pub(crate) fn next_tick(&mut self) -> Option<Tick> {
        if self.latest.is_some() {
            return self.next_watch_tick();
        }
        loop {
            if let Some(t) = self.pending.pop_front() {
                return Some(t);
            }
            if self.done {
                return None;
            }
            if let Some(e) = self.ended.take() {
                self.done = true;
                self.close_intervals(monotonic_ns());
                self.pending.push_back(self.ended_tick(e));
                continue;
            }
            if crate::pause::interrupted() || self.duration_over() {
                // What the program wrote until now still counts.
                self.drain();
                self.read_waiting(monotonic_ns(), None);
                self.close_intervals(monotonic_ns());
                self.done = true;
                continue;
            }
            let every = if let Some(w) = &self.waiting {
                let period = Duration::from_secs_f64(1.0 / self.rate);
                let every = period.max(WAITING_EVERY_MIN).max(w.took * WAITING_SHARE);
                every.mul_f64(0.5 + rand::random::<f64>())
            } else if self.rate <= 2000.0 && !self.native && !self.addrs {
                DRAIN_EVERY_SLOW
            } else {
                DRAIN_EVERY
            };
            // Not past the end of the recording.
            let left = self
                .duration
                .map_or(every, |d| d.saturating_sub(self.started.elapsed()));
            let nap = every.min(left).max(Duration::from_millis(1));
            std::thread::sleep(nap);
            // Drained before a refresh, whose removal of an ended process
            // would leave its last records without a process.
            self.drain();
            self.refresh();
            self.read_waiting(monotonic_ns(), Some(nap));
        }
    }

    /// The tick that says why the sampling ended: nothing to say when the
    /// process just exited (as the ptrace engine, which said nothing, where
    /// this said it "exited while it was being read").
    fn ended_tick(&self, e: Error) -> Tick {
        Tick {
            timestamp: self.started.elapsed(),
            weight: Duration::ZERO,
            samples: 0,
            late: Duration::ZERO,
            missed: 0,
            processes: Vec::new(),
            errors: Vec::new(),
            ended: match e {
                Error::ProcessExited { .. } => Vec::new(),
                e => vec![e],
            },
        }
    }

    /// For watch: at each tick, every thread of each process followed, as
    /// the records until then left it (see [`Latest`]).
    fn next_watch_tick(&mut self) -> Option<Tick> {
        loop {
            if self.done {
                return None;
            }
            if let Some(e) = self.ended.take() {
                self.done = true;
                return Some(self.ended_tick(e));
            }
            if crate::pause::interrupted() || self.duration_over() {
                self.done = true;
                return None;
            }
            let due = self
                .latest
                .as_ref()
                .map_or(Duration::ZERO, Latest::until_next);
            let left = self
                .duration
                .map_or(due, |d| d.saturating_sub(self.started.elapsed()));
            std::thread::sleep(due.min(left));
            self.drain();
            self.refresh();
            if self.duration_over() || self.ended.is_some() {
                continue;
            }
            return Some(self.watch_tick());
        }
    }

    /// The tick due now, for watch: each process's threads, those not
    /// seen yet read if asleep (a thread that went to sleep before it was
    /// listed has no record), with the GIL's holder and the loops' turns.
    fn watch_tick(&mut self) -> Tick {
        let now = monotonic_ns();
        let pids: Vec<i32> = self.followed.keys().copied().collect();
        let mut processes = Vec::with_capacity(pids.len());
        for pid in pids {
            let Some(mut f) = self.followed.remove(&pid) else {
                continue;
            };
            let Some(l) = self.latest.as_ref() else {
                self.followed.insert(pid, f);
                continue;
            };
            let unseen: HashSet<u32> = f.thread_ids().filter(|t| !l.has(*t)).collect();
            if !unseen.is_empty() {
                self.sleepers_among(&mut f, now, |t| unseen.contains(&t));
            }
            let threads = self.latest.as_ref().map(|l| l.of(pid)).unwrap_or_default();
            let (threads, loop_turns) = f.at_tick(threads);
            processes.push(ProcessSample {
                pid,
                cmdline: f.label.clone(),
                python_version: f.version.clone(),
                threads,
                loop_turns,
                read_at: self.started.elapsed(),
            });
            self.followed.insert(pid, f);
        }
        processes.sort_unstable_by_key(|p| p.pid);
        if let Some(l) = self.latest.as_mut() {
            l.ticked();
        }
        Tick {
            timestamp: self.started.elapsed(),
            weight: self.weight,
            samples: 1,
            late: Duration::ZERO,
            missed: 0,
            processes,
            errors: Vec::new(),
            ended: Vec::new(),
        }
    }

    /// When the ticks' timestamps count from.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// Samples the program counted and the ring buffer had no room for.
    fn counts(&self) -> (u64, u64) {
        let sum = |i: u32| {
            self.counters
                .get(&i, 0)
                .map(|v| v.iter().sum::<u64>())
                .unwrap_or(0)
        };
        (sum(0), sum(1))
    }

    pub(crate) fn rate_health(&self) -> RateHealth {
        let secs = self.started.elapsed().as_secs_f64();
        let (_, lost) = self.counts();
        let missed = lost;
        let share = if self.taken + missed > 0 {
            self.taken as f64 / (self.taken + missed) as f64
        } else {
            1.0
        };
        let mut reason = None;
        if secs >= 0.5 && share < 0.95 {
            reason = Some(format!(
                "the eBPF engine: {lost} samples found the ring buffer full"
            ));
        }
        RateHealth {
            asked: self.rate,
            delivered: self.rate * share,
            reason,
        }
    }

    pub(crate) fn cost_line(&self) -> Option<String> {
        let mut parts = Vec::new();
        let unknown: u64 = self.followed.values().map(|f| f.unknown_thread).sum();
        for name in ["on_sample", "on_switch"] {
            let Some(p) = self.ebpf.program(name) else {
                continue;
            };
            let Ok(info) = p.info() else { continue };
            let (runs, time) = (info.run_count(), info.run_time());
            if runs == 0 {
                continue;
            }
            let each = time.as_secs_f64() * 1e6 / runs as f64;
            let all = time.as_secs_f64() * 1e3;
            parts.push(if name == "on_sample" {
                let (taken, _) = self.counts();
                format!(
                    "eBPF program: {runs} runs ({taken} in the target, {unknown} of threads not \
                     listed yet), {each:.2} µs each, {all:.1} ms in all"
                )
            } else {
                format!("sched_switch program: {runs} runs, {each:.2} µs each, {all:.1} ms in all")
            });
        }
        (!parts.is_empty()).then(|| format!("pyinspect: {}", parts.join("; ")))
    }
}

/// `weight` counted in whole periods at `rate`, with the part of a period
/// `carry` holds from before; what is left over goes back to `carry`.
fn whole_periods(carry: &mut f64, weight: Duration, rate: f64) -> u64 {
    let periods = *carry + weight.as_secs_f64() * rate;
    let samples = periods.floor().max(0.0);
    *carry = periods - samples;
    samples as u64
}
