"""What a fused training port keeps for the backward, against what torch's autograd keeps for the same model.

A fused port's forward program returns the tensors its backward needs as extra outputs, and each output is a
MindSpore buffer of its own: a value returned twice (an activation and its `detach`, which AOTAutograd's default
partition saves both; a saved alias of the module's own output; a view of a weight) is held twice for the whole
step. The bound is the model's own: each activation torch saves, once, by the number and the bytes of the tensors
its saved-tensor hooks see (each storage once)."""
from __future__ import annotations

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
