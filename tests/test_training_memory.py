"""What a fused training port keeps for the backward, against what torch's autograd keeps for the same model.

A fused port's forward program returns the tensors its backward needs as extra outputs, and each output is a
MindSpore buffer of its own: a value returned twice (an activation and its `detach`, which AOTAutograd's default
partition saves both; a saved alias of the module's own output; a view of a weight) is held twice for the whole
step. The bound is the model's own: each activation torch saves, once, by the number and the bytes of the tensors
its saved-tensor hooks see (each storage once)."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import aot_ops
from aot_ops._port.programs.program_inputs import SavedFrom


def torch_saved(model: nn.Module, *inputs) -> dict[int, int]:
    """Bytes of each storage torch's autograd keeps for the backward, parameters and inputs left out."""
    known = {p.untyped_storage().data_ptr() for p in model.parameters()}
    known |= {t.untyped_storage().data_ptr() for t in inputs}
    saved: dict[int, int] = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in known:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(*inputs)
    return saved


def port_saved(cell, mode: str, output_bytes: list[int]) -> list[int]:
    """Bytes of each tensor the fused port's forward program returns for its backward beyond the module's own
    outputs (a saved tensor that is an input or one of the module's outputs costs nothing more)."""
    fused = cell.mode_programs[mode].fused
    user = set(fused.user_outputs)
    return [output_bytes[s.index] for s in fused.saved if s.source is SavedFrom.OUTPUT and s.index not in user]


class Mlp(nn.Module):
    """Linear layers with an activation whose backward reads its output (tanh) or its input (GELU)."""

    def __init__(self, activation):
        super().__init__()
        self.layers = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(32, 32), activation())])

    def forward(self, x):
        return self.layers(x)


@pytest.mark.parametrize("activation", [nn.Tanh, nn.GELU, nn.Sigmoid], ids=["tanh", "gelu", "sigmoid"])
def test_a_fused_forward_keeps_each_activation_torch_keeps_once_and_trains_as_torch(activation):
    import mindspore as ms

    from support import to_ms, to_torch

    torch.manual_seed(0)
    model, x = Mlp(activation), torch.randn(64, 32)
    cell = aot_ops.from_torch(model, (x,), fuse=True, input_grads=False)
    mode = "train" if "train" in cell.mode_programs else "both"
    output_bytes = [64 * 32 * 4] * cell.mode_programs[mode].fused.forward.num_outputs  # all values one size here
    ours, theirs = port_saved(cell, mode, output_bytes), torch_saved(model, x)
    assert theirs and sum(ours) <= sum(theirs.values()), (len(ours), len(theirs))
    # the saved values wired to the backward as they are (an output of the module among them): torch's gradients
    cell.set_train(True)
    grads = ms.grad(lambda t: cell(t).sum(), None, cell.trainable_params())(to_ms(x))
    model(x).sum().backward()
    for ours_grad, parameter in zip(grads, model.parameters()):
        torch.testing.assert_close(to_torch(ours_grad), parameter.grad, rtol=1e-5, atol=1e-6)


class PointwiseChain(nn.Module):
    """A linear layer, then pointwise operators whose backward torch's autograd feeds from saved tensors of their
    own: sin and cos keep their input, the product both factors."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(32, 32)

    def forward(self, x):
        y = self.linear(x)
        return torch.sin(y) * torch.cos(y)


@pytest.mark.parametrize("fuse", [True, pytest.param("compile", marks=pytest.mark.slow)],  # compile: AOTInductor
                         ids=["fused", "compiled"])
def test_a_fused_forward_saves_one_tensor_where_the_backward_can_recompute_the_rest_and_trains_as_torch(fuse):
    """The partition saves the linear layer's output alone and recomputes the pointwise operators from it in the
    backward (torch.compile's min-cut partition), where torch's autograd keeps a tensor for each of them; the same
    for the programs AOTInductor compiles."""
    import mindspore as ms

    from aot_ops._port.programs.compiled import is_compiled
    from support import to_ms, to_torch

    torch.manual_seed(0)
    model, x = PointwiseChain(), torch.randn(64, 32)
    cell = aot_ops.from_torch(model, (x,), fuse=fuse, input_grads=False)
    mode = "train" if "train" in cell.mode_programs else "both"
    activation = 64 * 32 * 4
    output_bytes = [activation] * cell.mode_programs[mode].fused.forward.num_outputs
    ours, theirs = port_saved(cell, mode, output_bytes), torch_saved(model, x)
    assert len(theirs) >= 3 and sum(ours) <= activation, (len(ours), len(theirs))
    cell.set_train(True)
    grads = ms.grad(lambda t: cell(t).sum(), None, cell.trainable_params())(to_ms(x))
    model(x).sum().backward()
    for ours_grad, parameter in zip(grads, model.parameters()):
        torch.testing.assert_close(to_torch(ours_grad), parameter.grad, rtol=1e-5, atol=1e-6)
    programs = cell.mode_programs[mode]  # what ran: compiled by AOTInductor, both, with fuse="compile"
    assert [is_compiled(programs.program(name)) for name in ("forward", "backward")] == [fuse == "compile"] * 2


class ConvBatchNorm(nn.Module):
    """A convolution, batch norm in training (its running statistics are buffer updates of the forward program) and
    a linear head."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.head = nn.Linear(8 * 8 * 8, 32)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def _ported_for_training(model_class, monkeypatch, fuse=True):
    """`model_class` ported (fused or compiled) in training, keeping its saved tensors in the library however small
    they are."""
    from aot_ops._port.programs import saved_in_library

    monkeypatch.setattr(saved_in_library, "MIN_KEPT_BYTES", 0)
    torch.manual_seed(0)
    model = model_class()
    x = torch.randn(64, 32) if isinstance(model, Mlp) else torch.randn(4, 3, 8, 8)
    target = torch.randn(x.shape[0], 32)
    cell = aot_ops.from_torch(model, (x,), fuse=fuse, input_grads=False)
    cell.set_train(True)
    return model, x, target, cell, ("train" if "train" in cell.mode_programs else "both")


@pytest.mark.parametrize("model_class, fuse", [
    (lambda: Mlp(nn.Tanh), True), (ConvBatchNorm, True),
    pytest.param(lambda: Mlp(nn.Tanh), "compile", marks=pytest.mark.slow)],  # AOTInductor: ~30 s
    ids=["mlp", "batch_norm", "mlp-compiled"])
def test_a_pynative_gradient_keeps_the_saved_tensors_once_in_the_library_until_its_backward_takes_them(
        model_class, fuse, monkeypatch):
    """PyNative's autodiff holds a gradient's forward outputs, and ms.jit graphs their memory, from step to step:
    the saved activations are kept in the library instead (programs/saved_in_library.py), each once, and freed by
    the backward that reads them; the training is torch's, step by step (batch norm's running statistics too)."""
    import mindspore as ms

    from aot_ops._core.native_state import saved_sets
    from support import to_ms, to_torch

    model, x, target, cell, mode = _ported_for_training(model_class, monkeypatch, fuse)
    programs = cell.mode_programs[mode]
    fused = programs.fused
    keeping_forward, _ = programs.keeping_programs()
    kept_from = keeping_forward.num_outputs - 1  # the module's outputs and buffer updates, then a ticket
    kept_bytes = sum(math.prod(s) * 4 for s in _static_shapes(fused.forward)[kept_from:])
    during = []

    def loss_of(t):
        out = cell(t)
        during.append(saved_sets())  # after the forward, before the backward
        return ((out - to_ms(target)) ** 2).mean()

    params = cell.trainable_params()
    grad_fn, optimizer = ms.value_and_grad(loss_of, None, params), ms.nn.SGD(params, learning_rate=0.1)
    torch_optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        loss, grads = grad_fn(to_ms(x))
        torch_optimizer.zero_grad()
        torch_loss = ((model(x) - target) ** 2).mean()
        torch_loss.backward()
        assert float(loss.asnumpy()) == pytest.approx(torch_loss.item(), rel=1e-5)
        for ours, parameter in zip(grads, model.parameters()):
            torch.testing.assert_close(to_torch(ours), parameter.grad, rtol=1e-4, atol=1e-5)
        optimizer(grads)
        torch_optimizer.step()
        assert saved_sets()["sets"] == 0  # taken and freed by the backward
    assert [(d["sets"], d["bytes"]) for d in during] == [(1, kept_bytes)] * 3
    if fuse == "compile":  # what ran: the programs AOTInductor compiled, in their keeping variant
        from aot_ops._port.programs.compiled import is_compiled

        assert all(is_compiled(p) for p in programs.keeping_programs())
    ported_state = cell.torch_state_dict()
    for key, value in model.state_dict().items():  # the weights and the running statistics
        torch.testing.assert_close(ported_state[key], value, rtol=1e-4, atol=1e-5)


def _static_shapes(program) -> list[list[int]]:
    return [[int(d) for d in shape.split(",") if d] for shape in program.attrs["program_out_shapes"].split("|")]


def test_a_set_whose_backward_never_runs_is_dropped_and_a_backward_without_its_set_is_named(monkeypatch):
    import mindspore as ms
    import numpy as np

    from aot_ops._core.mindspore_private import end_aborted_gradient
    from aot_ops._core.native_state import saved_sets
    from aot_ops._port.programs.mode_programs import program_operator
    from support import to_ms

    _model, x, _target, cell, mode = _ported_for_training(lambda: Mlp(nn.Tanh), monkeypatch)
    params = cell.trainable_params()

    def abandoned(t):
        cell(t)
        raise ValueError("after the forward")

    with pytest.raises(ValueError, match="after the forward"):
        ms.value_and_grad(abandoned, None, params)(to_ms(x))
    end_aborted_gradient()  # MindSpore 2.10 records the next gradients wrongly otherwise (mindspore_private.py)
    before = saved_sets()
    assert before["sets"] == 1
    grad_fn = ms.value_and_grad(lambda t: cell(t).sum(), None, params)
    for _ in range(2):  # a later forward drops it once a backward has taken a newer set
        grad_fn(to_ms(x))
    after = saved_sets()
    assert (after["sets"], after["dropped"]) == (0, before["dropped"] + 1)

    _, backward = cell.mode_programs[mode].keeping_programs()
    taking = program_operator(backward)
    no_such_ticket = [ms.Tensor(np.array([1 << 40], np.int64))]
    others = [ms.Tensor(np.zeros((64, 32), np.float32))] * (backward.num_inputs - 1)
    with pytest.raises(RuntimeError, match=r"backward.*ticket 1099511627776\) are gone"):
        taking(*no_such_ticket, *others)[0].asnumpy()  # PyNative launches behind the caller: wait for it
    loss, _ = grad_fn(to_ms(x))  # the next gradient works
    assert np.isfinite(loss.asnumpy())


@pytest.mark.parametrize("width, kept", [(4096, True), (256, False)], ids=["wide", "narrow"])
def test_a_pynative_gradient_keeps_its_sets_where_saved_tensors_and_gradients_reach_the_threshold(width, kept):
    """What a cell's ms.jit graphs would hold from call to call decides (saved_in_library.worth_keeping): a wide
    layer saves a few kilobytes but its weight's gradient is 64 MiB, so it keeps its sets like a model saving that
    much (a checkpointed model); a narrow one runs as one graph. The gradient is torch's either way."""
    import mindspore as ms

    from aot_ops._core.native_state import saved_sets
    from aot_ops._port.programs.saved_in_library import MIN_KEPT_BYTES
    from support import to_ms, to_torch

    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 8)), torch.randn(2, width)
    assert (width * width * 4 >= MIN_KEPT_BYTES) == kept and x.numel() * 4 * 4 < MIN_KEPT_BYTES
    cell = aot_ops.from_torch(model, (x,), fuse=True, input_grads=False)
    cell.set_train(True)
    during = []

    def loss_of(t):
        out = cell(t)
        during.append(saved_sets()["sets"])
        return out.sum()

    _, grads = ms.value_and_grad(loss_of, None, cell.trainable_params())(to_ms(x))
    model(x).sum().backward()
    assert during == [1 if kept else 0] and saved_sets()["sets"] == 0
    for ours, parameter in zip(grads, model.parameters()):
        torch.testing.assert_close(to_torch(ours), parameter.grad, rtol=1e-4, atol=1e-4)
