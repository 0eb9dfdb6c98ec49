# -*- coding: utf-8 -*-
"""Parks named threads in known functions at known lines, then prints READY.

Runs unchanged on Python 2.7 and 3.6+. The READY line carries, for every
thread, its name, ident, native id (where knowable), expected status and full
expected stack (read back through sys._current_frames), plus the expected
reprs of the locals of `with_locals`. Lines are never hard-coded: they come
from `# MARK:` comments and from the live frames.

Threads:
  sleeper      time.sleep in a loop                        idle
  lock-waiter  blocked on a threading.Lock                 idle
  busy         pure-Python spin loop                       active, usually holds the GIL
  worker       Worker.run, a method (qualname on 3.11+)    idle
  recurser     recursion 50 levels deep                    idle
  wörker-中    non-ASCII function and class on Python 3    idle
  locals       with_locals: one local of each kind         idle
  (nameless)   started by _thread.start_new_thread         idle, no name
  MainThread   main_wait                                   idle
"""
import os
import sys
import threading
import time

import fixture_util as fu

PY2 = sys.version_info[0] == 2
HERE = os.path.abspath(__file__)
MARK = fu.markers(HERE)
RECURSION_DEPTH = 50
LONG_SLEEP = 1000.0  # parked threads never wake: their status stays idle
LOCALS_PARKED = fu.Parked()


def sleeper(parked):
    parked.set()
    while True:
        time.sleep(LONG_SLEEP)  # MARK:sleeper


def blocked_on_lock(lock, parked):
    parked.set()
    lock.acquire()  # MARK:lock


def spin(parked):
    parked.set()
    n = 0
    while True: n += 1  # MARK:spin  (one line: the current line is exact)


class Worker(object):
    def __init__(self, parked):
        self.parked = parked

    def run(self):
        self.parked.set()
        while True:
            time.sleep(LONG_SLEEP)  # MARK:worker


def recurse(depth, parked):
    if depth > 1:
        return recurse(depth - 1, parked)  # MARK:recurse_call
    parked.set()
    while True:
        time.sleep(LONG_SLEEP)  # MARK:recurse


def ascii_named(parked):
    # Python 2 forbids non-ASCII identifiers: only the thread name is non-ASCII.
    parked.set()
    while True:
        time.sleep(LONG_SLEEP)  # MARK:ascii_named


def nameless(parked):
    parked.set()
    while True:
        time.sleep(LONG_SLEEP)  # MARK:nameless


class Foo(object):
    pass


def with_locals(arg_int, arg_str):
    big = 2 ** 100
    neg = -42
    neg_big = -(2 ** 70)
    flt = 0.1
    flt_big = 1e16
    flag = True
    nothing = None
    text = u"h\u00e9llo \u4e2d"
    raw = b"raw\x00\xff"
    items = [1, 2, 3]
    pair = (1, "two", None)
    mapping = {"k": 1}
    unique = set([7])
    obj = Foo()
    LOCALS_PARKED.set()
    while True:
        time.sleep(LONG_SLEEP)  # MARK:locals


def main_wait():
    while not fu.expired():
        time.sleep(0.5)  # MARK:main
    fu.exit_now()


def expected_repr(value):
    """How pyinspect should render `value`: (repr, accepted alternatives, match kind)."""
    if isinstance(value, Foo):
        return "<Foo at 0x%x>" % id(value), [], "object"
    text = repr(value)
    alts = []
    if PY2:
        # Python 2's own reprs differ from Python 3's; accept the Python 3 style too.
        if isinstance(value, long):  # noqa: F821 (Python 2 only)
            alts.append(text.rstrip("L"))
        elif isinstance(value, unicode):  # noqa: F821 (Python 2 only)
            alts.extend([u"u'%s'" % value, u"'%s'" % value])
        elif isinstance(value, str):
            alts.append("b" + text)
        elif isinstance(value, set):
            alts.append("{" + ", ".join(repr(v) for v in sorted(value)) + "}")
    if isinstance(value, (list, tuple, dict, set)):
        kind = "container"
    else:
        kind = "exact"
    return text, alts, kind


def stack_of(frame):
    frames = []
    while frame is not None:
        code = frame.f_code
        frames.append(
            {
                # What a reader shows: co_qualname on 3.11+, co_name before.
                "function": getattr(code, "co_qualname", code.co_name),
                "name": code.co_name,
                "file": code.co_filename,
                "line": frame.f_lineno,
            }
        )
        frame = frame.f_back
    return frames


def start(name, target, args):
    parked = fu.Parked()
    thread = threading.Thread(target=target, args=args + (parked,), name=name)
    thread.daemon = True
    thread.start()
    return thread, parked


def main():
    fu.install_ping()
    lock = threading.Lock()
    lock.acquire()
    spec = [
        ("sleeper", sleeper, (), "sleeper", "idle"),
        ("lock-waiter", blocked_on_lock, (lock,), "lock", "idle"),
        ("busy", spin, (), "spin", "active"),
    ]
    started = []
    for name, target, args, mark, status in spec:
        started.append((start(name, target, args), mark, status))
    parked = fu.Parked()
    worker = threading.Thread(target=Worker(parked).run, name="worker")
    worker.daemon = True
    worker.start()
    started.append(((worker, parked), "worker", "idle"))
    started.append((start("recurser", recurse, (RECURSION_DEPTH,)), "recurse", "idle"))
    unicode_name = u"w\u00f6rker-\u4e2d"
    if PY2:
        started.append(
            (start(unicode_name.encode("utf-8"), ascii_named, ()), "ascii_named", "idle")
        )
        unicode_file, unicode_mark = HERE, MARK["ascii_named"]
    else:
        import threads_unicode

        started.append((start(unicode_name, threads_unicode.entry(), ()), None, "idle"))
        unicode_file = os.path.abspath(threads_unicode.__file__)
        unicode_mark = fu.markers(unicode_file)["unicode_park"]
    locals_thread = threading.Thread(target=with_locals, args=(42, "arg"), name="locals")
    locals_thread.daemon = True
    locals_thread.start()
    nameless_parked = fu.Parked()
    nameless_ident = fu.thread_module.start_new_thread(nameless, (nameless_parked,))

    fu.wait_until([p for (_, p), _, _ in started] + [LOCALS_PARKED, nameless_parked])
    idents = dict((t.ident, t) for (t, _), _, _ in started)
    idents[locals_thread.ident] = locals_thread

    threads = []
    expected_lines = {}
    for (thread, _), mark, status in started:
        line = unicode_mark if mark is None else MARK[mark]
        expected_lines[thread.ident] = line
        threads.append({"name": thread.name, "ident": thread.ident, "status": status})
    expected_lines[locals_thread.ident] = MARK["locals"]
    threads.append({"name": "locals", "ident": locals_thread.ident, "status": "idle"})
    expected_lines[nameless_ident] = MARK["nameless"]
    threads.append({"name": None, "ident": nameless_ident, "status": "idle"})

    # Every thread must have reached its parking line before READY.
    deadline = time.time() + 10
    while True:
        current = sys._current_frames()
        stacks = dict((t["ident"], stack_of(current[t["ident"]])) for t in threads)
        if all(stacks[i][0]["line"] == line for i, line in expected_lines.items()):
            break
        if time.time() > deadline:
            sys.stderr.write("fixture: threads not at their marks: %r\n" % stacks)
            os._exit(3)
        time.sleep(0.05)
    for t in threads:
        t["frames"] = stacks[t["ident"]]
        t["native_id"] = fu.NATIVE_IDS.get(t["ident"])
        if PY2 and t["name"] is not None and not isinstance(t["name"], unicode):  # noqa: F821
            t["name"] = t["name"].decode("utf-8")

    locals_frame = current[locals_thread.ident]
    code = locals_frame.f_code
    variables = []
    for index, var in enumerate(code.co_varnames[: code.co_nlocals]):
        text, alts, kind = expected_repr(locals_frame.f_locals[var])
        variables.append(
            {
                "name": var,
                "repr": text,
                "alts": alts,
                "match": kind,
                "is_arg": index < code.co_argcount,
            }
        )

    script = main.__code__.co_filename  # as given on the command line
    main_frames = [
        fu.frame(main_wait, MARK["main"]),
        fu.frame(main, MARK["main_call"]),
        {"function": "<module>", "name": "<module>", "file": script, "line": MARK["module_call"]},
    ]
    threads.append(
        {
            "name": "MainThread",
            "ident": threading.current_thread().ident,
            "native_id": fu.native_id(),
            "status": "idle",
            "frames": main_frames,
        }
    )
    fu.ready(
        {
            "script": HERE,
            "threads": threads,
            "locals": {"thread": "locals", "function": "with_locals", "variables": variables},
            "busy": "busy",
            "unicode": {"file": unicode_file, "line": unicode_mark},
        }
    )
    main_wait()  # MARK:main_call


if __name__ == "__main__":
    main()  # MARK:module_call
