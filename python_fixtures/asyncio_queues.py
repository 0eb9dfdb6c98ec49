"""Event-loop fixture: tasks that no registry lists, found only through the
loop's own queues (`loop._ready`, `loop._scheduled`), then READY.

Usage: asyncio_queues.py [--no-c-asyncio]

  listed-sleeper  asyncio.sleep(1000), in the registries
  hidden-sleeper  asyncio.sleep(500), then removed from the registries
                  (asyncio.tasks._unregister_task): only its sleep's timer
                  in loop._scheduled leads to it (through the future's
                  wake-up callback)
  hidden-ready    created, removed from the registries before its first
                  step: only its step's handle in loop._ready leads to it
  main            prints READY, then blocks the loop's thread (time.sleep)
                  so that both queues stay as READY describes them

READY gives the loop's own len(loop._ready), len(loop._scheduled) and the
seconds to its earliest timer not cancelled, measured just before it is
printed. --no-c-asyncio blocks the C accelerator: pure-Python tasks, whose
queued callbacks are bound methods (Task.__step, Task.__wakeup).
"""
import os
import sys

if "--no-c-asyncio" in sys.argv:
    sys.modules["_asyncio"] = None
import asyncio
import time

import fixture_util as fu

fu.install_ping()

HERE = os.path.abspath(__file__)
MARK = fu.markers(HERE)
# Unregistered tasks are kept alive here (the registries held them weakly).
KEEP = []


async def sleeper(seconds):
    await asyncio.sleep(seconds)  # MARK:sleep


async def first_step():
    await asyncio.sleep(1)


async def main():
    loop = asyncio.get_running_loop() if hasattr(asyncio, "get_running_loop") else asyncio.get_event_loop()
    listed = loop.create_task(sleeper(1000))
    hidden = loop.create_task(sleeper(500))
    for _ in range(3):
        await asyncio.sleep(0)
    asyncio.tasks._unregister_task(hidden)
    ready = loop.create_task(first_step())
    asyncio.tasks._unregister_task(ready)
    KEEP.extend([listed, hidden, ready])
    listed_ids = sorted(id(t) for t in asyncio.all_tasks(loop))
    live = [h._when for h in loop._scheduled if not h._cancelled]
    fu.ready({
        "thread_id": fu.ident(),
        "ready_len": len(loop._ready),
        "timers_len": len(loop._scheduled),
        "next_timer_in": min(live) - loop.time(),
        "loop_id": id(loop),
        "listed_ids": listed_ids,
        "tasks": {
            "listed-sleeper": id(listed),
            "hidden-sleeper": id(hidden),
            "hidden-ready": id(ready),
            "main": id(asyncio.current_task() if hasattr(asyncio, "current_task") else asyncio.Task.current_task()),
        },
        "sleep_line": MARK["sleep"],
    })
    # The loop's thread blocked: nothing runs the queues until the test is done.
    while not fu.expired():
        time.sleep(0.05)  # MARK:block
    fu.exit_now()


if sys.version_info >= (3, 7):
    asyncio.run(main())
