# -*- coding: utf-8 -*-
"""Two loop stalls back to back on uvloop's event loop, for `pyinspect
watch`: one task's step that calls time.sleep, then, after an
`await asyncio.sleep(0)` (no time in the selector between them), its next
step that spins in pure Python. Two task steps, so two incidents.

After READY, waits for SIGUSR2 (the watcher is attached by then), runs
the two steps, and prints `STALLS <json>`: each stall's culprit (the
task, its coroutine and line) and its length as measured here, then
exits. `--runner` runs the loop as uvloop.install() + asyncio.run()
(the Runner's own `run`), the default is uvloop.run() (its wrapper
coroutine, then the program's). Needs uvloop (.ci/asyncio-deps) and 3.11+.
"""
import asyncio
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_util  # noqa: E402

import uvloop  # noqa: E402

STALL = 0.3
GAP = 0.5
MARKS = fixture_util.markers(os.path.abspath(__file__))
go = []
stalls = []


def record(func, mark, start, end):
    info = fixture_util.code_info(func)
    info.update(trigger="loop_blocked", line=MARKS[mark], start=start,
                duration=end - start, task="steps")
    stalls.append(info)


async def steps():
    start = time.time()
    time.sleep(STALL)  # MARK:first
    end = time.time()
    record(steps, "first", start, end)
    await asyncio.sleep(0)
    start = time.time()
    # One line: a sample may land on the test or the jump back, and
    # both must be the line the fixture names.
    while time.time() - start < STALL: pass  # noqa: E701  # MARK:second
    record(steps, "second", start, time.time())


async def main():
    fixture_util.ready({"stall": STALL})
    while not go:
        await asyncio.sleep(0.01)
        if fixture_util.expired():
            fixture_util.exit_now()
    await asyncio.sleep(GAP)
    await asyncio.create_task(steps(), name="steps")
    await asyncio.sleep(GAP)
    sys.stdout.write("STALLS " + json.dumps(stalls) + "\n")
    sys.stdout.flush()


def on_go(signum, frame):
    go.append(True)


if __name__ == "__main__":
    signal.signal(signal.SIGUSR2, on_go)
    if "--runner" in sys.argv[1:]:
        uvloop.install()
        asyncio.run(main())
    else:
        uvloop.run(main())
    fixture_util.exit_now()
