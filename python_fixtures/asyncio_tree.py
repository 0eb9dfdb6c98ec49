"""Event-loop fixture with known task trees, then READY.

Usage: asyncio_tree.py [--many N] [--uvloop] [--pytasks | --no-c-asyncio |
                       --third-party] [--two-loops] [--busy [--eager]]

--pytasks swaps in asyncio's pure-Python Task and Future beside the C module;
--no-c-asyncio blocks the C accelerator (`_asyncio`) before asyncio is
imported, so that everything is pure Python; --third-party creates every task
as a Task implementation of its own (a pure-Python Task subclass) that
registers itself through asyncio's public hooks (`asyncio._register_task`,
`_enter_task`...), as third-party loops do: from 3.14 those land in a WeakSet
of the `_asyncio` module's state.

With --busy, instead: main awaits handle-request, which awaits call-model,
which runs tokenize() forever (READY comes from call-model); a sleeper waits.
With --two-loops, a second thread runs its own loop: t2-main, t2-sleeper.

Trees (each task named; expected awaiters and innermost frames go in READY):
  sleeper          asyncio.sleep(1000)
  future-waiter    awaits a plain Future
  queue-consumer   awaits Queue.get
  lock-holder      holds an asyncio.Lock, parked on a Future
  lock-waiter      awaits that Lock
  event-waiter     awaits Event.wait
  semaphore-waiter awaits Semaphore.acquire (at 0)
  gg-parent        gather(gather(gg-a, gg-b), gather(gg-c))
  shield-parent    shield(shielded)
  waitfor-parent   wait_for(waitfor-child, 1000)
  ac-parent        as_completed([ac-1, ac-2])
  wait-parent      asyncio.wait([wait-1, wait-2])
  dead-a, dead-b   each awaits the other (a deadlock)
  agen-consumer    async for over an async generator that sleeps
  tg-parent        (3.11+) TaskGroup: tg-child, tg-nested (its own TaskGroup: tg-grandchild)
  eager            (3.12+) created by the eager task factory
  native-sleeper   with --third-party: a C task beside the third-party ones
  many-N           with --many: N tasks sleeping
The main task ("main") parks on a Future.
"""
import os
import sys

if "--no-c-asyncio" in sys.argv:
    # The C accelerator off: asyncio falls back on its pure-Python code.
    sys.modules["_asyncio"] = None
import asyncio

import fixture_util as fu

HERE = os.path.abspath(__file__)
MARK = fu.markers(HERE)
EXPECT = {}


def expect(name, parents, func, line_mark, awaiting, state="pending"):
    EXPECT[name] = {
        "parents": parents,
        "innermost": fu.frame(func, MARK[line_mark]) if func else None,
        "awaiting": awaiting,
        "state": state,
    }


async def sleeper():
    await asyncio.sleep(1000)  # MARK:sleep


async def wait_future(fut):
    await fut  # MARK:future


async def consume(q):
    await q.get()  # MARK:queue


async def hold(lock, park):
    async with lock:
        await park  # MARK:hold


async def wait_lock(lock):
    async with lock:  # MARK:lockwait
        pass


async def stubborn():
    try:
        await asyncio.sleep(1000)
    except asyncio.CancelledError:
        await asyncio.sleep(1000)  # MARK:stubborn


async def fails():
    raise ValueError("nobody retrieves this")


async def wait_event(ev):
    await ev.wait()  # MARK:event


async def wait_semaphore(sem):
    await sem.acquire()  # MARK:semaphore


async def leaf():
    await asyncio.sleep(1000)  # MARK:leaf


async def gather_of_gathers(a, b, c):
    await asyncio.gather(asyncio.gather(a, b), asyncio.gather(c))  # MARK:gg


async def shielder(inner):
    await asyncio.shield(inner)  # MARK:shield


async def waitfor(inner):
    await asyncio.wait_for(inner, 1000)  # MARK:waitfor


async def completed(fs):
    for f in asyncio.as_completed(fs):
        await f  # MARK:ascompleted


async def waiter(fs):
    await asyncio.wait(fs)  # MARK:wait


HOLDER = {}
# The loop keeps only weak references to tasks: these keep them alive.
KEEP = []
# With --two-loops: the second loop's thread.
SECOND = {}


async def dead(other):
    await asyncio.sleep(0)
    await HOLDER[other]  # MARK:dead


async def ticker():
    while True:
        yield 1
        await asyncio.sleep(1000)  # MARK:agen


async def agen_consumer():
    async for _ in ticker():  # MARK:agenloop
        pass


async def tg_nested():
    async with asyncio.TaskGroup() as tg:  # MARK:tgnested
        tg.create_task(leaf(), name="tg-grandchild")


async def tg_parent():
    async with asyncio.TaskGroup() as tg:  # MARK:tgparent
        tg.create_task(leaf(), name="tg-child")
        tg.create_task(tg_nested(), name="tg-nested")


# 3.7's tasks have no name: READY's "names" maps their ids to those given here.
NAMED = hasattr(asyncio.Task, "get_name")
NAMES = {}


def named(task, name):
    if NAMED:
        task.set_name(name)
    else:
        NAMES[str(id(task))] = name
    return task


def create(coro, name):
    loop = asyncio.get_running_loop()
    if NAMED:
        # Named at creation: an eager task may never return from it.
        return loop.create_task(coro, name=name)
    return named(loop.create_task(coro), name)


def name_me(name):
    named(asyncio.current_task(), name)


def third_party_task():
    """A Task implementation of its own, as a third-party loop brings: a
    pure-Python Task that registers, enters and leaves through asyncio's
    public hooks (`asyncio.tasks._register_task`, `_enter_task`..., the C
    ones when `_asyncio` is there)."""
    for hook in ("register_task", "unregister_task", "register_eager_task",
                 "unregister_eager_task", "enter_task", "leave_task",
                 "swap_current_task"):
        # 3.12+: asyncio's own pure-Python Task calls the `_py_` hooks.
        if hasattr(asyncio.tasks, "_py_" + hook):
            setattr(asyncio.tasks, "_py_" + hook, getattr(asyncio.tasks, "_" + hook))

    class ThirdPartyTask(asyncio.tasks._PyTask):
        pass
    return ThirdPartyTask


TASK_FACTORY = {}


async def main(many):
    name_me("main")
    loop = asyncio.get_running_loop()
    park = loop.create_future()
    def mk(coro, name):
        t = create(coro, name)
        KEEP.append(t)
        return t
    mk(sleeper(), "sleeper")
    expect("sleeper", [], sleeper, "sleep", "sleep")
    mk(wait_future(loop.create_future()), "future-waiter")
    expect("future-waiter", [], wait_future, "future", "future")
    q = asyncio.Queue()
    mk(consume(q), "queue-consumer")
    expect("queue-consumer", [], asyncio.Queue.get, None, "queue")
    lock = asyncio.Lock()
    mk(hold(lock, loop.create_future()), "lock-holder")
    expect("lock-holder", [], hold, "hold", "future")
    await asyncio.sleep(0)
    mk(wait_lock(lock), "lock-waiter")
    expect("lock-waiter", [], asyncio.Lock.acquire, None, "lock")
    mk(wait_event(asyncio.Event()), "event-waiter")
    expect("event-waiter", [], asyncio.Event.wait, None, "event")
    mk(wait_semaphore(asyncio.Semaphore(0)), "semaphore-waiter")
    expect("semaphore-waiter", [], asyncio.Semaphore.acquire, None, "semaphore")
    a, b, c = mk(leaf(), "gg-a"), mk(leaf(), "gg-b"), mk(leaf(), "gg-c")
    mk(gather_of_gathers(a, b, c), "gg-parent")
    expect("gg-parent", [], gather_of_gathers, "gg", "gather")
    for n in ("gg-a", "gg-b", "gg-c"):
        expect(n, ["gg-parent"], leaf, "leaf", "sleep")
    s = mk(leaf(), "shielded")
    mk(shielder(s), "shield-parent")
    expect("shield-parent", [], shielder, "shield", "future")
    expect("shielded", ["shield-parent"], leaf, "leaf", "sleep")
    w = mk(leaf(), "waitfor-child")
    mk(waitfor(w), "waitfor-parent")
    expect("waitfor-child", ["waitfor-parent"], leaf, "leaf", "sleep")
    # 3.12+ awaits the task inside a timeout; before, a future with a timer.
    expect("waitfor-parent", [], waitfor, "waitfor",
           "task" if sys.version_info >= (3, 12) else "future")
    fs = [mk(leaf(), "ac-1"), mk(leaf(), "ac-2")]
    mk(completed(fs), "ac-parent")
    expect("ac-parent", [], completed, "ascompleted", "queue")
    expect("ac-1", ["ac-parent"], leaf, "leaf", "sleep")
    expect("ac-2", ["ac-parent"], leaf, "leaf", "sleep")
    ws = [mk(leaf(), "wait-1"), mk(leaf(), "wait-2")]
    mk(waiter(ws), "wait-parent")
    expect("wait-parent", [], waiter, "wait", "future")
    expect("wait-1", ["wait-parent"], leaf, "leaf", "sleep")
    expect("wait-2", ["wait-parent"], leaf, "leaf", "sleep")
    HOLDER["a"] = mk(dead("b"), "dead-a")
    HOLDER["b"] = mk(dead("a"), "dead-b")
    expect("dead-a", ["dead-b"], dead, "dead", "task")
    expect("dead-b", ["dead-a"], dead, "dead", "task")
    mk(agen_consumer(), "agen-consumer")
    expect("agen-consumer", [], ticker, "agen", "sleep")
    if sys.version_info >= (3, 11):
        mk(tg_parent(), "tg-parent")
        expect("tg-parent", [], tg_parent, "tgparent", "future")
        expect("tg-child", ["tg-parent"], leaf, "leaf", "sleep")
        expect("tg-nested", ["tg-parent"], tg_nested, "tgnested", "future")
        expect("tg-grandchild", ["tg-nested"], leaf, "leaf", "sleep")
    if sys.version_info >= (3, 12):
        prev = loop.get_task_factory()
        task_class = TASK_FACTORY.get("class")
        loop.set_task_factory(asyncio.create_eager_task_factory(task_class)
                              if task_class else asyncio.eager_task_factory)
        mk(sleeper(), "eager")
        loop.set_task_factory(prev)
        expect("eager", [], sleeper, "sleep", "sleep")
    # Cancelled, caught, still running: cancelling() stays 1 (3.11+).
    st = mk(stubborn(), "stubborn")
    await asyncio.sleep(0)
    st.cancel()
    expect("stubborn", [], stubborn, "stubborn", "sleep",
           "cancelling" if sys.version_info >= (3, 11) else "pending")
    # Finished with an exception nobody retrieved: up to 3.11 the registry
    # keeps it while it lives (3.12+ unregisters finished tasks).
    if sys.version_info < (3, 12):
        mk(fails(), "failed")
        expect("failed", [], None, None, "none", "done-not-retrieved")
    if TASK_FACTORY:
        # Beside the third-party tasks, one of asyncio's C tasks.
        KEEP.append(named(asyncio.tasks._CTask(sleeper(), loop=loop), "native-sleeper"))
        expect("native-sleeper", [], sleeper, "sleep", "sleep")
    for i in range(many):
        mk(leaf(), "many-%d" % i)
    for _ in range(5):
        await asyncio.sleep(0)
    expect("main", [], main, "main", "future")
    # READY once main is suspended: the loop runs this after main awaits.
    loop.call_soon(ready_with_all_tasks, {
        "tasks": EXPECT,
        "thread_id": fu.ident(),
        "native_id": fu.native_id(),
        "many": many,
        "second_thread_id": SECOND.get("thread_id"),
        "names": NAMES,
    }, loop)
    await park  # MARK:main


def ready_with_all_tasks(info, loop):
    # The process's own view: what asyncio.all_tasks() finds (3.14's C
    # version reads the per-thread lists and `_asyncio`'s registries).
    if not info["many"]:
        info["all_task_ids"] = sorted(id(t) for t in asyncio.all_tasks(loop))
    fu.ready(info)


def tokenize():
    x = 0
    for i in range(10000):  # MARK:tokenize
        x += i
    return x


async def call_model():
    fu.ready({"thread_id": fu.ident(), "busy": True, "names": NAMES})
    while True:
        tokenize()


async def handle_request():
    await create(call_model(), "call-model")  # MARK:handle


async def busy():
    """A running task (call-model, CPU-bound in tokenize) awaited by
    handle-request, and a sleeping one beside them. With --eager (3.12+),
    handle-request and call-model start eagerly: call-model's first step
    never ends, so both stay in their first step, in the eager registries
    (handle-request is then not the current task)."""
    name_me("main")
    loop = asyncio.get_running_loop()
    KEEP.append(create(sleeper(), "sleeper"))
    await asyncio.sleep(0)
    if "--eager" in sys.argv:
        task_class = TASK_FACTORY.get("class")
        loop.set_task_factory(asyncio.create_eager_task_factory(task_class)
                              if task_class else asyncio.eager_task_factory)
    await create(handle_request(), "handle-request")


def second_loop(started, info):
    """Another thread's event loop, with one sleeping task."""
    async def body():
        info["thread_id"] = fu.ident()
        name_me("t2-main")
        KEEP.append(create(sleeper(), "t2-sleeper"))
        await asyncio.sleep(0)
        started.set()
        await asyncio.get_running_loop().create_future()
    asyncio.run(body())


def run():
    fu.install_ping()
    args = sys.argv[1:]
    many = int(args[args.index("--many") + 1]) if "--many" in args else 0
    if "--pytasks" in args:
        # The pure-Python Task and Future (what runs without _asyncio).
        asyncio.tasks.Task = asyncio.tasks._PyTask
        asyncio.futures.Future = asyncio.futures._PyFuture
    if "--uvloop" in args:
        import uvloop
        uvloop.install()
    if "--two-loops" in args:
        import threading
        started, info = threading.Event(), {}
        threading.Thread(target=second_loop, args=(started, info), daemon=True).start()
        fu.wait_until([started])
        SECOND.update(info)
    coro = busy() if "--busy" in args else main(many)
    if "--third-party" in args:
        task_class = TASK_FACTORY["class"] = third_party_task()
        loop = asyncio.new_event_loop()
        loop.set_task_factory(lambda loop, coro, **kw: task_class(coro, loop=loop, **kw))
        asyncio.set_event_loop(loop)
        loop.run_until_complete(coro)
    else:
        asyncio.run(coro)


# Expectations naming a library coroutine carry no line (None): the test
# checks their function and file only.
MARK[None] = None
if __name__ == "__main__":
    run()
