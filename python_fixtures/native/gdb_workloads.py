# -*- coding: utf-8 -*-
"""Workloads for the gdb oracle (tests/native_gdb.rs): a process whose
threads sit in native code that gdb can name, compared frame by frame with
`pyinspect dump --native-all`.

    python gdb_workloads.py MODE [LIBDIR [PAUSE]]

MODE:
  ctypes      LIBDIR's libgap.so (code segment starting mid-page), two
              threads deadlocked in libdeadlock.so, and libcxx.so (C++,
              inlined frames, exceptions thrown and caught, then a wait)
  matmul      numpy matmul in a loop (OpenBLAS, 2 threads)
  svd         scipy.linalg.svd in a loop (OpenBLAS, 2 threads)
  tokenizers  a BPE tokenizer trained in-process, encode_batch in a loop
              (Rust, rayon)
  onnx        onnxruntime running a tiny model built with onnx.helper
              (C++ thread pool)
  jax         a jitted matmul (XLA on the CPU) in a loop, each result
              waited for (jaxlib's C++, XLA's TSL/Eigen pool)
  jax-kernel  a jitted elementwise kernel alone (XLA's own code, from
              an anonymous mapping)
  torch       python_fixtures/torch_worker.py's PyTorch worker (run with
              .ci/torch-workload's venv): libtorch_cpu's C++, OpenMP and
              pthreadpool threads

With PAUSE (seconds), the loop sleeps that long after each step, so that
the pool threads sit in their waits most of the time (the pool-wait tests).

Prints `READY {...}` once every thread is in place; lives until killed.
"""
import os
import sys
import threading

os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")
os.environ.setdefault("RAYON_NUM_THREADS", "2")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fixture_util as fu  # noqa: E402

MODE = sys.argv[1]
LIBDIR = sys.argv[2] if len(sys.argv) > 2 else ""
PAUSE = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
started = threading.Event()


def run_ctypes():
    import ctypes

    gap = ctypes.CDLL(os.path.join(LIBDIR, "libgap.so"))
    dead = ctypes.CDLL(os.path.join(LIBDIR, "libdeadlock.so"))
    cxx = ctypes.CDLL(os.path.join(LIBDIR, "libcxx.so"))
    rfd, _wfd = os.pipe()
    gap.gap_block.argtypes = [ctypes.c_int]
    dead.deadlock_run.argtypes = [ctypes.c_int]
    cxx.cxx_park.argtypes = [ctypes.c_int]
    targets = [
        ("gap", lambda: gap.gap_block(rfd)),
        ("dead-a", lambda: dead.deadlock_run(0)),
        ("dead-b", lambda: dead.deadlock_run(1)),
        ("cxx", lambda: cxx.cxx_park(1000)),
    ]
    for name, f in targets:
        t = threading.Thread(target=f, name=name)
        t.daemon = True
        t.start()
    # Parked when every thread sleeps in the kernel.
    fu.time.sleep(0.5)


def loop_in_thread(step):
    def body():
        step()
        started.set()
        while True:
            step()
            if PAUSE:
                fu.time.sleep(PAUSE)

    t = threading.Thread(target=body, name=MODE)
    t.daemon = True
    t.start()
    fu.wait_until([started], timeout=120.0)


def run_matmul():
    import numpy as np

    a = np.ones((1500, 1500))
    loop_in_thread(lambda: a @ a)


def run_svd():
    import numpy as np
    import scipy.linalg

    a = np.random.default_rng(0).random((500, 500))
    loop_in_thread(lambda: scipy.linalg.svd(a))


def run_tokenizers():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta"]
    text = [" ".join(words[(i + j) % 7] for j in range(40)) for i in range(200)]
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=200, special_tokens=["[UNK]"]))
    batch = text * 20
    loop_in_thread(lambda: tok.encode_batch(batch))


def run_onnx():
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    import onnxruntime as ort

    w = helper.make_tensor("W", TensorProto.FLOAT, [256, 256], [0.01] * (256 * 256))
    node = helper.make_node("MatMul", ["X", "W"], ["Y"])
    relu = helper.make_node("Relu", ["Y"], ["Z"])
    graph = helper.make_graph(
        [node, relu],
        "tiny",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [512, 256])],
        [helper.make_tensor_value_info("Z", TensorProto.FLOAT, [512, 256])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    x = np.ones((512, 256), dtype=np.float32)
    loop_in_thread(lambda: sess.run(None, {"X": x}))


def run_jax():
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_platforms", "cpu")
    f = jax.jit(lambda a, b: jnp.tanh(a @ b))
    a = jnp.ones((512, 512), dtype=jnp.float32)
    b = jnp.full((512, 512), 0.001, dtype=jnp.float32)
    loop_in_thread(lambda: f(a, b).block_until_ready())


def run_jax_kernel():
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_platforms", "cpu")
    # Elementwise work alone: XLA fuses it into one kernel of its own code,
    # where the worker spends nearly all its time (the matmul above runs
    # mostly in Eigen's library code).
    f = jax.jit(lambda a: jnp.tanh(jnp.tanh(a * 1.5 + 0.25) * 0.5))
    a = jnp.ones((2048, 2048), dtype=jnp.float32)
    loop_in_thread(lambda: f(a).block_until_ready())


def run_torch():
    import torch_worker

    torch_worker.start_worker()


def main():
    # Three stops each read by gdb, and the dumps after them, take longer
    # than the default lifetime on a loaded machine (the test kills the
    # fixture when it is done).
    fu.LIFETIME_SECONDS = 900.0
    fu.install_ping()
    {
        "ctypes": run_ctypes,
        "matmul": run_matmul,
        "svd": run_svd,
        "tokenizers": run_tokenizers,
        "onnx": run_onnx,
        "jax": run_jax,
        "jax-kernel": run_jax_kernel,
        "torch": run_torch,
    }[MODE]()
    fu.ready({"mode": MODE})
    while not fu.expired():
        fu.time.sleep(0.2)
    fu.exit_now()


main()
