# -*- coding: utf-8 -*-
"""A thread running PyTorch's CPU kernels, for tests/native_names.rs: its
native frames carry libtorch's demangled names (the dispatcher's kernel
wrappers run to 2,000 characters).

    /opt/pyinspect-torch/venv/bin/python torch_names.py

Thread `model` runs nn.TransformerEncoderLayer forward passes in a loop
(one intra-op thread). READY once torch is imported and one pass has run.
"""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fixture_util as fu  # noqa: E402

import torch  # noqa: E402

torch.set_num_threads(1)
layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, batch_first=True).eval()
x = torch.randn(8, 128, 256)
ran = threading.Event()


def model():
    with torch.inference_mode():
        while not fu.expired():
            layer(x)  # MARK:forward
            ran.set()


t = threading.Thread(target=model, name="model")
t.daemon = True
t.start()
fu.wait_until([ran], timeout=60.0)
fu.ready({})
while not fu.expired():
    fu.time.sleep(0.5)
fu.exit_now()
