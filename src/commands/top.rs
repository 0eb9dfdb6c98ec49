//! `pyinspect top`: a live, top-like view of the functions a process spends
//! its time in, with a panel of its threads as the kernel sees them.
//!
//! The sampler runs on its own thread and hands each tick over a bounded
//! channel (a UI that cannot keep up slows sampling, and shows it as late
//! samples, rather than growing a queue). This thread drains the channel
//! every [`POLL`], folds ticks into the aggregator (a few counter bumps per
//! frame), and draws only at a refresh (once a second) or after a key.

use crate::launch::Launched;
use crate::output::short_filename;
use crate::pause;
use crate::procfs;
use crate::sampler::{SamplerConfig, Tick};
use crate::top::aggregate::{Aggregator, CountFilter};
use crate::top::threads::{ThreadMonitor, ThreadRates};
use crate::top::ui;
use crate::top::view::{Action, TargetState, View};
use anyhow::{bail, Context};
use crossterm::event::{self, Event, KeyEventKind};
use crossterm::{cursor, execute, terminal};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;
use std::collections::{HashMap, HashSet};
use std::io::IsTerminal;
use std::sync::mpsc::{sync_channel, Receiver, TryRecvError};
use std::sync::Mutex;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

pub struct TopOptions {
    pub pid: Option<i32>,
    /// `--async` / `--async-mode` (Off when not given).
    pub asyncio: crate::sampler::AsyncMode,
    pub command: Vec<String>,
    pub rate: f64,
    pub subprocesses: bool,
    pub nonblocking: bool,
    pub native: bool,
    pub idle: bool,
    pub gil: bool,
    /// How often the tables refresh (py-spy's `--delay`).
    pub refresh: Duration,
    pub full_filenames: bool,
    /// Native frames by their whole signature (`--full-names`).
    pub full_names: bool,
    pub engine: crate::bpf::Engine,
    /// Every Python process on the host (`--all`; the eBPF engine).
    pub all: bool,
}

/// The first refresh comes sooner, so the screen is not empty for a second.
const FIRST_REFRESH: Duration = Duration::from_millis(300);
/// How often queued ticks are folded in between refreshes.
const POLL: Duration = Duration::from_millis(100);
/// Ticks the channel holds: ten seconds at the default rate.
const CHANNEL_BOUND: usize = 1000;

enum Msg {
    Started,
    Tick(Tick),
    /// Every followed process has exited (or a stop signal arrived).
    Ended,
    /// The sampler could not start or go on: the error itself, carried to
    /// the edge (printed, or shown as the reason the view ended).
    Failed(anyhow::Error),
}

/// Panics of the sampler thread, kept while the screen is taken and
/// printed once the terminal is restored.
static OTHER_PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub fn run(opts: TopOptions) -> anyhow::Result<()> {
    // Checked first (the options' rules were, at the CLI edge): nothing is
    // launched or attached for a run that cannot go on.
    if !std::io::stdout().is_terminal() {
        bail!("top needs a terminal (stdout is not a tty)");
    }
    pause::install_signal_flag();
    let (pid, launched, log) = match opts.pid {
        Some(pid) => (pid, None, None),
        // --all: no one process (0 is never a process's pid).
        None if opts.all => (0, None, None),
        None => {
            // Created exclusively (never through a planted link); the time
            // keeps a stale log of an earlier pyinspect with our pid from
            // refusing the run.
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let log = std::env::temp_dir()
                .join(format!("pyinspect-top-{}-{nanos}.log", std::process::id()));
            let child = spawn_quietly(&opts.command, &log)?;
            (child.pid(), Some(child), Some(log))
        }
    };
    let result = watch(pid, &opts, log.as_deref());
    if let Some(child) = launched {
        // A launched program ends with the view, as it began with it.
        let _ = child.finish(crate::launch::Stop::Signalled {
            grace: Duration::ZERO,
        });
    }
    let panics = std::mem::take(&mut *OTHER_PANICS.lock().unwrap_or_else(|e| e.into_inner()));
    for p in &panics {
        eprintln!("pyinspect: sampler thread {p}");
    }
    result
}

/// Launch `argv` with stdin from /dev/null and its output to `log`: its
/// prints would tear the screen, and a child reading the terminal would
/// steal our keys. The launcher passes our own descriptors on, so they are
/// pointed away for the moment of the spawn (nothing else runs yet).
fn spawn_quietly(argv: &[String], log: &std::path::Path) -> anyhow::Result<Launched> {
    use std::os::fd::AsRawFd;
    let out = crate::output::sink::create_new_private(log)?;
    let null = std::fs::File::open("/dev/null").context("opening /dev/null")?;
    let targets = [
        (0, null.as_raw_fd()),
        (1, out.as_raw_fd()),
        (2, out.as_raw_fd()),
    ];
    let mut saved = Vec::new();
    for (fd, to) in targets {
        // SAFETY: plain descriptor calls on descriptors we own; each saved
        // copy is put back and closed below on every path.
        unsafe {
            let copy = libc::dup(fd);
            if copy < 0 || libc::dup2(to, fd) < 0 {
                if copy >= 0 {
                    libc::close(copy);
                }
                break;
            }
            saved.push((fd, copy));
        }
    }
    let spawned = if saved.len() == targets.len() {
        Launched::spawn(argv).map_err(anyhow::Error::from)
    } else {
        Err(anyhow::anyhow!(
            "could not redirect the launched program's input and output"
        ))
    };
    for (fd, copy) in saved {
        // SAFETY: see above.
        unsafe {
            libc::dup2(copy, fd);
            libc::close(copy);
        }
    }
    spawned
}

fn start_sampler(
    pid: i32,
    cfg: SamplerConfig,
    engine: crate::bpf::Engine,
) -> (Receiver<Msg>, JoinHandle<()>) {
    let (tx, rx) = sync_channel(CHANNEL_BOUND);
    let handle = thread::spawn(move || {
        let panicked = tx.clone();
        let body = std::panic::AssertUnwindSafe(move || {
            let mut sampler = match crate::bpf::AnySampler::new(engine, pid, cfg) {
                Ok(s) => s,
                Err(e) => {
                    let _ = tx.send(Msg::Failed(e.into()));
                    return;
                }
            };
            if tx.send(Msg::Started).is_err() {
                return;
            }
            while let Some(t) = sampler.next_tick() {
                // The receiver is gone once the user quit: stop (dropping
                // the sampler lets every paused thread go).
                if tx.send(Msg::Tick(t)).is_err() {
                    return;
                }
            }
            let _ = tx.send(Msg::Ended);
        });
        if std::panic::catch_unwind(body).is_err() {
            let _ = panicked.send(Msg::Failed(anyhow::anyhow!(
                "sampling stopped on an internal error (printed on exit)"
            )));
        }
    });
    (rx, handle)
}

fn watch(pid: i32, opts: &TopOptions, log: Option<&std::path::Path>) -> anyhow::Result<()> {
    let mut cfg = SamplerConfig {
        schedule: crate::sampler::Schedule {
            rate: opts.rate,
            duration: None,
            subprocesses: opts.subprocesses,
            all: opts.all,
        },
        target: crate::sampler::TargetConfig {
            pause: crate::sampler::PausePolicy {
                nonblocking: opts.nonblocking,
            },
            filter: crate::sampler::Filters {
                // The GIL filter applies to the function table only (in the
                // aggregator), so the threads panel still sees the other threads.
                // Idle threads are dropped by the sampler, which alone knows the
                // kernel states at sampling time; the panel lists them from /proc.
                gil_only: false,
                // Idle threads reach the aggregator (which leaves them out of the
                // function table unless --idle) so that the panel shows what they
                // wait for; with --native that would pause them all, so then only
                // --idle keeps them.
                include_idle: opts.idle || !opts.native,
            },
            read: crate::sampler::ReadConfig {
                native: opts.native,
                native_all: false,
                native_debug_info: false,
                loop_turns: false,
                full_names: opts.full_names,
                function_lines: false,
                locals: 0,
                statuses: true,
                gc_frames: true,
                positions: false,
                waits: crate::wait::WaitDetail::Short,
                asyncio: opts.asyncio,
            },
        },
    };
    if opts.engine == crate::bpf::Engine::Bpf {
        // The eBPF engine samples threads on a CPU only: the panel lists
        // the others from /proc. With --gil its program samples the GIL
        // holder alone (it cannot tell a holder later).
        cfg.target.filter.include_idle &= opts.idle;
        cfg.target.filter.gil_only = opts.gil;
    }
    let (rx, sampler) = start_sampler(pid, cfg, opts.engine);
    // Attach errors (not Python, permission) are printed plainly, before
    // the screen is taken.
    match rx.recv() {
        Ok(Msg::Started) => {}
        Ok(Msg::Failed(e)) => return Err(e),
        Ok(Msg::Ended) | Ok(Msg::Tick(_)) | Err(_) => bail!("process {pid} exited"),
    }
    let mut app = App {
        agg: Aggregator::new(CountFilter {
            idle: opts.idle,
            gil_only: opts.gil,
        }),
        view: View::new(
            pid,
            if opts.all {
                String::new()
            } else {
                procfs::cmdline(pid).unwrap_or_default()
            },
            opts.rate,
        ),
        pids: HashSet::new(),
        monitor: ThreadMonitor::new(),
        rates: HashMap::new(),
        gone: HashSet::new(),
        root_pid: pid,
        interval: Duration::from_secs_f64(1.0 / opts.rate),
        ended: false,
        log: log.map(|l| l.display().to_string()),
        refresh: opts.refresh,
        full_filenames: opts.full_filenames,
    };
    let result = {
        install_panic_hook();
        let _guard = TerminalGuard::enter()?;
        let mut terminal = Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
        terminal.clear()?;
        app.run(&mut terminal, &rx)
    };
    // Quitting drops the receiver: the sampler's next send fails and it
    // returns, letting its paused threads go. Give it a moment.
    drop(rx);
    let deadline = Instant::now() + Duration::from_secs(2);
    while !sampler.is_finished() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    result
}

struct App {
    agg: Aggregator,
    view: View,
    monitor: ThreadMonitor,
    rates: HashMap<(i32, u32), ThreadRates>,
    gone: HashSet<(i32, u32)>,
    /// The processes seen (`--all`: each tick holds one).
    pids: HashSet<i32>,
    root_pid: i32,
    /// Mean sampling interval: a sample later than this counts as late.
    interval: Duration,
    ended: bool,
    log: Option<String>,
    refresh: Duration,
    full_filenames: bool,
}

impl App {
    fn run(
        &mut self,
        terminal: &mut Terminal<CrosstermBackend<std::io::Stdout>>,
        rx: &Receiver<Msg>,
    ) -> anyhow::Result<()> {
        let mut next_refresh = Instant::now() + FIRST_REFRESH.min(self.refresh);
        let mut dirty = true;
        loop {
            loop {
                match rx.try_recv() {
                    Ok(Msg::Tick(t)) => self.add_tick(t),
                    Ok(Msg::Started) => {}
                    Ok(Msg::Ended) if self.root_pid == 0 => self.end("sampling ended".into()),
                    Ok(Msg::Ended) => self.end(format!("process {} exited", self.root_pid)),
                    Ok(Msg::Failed(e)) => self.end(e.to_string()),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        if !self.ended {
                            self.end("sampling stopped".into());
                        }
                        break;
                    }
                }
                if self.ended {
                    dirty = true;
                }
            }
            if pause::interrupted() {
                return Ok(());
            }
            let now = Instant::now();
            if now >= next_refresh {
                self.refresh();
                next_refresh = now + self.refresh;
                dirty = true;
            }
            if dirty {
                terminal.draw(|f| ui::draw(f, &self.view, &self.agg))?;
                dirty = false;
            }
            let wait = next_refresh
                .saturating_duration_since(Instant::now())
                .min(POLL);
            // Wait on the terminal ourselves: once it is hung up, crossterm's
            // reader loops forever on end-of-file, so it is only asked when
            // the terminal is still there, and then without waiting.
            if wait_for_terminal(wait) == TerminalWait::Gone {
                return Ok(());
            }
            if !event::poll(Duration::ZERO)? {
                continue;
            }
            match event::read()? {
                Event::Key(k) if k.kind != KeyEventKind::Release => match self.view.handle_key(k) {
                    Action::Quit => return Ok(()),
                    Action::Nothing => {}
                    Action::Redraw => dirty = true,
                    Action::Rebuild => {
                        self.view.rebuild(&self.agg, &self.rates);
                        dirty = true;
                    }
                    Action::Reset => {
                        self.agg.reset();
                        self.view.rebuild(&self.agg, &self.rates);
                        dirty = true;
                    }
                },
                Event::Resize(..) => dirty = true,
                _ => {}
            }
        }
    }

    fn add_tick(&mut self, t: Tick) {
        let late = u64::from(t.late > self.interval) + t.missed;
        self.agg.begin_tick(late, t.late, &t.errors);
        if self.root_pid == 0 {
            self.pids.extend(t.processes.iter().map(|p| p.pid));
            self.view.processes = self.pids.len();
        } else if !t.processes.is_empty() {
            self.view.processes = t.processes.len();
        }
        if self.view.python_version.is_empty() && self.root_pid != 0 {
            let root = t.processes.iter().find(|p| p.pid == self.root_pid);
            if let Some(p) = root.or(t.processes.first()) {
                self.view.python_version = p.python_version.clone();
                self.view.cmdline = p.cmdline.to_string();
            }
        }
        let pid = self.root_pid;
        let full = self.full_filenames;
        let threads = t
            .processes
            .iter()
            .flat_map(|p| p.threads.iter().map(move |th| (p.pid, th)));
        self.agg.add_threads(threads, t.weight, &mut |f| {
            if full {
                f.to_string()
            } else {
                short_filename(f, pid)
            }
        });
    }

    fn end(&mut self, why: String) {
        if self.ended {
            return;
        }
        self.ended = true;
        // Fold in what arrived since the last refresh, so the last data is
        // the latest.
        self.refresh();
        let why = match &self.log {
            Some(l) => format!("{why} (its output: {l})"),
            None => why,
        };
        self.view.state = TargetState::Ended(why);
    }

    fn refresh(&mut self) {
        self.agg.roll_window();
        // After the end, the last readings stay: the threads are gone.
        if !self.ended {
            let keys: Vec<(i32, u32)> = self
                .agg
                .threads()
                .filter_map(|(_, t)| Some((t.pid, t.os_tid?)))
                .filter(|k| !self.gone.contains(k))
                .collect();
            self.rates = self.monitor.refresh(&keys);
            // Threads that have exited are not looked up again: a program
            // churning through threads would otherwise cost more each second.
            self.gone
                .extend(keys.into_iter().filter(|k| !self.rates.contains_key(k)));
        }
        if !self.view.paused {
            self.view.rebuild(&self.agg, &self.rates);
        }
    }
}

/// Raw mode and the alternate screen, undone on drop (every return path)
/// and by the panic hook (a panic of ours).
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> anyhow::Result<TerminalGuard> {
        terminal::enable_raw_mode().context("switching the terminal to raw mode")?;
        let guard = TerminalGuard;
        execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        )?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

fn restore_terminal() {
    let _ = execute!(
        std::io::stdout(),
        terminal::LeaveAlternateScreen,
        cursor::Show
    );
    let _ = terminal::disable_raw_mode();
}

/// A panic on this (the UI) thread restores the terminal before the
/// message is printed, so it is readable and the shell usable. A panic on
/// another thread is kept for after the screen is given back.
fn install_panic_hook() {
    let ui_thread = thread::current().id();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if thread::current().id() == ui_thread {
            restore_terminal();
            previous(info);
        } else {
            OTHER_PANICS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(info.to_string());
        }
    }));
}

#[derive(PartialEq, Eq)]
enum TerminalWait {
    Ready,
    Gone,
}

/// Wait up to `timeout` for input on the terminal. `Gone` when it was
/// closed under us (a killed tmux pane, a dropped ssh session), where a
/// hang-up signal does not always reach us.
fn wait_for_terminal(timeout: Duration) -> TerminalWait {
    // SAFETY: isatty and poll on our own standard input, with a timeout.
    if unsafe { libc::isatty(0) } != 1 {
        std::thread::sleep(timeout);
        return TerminalWait::Ready;
    }
    let mut fd = libc::pollfd {
        fd: 0,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    let n = unsafe { libc::poll(&mut fd, 1, ms) };
    if n > 0 && fd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        TerminalWait::Gone
    } else {
        TerminalWait::Ready
    }
}
