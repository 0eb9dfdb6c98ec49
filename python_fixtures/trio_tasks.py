"""Trio fixture: tasks in nurseries, parked in known places, then READY.

Usage: trio_tasks.py [--guest [--stuck-host]]

--guest: the same tasks in a guest run (trio.lowlevel.start_guest_run) on
an asyncio loop that asyncio.run runs on the main thread, instead of
trio.run. READY then also carries `host`, the loop's thread ident.

--stuck-host: with --guest, one more task, ticker, sleeps 20 ms at a time;
once READY is written, a callback of the host loop blocks it for good
(time.sleep). The guest's next tick (ticker's wake-up, queued by Trio's
I/O thread) then waits in the host loop's ready queue, and no thread's
stack holds the run.

Tasks (names are Trio's: the function's qualified name):
  sleeper        trio.sleep(1000) two calls deep
  event_waiter   waits on a trio.Event that is never set
  reader         recv() on a trio socket whose peer never writes
  supervisor     opens a nursery of its own, running two worker tasks
  worker         (two) trio.sleep(1000) under supervisor's nursery
  locker         blocks on a trio.Lock the main task holds
  receiver       receive() on an empty memory channel
The main task opens the nursery of the others, then parks in park().

READY carries Trio's own view (trio.lowlevel), taken when every other task
is blocked: `tasks`, a list of {id, name, parent (the id of the task that
opened the task's nursery, or null), frames: [{function, line}] innermost
first (the task's coroutine chain, task.iter_await_frames()), wait}; `main`
(the main task's id) and `park` (where it parks: function, line). `wait`,
where the fixture knows what a task waits on: {kind: "socket", fd} or
{kind, object} (the id of the Event, Lock or channel); {kind: "timer",
seconds_left, at} for the sleeping tasks: the seconds left to the deadline
of their trio.sleep (sleep_until's `deadline` less trio.current_time()),
and time.monotonic() when it was read.
"""
import asyncio
import socket
import sys
import threading
import time

import trio
import trio.lowlevel
import trio.testing

import fixture_util as fu

MARK = fu.markers(__file__)


async def deeper_sleep():
    await trio.sleep(1000)  # MARK:sleep


async def sleeper():
    await deeper_sleep()  # MARK:sleeper


async def event_waiter(event):
    await event.wait()  # MARK:event


async def reader(sock):
    await sock.recv(1)  # MARK:recv


async def worker():
    await trio.sleep(1000)  # MARK:worker


async def locker(lock):
    async with lock:  # MARK:lock
        pass


async def receiver(channel):
    await channel.receive()  # MARK:receive


# What each task waits on, by task name, where the fixture knows.
WAITS = {}
# The sleeping tasks: their wait is their sleep's deadline.
SLEEPERS = ("__main__.sleeper", "__main__.worker")


async def supervisor():
    async with trio.open_nursery() as n:  # MARK:supervisor
        n.start_soon(worker)
        n.start_soon(worker)


def code_name(code):
    return getattr(code, "co_qualname", code.co_name)


def sleep_of(task):
    """A sleeping task's wait: the seconds left to its sleep's deadline."""
    for f, _ in task.iter_await_frames():
        if f.f_code is trio._timeouts.sleep_until.__code__:
            left = f.f_locals["deadline"] - trio.current_time()
            return {"kind": "timer", "seconds_left": left, "at": time.monotonic()}
    raise AssertionError("%s is not in trio.sleep" % task.name)


def view_of(task):
    parent = task.parent_nursery.parent_task if task.parent_nursery is not None else None
    frames = [
        {"function": code_name(f.f_code), "line": line}
        for f, line in task.iter_await_frames()
    ]
    frames.reverse()
    return {
        "id": id(task),
        "name": task.name,
        "parent": id(parent) if parent is not None else None,
        "frames": frames,
        "wait": sleep_of(task) if task.name in SLEEPERS else WAITS.get(task.name),
    }


def all_tasks():
    out, todo = [], [trio.lowlevel.current_root_task()]
    while todo:
        t = todo.pop()
        out.append(t)
        for n in t.child_nurseries:
            todo.extend(n.child_tasks)
    return out


async def park():
    await trio.sleep(fu.LIFETIME_SECONDS)  # MARK:park


STUCK_HOST = "--stuck-host" in sys.argv[1:]
# The host loop, with --guest.
HOST_LOOP = []


async def ticker():
    while True:
        await trio.sleep(0.02)


def stuck():
    """A host loop callback that never returns."""
    time.sleep(fu.LIFETIME_SECONDS)


async def main():
    a, b = trio.socket.socketpair()
    event, lock = trio.Event(), trio.Lock()
    send, receive = trio.open_memory_channel(0)
    await lock.acquire()
    WAITS["__main__.reader"] = {"kind": "socket", "fd": a.fileno()}
    WAITS["__main__.event_waiter"] = {"kind": "event", "object": id(event)}
    WAITS["__main__.locker"] = {"kind": "lock", "object": id(lock)}
    WAITS["__main__.receiver"] = {"kind": "queue", "object": id(receive)}
    async with trio.open_nursery() as n:
        n.start_soon(sleeper)
        n.start_soon(event_waiter, event)
        n.start_soon(reader, a)
        n.start_soon(supervisor)
        n.start_soon(locker, lock)
        n.start_soon(receiver, receive)
        if STUCK_HOST:
            n.start_soon(ticker)
        await trio.testing.wait_all_tasks_blocked()
        me = trio.lowlevel.current_task()
        fu.ready(
            {
                "tasks": [view_of(t) for t in all_tasks()],
                "main": id(me),
                "park": {"function": "park", "line": MARK["park"]},
                "host": threading.get_ident(),
            }
        )
        if STUCK_HOST:
            HOST_LOOP[0].call_soon_threadsafe(stuck)
        await park()
    fu.exit_now()


async def host():
    """The asyncio side of a guest run: it waits for the run to end."""
    loop = asyncio.get_running_loop()
    HOST_LOOP.append(loop)
    done = loop.create_future()
    trio.lowlevel.start_guest_run(
        main,
        run_sync_soon_threadsafe=loop.call_soon_threadsafe,
        done_callback=done.set_result,
        host_uses_signal_set_wakeup_fd=True,
    )
    (await done).unwrap()


if "--guest" in sys.argv[1:]:
    asyncio.run(host())
else:
    trio.run(main)
