#!/usr/bin/env python3
"""Instructions per tick of `pyinspect record`, counted by callgrind: a
figure that a busy machine does not blur (CPU time does).

    python3 bench/callgrind_ticks.py [--python PATH] [--pausing] [--rate HZ]
                                     [--secs S] [--pyinspect PATH]

Starts bench/fixtures/threads.py (4 threads, 1 busy) under PATH (default:
Debian sid's 3.15), records it with `record --idle -f raw` (with
--nonblocking unless --pausing) under `valgrind --tool=callgrind`, and
prints the sampling loop's instructions per tick: record's own total less
the start-up (Sampler::new) and the profile's write, over the ticks the
profile holds. Needs valgrind (apt-get install valgrind); not run by CI.
"""

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THREADS = 4


def inclusive(report, name):
    """Inclusive Ir of the first function whose name ends in `name`."""
    for line in report.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(\S+) \[", line)
        if m and m.group(2).endswith(name):
            return int(m.group(1).replace(",", ""))
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default="/opt/pyinspect-sid/root/usr/bin/python3.15-hosted")
    ap.add_argument("--pyinspect", default=str(ROOT / "target" / "release" / "pyinspect"))
    ap.add_argument("--pausing", action="store_true")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--secs", type=int, default=5)
    args = ap.parse_args()
    target = subprocess.Popen([args.python, str(ROOT / "bench" / "fixtures" / "threads.py"), str(THREADS), "1"],
                              stdout=subprocess.PIPE, text=True)
    try:
        if target.stdout.readline().strip() != "ready":
            sys.exit("callgrind_ticks: the fixture did not start")
        time.sleep(0.3)
        with tempfile.TemporaryDirectory() as tmp:
            out, cg = Path(tmp) / "profile.txt", Path(tmp) / "callgrind.out"
            cmd = [args.pyinspect, "record", "-p", str(target.pid), "-r", str(args.rate), "-d", str(args.secs),
                   "--idle", "-f", "raw", "-o", str(out)] + ([] if args.pausing else ["--nonblocking"])
            run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}", *cmd],
                                 capture_output=True, text=True)
            if run.returncode != 0 or not out.exists():
                sys.exit(f"callgrind_ticks: record failed: {run.stderr[-500:]}")
            ticks = sum(int(line.rsplit(" ", 1)[1]) for line in out.read_text().splitlines() if line.strip()) / THREADS
            report = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(cg)],
                                    capture_output=True, text=True).stdout
            loop = (inclusive(report, "commands::record::run") - inclusive(report, "sampler::Sampler::new")
                    - inclusive(report, "OutputFile::write_with"))
            mode = "pausing" if args.pausing else "nonblocking"
            print(f"{mode} {args.rate} Hz: {ticks:.0f} ticks, {loop / ticks:,.0f} instructions per tick "
                  f"(start-up and write left out)")
    finally:
        target.kill()
        target.wait()


main()
