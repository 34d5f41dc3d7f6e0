"""Per-kernel state and scratch buffers: created once per kernel, freed with it, workspaces where MindSpore can."""
from __future__ import annotations

import gc

import mindspore as ms
import numpy as np
import psutil
import pytest
import torch
import torch.nn.functional as F
from mindspore import nn

import aot_ops
from aot_ops import AotOp
from support import run_forward, sample, to_ms, to_torch


class Single(nn.Cell):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, x):
        return self.op(x)


def test_init_exception_without_a_message_still_fails_the_launch_with_a_cause(user_library, mode):
    x = sample((3,), torch.float32)
    # Outputs inferred in Python: MindSpore's Init hook meets the failure first, the launch reports it.
    op = ms.ops.Custom(f"{user_library}:EmptyInitError", out_shape=lambda s: s, out_dtype=lambda t: t,
                       func_type="aot")
    with pytest.raises(RuntimeError, match="EmptyInitError: kernel initialisation failed: an exception with an "
                                           "empty message was thrown"):
        run_forward(op, [x])
    # Outputs inferred in C++: the shape inference parses the state first and reports the same cause.
    with pytest.raises(RuntimeError, match="EmptyInitError: an exception with an empty message was thrown"):
        run_forward(AotOp(user_library, "EmptyInitError"), [x])


def test_scratch_is_a_mindspore_workspace_when_its_size_is_known(user_library, mode):
    x = sample((5, 7), torch.float32)
    sums, from_workspace = run_forward(AotOp(user_library, "RowSumsWithScratch"), [x])
    torch.testing.assert_close(sums, x.sum(1))
    assert from_workspace.item() == 1


def test_scratch_is_allocated_per_call_when_its_size_is_dynamic(user_library):
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        net = Single(AotOp(user_library, "RowSumsWithScratch"))
        net.set_inputs(ms.Tensor(shape=[None, None], dtype=ms.float32))
        for shape in ((2, 3), (6, 1), (4, 9)):
            x = sample(shape, torch.float32)
            sums, from_workspace = net(to_ms(x))
            torch.testing.assert_close(to_torch(sums), x.sum(1))
            assert from_workspace.asnumpy().item() == 0
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def test_harness_calls_without_init_parse_the_state_per_call():
    """No Init hook ran (no MindSpore): attributes are absent, so LeakyRelu uses its default slope."""
    x, y = torch.tensor([-1.0, 2.0]), torch.empty(2)
    aot_ops.harness.call(aot_ops.library_path(), "LeakyRelu", [x], [y])
    assert y.tolist() == pytest.approx([-0.01, 2.0])


def test_ten_thousand_calls_do_not_grow_memory():
    """10,000 PyNative calls alternating 4 shapes and 2 slopes: each (shape, slope) gets its own MindSpore kernel
    with its own state; resident memory stays flat and no state outlives its kernel."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    library = aot_ops.library_path()
    inputs = [ms.Tensor(np.random.default_rng(i).standard_normal(shape).astype(np.float32))
              for i, shape in enumerate(((16,), (4, 8), (3, 5, 2), (100,)))]
    ops_by_slope = [aot_ops.leaky_relu(negative_slope=s) for s in (0.05, 0.25)]

    def run(calls):
        for i in range(calls):
            out = ops_by_slope[i % 2](inputs[(i // 2) % len(inputs)])
        return out.asnumpy()

    process = psutil.Process()
    run(1000)  # warm-up: kernels, caches, allocator pools
    gc.collect()
    rss_before = process.memory_info().rss
    states_before = aot_ops.live_kernel_states(library)
    last = run(9000)
    gc.collect()
    growth_mb = (process.memory_info().rss - rss_before) / 2**20
    states_after = aot_ops.live_kernel_states(library)
    x = torch.from_numpy(inputs[(8999 // 2) % len(inputs)].asnumpy())
    np.testing.assert_allclose(last, F.leaky_relu(x, 0.25).numpy(), rtol=1e-6)
    print(f"RSS growth over 9,000 calls: {growth_mb:.1f} MiB; live kernel states {states_before} -> {states_after}")
    assert growth_mb < 20, f"resident memory grew by {growth_mb:.1f} MiB"
    assert states_after <= states_before + 8, "kernel states accumulate: they are not freed with their kernels"


def test_kernel_states_are_freed_with_their_graph():
    """MindSpore deletes a kernel's data when the compiled graph goes away; ms_ext's state goes with it."""
    library = aot_ops.library_path()
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        baseline = aot_ops.live_kernel_states(library)
        for k in range(3):
            net = Single(aot_ops.gelu(approximate="tanh"))
            net(ms.Tensor(np.ones(3 + k, np.float32))).asnumpy()
            assert aot_ops.live_kernel_states(library) > baseline
            del net
            gc.collect()
            assert aot_ops.live_kernel_states(library) == baseline
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
