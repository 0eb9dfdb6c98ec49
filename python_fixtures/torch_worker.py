# -*- coding: utf-8 -*-
"""PyTorch inference in a worker thread: the `--native` workload at
inference scale (bench/run.py's torch-native group, tests/native_gdb.rs).

    python torch_worker.py [SECONDS]

A small `nn.TransformerEncoder` (4 layers, d_model 256, 4 heads, nothing
downloaded) runs on `torch.randn(8, 128, 256)` under `torch.inference_mode()`
in a loop in a worker thread, with `torch.set_num_threads(2)` (so OpenMP's
pool has a worker besides the caller). Needs torch (`.ci/torch-workload`).
Prints `READY {...}` after the model has run once and the worker is looping;
lives until killed, or SECONDS (default 120; the benchmark's 10-minute
record asks for more).
"""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_util as fu  # noqa: E402

looping = threading.Event()


def start_worker():
    """Build the model, run it once, and start the worker thread that
    runs it in a loop; returns once the worker is looping."""
    import torch
    from torch import nn

    torch.set_num_threads(2)
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=256, nhead=4, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=4).eval()
    x = torch.randn(8, 128, 256)

    def step():
        with torch.inference_mode():
            model(x)

    step()

    def body():
        step()
        looping.set()
        while not fu.expired():
            step()

    t = threading.Thread(target=body, name="torch-worker")
    t.daemon = True
    t.start()
    fu.wait_until([looping], timeout=120.0)
    return t


def main():
    if len(sys.argv) > 1:
        fu.LIFETIME_SECONDS = float(sys.argv[1])
    fu.install_ping()
    start_worker()
    import torch

    fu.ready({"torch": torch.__version__, "worker": "torch-worker"})
    while not fu.expired():
        fu.time.sleep(0.2)
    fu.exit_now()


if __name__ == "__main__":
    main()
