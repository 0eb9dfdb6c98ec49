"""Event-loop fixture: tasks that no registry lists, found only through the
loop's own queues (`loop._ready`, `loop._scheduled`), then READY.

Usage: asyncio_queues.py [--no-c-asyncio] [--corrupt]

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

--corrupt, once READY's figures are taken, makes both queues lie (as a
racing or hostile target's may): the ready deque claims 2**31 items and its
only block links to itself (a cycle), the timer list claims 2**40 items.
The garbage collector is off first, so that nothing in this process walks
them; nothing else touches them while the loop's thread is blocked. READY
then gives the lengths as they read now.
"""
import os
import sys

if "--no-c-asyncio" in sys.argv:
    sys.modules["_asyncio"] = None
import asyncio
import ctypes
import gc
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


def corrupt(deque, timers):
    # CPython's dequeobject: ob_size at 16, leftblock at 24; a block is a
    # left link, 64 item slots, a right link. PyListObject: ob_size at 16.
    ssize = ctypes.sizeof(ctypes.c_ssize_t)
    ctypes.c_ssize_t.from_address(id(deque) + 2 * ssize).value = 1 << 31
    block = ctypes.c_void_p.from_address(id(deque) + 3 * ssize).value
    ctypes.c_void_p.from_address(block + 65 * ssize).value = block
    ctypes.c_ssize_t.from_address(id(timers) + 2 * ssize).value = 1 << 40
    return 1 << 31, None


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
    ready_len, timers_len = len(loop._ready), len(loop._scheduled)
    if "--corrupt" in sys.argv:
        gc.disable()
        ready_len, timers_len = corrupt(loop._ready, loop._scheduled)
    fu.ready({
        "thread_id": fu.ident(),
        "ready_len": ready_len,
        "timers_len": timers_len,
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
