"""Finds, in this interpreter, where the asyncio objects keep what pyinspect
reads, by looking for known pointers in the objects' raw bytes
(ctypes.string_at(id(obj), size)). Prints one JSON object; tests/asyncio.rs
checks pyinspect's asyncio offset table against it. Each offset must be
found exactly once, or the probe fails rather than guess.
"""
import asyncio
import collections
import ctypes
import functools
import json
import os
import struct
import sys
import weakref

OUT = {"version": list(sys.version_info[:2])}


MEM = open("/proc/self/mem", "rb", buffering=0)


def peek(addr, n=8):
    """Bytes at addr, or None where nothing is mapped (never a crash)."""
    try:
        return os.pread(MEM.fileno(), n, addr)
    except (OSError, OverflowError, ValueError):
        return None


def peek_word(addr):
    b = peek(addr)
    return None if b is None or len(b) < 8 else struct.unpack("<Q", b)[0]


def raw(obj, size=None):
    if size is None:
        size = type(obj).__basicsize__
    return ctypes.string_at(id(obj), size)


def words(buf):
    return [struct.unpack_from("<Q", buf, o)[0] for o in range(0, len(buf) - 7, 8)]


def where(buf, value, skip_header=True):
    return [i * 8 for i, w in enumerate(words(buf)) if w == value and (i >= 2 or not skip_header)]


def one(name, found):
    if len(found) != 1:
        raise SystemExit("probe: %s found at %r, not exactly once" % (name, found))
    OUT[name] = found[0]
    return found[0]


def diff(a, b):
    return [(i, x ^ y) for i, (x, y) in enumerate(zip(bytearray(a), bytearray(b))) if x != y]


def cb_a(f):
    pass


def cb_b(f):
    pass


async def inner(arg, fut):
    await fut


async def outer(arg, fut):
    await inner(arg, fut)


async def fails():
    raise ValueError("x")


async def agen():
    yield 1


async def main():
    loop = asyncio.get_running_loop()
    Task = asyncio.tasks._CTask
    OUT["task_type"] = Task.__module__ + "." + Task.__name__
    OUT["task_size"] = Task.__basicsize__
    marker = object()
    awaited = loop.create_future()
    coro = outer(marker, awaited)
    named = hasattr(Task, "get_name")  # 3.8+: 3.7's tasks have no name
    t = Task(coro, loop=loop, name="probe-task-name") if named else Task(coro, loop=loop)
    one("fut_loop", where(raw(t), id(loop)))
    one("task_coro", where(raw(t), id(coro)))
    if named:
        one("task_name", where(raw(t), id(t.get_name())))
    t.add_done_callback(cb_a)
    one("fut_callback0", where(raw(t), id(cb_a)))
    before = raw(t)
    t.add_done_callback(cb_b)
    after = raw(t)
    list_offs = [i * 8 for i, (x, y) in enumerate(zip(words(before), words(after)))
                 if x == 0 and y != 0 and peek_word(y + 8) == id(list)]
    one("fut_callbacks", list_offs)
    t.remove_done_callback(cb_a)
    t.remove_done_callback(cb_b)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    one("task_fut_waiter", where(raw(t), id(awaited)))

    # The coroutine's frame: arg is the first local slot.
    csize = coro.__sizeof__()
    craw = raw(coro, csize)
    if sys.version_info < (3, 11):
        one("gen_frame", where(craw, id(coro.cr_frame)))
        fr = coro.cr_frame
        fraw = raw(fr, fr.__sizeof__())
        OUT["frame_raw"] = fraw.hex()
        OUT["frame_addr"] = id(fr)
    else:
        OUT["frame_raw"] = craw.hex()
        OUT["frame_addr"] = id(coro)
    # Where the value stack's top (the awaited coroutine) is recorded:
    # a pointer just past it, a base pointer and a depth, or an index from
    # the first local slot (the argument, found by its address).
    fraw = bytes.fromhex(OUT.pop("frame_raw"))
    base = OUT.pop("frame_addr")
    aw = id(coro.cr_await)
    ws = words(fraw)
    # The argument's slot comes first; later copies are stale stack slots.
    OUT["frame_first_local_at"] = min(where(fraw, id(marker)))
    OUT["stack_pointer_at"] = [[o * 8, below] for o, w in enumerate(ws)
                               if base <= w < base + len(fraw) + 8 and w % 8 == 0
                               for below in (1, 2)
                               if ws[(w - base) // 8 - below] & ~7 == aw]
    ints = [(o, struct.unpack_from("<i", fraw, o)[0]) for o in range(0, len(fraw) - 3, 4)]
    lp = OUT["frame_first_local_at"]
    OUT["stack_index_at"] = [o for o, v in ints if 0 < v < 64 and lp + 8 * (v - 1) + 8 <= len(fraw)
                             and ws[lp // 8 + v - 1] & ~7 == aw]
    OUT["stack_base_depth_at"] = [[o * 8, io] for o, w in enumerate(ws)
                                  if base <= w < base + len(fraw) and w % 8 == 0
                                  for io, v in ints if 0 < v < 64
                                  and (w - base) // 8 + v - 1 < len(ws)
                                  and ws[(w - base) // 8 + v - 1] & ~7 == aw]

    # 3.11+: gi_frame_state, a signed byte before the embedded frame:
    # negative while created or suspended, positive once finished.
    if sys.version_info >= (3, 11):
        async def nothing():
            pass
        fresh, done_c = nothing(), nothing()
        try:
            done_c.send(None)
        except StopIteration:
            pass
        # Each state's bytes; the test checks the table's offset and values.
        OUT["gen_state_fresh"] = raw(fresh, 96).hex()
        OUT["gen_state_done"] = raw(done_c, 96).hex()
        OUT["gen_state_suspended"] = raw(coro, 96).hex()
        fresh.close()

    # States: pending 0, cancelled 1, finished 2.
    done = loop.create_future()
    done.set_result(1)
    cancelled = loop.create_future()
    cancelled.cancel()
    pending = loop.create_future()
    cands = [o for o in range(16, type(pending).__basicsize__ - 3, 4)
             if [struct.unpack_from("<I", raw(f), o)[0] for f in (pending, cancelled, done)] == [0, 1, 2]]
    one("fut_state", cands)

    # Exception not retrieved: one bit, cleared by retrieving it.
    ft = Task(fails(), loop=loop)
    try:
        await ft
    except ValueError:
        pass
    ft2 = Task(fails(), loop=loop)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    a = raw(ft2)
    ft2.exception()
    b = raw(ft2)
    d = diff(a, b)
    if len(d) != 1:
        raise SystemExit("probe: log_tb diff %r" % d)
    OUT["fut_log_tb"] = [d[0][0], d[0][1]]

    # Cancelling: must_cancel (before the task runs) and the count (3.11+).
    async def idle():
        await asyncio.sleep(3600)
    ct = Task(idle(), loop=loop)
    a = raw(ct)
    ct.cancel()
    b = raw(ct)
    if hasattr(ct, "cancelling"):
        ct.cancel()
        c = raw(ct)
        d2 = diff(b, c)
        if len(d2) != 1 or ct.cancelling() != 2:
            raise SystemExit("probe: cancels diff %r" % d2)
        off = d2[0][0] & ~3
        OUT["task_num_cancels_requested"] = off
        d = [x for x in diff(a, b) if x[0] & ~3 != off]
    else:
        d = diff(a, b)
    d = [x for x in d if (x[0] & ~7) not in where(b, id(None))]
    if len(d) != 1:
        raise SystemExit("probe: must_cancel diff %r" % d)
    OUT["task_must_cancel"] = [d[0][0], d[0][1]]
    ct.cancel()
    try:
        await ct
    except asyncio.CancelledError:
        pass

    # A task awaiting another: the awaited one's callback wakes the awaiter.
    target = Task(idle(), loop=loop)
    async def await_it():
        await target
    waiter_task = Task(await_it(), loop=loop)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    wake = target._callbacks[0][0]
    # A new task's first step, queued in the loop's ready queue.
    queued = Task(idle(), loop=loop)
    step = loop._ready[-1]._callback
    OUT["step_type"] = type(step).__name__
    one("step_task", where(raw(step), id(queued)))
    queued.cancel()
    OUT["wakeup_type"] = type(wake).__name__
    one("wakeup_task", where(raw(wake), id(waiter_task)))
    if hasattr(asyncio.Task, "_awaited_by") or sys.version_info >= (3, 14):
        OUT["awaited_by_is"] = id(waiter_task)
        OUT["awaited_by_raw"] = raw(target).hex()
    waiter_task.cancel()
    target.cancel()

    # Bound method, function closure, functools.partial, weakref, cell.
    class C:
        def m(self):
            pass
    obj = C()
    bm = obj.m
    one("method_self", where(raw(bm), id(obj)))
    x = object()
    def f():
        return x
    one("func_closure", where(raw(f), id(f.__closure__)))
    one("func_name", where(raw(f), id(f.__name__)))
    p = functools.partial(cb_a, x)
    one("partial_fn", where(raw(p), id(cb_a)))
    one("partial_args", where(raw(p), id(p.args)))
    r = weakref.ref(obj)
    one("weakref_object", where(raw(r), id(obj)))
    # deque: the first item sits at leftblock->data[leftindex].
    items = [object() for _ in range(3)]
    dq = collections.deque(items)
    draw = raw(dq)
    block_ptrs = [o for o, w in zip(range(0, len(draw), 8), words(draw)) if o >= 24]
    found = []
    for o in block_ptrs:
        blk = struct.unpack_from("<Q", draw, o)[0]
        for io in block_ptrs:
            idx = struct.unpack_from("<q", draw, io)[0]
            if blk and 0 <= idx < 64:
                try:
                    if peek_word(blk + 8 + 8 * idx) == id(items[0]):
                        found.append((o, io))
                except Exception:
                    pass
    found = [fd for fd in found if fd[0] != fd[1]]
    if not found:
        raise SystemExit("probe: deque not understood")
    OUT["deque_leftblock"], OUT["deque_leftindex"] = found[0]
    # async generator asend and the Future iterator.
    g = agen()
    s = g.asend(None)
    one("asend_gen", where(raw(s), id(g)))
    s.close()
    fut = loop.create_future()
    it = fut.__await__()
    one("futureiter_future", where(raw(it), id(fut)))
    fut.cancel()
    # Types: tp_dict (under T.__dict__'s mappingproxy) and tp_mro; slots.
    T = asyncio.TimerHandle
    mp = T.__dict__
    d = struct.unpack("<Q", ctypes.string_at(id(mp) + 16, 8))[0]
    one("type_dict", where(raw(T, type(T).__basicsize__), d))
    one("type_mro", where(raw(T, type(T).__basicsize__), id(T.__mro__)))
    h = loop.call_later(3600, cb_a, x)
    one("slot__when", where(raw(h), id(h._when)))
    desc = T.__dict__["_when"]
    ok = []
    for o, w in zip(range(0, 1000, 8), words(raw(desc))):
        if o < 16 or not w:
            continue
        if peek_word(w + 16) == OUT["slot__when"]:
            ok.append(o)
    one("member_descr_def", ok)
    h.cancel()
    t.cancel()
    if sys.version_info >= (3, 14):
        module_state()


class NotATask:
    """Weakly referable, and no _asyncio.Task: registered as a third-party task."""


def module_state():
    """3.14+: where `_asyncio`'s module state keeps the tasks that are no C
    tasks (a WeakSet and a set): an object registered into both is found
    among the module's referents, and then in the state's words."""
    import _asyncio
    import gc
    m = NotATask()
    asyncio.tasks._register_task(m)
    asyncio.tasks._register_eager_task(m)
    try:
        refs = gc.get_referents(_asyncio)
        ws = [r for r in refs if isinstance(r, weakref.WeakSet) and m in r]
        st = [r for r in refs if type(r) is set and m in r]
        if len(ws) != 1 or len(st) != 1:
            raise SystemExit("probe: _asyncio's registries not found (%d, %d)" % (len(ws), len(st)))
        states = []
        for o, w in enumerate(words(raw(_asyncio))):
            head = peek(w, 128) if o >= 2 and w else None
            if head is not None and len(head) == 128 and id(ws[0]) in words(head):
                states.append((o * 8, head))
        one("md_state", [o for o, _ in states])
        head = states[0][1]
        one("state_future_type", where(head[:64], id(_asyncio.Future), skip_header=False))
        one("state_task_type", where(head[:64], id(_asyncio.Task), skip_header=False))
        one("state_tasks", where(head, id(ws[0]), skip_header=False))
        one("state_eager_tasks", where(head, id(st[0]), skip_header=False))
    finally:
        asyncio.tasks._unregister_eager_task(m)
        asyncio.tasks._unregister_task(m)


asyncio.run(main())
print(json.dumps(OUT))
