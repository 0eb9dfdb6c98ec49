# -*- coding: utf-8 -*-
"""Named Python threads parked in native code, for the `dump --native` tests.

    python native_dump.py LIBDIR

LIBDIR holds what tests/native_dump.rs builds: libfixture.so (fixture.c,
fixture_asm.s, fixture_threads.c; stripped to its dynamic symbols),
libnosym.so (no symbols at all), liblate.so (a copy of libfixture.so, loaded
only once the file `trigger-PID` appears), blob.bin (raw machine code, not an
ELF file). The fixture makes libgone-PID.so, a copy of libfixture.so that it
deletes once loaded.

Threads (all parked for good; nothing writes to the pipe they read):
  blocker   fixture_block: read() under two static helpers
  spinner   fixture_spin: spins in the library
  sleeper   fixture_sleep: nanosleep() under a static helper
  callback  fixture_call -> ctypes callback in_callback -> fixture_block
  sorter    sorted(key=sort_key) -> sort_key -> fixture_block
  nosym     the entry of libnosym.so (found through its constructor) -> read()
  gone      fixture_block of libgone-PID.so, whose file no longer exists
  blob      code in blob.bin -> read()
  reader    os.read on the pipe
  selector  select.select on the pipe
  late      polls for `trigger-PID`, then loads liblate.so and calls its fixture_block
  c-worker  a thread started by C (fixture_start_thread), unknown to Python

READY carries, per thread, its native id and the line of the Python call
into native code (from the MARK comments), and the C thread's id.
Runs unchanged on Python 2.7 and 3.6+.
"""
import ctypes
import os
import select
import shutil
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fixture_util as fu  # noqa: E402

HERE = os.path.abspath(__file__)
MARK = fu.markers(HERE)
LIBDIR = sys.argv[1]

read_fd, write_fd = os.pipe()


def load(name):
    lib = ctypes.CDLL(os.path.join(LIBDIR, name))
    lib.fixture_block.argtypes = [ctypes.c_int]
    lib.fixture_block.restype = ctypes.c_long
    return lib


lib = load("libfixture.so")
lib.fixture_sleep.argtypes = [ctypes.c_long]
lib.fixture_spin.argtypes = [ctypes.c_uint64]
CALLBACK = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long)
lib.fixture_call.argtypes = [CALLBACK, ctypes.c_long]
lib.fixture_start_thread.argtypes = [ctypes.c_char_p, ctypes.c_int]

libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
libc.getenv.argtypes = [ctypes.c_char_p]
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]

# No symbol names the entry of libnosym.so: its constructor put the address
# in the environment.
ctypes.CDLL(os.path.join(LIBDIR, "libnosym.so"))
nosym_entry = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_int)(
    int(libc.getenv(b"NOSYM_ENTRY"), 16)
)

# A private copy of the library, deleted once loaded.
gone_name = "libgone-%d.so" % os.getpid()
shutil.copy(os.path.join(LIBDIR, "libfixture.so"), os.path.join(LIBDIR, gone_name))
gone = load(gone_name)
os.unlink(os.path.join(LIBDIR, gone_name))

# blob.bin: long f(long (*read)(int, void *, size_t), int fd, void *buf)
# calls read(fd, buf, 1). Mapped executable straight from the file.
blob_path = os.path.join(LIBDIR, "blob.bin")
blob_fd = os.open(blob_path, os.O_RDONLY)
PROT_READ, PROT_EXEC, MAP_PRIVATE = 1, 4, 2
blob_addr = libc.mmap(None, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, blob_fd, 0)
if blob_addr in (None, ctypes.c_void_p(-1).value):
    sys.stderr.write("fixture: mmap of blob.bin failed\n")
    os._exit(3)
blob = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)(
    blob_addr
)
read_addr = ctypes.cast(libc.read, ctypes.c_void_p).value
blob_buf = ctypes.create_string_buffer(16)


def blocker(parked):
    parked.set()
    lib.fixture_block(read_fd)  # MARK:blocker


def spinner(parked):
    parked.set()
    lib.fixture_spin(0)  # MARK:spinner


def sleeper(parked):
    parked.set()
    lib.fixture_sleep(100000000)  # MARK:sleeper


def in_callback(fd):
    return lib.fixture_block(fd)  # MARK:in_callback


def callback(parked):
    parked.set()
    lib.fixture_call(CALLBACK(in_callback), read_fd)  # MARK:callback


def sort_key(x):
    return lib.fixture_block(read_fd)  # MARK:sort_key


def sorter(parked):
    parked.set()
    sorted([3, 1, 2], key=sort_key)  # MARK:sorter


def nosym(parked):
    parked.set()
    nosym_entry(read_fd)  # MARK:nosym


def gone_thread(parked):
    parked.set()
    gone.fixture_block(read_fd)  # MARK:gone


def blob_thread(parked):
    parked.set()
    blob(read_addr, read_fd, blob_buf)  # MARK:blob


def reader(parked):
    parked.set()
    os.read(read_fd, 1)  # MARK:reader


def selector(parked):
    parked.set()
    select.select([read_fd], [], [])  # MARK:selector


def late(parked):
    parked.set()
    trigger = os.path.join(LIBDIR, "trigger-%d" % os.getpid())
    while not os.path.exists(trigger):
        time.sleep(0.02)  # MARK:late_wait
    late_lib = load("liblate.so")
    late_lib.fixture_block(read_fd)  # MARK:late


TARGETS = [
    ("blocker", blocker),
    ("spinner", spinner),
    ("sleeper", sleeper),
    ("callback", callback),
    ("sorter", sorter),
    ("nosym", nosym),
    ("gone", gone_thread),
    ("blob", blob_thread),
    ("reader", reader),
    ("selector", selector),
    ("late", late),
]


def main():
    fu.install_ping()
    threads = {}
    events = []
    for name, target in TARGETS:
        parked = fu.Parked()
        t = threading.Thread(target=target, name=name, args=(parked,))
        t.daemon = True
        t.start()
        threads[name] = (t, parked)
        events.append(parked)
    fu.wait_until(events)
    c_tid = lib.fixture_start_thread(b"c-worker", read_fd)
    # A moment for every thread to get from parked.set() into its call.
    time.sleep(0.2)
    fu.ready(
        {
            "threads": dict(
                (name, {"native_id": fu.NATIVE_IDS.get(t.ident), "line": MARK[name]})
                for name, (t, _) in threads.items()
            ),
            "marks": MARK,
            "c_thread": c_tid,
            "file": HERE,
        }
    )
    while not fu.expired():
        time.sleep(0.2)
    fu.exit_now()


main()
