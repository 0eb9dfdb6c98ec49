#!/usr/bin/env python3
"""pyinspect benchmark: pyinspect side by side with py-spy 0.4.3, in one run.

    python3 bench/run.py [--quick] [--only NAME[,NAME...]] [--python PATH]
                         [--json OUT.json] [--no-build] [--pyinspect PATH]

Machines are noisy: every figure is a median over interleaved repetitions
(pyinspect, py-spy, pyinspect, ...), compared as a ratio or against the
issue's target. Nothing here is a timed test; the verdicts are for reading.
See bench/README.md for what each scenario measures.
"""

import argparse
import contextlib
import json
import os
import pty
import re
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import fcntl
import termios
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "bench" / "fixtures"
PYINSPECT = ROOT / "target" / "release" / "pyinspect"
PYSPY_VERSION = "0.4.3"
DEFAULT_PYTHON = "/root/.pyenv/versions/3.12.1/bin/python"
# .ci/torch-workload's venv (torch from PyPI, CUDA wheel) for torch-native.
TORCH_PYTHON = os.path.join(os.environ.get("PYINSPECT_TORCH_VENV", "/opt/pyinspect-torch/venv"), "bin", "python")
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Skip(Exception):
    """The scenario cannot run here (a feature not in the binary yet...)."""


# ---------------------------------------------------------------- results


class Results:
    def __init__(self):
        self.rows = []

    def add(self, scenario, ours, theirs, target, verdict, unit="", note="", detail=None):
        ratio = None
        if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)) and theirs:
            ratio = ours / theirs
        row = {
            "scenario": scenario,
            "pyinspect": ours,
            "py-spy": theirs,
            "ratio": ratio,
            "unit": unit,
            "target": target,
            "verdict": verdict,
            "note": note,
            "load_average": os.getloadavg()[0],
            # Every measurement behind the medians, for --json readers.
            "detail": detail,
        }
        self.rows.append(row)
        print(format_row(row), flush=True)

    def skip(self, scenario, reason):
        self.add(scenario, None, None, "", "SKIPPED", note=reason)


def fmt(value, unit):
    if value is None:
        return "-"
    if isinstance(value, float):
        text = f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    else:
        text = str(value)
    return f"{text} {unit}".strip()


HEADER = f"{'scenario':<34} {'pyinspect':>13} {'py-spy':>13} {'ratio':>6}  {'target':<26} verdict"


def format_row(row):
    ratio = f"{row['ratio']:.2f}" if row["ratio"] is not None else "-"
    line = (
        f"{row['scenario']:<34} {fmt(row['pyinspect'], row['unit']):>13} "
        f"{fmt(row['py-spy'], row['unit']):>13} {ratio:>6}  {row['target']:<26} {row['verdict']}"
    )
    if row["note"]:
        line += f"  ({row['note']})"
    return line


def verdict(ok):
    return "PASS" if ok else "FAIL"


# ------------------------------------------------------------ processes


class Measured:
    """What bench/measure.c reports about one finished command."""

    def __init__(self, report, err):
        wall_ns, utime_us, stime_us, maxrss_kib, rc = report.split()
        self.wall = int(wall_ns) / 1e9
        self.cpu = (int(utime_us) + int(stime_us)) / 1e6
        self.rss_mib = int(maxrss_kib) / 1024
        self.rc = int(rc)
        self.err = err


MEASURE = None  # path of the compiled bench/measure.c, set by main()


def run_measured(cmd, stdout=subprocess.DEVNULL, timeout=120):
    """Run cmd to completion under bench/measure.c (wall time, CPU time and
    peak RSS of the command alone); its stderr is kept for error messages."""
    with tempfile.NamedTemporaryFile(suffix=".measure") as report, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([MEASURE, report.name, *map(str, cmd)], stdin=subprocess.DEVNULL,
                                stdout=stdout, stderr=err, start_new_session=True)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        err.seek(0)
        text = err.read().decode(errors="replace")
        line = Path(report.name).read_text().strip()
        if not line:
            raise RuntimeError(f"{Path(cmd[0]).name} did not finish within {timeout} s: {first_line(text)}")
        return Measured(line, text)


def not_implemented(stderr):
    """The binary's own words for a feature that has not landed yet."""
    text = stderr.lower()
    return any(p in text for p in ("not implemented", "not available", "not supported yet"))


def first_line(text):
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:120]
    return "no output"


class Target:
    """A fixture program; it prints "ready" when set up and may answer
    requests written to its stdin, one line each."""

    def __init__(self, python, script, *args, ready_timeout=30):
        self.proc = subprocess.Popen(
            [python, str(FIXTURES / script), *map(str, args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.pid = self.proc.pid
        line = self.read_line(ready_timeout)
        if line != "ready":
            self.stop()
            raise RuntimeError(f"fixture {script} did not start (said {line!r})")
        # Let the threads settle into their functions before measuring.
        time.sleep(0.3)

    def read_line(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        return self.proc.stdout.readline().strip()

    def ask(self, request, timeout):
        self.proc.stdin.write(f"{request}\n")
        self.proc.stdin.flush()
        return self.read_line(timeout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


@contextlib.contextmanager
def bpf_stats_on():
    """kernel.bpf_stats_enabled set for a scenario (the eBPF programs' run
    time counted), then as it was."""
    stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    try:
        old = stats.read_text().strip()
        stats.write_text("1")
    except OSError as e:
        raise Skip(f"cannot enable kernel.bpf_stats_enabled: {e}")
    try:
        yield
    finally:
        stats.write_text(old)


def cpu_seconds(pid):
    """utime + stime of every thread of pid so far, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_seconds_precise(pid):
    """Time on a CPU of every live thread of pid so far, in nanoseconds from
    /proc/PID/task/*/schedstat: utime and stime come in 10 ms ticks, too
    coarse for a process that uses 0.1% of a CPU over a few seconds.
    Threads that have ended are not counted (the eBPF engine runs one)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def spawn(cmd):
    """Start a profiler in the background, its stderr kept in a file (a pipe
    nobody reads could fill up and stall it)."""
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    proc.err = err
    return proc


def stderr_of(proc):
    proc.err.seek(0)
    return proc.err.read().decode(errors="replace")


def early_exit(proc, what):
    """Skip when a background profiler has already given up."""
    if proc.poll() is not None:
        err = stderr_of(proc)
        reason = first_line(err)
        if not_implemented(err):
            reason = f"not-implemented: {reason}"
        raise Skip(f"{what} exited early: {reason}")


def stop_gently(proc, wait=10):
    """SIGINT (both profilers write their output and exit), then SIGKILL."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ----------------------------------------------------------- raw profiles


def read_raw(path):
    """Collapsed stacks: [(frames, count)]."""
    stacks = []
    try:
        text = Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return stacks
    for line in text.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def perf_samples(data, out):
    """`perf record`'s samples as collapsed stacks, one line per thread id
    (only their count is used), written to `out`; `data` removed."""
    counts = {}
    try:
        text = subprocess.run(["perf", "script", "-i", str(data), "-F", "tid"], capture_output=True,
                              text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        text = ""
    for line in text.splitlines():
        tid = line.strip()
        if tid:
            counts[tid] = counts.get(tid, 0) + 1
    Path(out).write_text("".join(f"thread {tid} {n}\n" for tid, n in counts.items()))
    data.unlink(missing_ok=True)


def function_of(frame):
    """`Class.name (file.py:12)` -> `name`."""
    return frame.split(" (", 1)[0].strip().rsplit(".", 1)[-1]


def is_native(frame):
    """Python frames read `name (file.py:line)`; native ones name a module
    (`name (libc.so.6)`) or a C source file."""
    where = frame.rpartition(" (")[2]
    return ".py" not in where or ".so" in where


# ------------------------------------------------------------- scenarios


class Bench:
    def __init__(self, args, pyspy, results):
        self.args = args
        self.python = args.python
        self.pyspy = pyspy
        self.results = results
        self.quick = args.quick
        self.tmp = Path(tempfile.mkdtemp(prefix="pyinspect-bench-"))
        self.last_detail = None  # the measurements behind dump_times' medians
        self.floors = {}  # (mode, rate) -> us per sample, set by machine-floor

    def ours(self, *args):
        return [str(PYINSPECT), *map(str, args)]

    def theirs(self, *args):
        return [self.pyspy, *map(str, args)]

    def probe(self, cmd, what):
        """Run cmd once; Skip with its first stderr line when it fails."""
        out = self.tmp / "probe.out"
        with open(out, "wb") as f:
            m = run_measured(cmd, stdout=f)
        if m.rc != 0:
            reason = first_line(m.err)
            if not_implemented(m.err):
                reason = f"not-implemented: {reason}"
            raise Skip(f"{what} failed: {reason}")
        return out.read_text(errors="replace")

    def dump_times(self, pid, ours_args, theirs_args, runs):
        """Interleaved dumps; medians of wall time and peak RSS (MiB)."""
        walls = {"ours": [], "theirs": []}
        rss = {"ours": [], "theirs": []}
        for _ in range(runs):
            for who, cmd in (("ours", self.ours(*ours_args)), ("theirs", self.theirs(*theirs_args))):
                m = run_measured(cmd)
                if m.rc != 0:
                    tool = "pyinspect" if who == "ours" else "py-spy"
                    raise Skip(f"{tool} dump failed: {first_line(m.err)}")
                walls[who].append(m.wall * 1000)
                rss[who].append(m.rss_mib)
        med = {k: statistics.median(v) for k, v in walls.items()}
        med_rss = {k: statistics.median(v) for k, v in rss.items()}
        names = {"ours": "pyinspect", "theirs": "py-spy"}
        self.last_detail = {
            "wall_ms": {names[k]: v for k, v in walls.items()},
            "rss_mib": {names[k]: v for k, v in rss.items()},
        }
        return med, med_rss

    def dump_json(self, pid, *extra):
        text = self.probe(self.ours("dump", "--json", "--pid", pid, *extra), "pyinspect dump --json")
        return json.loads(text.splitlines()[0])

    # 1
    def dump_4threads(self):
        runs = 10 if self.quick else 30
        with Target(self.python, "threads.py", 4, 1) as t:
            self.probe(self.ours("dump", "--pid", t.pid), "pyinspect dump")
            wall, rss = self.dump_times(t.pid, ["dump", "--pid", t.pid], ["dump", "--pid", t.pid], runs)
        r = self.results
        r.add("dump-4threads wall", wall["ours"], wall["theirs"], "<= 0.5x py-spy",
              verdict(wall["ours"] <= 0.5 * wall["theirs"]), "ms", f"median of {runs}",
              self.last_detail["wall_ms"])
        r.add("dump-4threads peak RSS", rss["ours"], rss["theirs"], "<= 10 MiB",
              verdict(rss["ours"] <= 10), "MiB", detail=self.last_detail["rss_mib"])

    # 2
    def dump_200threads(self):
        runs = 10 if self.quick else 20
        with Target(self.python, "threads.py", 200, 1) as t:
            doc = self.dump_json(t.pid)
            wall, _ = self.dump_times(t.pid, ["dump", "--pid", t.pid], ["dump", "--pid", t.pid], runs)
        threads = len(doc.get("threads", []))
        ok = wall["ours"] < 25 and threads == 200
        self.results.add("dump-200threads wall", wall["ours"], wall["theirs"], "< 25 ms, 200 threads",
                         verdict(ok), "ms", f"{threads}/200 threads in --json",
                         self.last_detail["wall_ms"])

    def dump_900frames(self):
        runs = 10 if self.quick else 20
        with Target(self.python, "deep.py", 900) as t:
            doc = self.dump_json(t.pid)
            wall, _ = self.dump_times(t.pid, ["dump", "--pid", t.pid], ["dump", "--pid", t.pid], runs)
        deepest = max(
            (sum(1 for f in th.get("frames", []) if f.get("function") == "deep") for th in doc.get("threads", [])),
            default=0,
        )
        ok = wall["ours"] < 25 and deepest == 900
        self.results.add("dump-900frames wall", wall["ours"], wall["theirs"], "< 25 ms, 900 frames",
                         verdict(ok), "ms", f"{deepest}/900 `deep` frames in --json",
                         self.last_detail["wall_ms"])

    def dump_10k_tasks(self):
        """dump of an event loop with 10,000 pending tasks (task trees on by
        default) against py-spy's dump, which shows no tasks."""
        runs = 10 if self.quick else 20
        with Target(self.python, "tasks.py", 10000) as t:
            doc = self.dump_json(t.pid)
            wall, _ = self.dump_times(t.pid, ["dump", "--pid", t.pid], ["dump", "--pid", t.pid], runs)
        counted = max(
            (len(th.get("tasks", [])) + th.get("tasks_left_out", 0) for th in doc.get("threads", [])),
            default=0,
        )
        ok = wall["ours"] < 100 and counted == 10001
        self.results.add("dump-10k-tasks wall", wall["ours"], wall["theirs"], "< 100 ms, 10,001 tasks",
                         verdict(ok), "ms", f"{counted}/10001 tasks counted in --json",
                         self.last_detail["wall_ms"])

    def dump_10k_greenlets(self):
        """dump of a gevent process with 10,000 sleeping greenlets (shown by
        default, --async-limit of them) against py-spy's dump, which shows
        only the running one."""
        runs = 10 if self.quick else 20
        with Target(self.python, "greenlets.py", 10000) as t:
            doc = self.dump_json(t.pid)
            wall, _ = self.dump_times(t.pid, ["dump", "--pid", t.pid], ["dump", "--pid", t.pid], runs)
        counted = max(
            (len(th.get("greenlets", [])) + th.get("greenlets_left_out", 0) for th in doc.get("threads", [])),
            default=0,
        )
        # The 10,000, main and the hub.
        ok = wall["ours"] < 100 and counted == 10002
        self.results.add("dump-10k-greenlets wall", wall["ours"], wall["theirs"], "< 100 ms, 10,002 greenlets",
                         verdict(ok), "ms", f"{counted}/10002 greenlets counted in --json",
                         self.last_detail["wall_ms"])

    def record_greenlets(self):
        """record --mode wall at 200 Hz on a gevent process with 100
        sleeping greenlets: CPU per tick without --async, with --async (the
        running greenlet's stack is the thread's own), and with --async-mode
        all (each suspended greenlet's stack added at every tick); py-spy
        --idle beside, which sees the running greenlet only. A tick is one
        sample of the thread (a root under --threads not named `greenlet ...`)."""
        reps, secs, rate = (1 if self.quick else 3), 5, 200
        modes = {"off": [], "async": ["--async"], "all": ["--async", "--async-mode", "all"]}
        per_tick, detail = {}, {}
        with Target(self.python, "greenlets.py", 100) as t:
            for mode, extra in modes.items():
                runs = self.record_both(
                    t.pid,
                    ["--rate", rate, "--mode", "wall", "--threads", "-d", secs, *extra],
                    ["-r", rate, "--idle", "--threads", "-d", secs],
                    reps,
                )
                us = []
                for m, stacks in runs["ours"]:
                    ticks = sum(c for st, c in stacks if '"greenlet ' not in st[0])
                    us.append(m.cpu / max(1, ticks) * 1e6)
                per_tick[mode] = statistics.median(us)
                theirs = [m.cpu / max(1, sum(c for _, c in st)) * 1e6 for m, st in runs["theirs"]]
                per_tick["py-spy"] = statistics.median(theirs)
                detail[mode] = us
        r = self.results
        ratio = per_tick["async"] / per_tick["off"]
        r.add("record-greenlets --async CPU/tick", per_tick["async"], per_tick["py-spy"],
              "<= 1.5x without --async", verdict(ratio <= 1.5), "us",
              f"{ratio:.2f}x the {per_tick['off']:.0f} us without --async; 100 greenlets, "
              f"wall, {rate} Hz, median of {reps}", detail)
        # With all, a tick samples the thread and the 101 greenlets it runs
        # (main's and the 100 sleeping): per stack, against a stack without.
        per_stack = per_tick["all"] / 102
        ratio_all = per_stack / per_tick["off"]
        r.add("record-greenlets --async-mode all CPU/stack", per_stack, per_tick["py-spy"],
              "<= 1.5x a stack without --async", verdict(ratio_all <= 1.5), "us",
              f"{ratio_all:.2f}x; {per_tick['all']:.0f} us a tick for the thread's stack and 101 "
              f"greenlets' ({per_tick['all'] / per_tick['off']:.1f}x a tick without --async)", detail)

    # 3
    def dump_native_3threads(self):
        runs = 10 if self.quick else 30
        with Target(self.python, "threads.py", 3, 1) as t:
            doc = self.dump_json(t.pid, "--native")
            native = sum(1 for th in doc.get("threads", []) for f in th.get("frames", [])
                         if f.get("kind") == "native")
            if not native:
                raise Skip("not-implemented: dump --native printed no native frames")
            args = ["dump", "--native", "--pid", t.pid]
            wall, _ = self.dump_times(t.pid, args, args, runs)
        self.results.add("dump-native-3threads wall", wall["ours"], wall["theirs"], "<= 0.5x py-spy",
                         verdict(wall["ours"] <= 0.5 * wall["theirs"]), "ms", f"median of {runs}",
                         self.last_detail["wall_ms"])

    def dump_core(self):
        """`dump --core` against `pystack core` on one gcore of the 4-thread
        fixture, plain and with native frames, interleaved; medians of wall
        time and peak RSS. pystack comes from PyPI in pyenv's 3.11
        (.ci/core-deps)."""
        pystack = find_pystack()
        if not shutil.which("gcore"):
            raise Skip("gcore (gdb) is not installed: run .ci/core-deps")
        runs = 5 if self.quick else 15
        with Target(self.python, "threads.py", 4, 1) as t:
            os.kill(t.pid, signal.SIGSTOP)
            base = self.tmp / "core"
            done = subprocess.run(["gcore", "-o", base, str(t.pid)], capture_output=True, text=True,
                                  timeout=300)
            core = Path(f"{base}.{t.pid}")
            if done.returncode != 0 or not core.exists():
                raise Skip(f"gcore failed: {first_line(done.stderr)}")
        size_mib = core.stat().st_size / (1 << 20)
        try:
            for label, ours_extra, theirs_extra in (("", [], []), (" --native", ["--native"], ["--native"])):
                cmds = {
                    "ours": self.ours("dump", "--core", core, *ours_extra),
                    "theirs": [pystack, "core", core, *theirs_extra],
                }
                walls = {"ours": [], "theirs": []}
                rss = {"ours": [], "theirs": []}
                for _ in range(runs):
                    for who, cmd in cmds.items():
                        m = run_measured(cmd, timeout=300)
                        if m.rc != 0:
                            tool = "pyinspect dump --core" if who == "ours" else "pystack core"
                            raise Skip(f"{tool} failed: {first_line(m.err)}")
                        walls[who].append(m.wall * 1000)
                        rss[who].append(m.rss_mib)
                wall = {k: statistics.median(v) for k, v in walls.items()}
                mem = {k: statistics.median(v) for k, v in rss.items()}
                names = {"ours": "pyinspect", "theirs": "pystack"}
                note = f"vs pystack core, median of {runs}, {size_mib:.0f} MiB core"
                self.results.add(f"dump-core{label} wall", wall["ours"], wall["theirs"], "<= 1x pystack",
                                 verdict(wall["ours"] <= wall["theirs"]), "ms", note,
                                 {names[k]: v for k, v in walls.items()})
                self.results.add(f"dump-core{label} peak RSS", mem["ours"], mem["theirs"], "<= 1x pystack",
                                 verdict(mem["ours"] <= mem["theirs"]), "MiB", note,
                                 {names[k]: v for k, v in rss.items()})
        finally:
            core.unlink(missing_ok=True)

    def dump_native_pause(self):
        """How long dump --native stops the target, from the target's view:
        the largest gap a ticking thread sees around one dump, minus the
        largest gap it sees over as long a time without one."""
        runs = 5 if self.quick else 15
        try:
            t = Target(self.python, "native_pause.py")
        except RuntimeError as e:
            raise Skip(str(e))
        with t:
            args = ["dump", "--native", "--pid", t.pid]
            self.probe(self.ours(*args), "pyinspect dump --native")
            results = {"ours": [], "theirs": [], "idle": []}
            for _ in range(runs):
                for who in ("idle", "ours", "theirs"):
                    t.ask("reset", 5)
                    time.sleep(0.05)
                    if who == "idle":
                        time.sleep(0.05)
                    else:
                        cmd = self.ours(*args) if who == "ours" else self.theirs(*args)
                        run_measured(cmd)
                    time.sleep(0.05)
                    results[who].append(float(t.ask("max", 5) or "nan"))
        med = {k: statistics.median(v) for k, v in results.items()}
        self.results.add("dump-native-pause (onnxruntime)", med["ours"], med["theirs"], "< 20 ms",
                         verdict(med["ours"] < 20), "ms",
                         f"largest tick gap around one dump, median of {runs}; "
                         f"{med['idle']:.1f} ms without a dump",
                         {"gap_ms": {"pyinspect": results["ours"], "py-spy": results["theirs"],
                                     "no dump": results["idle"]}})

    def evict(self, pid):
        """Drop what the page cache holds of the files `pid` maps and no
        process has mapped (symbol tables, string tables, debug files'
        sections): what a first dump after boot, or after the cache went
        to other work, reads from disk."""
        paths = set()
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    paths.add(parts[5].strip())
        for p in paths:
            try:
                fd = os.open(p, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)

    def record_over_time(self, cmd, secs):
        """Run a record to its end, its RSS polled every second; (RSS MiB
        over time, CPU seconds, peak RSS MiB, exit status, stderr)."""
        err = tempfile.TemporaryFile()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        rss = []
        deadline = time.monotonic() + secs + 120
        while time.monotonic() < deadline:
            time.sleep(1.0)
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            rss.append(int(line.split()[1]) / 1024)
            except OSError:
                pass
            done, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if done:
                break
        else:
            proc.kill()
            done, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode(errors="replace")
        return rss, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode, text

    def torch_native(self):
        """--native at inference scale (issue 20): a PyTorch worker
        (bench/fixtures/torch_native.py) under .ci/torch-workload's venv.
        dump --native cold (page cache of the mapped files evicted before
        each run) and warm: wall and peak RSS; record --native at 100 Hz
        (10 min, 1 with --quick): RSS over time, CPU per scheduled tick,
        and the target's longest hold (largest tick gap of a 0.5 ms ticker
        thread during the record, less the largest over as long a window
        without one). pyinspect and py-spy side by side."""
        if not Path(TORCH_PYTHON).exists():
            raise Skip(f"{TORCH_PYTHON} is missing: run .ci/torch-workload")
        cold_runs, warm_runs = (2, 3) if self.quick else (3, 10)
        secs = 60 if self.quick else 600
        try:
            t = Target(TORCH_PYTHON, "torch_native.py", ready_timeout=300)
        except RuntimeError as e:
            raise Skip(str(e))
        r = self.results
        names = {"ours": "pyinspect", "theirs": "py-spy"}
        with t:
            args = ["dump", "--native", "--pid", t.pid]
            self.probe(self.ours(*args), "pyinspect dump --native")
            for label, runs, cold in (("cold", cold_runs, True), ("warm", warm_runs, False)):
                walls = {"ours": [], "theirs": []}
                rss = {"ours": [], "theirs": []}
                for _ in range(runs):
                    for who in ("ours", "theirs"):
                        if cold:
                            self.evict(t.pid)
                        cmd = self.ours(*args) if who == "ours" else self.theirs(*args)
                        m = run_measured(cmd, timeout=300)
                        if m.rc != 0:
                            raise Skip(f"{names[who]} dump --native failed: {first_line(m.err)}")
                        walls[who].append(m.wall * 1000)
                        rss[who].append(m.rss_mib)
                wall = {k: statistics.median(v) for k, v in walls.items()}
                mem = {k: statistics.median(v) for k, v in rss.items()}
                note = f"median of {runs}" + (", page cache of the mapped files evicted" if cold else "")
                r.add(f"torch-native dump {label} wall", wall["ours"], wall["theirs"], "<= 300 ms",
                      verdict(wall["ours"] <= 300), "ms", note, {names[k]: v for k, v in walls.items()})
                r.add(f"torch-native dump {label} peak RSS", mem["ours"], mem["theirs"], "<= 100 MiB",
                      verdict(mem["ours"] <= 100), "MiB", note, {names[k]: v for k, v in rss.items()})
            # The ticker's own noise over a window as long as a record.
            t.ask("reset", 5)
            time.sleep(min(secs, 30))
            idle_gap = float(t.ask("max", 5) or "nan")
            rec = {}
            for who in ("ours", "theirs"):
                out = self.tmp / f"torch-rec-{who}.txt"
                if who == "ours":
                    cmd = self.ours("record", "--native", "--rate", 100, "-d", secs, "-f", "raw",
                                    "-o", out, "--pid", t.pid)
                else:
                    cmd = self.theirs("record", "--native", "-r", 100, "-d", secs, "-f", "raw",
                                      "-o", out, "--pid", t.pid)
                t.ask("reset", 5)
                rss, cpu, peak, rc, err = self.record_over_time(cmd, secs)
                gap = float(t.ask("max", 5) or "nan")
                if rc != 0 and who == "ours":
                    raise Skip(f"pyinspect record --native failed: {first_line(err)}")
                rec[who] = {"rss": rss, "cpu": cpu, "peak": peak, "gap": gap, "rc": rc}
        ticks = 100 * secs
        ours, theirs = rec["ours"], rec["theirs"]
        # RSS once warmed up: at 60 s (at half time in a --quick record of a minute).
        settle = min(60, secs // 2)
        minute = lambda v: v[min(settle - 1, len(v) - 1)] if v else float("nan")  # noqa: E731
        detail = {names[k]: v["rss"] for k, v in rec.items()}
        r.add("torch-native record peak RSS", ours["peak"], theirs["peak"], "<= 150 MiB",
              verdict(ours["peak"] <= 150), "MiB", f"record --native at 100 Hz for {secs} s", detail)
        growth = (ours["rss"][-1] - minute(ours["rss"])) if ours["rss"] else float("nan")
        their_growth = (theirs["rss"][-1] - minute(theirs["rss"])) if theirs["rss"] else float("nan")
        r.add("torch-native record RSS growth", growth, their_growth, "flat after 1 min",
              verdict(growth <= 5), "MiB", f"last RSS less the RSS at {settle} s (polled every second)")
        r.add("torch-native record CPU/tick", ours["cpu"] / ticks * 1e6, theirs["cpu"] / ticks * 1e6,
              "for reading", "-", "us", f"whole-run CPU / (100 Hz x {secs} s)")
        r.add("torch-native record longest hold", ours["gap"] - idle_gap, theirs["gap"] - idle_gap,
              "<= 20 ms", verdict(ours["gap"] - idle_gap <= 20), "ms",
              f"largest tick gap during the record less {idle_gap:.1f} ms without one",
              {"gap_ms": {"pyinspect": ours["gap"], "py-spy": theirs["gap"], "no record": idle_gap}})

    def native_gdb_agreement(self):
        """The gdb oracle (tests/native_gdb.rs): its agreement table."""
        env = dict(os.environ, PYINSPECT_ORACLE_REPEATS="10" if self.quick else "100")
        proc = subprocess.run(
            ["cargo", "test", "--release", "--test", "native_gdb", "--", "--nocapture",
             "--test-threads", "1"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
        rows = [l for l in proc.stderr.splitlines() if l.startswith("  all ")]
        if not rows:
            raise Skip(f"oracle did not run: {first_line(proc.stderr)}")
        for table, row in zip(("ctypes", "wheels"), rows):
            parts = row.split()
            agree = float(parts[2].rstrip("%"))
            self.results.add(f"native-gdb-agreement {table}", agree, None, ">= 98%, no extra frames",
                             verdict(agree >= 98.0 and parts[3] == "0"), "%",
                             f"gdb frames {parts[1]}, extra {parts[3]}, merged right {parts[4]}")

    def record_both(self, pid, ours_args, theirs_args, reps):
        """Interleaved records to raw files; per run (Measured, stacks)."""
        runs = {"ours": [], "theirs": []}
        for i in range(reps):
            for who in ("ours", "theirs"):
                out = self.tmp / f"rec-{who}-{i}.txt"
                out.unlink(missing_ok=True)
                if who == "ours":
                    cmd = self.ours("record", "--pid", pid, "-f", "raw", "-o", out, *ours_args)
                else:
                    cmd = self.theirs("record", "--pid", pid, "-f", "raw", "-o", out, *theirs_args)
                m = run_measured(cmd, timeout=60)
                stacks = read_raw(out)
                if m.rc != 0 or not stacks:
                    tool = "pyinspect" if who == "ours" else "py-spy"
                    reason = first_line(m.err) if m.rc != 0 else "empty profile"
                    if not_implemented(m.err):
                        reason = f"not-implemented: {reason}"
                    raise Skip(f"{tool} record failed: {reason}")
                runs[who].append((m, stacks))
        return runs

    # 4
    def record_cpu_per_sample(self):
        reps, secs, rate, threads = (1 if self.quick else 3), 5, 1000, 4
        with Target(self.python, "threads.py", threads, 1) as t:
            runs = self.record_both(
                t.pid,
                ["--rate", rate, "--nonblocking", "--idle", "-d", secs],
                ["-r", rate, "--nonblocking", "--idle", "-d", secs],
                reps,
            )
        per_sample, delivered, detail = {}, {}, {}
        for who, rs in runs.items():
            us, dl = [], []
            for m, stacks in rs:
                # One sample = one tick over every thread; with --idle all 4
                # threads are in each tick, so ticks = total count / 4.
                ticks = sum(c for _, c in stacks) / threads
                us.append(m.cpu / ticks * 1e6)
                dl.append(ticks / (rate * secs) * 100)
            per_sample[who] = statistics.median(us)
            delivered[who] = statistics.median(dl)
            detail["pyinspect" if who == "ours" else "py-spy"] = {"us_per_sample": us, "delivered_pct": dl}
        r = self.results
        r.add("record-cpu-per-sample", per_sample["ours"], per_sample["theirs"], "<= 1/3 of py-spy",
              verdict(per_sample["ours"] <= per_sample["theirs"] / 3), "us",
              f"CPU / ticks, 1000 Hz, median of {reps}", detail)
        r.add("record-1000Hz-delivered", delivered["ours"], delivered["theirs"], ">= 95%",
              verdict(delivered["ours"] >= 95), "%", "ticks / (1000 x 5 s)")

    # 4b (issue 13)
    def record_wall_100hz(self):
        """--mode wall at 100 Hz: every thread sampled, the waits of the 3
        off-CPU threads read from /proc (the call, and the fd described)
        and injected as leaf frames; against py-spy --idle at 100 Hz. CPU per
        tick in total (start-up included), and excluding each tool's start-up,
        measured separately the same way for both (a 10 Hz record for a second:
        attach, load, its few ticks taken out, write)."""
        reps, secs, rate, threads = (1 if self.quick else 3), 10, 100, 4
        ours_args = ["--mode", "wall"]
        theirs_args = ["--idle"]
        with Target(self.python, "threads.py", threads, 1) as t:
            starts = self.record_both(
                t.pid, ["--rate", 10, *ours_args, "-d", 1], ["-r", 10, *theirs_args, "-d", 1], reps)
            runs = self.record_both(
                t.pid,
                ["--rate", rate, *ours_args, "-d", secs],
                ["-r", rate, *theirs_args, "-d", secs],
                reps,
            )
        per_sample, after_startup, startup, detail = {}, {}, {}, {}
        for who, rs in runs.items():
            # The start-up run's own ticks are not start-up: they are taken
            # out at the same per-tick cost as the long run's.
            su_cpu = statistics.median(m.cpu for m, _ in starts[who])
            su_ticks = statistics.median(sum(c for _, c in st) / threads for _, st in starts[who])
            us, us_after = [], []
            for m, stacks in rs:
                ticks = sum(c for _, c in stacks) / threads
                us.append(m.cpu / ticks * 1e6)
                us_after.append(max(0.0, m.cpu - su_cpu) / max(1.0, ticks - su_ticks) * 1e6)
            per_sample[who] = statistics.median(us)
            after_startup[who] = statistics.median(us_after)
            startup[who] = max(0.0, su_cpu - su_ticks * after_startup[who] / 1e6) * 1000
            detail["pyinspect" if who == "ours" else "py-spy"] = {
                "us_per_sample": us, "us_per_sample_after_startup": us_after,
                "startup_cpu_s": [m.cpu for m, _ in starts[who]]}
        r = self.results
        r.add("record-wall-100Hz", per_sample["ours"], per_sample["theirs"], "<= 1/3 of py-spy",
              verdict(per_sample["ours"] <= per_sample["theirs"] / 3), "us",
              f"CPU / ticks, --mode wall vs py-spy --idle, 100 Hz, {secs} s, start-up included, "
              f"median of {reps}", detail)
        floor = self.floors.get(("pause", rate))
        r.add("record-wall-100Hz after start-up", after_startup["ours"], after_startup["theirs"],
              "<= 1/3 of py-spy", verdict(after_startup["ours"] <= after_startup["theirs"] / 3), "us",
              "(CPU - start-up CPU) / ticks, each tool's start-up measured alone"
              + (f"; machine floor (a wake-up, a stop, a release) {floor:.1f} us" if floor else ""))
        r.add("record-wall start-up", startup["ours"], startup["theirs"], "<= 1x py-spy",
              verdict(startup["ours"] <= startup["theirs"]), "ms",
              "CPU of a 10 Hz, 1 s record less its ticks")

    # 5
    def record_native_rate(self):
        reps, secs, rate, threads = 1, 5, 500, 4
        with Target(self.python, "threads.py", threads, 1) as t:
            runs = self.record_both(
                t.pid,
                ["--native", "--rate", rate, "--idle", "-d", secs],
                ["--native", "-r", rate, "--idle", "-d", secs],
                reps,
            )
        delivered = {}
        for who, rs in runs.items():
            _, stacks = rs[-1]
            if who == "ours" and not any(is_native(f) for frames, _ in stacks for f in frames):
                raise Skip("not-implemented: record --native wrote no native frames")
            delivered[who] = sum(c for _, c in stacks) / threads / (rate * secs) * 100
        self.results.add("record-native-rate delivered", delivered["ours"], delivered["theirs"],
                         ">= 95% of 500 Hz", verdict(delivered["ours"] >= 95), "%",
                         "ticks / (500 x 5 s), --idle")

    # 6
    def record_150_native_threads(self):
        rounds, secs = (2, 2) if self.quick else (4, 3)
        lib = self.tmp / "libnative_threads.so"
        build = subprocess.run(
            ["gcc", "-O2", "-shared", "-fPIC", "-o", lib, FIXTURES / "native_threads.c", "-lpthread"],
            capture_output=True, text=True,
        )
        if build.returncode != 0:
            raise Skip(f"gcc failed: {first_line(build.stderr)}")
        # Alone, pyinspect, alone, py-spy, ..., alone: each profiled window
        # is compared with the two alone windows around it, so the slow drift
        # of a shared machine's load cancels out of each pair.
        order = ["alone"] + ["ours", "alone", "theirs", "alone"] * rounds
        rates = []
        with Target(self.python, "native_work.py", lib, 150, 1000) as t:
            t.ask(1, 30)  # warm-up: the first window after start-up runs slow
            for i, who in enumerate(order):
                prof = None
                if who != "alone":
                    tool = self.ours if who == "ours" else self.theirs
                    prof = spawn(tool("record", "--pid", t.pid, "-r", 100, "-f", "raw",
                                      "-o", self.tmp / f"native150-{i}.txt", "-d", secs + 10))
                    time.sleep(1.0)  # attached and sampling before the work starts
                    early_exit(prof, ("pyinspect" if who == "ours" else "py-spy") + " record")
                answer = t.ask(secs, secs + 30)
                if prof is not None:
                    stop_gently(prof)
                if not answer or not answer.startswith("rate "):
                    raise RuntimeError(f"native_work.py answered {answer!r}")
                rates.append(float(answer.split()[1]))
        slow = {"ours": [], "theirs": []}
        for i, who in enumerate(order):
            if who != "alone":
                alone = (rates[i - 1] + rates[i + 1]) / 2
                slow[who].append((alone - rates[i]) / alone * 100)
        med = {k: statistics.median(v) for k, v in slow.items()}
        alone = statistics.median(r for r, who in zip(rates, order) if who == "alone")
        self.results.add("record-150-native-threads slowdown", med["ours"], med["theirs"], "<= 5%",
                         verdict(med["ours"] <= 5), "%",
                         f"100 Hz, {secs} s windows, median of {rounds} paired rounds; "
                         f"Python loop alone {alone / 1e6:.2f} M it/s",
                         {"order": order, "rates": rates, "slowdowns_pct": slow})

    # 7
    def top_overhead(self):
        window = 5 if self.quick else 12
        warmup = 2
        with Target(self.python, "threads.py", 4, 1) as t:
            top_ours = self.cpu_in_pty(self.ours("top", "--pid", t.pid, "-r", 100), warmup, window, "pyinspect top")
            rec = spawn(self.ours("record", "--pid", t.pid, "-r", 100, "-f", "raw", "-o", self.tmp / "top-rec.txt",
                                  "-d", warmup + window + 10))
            try:
                rec_cpu = self.cpu_over(rec, warmup, window, "pyinspect record")
            finally:
                stop_gently(rec)
            top_theirs = self.cpu_in_pty(self.theirs("top", "--pid", t.pid, "-r", 100), warmup, window, "py-spy top")
        self.results.add("top-overhead (top - record)", top_ours - rec_cpu, None, "<= 5% of a core",
                         verdict(top_ours - rec_cpu <= 5), "%",
                         f"top {top_ours:.1f}%, record {rec_cpu:.1f}%, py-spy top {top_theirs:.1f}%; {window} s")

    def watch_overhead(self):
        """`watch` at its default rate (50 Hz) on a 4-thread service, its CPU
        beside `record`'s at the same rate, and `watch` at 100 Hz for scale:
        record, watch, watch at 100 Hz, record... (interleaved, so the drift
        of a shared machine's load falls on each), the median of each."""
        window = 5 if self.quick else 15
        warmup = 2
        runs = 2 if self.quick else 3
        rate = 50
        cpu = {"record": [], "watch": [], "watch-100": []}
        with Target(self.python, "threads.py", 4, 1) as t:
            for i in range(runs):
                for what in cpu:
                    if what == "record":
                        cmd = self.ours("record", "--pid", t.pid, "-r", rate, "-f", "raw",
                                        "-o", self.tmp / f"watch-rec-{i}.txt", "-d", warmup + window + 10)
                    else:
                        # The default rate: no --rate for the measured one.
                        extra = ["-r", 100] if what == "watch-100" else []
                        cmd = self.ours("watch", "--pid", t.pid, *extra, "-d", warmup + window + 10,
                                        "-o", self.tmp / f"{what}-{i}.jsonl")
                    proc = spawn(cmd)
                    try:
                        cpu[what].append(self.cpu_over(proc, warmup, window, f"pyinspect {what}"))
                    finally:
                        stop_gently(proc)
        med = {k: statistics.median(v) for k, v in cpu.items()}
        self.results.add(f"watch-cpu (4-thread service, default {rate} Hz)", med["watch"], None, "<= 1% of a core",
                         verdict(med["watch"] <= 1), "%",
                         f"record at {rate} Hz {med['record']:.2f}%, watch at 100 Hz {med['watch-100']:.2f}%; "
                         f"median of {runs}, {window} s each",
                         {"cpu_pct": cpu})

    def cpu_over(self, proc, warmup, window, what, drain=None, precise=False):
        """CPU % of one core that proc uses over `window` seconds after `warmup`
        (precise: counted in nanoseconds, for a single-threaded process)."""
        cpu = cpu_seconds_precise if precise else cpu_seconds
        deadline = time.monotonic() + warmup
        while time.monotonic() < deadline:
            if drain:
                drain(0.05)
            else:
                time.sleep(0.05)
            if proc.poll() is not None:
                err = proc.screen if hasattr(proc, "screen") else stderr_of(proc)
                reason = first_line(err)
                if not_implemented(err):
                    reason = f"not-implemented: {reason}"
                raise Skip(f"{what} exited early: {reason}")
        c0, t0 = cpu(proc.pid), time.monotonic()
        end = t0 + window
        while time.monotonic() < end:
            if drain:
                drain(0.05)
            else:
                time.sleep(0.05)
        return (cpu(proc.pid) - c0) / (time.monotonic() - t0) * 100

    def cpu_in_pty(self, cmd, warmup, window, what):
        """Run an interactive view in a 120x40 pseudo-terminal, keep reading
        its screen output (as a terminal would), measure its CPU, quit it."""
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
        os.close(slave)
        screen = bytearray()

        def drain(timeout):
            ready, _, _ = select.select([master], [], [], timeout)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    return
                screen.extend(chunk)
                del screen[:-4096]
                proc.screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.decode(errors="replace"))

        proc.screen = ""
        try:
            return self.cpu_over(proc, warmup, window, what, drain)
        finally:
            try:
                os.write(master, b"q")
            except OSError:
                pass
            deadline = time.monotonic() + 1.5
            while proc.poll() is None and time.monotonic() < deadline:
                drain(0.05)
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # py-spy top quits only on Ctrl-C
                deadline = time.monotonic() + 3
                while proc.poll() is None and time.monotonic() < deadline:
                    drain(0.05)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            os.close(master)

    # 8
    def accuracy(self):
        secs = 8 if self.quick else 20
        shares, truth = {}, {}
        with Target(self.python, "accuracy.py") as t:
            for who in ("ours", "theirs"):
                out = self.tmp / f"accuracy-{who}.txt"
                tool = self.ours if who == "ours" else self.theirs
                prof = spawn(tool("record", "--pid", t.pid, "-r", 200, "-f", "raw", "-o", out, "-d", secs + 10))
                time.sleep(1.0)
                name = "pyinspect" if who == "ours" else "py-spy"
                early_exit(prof, f"{name} record")
                answer = t.ask(secs, secs + 30)
                stop_gently(prof)
                if not answer or not answer.startswith("share "):
                    raise RuntimeError(f"accuracy.py answered {answer!r}")
                truth[who] = float(answer.split()[1]) * 100
                # Only samples inside `work` count: before and after the
                # request the fixture waits on stdin.
                in_work = [(frames, c) for frames, c in read_raw(out)
                           if any(function_of(f) == "work" for f in frames)]
                total = sum(c for _, c in in_work)
                if not total:
                    raise Skip(f"{name}: no samples inside work()")
                hot = sum(c for frames, c in in_work if any(function_of(f) == "hot" for f in frames))
                shares[who] = hot / total * 100
        err = {k: abs(shares[k] - truth[k]) for k in shares}
        self.results.add("accuracy hot-share error", err["ours"], err["theirs"], "within 2 pp",
                         verdict(err["ours"] <= 2), "pp",
                         f"sampled {shares['ours']:.1f}% vs true {truth['ours']:.1f}%; "
                         f"py-spy {shares['theirs']:.1f}% vs {truth['theirs']:.1f}%; 200 Hz, {secs} s",
                         {"sampled_pct": {"pyinspect": shares["ours"], "py-spy": shares["theirs"]},
                          "true_pct": {"pyinspect": truth["ours"], "py-spy": truth["theirs"]}})


    # 8 (issue 15)
    # (issues 13 and 15)
    def machine_floor(self):
        """What this machine charges any sampler per sample before it reads a
        byte: a wake-up at the rate (`bench/floor.c sleep`), and a wake-up plus
        one ptrace stop and release of a busy thread (`floor.c pause`), at
        100 Hz, 1 kHz and 10 kHz, on the busy thread of `threads.py 4 1` under
        sid's 3.15. Every tool's CPU per sample is its floor plus its own
        work; the record rows print theirs beside these."""
        secs, reps = (2, 1) if self.quick else (4, 3)
        exe = build_floor(self.tmp)
        with Target(sid_python("3.15"), "threads.py", 4, 1) as t:
            busy = busy_thread(t.pid)
            if busy is None:
                raise Skip("no running thread in the fixture")
            for rate in (100, 1000, 10000):
                for mode in ("sleep", "pause"):
                    cmd = [exe, mode, rate, secs] + ([busy] if mode == "pause" else [])
                    runs = [run_measured(cmd, timeout=secs + 30) for _ in range(reps)]
                    if any(m.rc != 0 for m in runs):
                        raise Skip(f"floor {mode} failed: {first_line(runs[0].err)}")
                    us = [m.cpu / (rate * secs) * 1e6 for m in runs]
                    self.floors[(mode, rate)] = statistics.median(us)
                    what = "a wake-up" if mode == "sleep" else "a wake-up, a stop and a release"
                    self.results.add(f"floor {mode} {rate} Hz", self.floors[(mode, rate)], None, "-",
                                     "INFO", "us", f"CPU per sample of {what} alone, median of {reps}",
                                     {"us_per_sample": us})

    def record_vs_cpython_sampler(self):
        """On one CPython 3.15 process (4 threads), pyinspect, CPython's own
        sampler (`profiling.sampling attach -a`) and py-spy at 1 and 10 kHz,
        non-blocking and pausing: CPU per sample after start-up, share of the
        asked rate delivered, target slowdown. Then 1 kHz on 3.12 against py-spy.
        pyinspect's eBPF engine (`--engine bpf`, which never pauses) runs in
        the same rows as `pyinspect-bpf`: its CPU adds the program's kernel
        time (kernel.bpf_stats_enabled, set for the scenario, then restored),
        which the kernel spends in the target's threads and at switches."""
        secs, work = (3, 1.5) if self.quick else (5, 2.5)
        threads = 4
        py315 = sid_python("3.15")

        def tools(python):
            t = {
                "pyinspect": lambda pid, rate, d, out, block: self.ours(
                    "record", "-p", pid, "-r", rate, "-d", d, "--idle", "-f", "raw", "-o", out,
                    *([] if block else ["--nonblocking"])),
                "py-spy": lambda pid, rate, d, out, block: self.theirs(
                    "record", "-p", pid, "-r", rate, "-d", d, "--idle", "-f", "raw", "-o", out,
                    *([] if block else ["--nonblocking"])),
            }
            t["pyinspect-bpf"] = lambda pid, rate, d, out, block: self.ours(
                "record", "-p", pid, "-r", rate, "-d", d, "--idle", "-f", "raw", "-o", out,
                "--engine", "bpf")
            # The kernel's own sampler at the same rate, with no eBPF program
            # and no stacks (perf record of the interrupted instruction
            # alone): what the timer interrupts cost the target by
            # themselves, the floor under the eBPF engine's slowdown.
            if shutil.which("perf"):
                t["perf"] = lambda pid, rate, d, out, block: [
                    "perf", "record", "-q", "-e", "cpu-clock", "-F", str(rate), "-p", str(pid),
                    "-o", f"{out}.data", "--", "sleep", str(d)]
            if python == py315:
                t["cpython"] = lambda pid, rate, d, out, block: [
                    py315, "-m", "profiling.sampling", "attach", "-a", "-r", str(rate), "-d", str(d),
                    "--collapsed", "-o", str(out), *(["--blocking"] if block else []), str(pid)]
            return t

        def one_run(target, cmd, out, wait_s):
            """Run cmd under measure.c while the target works in the middle of
            its recording; returns (Measured, ticks, target rate with it)."""
            out.unlink(missing_ok=True)
            with tempfile.NamedTemporaryFile(suffix=".measure") as report, tempfile.TemporaryFile() as err:
                proc = subprocess.Popen([MEASURE, report.name, *map(str, cmd)], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
                time.sleep(wait_s)
                rate = None
                if proc.poll() is None:
                    answer = target.ask(work, work + 30)
                    if answer and answer.startswith("rate "):
                        rate = float(answer.split()[1])
                try:
                    proc.wait(secs + 60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                err.seek(0)
                text = err.read().decode(errors="replace")
                line = Path(report.name).read_text().strip()
            if cmd[0] == "perf":
                perf_samples(Path(f"{out}.data"), out)
            if not line:
                return None, 0, rate, "did not finish"
            m = Measured(line, text)
            stacks = read_raw(out) if out.exists() else []
            # perf samples a thread only on its CPU: its ticks are its
            # interrupts, all threads together (one CPU runs Python at a
            # time: the GIL).
            ticks = sum(c for _, c in stacks) / (1 if cmd[0] == "perf" else threads)
            if m.rc != 0 or not stacks:
                return m, 0, rate, first_line(text) if m.rc != 0 else "empty profile"
            return m, ticks, rate, None

        rows = []

        def measure(python, label, rates, modes):
            with Target(python, "work_threads.py") as t:
                t.ask(1, 30)  # warm-up
                for name, make in tools(python).items():
                    for block in modes:
                        if block and name in ("pyinspect-bpf", "perf"):
                            continue
                        # Start-up alone: one sample a second for a second.
                        su = self.tmp / f"startup-{name}.txt"
                        m0, _, _, why0 = one_run(t, make(t.pid, 1, 1, su, block), su, 0.0)
                        startup_cpu = m0.cpu + program_s(m0) if m0 and why0 is None else 0.0
                        startup_wall = m0.wall - 1.0 if m0 and why0 is None else 0.5
                        for rate in rates:
                            alone = float(t.ask(work, work + 30).split()[1])
                            out = self.tmp / f"rec-{name}-{rate}-{block}.txt"
                            m, ticks, with_rate, why = one_run(
                                t, make(t.pid, rate, secs, out, block), out, max(0.3, startup_wall + 0.3))
                            row = {"python": label, "tool": name, "mode": "pausing" if block else "nonblocking",
                                   "rate": rate, "error": why}
                            if why is None and ticks > 0:
                                cpu = max(0.0, m.cpu + program_s(m) - startup_cpu)
                                row["us_per_sample"] = cpu / ticks * 1e6
                                row["cpu_pct"] = cpu / secs * 100
                                row["program_s"] = program_s(m)
                                row["delivered_pct"] = ticks / (rate * secs) * 100
                                row["startup_cpu_s"] = startup_cpu
                                row["wall_s"] = m.wall
                            if with_rate:
                                row["slowdown_pct"] = (alone - with_rate) / alone * 100
                            rows.append(row)

        def program_s(m):
            """The eBPF program's run time, from the engine's summary line."""
            found = re.search(r"eBPF program: \d+ runs .*?([\d.]+) ms in all", m.err or "")
            return float(found.group(1)) / 1000 if found else 0.0

        stats = Path("/proc/sys/kernel/bpf_stats_enabled")
        old_stats = stats.read_text().strip() if stats.exists() else None
        try:
            if old_stats is not None:
                stats.write_text("1")
            measure(py315, "3.15", [1000, 10000], [False, True])
            measure(self.python, version_of(self.python), [1000], [False, True])
        finally:
            if old_stats is not None:
                stats.write_text(old_stats)

        def cell(r, key, unit):
            if r is None or r.get(key) is None:
                return "failed" if r and r.get("error") else "-"
            return f"{r[key]:.1f}{unit}"

        def above_floor(r):
            """CPU per sample less what a wake-up alone costs at the row's
            rate (machine-floor, when it ran), which every tool pays. A
            pausing tool also pays a stop and release (floor pause) at the
            samples where a thread of the fixture runs: about half of them."""
            floor = self.floors.get(("sleep", r["rate"]))
            if floor is None or r.get("us_per_sample") is None:
                return "-"
            return f"{r['us_per_sample'] - floor:.1f}"

        print(f"\n  {'python':<6} {'mode':<11} {'rate':>6}  {'tool':<10} {'us/sample':>10} {'delivered':>10} "
              f"{'slowdown':>9} {'above wake-up':>14}")
        for r in rows:
            print(f"  {r['python']:<6} {r['mode']:<11} {r['rate']:>6}  {r['tool']:<10} "
                  f"{cell(r, 'us_per_sample', ''):>10} {cell(r, 'delivered_pct', '%'):>10} "
                  f"{cell(r, 'slowdown_pct', '%'):>9} {above_floor(r):>14}"
                  + (f"  ({r['error'][:70]})" if r.get("error") else ""))
        print(flush=True)

        def find(py, tool, mode, rate):
            for r in rows:
                if (r["python"], r["tool"], r["mode"], r["rate"]) == (py, tool, mode, rate):
                    return r
            return None

        for py in ("3.15", version_of(self.python)):
            for rate in (1000, 10000):
                b = find(py, "pyinspect-bpf", "nonblocking", rate)
                if b is None:
                    continue
                peer = find(py, "cpython", "nonblocking", rate) or find(py, "py-spy", "nonblocking", rate)
                spy = find(py, "py-spy", "nonblocking", rate)
                perf = find(py, "perf", "nonblocking", rate)
                # CPU per sample is judged by record-bpf-engine (measured over a
                # window, start-up apart); here the whole run less a start-up
                # run, beside the peers', and what the target lost.
                d, slow = b.get("delivered_pct"), b.get("slowdown_pct")
                ok = d is not None and d >= 99 and slow is not None and slow <= 1
                self.results.add(f"rec{py} {rate // 1000}k bpf delivered", d,
                                 peer.get("delivered_pct") if peer else None,
                                 ">= 99%, slowdown <= 1%", verdict(ok), "%",
                                 f"target slowdown {cell(b, 'slowdown_pct', '%')} "
                                 f"(vs {peer['tool'] if peer else '-'} {cell(peer, 'slowdown_pct', '%')}; "
                                 f"the kernel's own perf record, no program: {cell(perf, 'slowdown_pct', '%')}); "
                                 f"{cell(b, 'us_per_sample', ' us')}/sample, program "
                                 f"{b.get('program_s', 0) * 1e3:.0f} ms; py-spy {cell(spy, 'us_per_sample', ' us')}, "
                                 f"ptrace engine {cell(find(py, 'pyinspect', 'nonblocking', rate), 'us_per_sample', ' us')}",
                                 {"rows": [b, peer, spy, perf]})
            for mode in ("nonblocking", "pausing"):
                for rate in (1000, 10000):
                    ours = find(py, "pyinspect", mode, rate)
                    if ours is None:
                        continue
                    peer = find(py, "cpython", mode, rate) or find(py, "py-spy", mode, rate)
                    spy = find(py, "py-spy", mode, rate)
                    o, c, s = (x.get("us_per_sample") if x else None for x in (ours, peer, spy))
                    ok = o is not None and (c is None or o <= c / 2) and (s is None or o <= s / 4)
                    peer_name = peer["tool"] if peer else "-"
                    self.results.add(f"rec{py} {rate // 1000}k {mode} us/sample", o, c,
                                     "<= 1/2 CPython, 1/4 py-spy", verdict(ok), "us",
                                     f"vs {peer_name}; py-spy {cell(spy, 'us_per_sample', ' us')}",
                                     {"rows": [ours, peer, spy]})
                    want = 95 if mode == "nonblocking" or rate <= 2000 else 20
                    d = ours.get("delivered_pct")
                    self.results.add(f"rec{py} {rate // 1000}k {mode} delivered", d,
                                     peer.get("delivered_pct") if peer else None,
                                     f">= {want}% of {rate} Hz", verdict(d is not None and d >= want), "%",
                                     f"slowdown {cell(ours, 'slowdown_pct', '%')} vs {peer_name} "
                                     f"{cell(peer, 'slowdown_pct', '%')}")

    # ---------------------------------------- 3.14, 3.15 and profiling.sampling

    def newest_pythons(self):
        """dump-4threads on Debian sid's 3.14 and 3.15, against py-spy."""
        runs = 10 if self.quick else 20
        for version in ("3.14", "3.15"):
            python = sid_python(version)
            with Target(python, "threads.py", 4, 1) as t:
                self.probe(self.ours("dump", "--pid", t.pid), f"pyinspect dump on {version}")
                args = ["dump", "--pid", t.pid]
                wall, rss = self.dump_times(t.pid, args, args, runs)
            self.results.add(f"dump-4threads {version} wall", wall["ours"], wall["theirs"],
                             "<= 0.5x py-spy", verdict(wall["ours"] <= 0.5 * wall["theirs"]), "ms",
                             f"sid {version}, median of {runs}", self.last_detail["wall_ms"])

    def profiling_sampling(self):
        """On sid's 3.15, CPython's own remote sampler (`python3.15 -m
        profiling.sampling`) beside pyinspect and py-spy, on one process:
        dump latency, then record CPU per sample and the share of the asked
        rate delivered at 1 kHz and 10 kHz, every tool non-blocking."""
        python = sid_python("3.15")
        cpython = [python, "-m", "profiling.sampling"]
        threads, secs = 4, (3 if self.quick else 5)
        dump_runs, reps = (5, 1) if self.quick else (10, 2)
        tools = ("pyinspect", "py-spy", "profiling.sampling")
        with Target(python, "threads.py", threads, 1) as t:
            pid = t.pid
            dumps = {
                "pyinspect": self.ours("dump", "--pid", pid),
                "py-spy": self.theirs("dump", "--pid", pid),
                "profiling.sampling": [*cpython, "dump", "-a", pid],
            }
            walls = {k: [] for k in tools}
            for _ in range(dump_runs):
                for tool in tools:
                    m = run_measured(dumps[tool])
                    if m.rc != 0:
                        raise Skip(f"{tool} dump failed on 3.15: {first_line(m.err)}")
                    walls[tool].append(m.wall * 1000)
            wall = {k: statistics.median(v) for k, v in walls.items()}
            self.add_three("3.15 dump wall", wall, "ms", "<= 0.5x best peer",
                           lambda o, best: o <= 0.5 * best, f"median of {dump_runs}", walls)

            for rate in (1000, 10000):
                us = {k: [] for k in tools}
                share = {k: [] for k in tools}
                for i in range(reps):
                    for tool in tools:
                        out = self.tmp / f"ps-{tool}-{rate}-{i}.txt"
                        out.unlink(missing_ok=True)
                        if tool == "pyinspect":
                            cmd = self.ours("record", "--pid", pid, "-f", "raw", "-o", out, "--rate", rate,
                                            "--nonblocking", "--idle", "-d", secs)
                        elif tool == "py-spy":
                            cmd = self.theirs("record", "--pid", pid, "-f", "raw", "-o", out, "-r", rate,
                                              "--nonblocking", "--idle", "-d", secs)
                        else:
                            # Non-blocking unless --blocking; -a: every thread, idle ones too.
                            cmd = [*cpython, "attach", "-a", "-r", rate, "-d", secs, "--collapsed",
                                   "-o", out, pid]
                        m = run_measured(cmd, timeout=secs + 60)
                        stacks = read_raw(out)
                        if m.rc != 0 or not stacks:
                            reason = first_line(m.err) if m.rc != 0 else "empty profile"
                            raise Skip(f"{tool} record at {rate} Hz failed: {reason}")
                        # Every thread is in every tick (--idle / -a).
                        ticks = sum(c for _, c in stacks) / threads
                        us[tool].append(m.cpu / ticks * 1e6)
                        share[tool].append(ticks / (rate * secs) * 100)
                med_us = {k: statistics.median(v) for k, v in us.items()}
                med_share = {k: statistics.median(v) for k, v in share.items()}
                khz = f"{rate // 1000} kHz"
                self.add_three(f"3.15 record {khz} CPU/sample", med_us, "us", "<= 0.5x best peer",
                               lambda o, best: o <= 0.5 * best,
                               f"whole-run CPU / ticks, --nonblocking, {secs} s, median of {reps}",
                               {"us_per_sample": us, "delivered_pct": share})
                self.add_three(f"3.15 record {khz} delivered", med_share, "%", ">= 95% of the rate",
                               lambda o, best: o >= 95, f"ticks / ({rate} x {secs} s)", share,
                               higher_is_better=True)

    # issue 25
    def recorder_cost(self, cmd, out, warmup, window, secs, what, precise):
        """Run a recorder that writes raw stacks to `out` for `secs`: its CPU
        (% of a core) over `window` after `warmup`, the eBPF program's (from
        its summary line, 0 without one), and its stacks."""
        proc = spawn(cmd)
        try:
            cpu_pct = self.cpu_over(proc, warmup, window, what, precise=precise)
            proc.wait(60)
        finally:
            stop_gently(proc)
        err = stderr_of(proc)
        stacks = read_raw(out)
        if proc.returncode != 0 or not stacks:
            raise Skip(f"{what} failed: {first_line(err)}")
        m = re.search(r"eBPF program: (\d+) runs .*?([\d.]+) ms in all", err)
        prog_pct = float(m.group(2)) / 1000 / secs * 100 if m else 0.0
        return cpu_pct, prog_pct, stacks

    def record_bpf_engine(self):
        """CPU per sample of `record --engine bpf` against the default
        engine, at 1 and 10 kHz on 4 busy threads: pyinspect's own CPU over
        a window after start-up (loading and verifying the program is a
        one-time cost), plus the eBPF program's kernel time from
        kernel.bpf_stats_enabled (set here for the scenario, then restored)."""
        warmup, window = 2, (4 if self.quick else 8)
        with bpf_stats_on(), Target(self.python, "threads.py", 4, 4) as t:
            for rate in (1000, 10000):
                cells = {}
                for engine in ("ptrace", "bpf"):
                    out = self.tmp / f"bpf-{engine}-{rate}.txt"
                    out.unlink(missing_ok=True)
                    secs = warmup + window + 1
                    cmd = self.ours("record", "--pid", t.pid, "--engine", engine, "-r", rate,
                                    "-d", secs, "-f", "raw", "-o", out)
                    cpu_pct, prog_pct, stacks = self.recorder_cost(
                        cmd, out, warmup, window, secs, f"record --engine {engine}", engine == "bpf")
                    samples = sum(c for _, c in stacks)
                    per_s = samples / secs
                    us = (cpu_pct + prog_pct) / 100 / per_s * 1e6
                    cells[engine] = (us, cpu_pct, prog_pct, per_s)
                b, p = cells["bpf"], cells["ptrace"]
                self.results.add(
                    f"record-bpf-{rate // 1000}kHz CPU/sample", b[0], None, "<= 3 us, < 1% at 1 kHz",
                    verdict(b[0] <= 3 and (rate != 1000 or b[1] + b[2] < 1)), "us",
                    f"bpf: {b[1]:.2f}% user+sys + {b[2]:.2f}% program, {b[3]:.0f} samples/s; "
                    f"ptrace engine: {p[0]:.1f} us/sample, {p[1]:.1f}% of a core, {p[3]:.0f} samples/s",
                    {"bpf": b, "ptrace": p})

    def watch_bpf(self):
        """`watch` on the eBPF engine against the default engine, at 50 Hz
        (watch's default) and 250 Hz, on a service of four threads (one
        busy in pure Python, three waiting): pyinspect's CPU (schedstat,
        over the work window) plus the eBPF programs' kernel time (its
        summary line, kernel.bpf_stats_enabled), and the busy thread's
        slowdown against its rate alone just before (the default engine
        pauses the process at each tick; the eBPF engine never does)."""
        work = 3 if self.quick else 6
        runs = 2 if self.quick else 3
        cells = {}
        with bpf_stats_on(), Target(self.python, "work_threads.py") as t:
            t.ask(1, 30)  # warm-up
            for rate in (50, 250):
                for engine in ("ptrace", "bpf"):
                    cpu, prog, slow = [], [], []
                    for i in range(runs):
                        alone = float(t.ask(work, work + 30).split()[1])
                        secs = work + 3
                        proc = spawn(self.ours("watch", "--pid", t.pid, "--engine", engine, "-r", rate,
                                               "-d", secs, "-o", self.tmp / f"watch-{engine}-{rate}-{i}.jsonl"))
                        try:
                            time.sleep(1.5)
                            if proc.poll() is not None:
                                raise Skip(f"watch --engine {engine} ended: {first_line(stderr_of(proc))}")
                            before = cpu_seconds_precise(proc.pid)
                            with_rate = float(t.ask(work, work + 30).split()[1])
                            used = cpu_seconds_precise(proc.pid) - before
                            proc.wait(secs + 30)
                        finally:
                            stop_gently(proc)
                        m = re.search(r"eBPF program: (\d+) runs .*?([\d.]+) ms in all", stderr_of(proc))
                        s = re.search(r"sched_switch program: \d+ runs, [\d.]+ µs each, ([\d.]+) ms in all",
                                      stderr_of(proc))
                        program = (float(m.group(2)) if m else 0.0) + (float(s.group(1)) if s else 0.0)
                        # The programs ran over the whole watch: their share
                        # over the work window is taken as their mean.
                        cpu.append(used / work * 100)
                        prog.append(program / 1000 / secs * 100)
                        slow.append((alone - with_rate) / alone * 100)
                    cells[(engine, rate)] = (statistics.median(cpu), statistics.median(prog),
                                             statistics.median(slow))
        for rate in (50, 250):
            b, p = cells[("bpf", rate)], cells[("ptrace", rate)]
            self.results.add(
                f"watch-bpf {rate} Hz CPU", b[0] + b[1], None, "<= the default engine's",
                verdict(b[0] + b[1] <= p[0] + p[1]), "%",
                f"bpf: {b[0]:.2f}% pyinspect + {b[1]:.2f}% programs, target slowdown {b[2]:.1f}%; "
                f"ptrace: {p[0]:.2f}% pyinspect, target slowdown {p[2]:.1f}%; median of {runs}, {work} s each",
                {"bpf": b, "ptrace": p})

    def record_greenlets_bpf(self):
        """`record --async --async-mode all` on the eBPF engine against the
        default engine's, on a gevent process with 100 sleeping greenlets,
        --mode wall at 200 Hz: pyinspect's CPU over a window after start-up
        plus the eBPF programs' kernel time, per tick of the thread (a root
        under --threads not named `greenlet ...`). The default engine pauses
        the thread and reads every greenlet at each tick; the eBPF engine
        takes the thread's stacks from its programs and reads the greenlets
        (without a pause) about once a period, never more than a tenth of
        the time."""
        warmup, window, rate = 2, (4 if self.quick else 8), 200
        cells = {}
        with bpf_stats_on(), Target(self.python, "greenlets.py", 100) as t:
            secs = warmup + window + 1
            for engine in ("ptrace", "bpf"):
                out = self.tmp / f"greenlets-{engine}.txt"
                out.unlink(missing_ok=True)
                cmd = self.ours("record", "--pid", t.pid, "--engine", engine, "-r", rate, "--mode", "wall",
                                "--threads", "--async", "--async-mode", "all", "-d", secs, "-f", "raw", "-o", out)
                cpu_pct, prog_pct, stacks = self.recorder_cost(
                    cmd, out, warmup, window, secs, f"record --engine {engine} --async-mode all", True)
                ticks = sum(c for st, c in stacks if '"greenlet ' not in st[0])
                greenlets = sum(c for st, c in stacks if '"greenlet ' in st[0])
                per_s = ticks / secs
                us = (cpu_pct + prog_pct) / 100 / max(per_s, 1e-9) * 1e6
                cells[engine] = (us, cpu_pct, prog_pct, per_s, greenlets / max(ticks, 1))
        b, p = cells["bpf"], cells["ptrace"]
        self.results.add(
            "record-greenlets-bpf --async-mode all CPU/tick", b[0], None, "<= the default engine's",
            verdict(b[0] <= p[0]), "us",
            f"bpf: {b[1]:.2f}% pyinspect + {b[2]:.2f}% programs, {b[3]:.0f} ticks/s, {b[4]:.0f} greenlet "
            f"stacks a tick; ptrace: {p[0]:.0f} us, {p[1]:.1f}% of a core, {p[3]:.0f} ticks/s, {p[4]:.0f} "
            f"greenlet stacks a tick; 100 sleeping greenlets, wall, {rate} Hz",
            {"bpf": b, "ptrace": p})

    def record_bpf_native(self):
        """CPU per sample of `record --native` on the eBPF engine (the
        program copies each sample's stack top; pyinspect unwinds it) against
        the default engine's --native and py-spy's, at 500 Hz on 4 busy
        threads: each recorder's CPU over a window after start-up, plus the
        program's kernel time (kernel.bpf_stats_enabled), per sample it
        delivered."""
        warmup, window, rate, threads = 2, (4 if self.quick else 8), 500, 4
        cells = {}
        with bpf_stats_on(), Target(self.python, "threads.py", threads, threads) as t:
            secs = warmup + window + 1
            for who in ("bpf", "ptrace", "py-spy"):
                out = self.tmp / f"bpf-native-{who}.txt"
                out.unlink(missing_ok=True)
                common = ["--pid", t.pid, "--native", "-r", rate, "-d", secs, "-f", "raw", "-o", out]
                if who == "py-spy":
                    cmd = self.theirs("record", *common)
                else:
                    cmd = self.ours("record", "--engine", who, *common)
                cpu_pct, prog_pct, stacks = self.recorder_cost(
                    cmd, out, warmup, window, secs, f"{who} record --native", who == "bpf")
                samples = sum(c for _, c in stacks)
                if not any(is_native(f) for frames, _ in stacks for f in frames):
                    raise Skip(f"{who} record --native wrote no native frames")
                per_s = samples / secs
                us = (cpu_pct + prog_pct) / 100 / per_s * 1e6
                cells[who] = (us, cpu_pct, prog_pct, per_s / threads / rate * 100)
        b, p, y = cells["bpf"], cells["ptrace"], cells["py-spy"]
        self.results.add(
            "record-bpf-native CPU/sample", b[0], y[0], "<= half of py-spy's",
            verdict(b[0] <= y[0] / 2), "us",
            f"bpf: {b[1]:.2f}% user+sys + {b[2]:.2f}% program, {b[3]:.0f}% delivered; "
            f"ptrace engine: {p[0]:.1f} us, {p[3]:.0f}% delivered; py-spy {y[3]:.0f}% delivered; "
            f"pyinspect/py-spy {b[0] / y[0]:.2f}",
            {"bpf": b, "ptrace": p, "py-spy": y})

    def add_three(self, name, values, unit, target, ok, note, detail, higher_is_better=False):
        """One row with pyinspect against py-spy (the table's columns), and
        profiling.sampling's figure and both ratios in the note."""
        ours, spy, cpy = values["pyinspect"], values["py-spy"], values["profiling.sampling"]
        best = max(spy, cpy) if higher_is_better else min(spy, cpy)
        ratio_cpy = ours / cpy if cpy else float("nan")
        self.results.add(name, ours, spy, target, verdict(ok(ours, best)), unit,
                         f"profiling.sampling {fmt(cpy, unit)}, pyinspect/profiling.sampling "
                         f"{ratio_cpy:.2f}; {note}", detail)

    def heap_1m(self):
        """`pyinspect heap` of a process holding about a million objects the
        census counts (bench/fixtures/heap_objects.py): median wall time and
        peak RSS of the command, and the pause it reports. No peer reads a heap
        from outside; beside it, guppy3's census of the same heap taken inside
        the target (`hpy().heap()`, after pyinspect's runs), where guppy3 is
        installed in --python: its wall time and how much it raised the
        target's peak RSS. memray traces allocations from the program's start
        rather than taking a census, so it has no figure here."""
        runs = 3 if self.quick else 7
        walls, rss, pauses, objects = [], [], [], None
        guppy = []
        with Target(self.python, "heap_objects.py", 1_000_000, ready_timeout=120) as t:
            for _ in range(runs):
                with tempfile.TemporaryFile() as out:
                    m = run_measured(self.ours("heap", "--pid", t.pid, "--json"), stdout=out, timeout=120)
                    if m.rc != 0:
                        raise Skip(f"pyinspect heap failed: {first_line(m.err)}")
                    out.seek(0)
                    snap = json.loads(out.read())
                walls.append(m.wall)
                rss.append(m.rss_mib)
                pauses.append(snap["paused_ms"])
                objects = snap["objects"]
            for _ in range(1 if self.quick else 3):
                answer = json.loads(t.ask("guppy", 600) or '{"error": "no answer"}')
                if "error" in answer:
                    guppy = answer["error"]
                    break
                guppy.append(answer)
        wall, mem, pause = statistics.median(walls), statistics.median(rss), statistics.median(pauses)
        note = f"{objects} objects, median of {runs}; target paused {pause:.0f} ms"
        wall_note, mem_note = note, note
        if isinstance(guppy, str):
            wall_note += f"; guppy3: {guppy}"
        else:
            g_wall = statistics.median(g["wall"] for g in guppy)
            g_mem = statistics.median(g["peak_rss_growth_mib"] for g in guppy)
            g_objects = guppy[0]["objects"]
            wall_note += (f"; guppy3 in-process: {g_wall:.2f} s for {g_objects} objects (all it "
                          f"reaches, ints and strs held by instances too), pyinspect/guppy3 "
                          f"{wall / g_wall:.2f}")
            mem_note += f"; guppy3 raised the target's peak RSS by {g_mem:.1f} MiB"
        self.results.add("heap-1M census wall", wall, None, "<= 2 s", verdict(wall <= 2.0), "s", wall_note,
                         {"pyinspect": walls, "paused_ms": pauses, "guppy3": guppy})
        self.results.add("heap-1M census peak RSS", mem, None, "<= 150 MiB", verdict(mem <= 150), "MiB", mem_note,
                         {"pyinspect": rss})


def version_of(python):
    out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True).stdout.strip()
    return out or "?"


def sid_python(version):
    """Debian sid's build of `version`, as `.ci/sid-pythons` installs it."""
    root = Path(os.environ.get("PYINSPECT_SID", "/opt/pyinspect-sid")) / "root"
    python = root / "usr" / "bin" / f"python{version}-hosted"
    if not python.exists():
        raise Skip(f"{python} is missing: run .ci/sid-pythons")
    return str(python)


SCENARIOS = [
    ("dump-4threads", Bench.dump_4threads),
    ("dump-200threads", Bench.dump_200threads),
    ("dump-900frames", Bench.dump_900frames),
    ("dump-10k-tasks", Bench.dump_10k_tasks),
    ("dump-10k-greenlets", Bench.dump_10k_greenlets),
    ("record-greenlets", Bench.record_greenlets),
    ("dump-native-3threads", Bench.dump_native_3threads),
    ("dump-native-pause", Bench.dump_native_pause),
    ("torch-native", Bench.torch_native),
    ("dump-core", Bench.dump_core),
    ("native-gdb-agreement", Bench.native_gdb_agreement),
    ("machine-floor", Bench.machine_floor),
    ("record-cpu-per-sample", Bench.record_cpu_per_sample),
    ("record-wall-100Hz", Bench.record_wall_100hz),
    ("record-native-rate", Bench.record_native_rate),
    ("record-150-native-threads", Bench.record_150_native_threads),
    ("top-overhead", Bench.top_overhead),
    ("watch-cpu", Bench.watch_overhead),
    ("accuracy", Bench.accuracy),
    ("newest-pythons", Bench.newest_pythons),
    ("profiling-sampling", Bench.profiling_sampling),
    ("record-vs-cpython-sampler", Bench.record_vs_cpython_sampler),
    ("record-bpf-engine", Bench.record_bpf_engine),
    ("record-bpf-native", Bench.record_bpf_native),
    ("watch-bpf", Bench.watch_bpf),
    ("record-greenlets-bpf", Bench.record_greenlets_bpf),
    ("heap-1M", Bench.heap_1m),
]


# ---------------------------------------------------------------- set-up


def build_measure(tmp):
    out = tmp / "measure"
    done = subprocess.run(["gcc", "-O2", "-o", out, ROOT / "bench" / "measure.c"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench: gcc failed on bench/measure.c: {first_line(done.stderr)}")
    return str(out)


def build_floor(tmp):
    out = tmp / "floor"
    done = subprocess.run(["gcc", "-O2", "-o", out, ROOT / "bench" / "floor.c"], capture_output=True, text=True)
    if done.returncode != 0:
        raise Skip(f"gcc failed on bench/floor.c: {first_line(done.stderr)}")
    return str(out)


def busy_thread(pid):
    """The thread of `pid` that is running now and has run the most."""
    best = None
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is the state (field 3); utime is field 14.
        if fields[0] == "R" and (best is None or int(fields[11]) > best[1]):
            best = (int(task.name), int(fields[11]))
    return best[0] if best else None


def build():
    print("building: cargo build --release", flush=True)
    done = subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT)
    if done.returncode != 0:
        sys.exit("bench: cargo build --release failed")


def pyspy_version(path):
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return None
    return out.split()[-1] if out.split() else None


def find_pystack():
    """pystack from pyenv's 3.11 (.ci/core-deps installs it from PyPI)."""
    found = sorted(Path("/root/.pyenv/versions").glob("3.11.*/bin/pystack")) + \
        [Path(p) for p in [shutil.which("pystack")] if p]
    if not found:
        raise Skip("pystack is not installed: run .ci/core-deps")
    return str(found[0])


def find_pyspy(python):
    """py-spy 0.4.3 from PATH or next to the target Python; else pip-install
    it into that Python (pyenv's, so no system packages are touched)."""
    candidates = [shutil.which("py-spy"), str(Path(python).parent / "py-spy"),
                  str(Path(TORCH_PYTHON).parent / "py-spy")]
    candidates += sorted(str(p) for p in Path("/root/.pyenv/versions").glob("*/bin/py-spy"))
    for c in candidates:
        if c and Path(c).exists() and pyspy_version(c) == PYSPY_VERSION:
            return c
    # pyenv's 3.11 has pip (Debian sid's interpreters, say, do not).
    pyenv311 = sorted(Path("/root/.pyenv/versions").glob("3.11.*/bin/python"))
    if pyenv311:
        python = str(pyenv311[-1])
    print(f"installing py-spy=={PYSPY_VERSION} with {python} -m pip", flush=True)
    subprocess.run([python, "-m", "pip", "install", "-q", f"py-spy=={PYSPY_VERSION}"], check=True)
    c = str(Path(python).parent / "py-spy")
    if pyspy_version(c) != PYSPY_VERSION:
        sys.exit(f"bench: could not get py-spy {PYSPY_VERSION}")
    return c


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, shorter records (~2 min)")
    parser.add_argument("--only", help="comma-separated scenario names (or prefixes) to run")
    parser.add_argument("--python", default=DEFAULT_PYTHON, help="Python that runs the target programs")
    parser.add_argument("--json", metavar="OUT", help="also save the results as JSON")
    parser.add_argument("--no-build", action="store_true", help="use target/release/pyinspect as it is")
    parser.add_argument("--pyinspect", metavar="PATH",
                        help="benchmark this pyinspect binary instead of building target/release/pyinspect")
    args = parser.parse_args()
    global PYINSPECT
    if args.pyinspect:
        PYINSPECT = Path(args.pyinspect).resolve()
        args.no_build = True

    chosen = SCENARIOS
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        chosen = [(n, f) for n, f in SCENARIOS if any(n.startswith(w) for w in wanted)]
        if not chosen:
            sys.exit(f"bench: no scenario matches {args.only!r}; have: {', '.join(n for n, _ in SCENARIOS)}")

    if os.geteuid() != 0:
        print("bench: warning: not root; attaching may need CAP_SYS_PTRACE", file=sys.stderr)
    if not args.no_build:
        build()
    pyspy = find_pyspy(args.python)

    load = os.getloadavg()
    started = time.monotonic()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    version = subprocess.run([args.python, "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True).stdout.strip()
    print(f"pyinspect {commit} vs py-spy {PYSPY_VERSION}; target Python {version} ({args.python})")
    print(f"machine: {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
          f"{'; --quick' if args.quick else ''}")
    if load[0] > (os.cpu_count() or 1):
        print("warning: the load average is above the CPU count; expect slow, noisy figures")
    print()
    print(HEADER, flush=True)

    results = Results()
    bench = Bench(args, pyspy, results)
    global MEASURE
    MEASURE = build_measure(bench.tmp)
    try:
        for name, scenario in chosen:
            try:
                scenario(bench)
            except Skip as e:
                results.skip(name, str(e))
            except Exception as e:  # one broken scenario must not hide the others
                results.add(name, None, None, "", "ERROR", note=f"{type(e).__name__}: {e}")
    finally:
        shutil.rmtree(bench.tmp, ignore_errors=True)

    elapsed = time.monotonic() - started
    counts = {}
    for row in results.rows:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    print()
    print(f"summary ({elapsed:.0f} s, load average now {os.getloadavg()[0]:.2f}): "
          + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    print(HEADER)
    for row in results.rows:
        print(format_row(row))

    if args.json:
        Path(args.json).write_text(json.dumps({
            "pyinspect_commit": commit,
            "py_spy_version": PYSPY_VERSION,
            "python": version,
            "cpus": os.cpu_count(),
            "load_average_start": load,
            "quick": args.quick,
            "elapsed_s": elapsed,
            "results": results.rows,
        }, indent=2) + "\n")
        print(f"results saved to {args.json}")


if __name__ == "__main__":
    main()
