"""The PyNative fast front (aot_ops/_front): eager calls of every kind of operator go through it, give what the
ops.Custom path gives, and keep its errors; the traps met building it (non-contiguous inputs, a built-in operator
reading a front output first, gradients) each have a test; AOT_OPS_FAST_FRONT=0 turns it off."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import mindspore as ms
import numpy as np
import pytest
import torch
from mindspore import ops

import aot_ops
from aot_ops import AotOp, aten
from aot_ops._core import front
from support import assert_same, sample, to_ms, to_torch

pytestmark = pytest.mark.skipif(not front.active(), reason=f"the fast front is not active: {front.status()}")


def custom_path(op, *args):
    """The same operator called through ops.Custom, as with the front off (a primitive gets every argument)."""
    op = getattr(op, "op", op)  # the primitive inside an OptionalInputs cell
    return ops.Custom.__call__(op, *(args + (None,) * ((op.arity.inputs or 0) - len(args))))


def launched(call):
    """(result as torch tensors, entry points the front launched for it)."""
    before = front.launches()
    out = call()
    outs = tuple(to_torch(o) for o in (out if isinstance(out, tuple) else (out,)))  # reading waits for the launch
    return outs, front.launches() - before


@pytest.mark.parametrize("make, inputs", [
    (lambda: aot_ops.leaky_relu(negative_slope=0.3), [sample((5, 7), torch.float32)]),
    (lambda: aot_ops.add(), [sample((3, 1), torch.float64), sample((4,), torch.float32)]),
    (lambda: aot_ops.max(dim=1), [sample((4, 6), torch.float32)]),
    (lambda: aot_ops.sum(dim=[0]), [sample((4, 6), torch.int32)]),
    (lambda: aten.op("aten::add.Tensor", alpha=2), [sample((2, 3), torch.float32), sample((2, 3), torch.float32)]),
    (lambda: aten.op("aten::layer_norm", normalized_shape=[6]), [sample((3, 6), torch.float32)]),  # None w, b
    (lambda: aten.op("aten::cat", dim=1), [[sample((2, 2), torch.float32), sample((2, 3), torch.float32)]]),
    (lambda: aten.op("aten::sum", dim=None), [sample((), torch.float32)]),  # 0-dim in, 0-dim out
    (lambda: aot_ops.leaky_relu(), [torch.zeros(0, 3)]),  # empty
], ids=["leaky_relu", "add-promotes", "max-two-outputs", "sum-int", "aten-add", "aten-layer_norm-optional-none",
        "aten-cat-list", "0-dim", "empty"])
def test_each_kind_of_operator_runs_on_the_front_as_on_the_custom_path(make, inputs):
    op = make()
    args = [[to_ms(t) for t in a] if isinstance(a, list) else to_ms(a) for a in inputs]
    got, launches = launched(lambda: op(*args))
    assert launches == 1
    expected, custom_launches = launched(lambda: custom_path(op, *args))
    assert custom_launches == 0
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert_same(g, e)


class ManyOutputs(torch.nn.Module):
    def forward(self, x):
        return tuple(torch.tanh(x) * k for k in range(20))


def test_an_operator_with_many_outputs_runs_on_the_front():
    """A fused forward program returns as many outputs as the network has (the front takes any count)."""
    x = sample((3, 4), torch.float32)
    # jit=False: called operator by operator through PyNative (by default the cell is one graph, not on the front)
    cell = aot_ops.from_torch(ManyOutputs().eval(), (x,), fuse=True, jit=False)
    got, launches = launched(lambda: cell(to_ms(x)))
    assert launches == 1
    expected = ManyOutputs()(x)
    assert len(got) == len(expected) == 20
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


def test_users_ms_ext_kernel_reads_every_attribute_kind_on_the_front(user_library):
    # What lib.op(symbol, attrs=...) makes for a kernel of the user's own library: an AotOp.
    op = AotOp(user_library, "AttrEcho", attrs={"i": 7, "f": 0.1, "s": "text", "b": True, "il": [3, 1, 4],
                                                "fl": [0.5, 1e-5], "i2": [[1, 2], [3]], "f2": [[0.25], [2.0]]})
    x = sample((1,), torch.float32)
    got, launches = launched(lambda: op(to_ms(x)))
    assert launches == 1
    expected, _ = launched(lambda: custom_path(op, to_ms(x)))
    assert_same(got[0], expected[0])
    assert got[0][:4].tolist() == [1.0, 7.0, 0.1, 4.0]  # b, i, f (the exact double), len(s)


def test_kernel_with_scratch_buffers_sized_per_call(user_library):
    # Init sizes the scratch from the shapes: the front runs it for every call, so a larger second call is safe.
    op = AotOp(user_library, "RowSumsWithScratch")
    for rows, cols in ((3, 4), (50, 70), (2, 1)):
        x = sample((rows, cols), torch.float32, seed=rows)
        (sums, from_workspace), launches = launched(lambda: op(to_ms(x)))
        assert launches == 1
        torch.testing.assert_close(sums, x.sum(1))
        assert from_workspace.item() == 1  # the scratch came from the front's workspace, as MindSpore's would


@pytest.mark.parametrize("view", ["transposed", "sliced-columns", "strided", "row-slice"])
def test_non_contiguous_inputs_are_read_as_their_values(view):
    base = sample((6, 8), torch.float32)
    x = to_ms(base)
    views = {"transposed": (x.T, base.T), "sliced-columns": (x[:, 2:5], base[:, 2:5]),
             "strided": (x[::2, 1::3], base[::2, 1::3]), "row-slice": (x[1:4], base[1:4])}
    ms_view, torch_view = views[view]
    leaky = aot_ops.leaky_relu(negative_slope=0.1)
    (got,), launches = launched(lambda: leaky(ms_view))
    assert launches == 1
    torch.testing.assert_close(got, torch.nn.functional.leaky_relu(torch_view, 0.1))
    add = aten.op("aten::add.Tensor")
    (got,), _ = launched(lambda: add(ms_view, ms_view))
    torch.testing.assert_close(got, torch_view * 2)


def test_built_in_operator_reading_a_front_output_first_sees_it_written():
    # The first-ever call of a built-in operator, reading the output of a slow front kernel: with the launch left
    # to MindSpore's launch thread it read zeros or stale memory. A fresh process: "first-ever" matters.
    code = textwrap.dedent("""
        import numpy as np, mindspore as ms, aot_ops
        from mindspore import ops
        from aot_ops._core import front
        ms.set_device("CPU")
        assert front.active(), front.status()
        data = np.random.default_rng(0).standard_normal((2000, 2000)).astype(np.float32)
        mm = aot_ops.matmul()
        y = mm(ms.Tensor(data), ms.Tensor(data))          # slow: about 0.1 s on one core
        checks = {"relu": ops.relu(y), "times 2": y * 2, "sum": y.sum(), "exp": ops.exp(y[:2, :2])}
        reference = data.astype(np.float64) @ data.astype(np.float64)
        expected = {"relu": np.maximum(reference, 0), "times 2": reference * 2, "sum": reference.sum(),
                    "exp": np.exp(reference[:2, :2])}
        for name, value in checks.items():
            np.testing.assert_allclose(value.asnumpy(), expected[name], rtol=2e-3, atol=2e-2, err_msg=name)
        assert front.launches() == 1
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr[-3000:]


def test_gradients_are_recorded_through_the_custom_primitive_never_zero():
    # A PyBoost op of its own would get zero gradients from ms.grad without an error; while MindSpore records
    # gradients the call takes the Custom path, whose bprop MindSpore knows.
    x = sample((4, 5), torch.float64)
    leaky = aot_ops.leaky_relu(negative_slope=0.2)
    mul = aten.op("aten::mul.Tensor")
    before = front.launches()
    dx, dw = ms.grad(lambda a, b: mul(leaky(a), b).sum(), grad_position=(0, 1))(to_ms(x), to_ms(x * 3))
    # No launch on the front: the two forward calls, recorded, took the Custom path, and so did the backward
    # kernels (LeakyReluGrad, mul's ATen backward), which are faster there inside MindSpore's bprop.
    assert front.launches() - before == 0
    xt = x.clone().requires_grad_()
    wt = (x * 3).requires_grad_()
    (torch.nn.functional.leaky_relu(xt, 0.2) * wt).sum().backward()
    torch.testing.assert_close(to_torch(dx), xt.grad)
    torch.testing.assert_close(to_torch(dw), wt.grad)
    assert to_torch(dx).abs().sum() > 0
    # Outside ms.grad the same operators are on the front again.
    launched(lambda: leaky(to_ms(x)))
    assert front.launches() - before == 1


def test_the_launch_count_includes_calls_still_queued():
    """PyNative launches on runtime threads behind the caller: without waiting for them a count read right after
    50 unread calls saw 0-3 of them, and a test that left results unread shifted the next test's count."""
    leaky = aot_ops.leaky_relu(negative_slope=0.1)
    x = to_ms(sample((64, 64), torch.float32))
    before = front.launches()
    outs = [leaky(x) for _ in range(50)]
    assert front.launches() - before == 50
    assert_same(to_torch(outs[-1]), torch.nn.functional.leaky_relu(to_torch(x), 0.1))


def test_dtype_errors_are_raised_at_the_call_as_on_the_custom_path():
    leaky = aot_ops.leaky_relu()
    bad = to_ms(torch.arange(3, dtype=torch.int32))
    with pytest.raises(TypeError, match=r"LeakyRelu: input 0 has dtype int32, which this operator does not support"):
        leaky(bad)
    (got,), _ = launched(lambda: leaky(to_ms(torch.ones(3))))
    assert got.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("case", ["shape", "init", "launch"])
def test_errors_name_the_operator_and_the_next_call_works(case):
    x = to_ms(sample((4, 5), torch.float32))
    if case == "shape":  # the kernel's C++ shape rule refuses, on MindSpore's frontend thread
        op, bad, good, text = aot_ops.add(), (x, to_ms(torch.ones(3))), (x, x), r"Add: The size of tensor a \(5\)"
    elif case == "init":  # the kernel's Init refuses its attribute
        op, bad, good = aot_ops.gelu(approximate="bad"), (x,), None
        text = r"Gelu: attribute 'approximate' must be \"none\" or \"tanh\""
    else:  # the ATen operator fails inside the launch, on MindSpore's device thread
        op = aten.op("aten::index_select", dim=0)
        bad, good = (x, to_ms(torch.tensor([7]))), (x, to_ms(torch.tensor([1])))
        text = r"aten::index_select: index out of range"
    for _ in range(5):  # a failure never leaks into a later call
        with pytest.raises(RuntimeError, match=text) as info:
            op(*bad).asnumpy()
        assert "Traceback" not in str(info.value)
        if good is not None:
            op(*good).asnumpy()
        assert ops.relu(x).asnumpy().shape == (4, 5)


def test_non_tensor_arguments_keep_the_custom_paths_handling():
    """A NumPy array is not a MindSpore tensor: the front stands aside, and the call fails exactly as through
    ops.Custom (MindSpore hands the kernel an input without a rank), after which the next call works."""
    leaky = aot_ops.leaky_relu()
    errors = []
    for call in (lambda: leaky(np.ones(3, np.float32)).asnumpy(),
                 lambda: custom_path(leaky, np.ones(3, np.float32)).asnumpy()):
        before = front.launches()
        with pytest.raises(RuntimeError, match=r"LeakyRelu: input 0 has no rank") as info:
            call()
        assert front.launches() == before
        errors.append(str(info.value).split("Error message is ", 1)[-1].splitlines()[0])
    assert errors[0] == errors[1]
    x = sample((2, 3), torch.float32)
    (got,), launches = launched(lambda: leaky(to_ms(x)))
    assert launches == 1
    torch.testing.assert_close(got, torch.nn.functional.leaky_relu(x))


@pytest.mark.slow  # a fresh process: 6-7 s
def test_switch_off_keeps_every_call_on_the_custom_path_with_the_same_values():
    code = textwrap.dedent("""
        import numpy as np, mindspore as ms, aot_ops
        from aot_ops._core import front
        ms.set_device("CPU")
        x = ms.Tensor(np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4))
        y = aot_ops.leaky_relu(negative_slope=0.25)(x.T).asnumpy()
        print(front.status(), front.active(), front.launches())
        print(",".join(f"{v:.4f}" for v in y.ravel()))
    """)
    outputs = {}
    for value in ("0", "1"):
        env = dict(os.environ, AOT_OPS_FAST_FRONT=value)
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        outputs[value] = proc.stdout.strip().splitlines()
    assert outputs["0"][0] == "off (AOT_OPS_FAST_FRONT=0) False 0"
    assert outputs["1"][0].startswith("active") and outputs["1"][0].endswith("True 1")
    assert outputs["0"][1] == outputs["1"][1]
    data = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4).T.ravel()
    assert outputs["1"][1] == ",".join(f"{v:.4f}" for v in np.where(data > 0, data, 0.25 * data))


def test_doctor_reports_the_front():
    from aot_ops.tools import doctor

    finding = doctor.check_front()
    assert finding.status == doctor.OK and finding.detail.startswith("active"), finding


def test_eager_calls_return_to_the_front_once_an_aborted_gradient_is_ended():
    """MindSpore keeps recording every later PyNative operator for a gradient whose forward raised (the front is
    then skipped); aot_ops' entry points end such a recording (train_step, the conformance run)."""
    from aot_ops._core import mindspore_private

    op = aot_ops.leaky_relu()
    x = to_ms(sample((3, 4), torch.float32))

    def failing(v):
        op(v)
        raise RuntimeError("failed inside the gradient's forward")

    with pytest.raises(RuntimeError, match="failed inside"):
        ms.grad(failing)(x)
    assert mindspore_private.recording_gradients()
    assert launched(lambda: op(x))[1] == 0  # recorded for the dead gradient: not on the front
    mindspore_private.end_aborted_gradient()
    (got,), launches = launched(lambda: op(x))
    assert launches == 1
    torch.testing.assert_close(got, torch.nn.functional.leaky_relu(to_torch(x)))
