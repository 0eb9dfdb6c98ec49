# -*- coding: utf-8 -*-
"""The event-loop stalls of watch_stalls.py (3.7+: asyncio.run)."""
import asyncio
import time


async def sleepy(record, stall):
    start = time.time()
    time.sleep(stall)  # MARK:loop_sleep
    record("loop_blocked", sleepy, "loop_sleep", start, time.time(), task="sleepy-task")


async def spinner(record, stall):
    start = time.time()
    n = 0
    while time.time() - start < stall:  # MARK:loop_spin
        n += 1  # MARK:loop_spin_body
    record("loop_blocked", spinner, "loop_spin", start, time.time(), task="spinner-task",
           lines=["loop_spin", "loop_spin_body"])


async def schedule(record, stall, gap):
    await asyncio.sleep(gap)
    t = asyncio.get_running_loop().create_task(sleepy(record, stall))
    try:
        t.set_name("sleepy-task")
    except AttributeError:  # 3.7: tasks have no names
        pass
    await t
    await asyncio.sleep(gap)
    t = asyncio.get_running_loop().create_task(spinner(record, stall))
    try:
        t.set_name("spinner-task")
    except AttributeError:
        pass
    await t
    await asyncio.sleep(gap)


def run(record, stall, gap, marks):
    def rec(trigger, func, mark, start, end, **extra):
        if "lines" in extra:
            extra["lines"] = [MARKS[m] for m in extra["lines"]]
        record(trigger, func, mark, start, end, marks=MARKS, **extra)

    asyncio.run(schedule(rec, stall, gap))


import fixture_util  # noqa: E402
import os  # noqa: E402

MARKS = fixture_util.markers(os.path.abspath(__file__))
