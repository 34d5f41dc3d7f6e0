"""What models bring beyond ATen: torch.autograd.Functions with their own backward, and operators a library
registers with torch.library, ported per node and fused, in both modes, against torch's own forward and backward.
Each network is ported once per way of running it (module fixtures) and checked in both modes."""
from __future__ import annotations

import copy
import warnings

import mindspore as ms
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

import aot_ops
from aot_ops import aten
from port_support import assert_state_close, train_mindspore, train_torch
from support import to_ms, to_torch


# --- the Functions: one of each kind real models use ----------------------------------------------------------

class RoundThrough(torch.autograd.Function):
    """A straight-through round at a given scale (quantisation-aware training): the gradient passes unchanged."""

    @staticmethod
    def forward(ctx, x, scale):
        return torch.round(x * scale) / scale

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class GradientReversal(torch.autograd.Function):
    """Domain-adversarial training's layer: the identity forward, the gradient negated and scaled."""

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return -ctx.alpha * grad, None


class TanhGelu(torch.autograd.Function):
    """An activation with a hand-written derivative (as Bloom's GeLU): saves its input."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 0.5 * x * (1 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        t = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
        return grad * (0.5 * x * ((1 - t * t) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + t))


class GatedProduct(torch.autograd.Function):
    """Saves tensors and context (an attribute), reads needs_input_grad (the gate is a buffer: no gradient), and
    is once_differentiable."""

    @staticmethod
    def forward(ctx, x, gate, scale):
        ctx.save_for_backward(x, gate)
        ctx.scale = scale
        return x * gate * scale

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, gate = ctx.saved_tensors
        grad_x = grad * gate * ctx.scale if ctx.needs_input_grad[0] else None
        grad_gate = grad * x * ctx.scale if ctx.needs_input_grad[1] else None
        return grad_x, grad_gate, None


class SplitHalves(torch.autograd.Function):
    """Two outputs, with a backward of its own for each (new-style: forward without ctx, then setup_context)."""

    @staticmethod
    def forward(x):
        half = x.shape[-1] // 2
        return x[..., :half] * 2, torch.exp(x[..., half:])

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output[1])

    @staticmethod
    def backward(ctx, grad_doubled, grad_exp):
        (exp,) = ctx.saved_tensors
        return torch.cat([grad_doubled * 2, grad_exp * exp], dim=-1)


class MaskedSoftmax(torch.autograd.Function):
    """As DeBERTa's XSoftmax: makes a constant (torch.tensor) and writes into its own result in place, saves its
    output, and differentiates with torch's softmax backward."""

    @staticmethod
    def forward(ctx, x, mask, dim):
        ctx.dim = dim
        rmask = ~mask.to(torch.bool)
        out = torch.softmax(x.masked_fill(rmask, torch.tensor(torch.finfo(x.dtype).min)), dim)
        out.masked_fill_(rmask, 0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return torch._softmax_backward_data(grad, out, ctx.dim, out.dtype), None, None


class FunctionNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.out = nn.Linear(8, 4)
        self.register_buffer("gate", torch.linspace(0.5, 1.5, 16))
        self.register_buffer("mask", (torch.arange(16) % 5 != 0).long())

    def forward(self, x):
        h = TanhGelu.apply(self.inp(x))
        h = GatedProduct.apply(h, self.gate, 0.5) + MaskedSoftmax.apply(h, self.mask, -1)
        doubled, exp = SplitHalves.apply(h)
        return self.out(RoundThrough.apply(doubled, 4.0) + GradientReversal.apply(exp, 0.3))


def _grads_of(model, x):
    model.zero_grad()
    out = model(x)
    out.sum().backward()
    return out.detach(), [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]


WAYS = [False, True]


def _ported(make, rows: int, seed: int, fuse: bool):
    """(module, example input, its port): a network built from `seed` with an input of `rows` x 8."""
    torch.manual_seed(seed)
    model = make()
    x = torch.randn(rows, 8)
    return model, x, aot_ops.from_torch(model, (x,), fuse=fuse)


@pytest.fixture(scope="module", params=WAYS, ids=["per_node", "fused"])
def function_port(request):
    return _ported(FunctionNet, 5, 3, request.param)


def test_functions_forward_and_gradients_equal_torchs_own_backward(function_port, mode):
    model, x, cell = function_port
    expected, expected_grads = _grads_of(model, x)
    torch.testing.assert_close(to_torch(cell(to_ms(x))), expected)
    grads = ms.grad(cell, None, cell.trainable_params())(to_ms(x))
    names = [p.name for p in cell.trainable_params()]
    assert names == [n for n, _ in model.named_parameters()]
    for name, ours, theirs in zip(names, grads, expected_grads):
        torch.testing.assert_close(to_torch(ours), theirs, rtol=1e-5, atol=1e-6, msg=name)
    # the custom backward is what ran: differentiating the forward's operators would give zero through round
    assert to_torch(grads[0]).abs().sum() > 0


class _Classifier(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, target):
        return F.cross_entropy(self.model(x), target)


@pytest.mark.parametrize("fuse", [False, True], ids=["per_node", "fused"])
def test_a_network_of_functions_trains_as_torch(mode, fuse):
    torch.manual_seed(5)
    model = _Classifier(FunctionNet())
    reference = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(0)
    data = [(torch.randn(6, 8, generator=gen), torch.randint(0, 4, (6,), generator=gen)) for _ in range(4)]
    cell = aot_ops.from_torch(model, data[0], fuse=fuse)
    losses, expected = train_mindspore(cell, data), train_torch(reference, data)
    for ours, theirs in zip(losses, expected):
        assert abs(ours - theirs) <= 1e-4 * abs(theirs), (losses, expected)
    assert_state_close(cell, reference)


@pytest.mark.slow
def test_functions_compiled_by_inductor_give_torchs_gradients():
    torch.manual_seed(3)
    model, x = FunctionNet(), torch.randn(5, 8)
    cell = aot_ops.from_torch(model, (x,), fuse="compile")
    expected, expected_grads = _grads_of(model, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error", aot_ops.CompileFallbackWarning)  # compiled, not run interpreted
        torch.testing.assert_close(to_torch(cell(to_ms(x))), expected)
        grads = ms.grad(cell, None, cell.trainable_params())(to_ms(x))
    for ours, theirs in zip(grads, expected_grads):
        torch.testing.assert_close(to_torch(ours), theirs, rtol=1e-5, atol=1e-6)


# --- a Function used in training only ----------------------------------------------------------------------------

class ClippedByData(torch.autograd.Function):
    """A backward with Python control flow on tensor values: runs per node, cannot be traced for fuse=True."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        if grad.abs().max() > 1e3:  # decided on the values
            return grad.clamp(-1e3, 1e3)
        return grad * 0.5


class TrainingOnlyFunction(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 3)

    def forward(self, x):
        h = self.linear(x)
        return ClippedByData.apply(h) if self.training else h


@pytest.mark.parametrize("fuse", [False, True], ids=["per_node", "fused"])
def test_a_training_only_function_ports_for_evaluation_and_is_refused_only_where_it_cannot_run(fuse):
    torch.manual_seed(0)
    model, x = TrainingOnlyFunction().eval(), torch.randn(4, 6)
    cell = aot_ops.from_torch(model, (x,), fuse=fuse)
    torch.testing.assert_close(to_torch(cell(to_ms(x))), model(x))
    if fuse:  # AOTAutograd must trace the backward, which decides on tensor values
        with pytest.raises(aot_ops.PortError, match=r"ClippedByData \(.*test_custom_autograd.py:\d+\).*backward"):
            cell.set_train(True)
        torch.testing.assert_close(to_torch(cell(to_ms(x))), model(x))  # evaluation still runs
        return
    cell.set_train(True)  # per node, the backward runs as Python on real values
    model.train()
    model.zero_grad()
    model(x).sum().backward()
    grads = ms.grad(cell, None, cell.trainable_params())(to_ms(x))
    torch.testing.assert_close(to_torch(grads[0]), model.linear.weight.grad)


def test_a_module_training_with_an_untraceable_backward_is_refused_at_port_time_when_fused():
    model, x = TrainingOnlyFunction().train(), torch.randn(4, 6)
    with pytest.raises(aot_ops.PortError, match=r"ClippedByData \(.*test_custom_autograd.py:\d+\)"):
        aot_ops.from_torch(model, (x,), fuse=True)


# --- operators registered with torch.library ---------------------------------------------------------------------

@torch.library.custom_op("aot_ops_tests::scaled_softplus", mutates_args=())
def scaled_softplus(x: torch.Tensor, beta: float) -> torch.Tensor:
    """A Python implementation (numpy inside: nothing torch can trace) with a registered autograd."""
    return torch.from_numpy((torch.log1p(torch.exp(beta * x)) / beta).numpy().copy())


@scaled_softplus.register_fake
def _(x, beta):
    return torch.empty_like(x)


def _softplus_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.beta = inputs[1]


def _softplus_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * torch.sigmoid(ctx.beta * x), None


scaled_softplus.register_autograd(_softplus_backward, setup_context=_softplus_setup)

# A grouped matrix product over token groups whose sizes depend on the routing, as mixture-of-experts code
# registers it: Library.define + impl, a loop over the group offsets read from the tensor, and its backward as a
# second operator (so that autograd never looks into the loop).
_LIB = torch.library.Library("aot_ops_tests", "FRAGMENT")
_LIB.define("grouped_mm(Tensor input, Tensor weight, Tensor offs) -> Tensor")
_LIB.define("grouped_mm_backward(Tensor input, Tensor weight, Tensor offs, Tensor grad) -> (Tensor, Tensor)")


def _grouped_mm(input, weight, offs):
    out = input.new_zeros(input.shape[0], weight.shape[2])
    start = 0
    for group, end in enumerate(offs.tolist()):
        out[start:end] = input[start:end] @ weight[group]
        start = end
    return out


def _grouped_mm_backward(input, weight, offs, grad):
    grad_input, grad_weight = torch.zeros_like(input), torch.zeros_like(weight)
    start = 0
    for group, end in enumerate(offs.tolist()):
        grad_input[start:end] = grad[start:end] @ weight[group].T
        grad_weight[group] = input[start:end].T @ grad[start:end]
        start = end
    return grad_input, grad_weight


_LIB.impl("grouped_mm", _grouped_mm, "CPU")
_LIB.impl("grouped_mm_backward", _grouped_mm_backward, "CPU")
torch.library.register_fake("aot_ops_tests::grouped_mm", lambda i, w, o: i.new_empty(i.shape[0], w.shape[2]),
                            lib=_LIB)
torch.library.register_fake("aot_ops_tests::grouped_mm_backward",
                            lambda i, w, o, g: (torch.empty_like(i), torch.empty_like(w)), lib=_LIB)


def _grouped_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1], inputs[2])


def _grouped_backward(ctx, grad):
    input, weight, offs = ctx.saved_tensors
    grad_input, grad_weight = torch.ops.aot_ops_tests.grouped_mm_backward(input, weight, offs, grad)
    return grad_input, grad_weight, None


torch.library.register_autograd("aot_ops_tests::grouped_mm", _grouped_backward, setup_context=_grouped_setup,
                                lib=_LIB)


class ExpertNet(nn.Module):
    """Tokens routed to experts, sorted by expert, multiplied by their expert's weights in one grouped product."""

    def __init__(self, experts=3):
        super().__init__()
        self.experts = experts
        self.router = nn.Linear(8, experts)
        self.weights = nn.Parameter(torch.randn(experts, 8, 6) * 0.3)
        self.out = nn.Linear(6, 4)

    def forward(self, x):
        expert = self.router(x).argmax(-1)
        order = torch.argsort(expert, stable=True)
        offs = torch.cumsum(F.one_hot(expert, self.experts).sum(0), 0)
        h = torch.ops.aot_ops_tests.grouped_mm(x[order], self.weights, offs)
        h = scaled_softplus(h, 2.0)
        return self.out(h[torch.argsort(order)])


@pytest.fixture(scope="module", params=WAYS, ids=["per_node", "fused"])
def expert_port(request):
    return _ported(ExpertNet, 10, 7, request.param)


def test_library_operators_run_with_their_registered_autograd(expert_port, mode):
    model, _, cell = expert_port
    for seed in (1, 2):  # other inputs route other token counts to each expert: the loop follows them
        x = torch.randn(10, 8, generator=torch.Generator().manual_seed(seed))
        expected, expected_grads = _grads_of(model, x)
        torch.testing.assert_close(to_torch(cell(to_ms(x))), expected, rtol=1e-5, atol=1e-6)
        grads = ms.grad(cell, None, cell.trainable_params())(to_ms(x))
        for (name, _), ours, theirs in zip(model.named_parameters(), grads, expected_grads):
            torch.testing.assert_close(to_torch(ours), theirs, rtol=1e-5, atol=1e-6, msg=name)


def test_a_library_operator_is_reachable_as_an_aot_op(mode):
    op = aten.op("aot_ops_tests::scaled_softplus", beta=3.0)
    x = torch.randn(4, 5)

    class Net(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.op = op

        def construct(self, v):
            return self.op(v)

    torch.testing.assert_close(to_torch(Net()(to_ms(x))), scaled_softplus(x, 3.0))
    grad = ms.grad(Net(), 0)(to_ms(x))
    torch.testing.assert_close(to_torch(grad), torch.sigmoid(3.0 * x))


def test_an_unknown_library_operator_is_named():
    with pytest.raises(AttributeError, match=r"unknown operator .*'aot_ops_tests::missing'"):
        aten.op("aot_ops_tests::missing")


_LIB.define("without_fake(Tensor x) -> Tensor")
_LIB.impl("without_fake", lambda x: x * 2, "CPU")


class _WithoutFake(nn.Module):
    def forward(self, x):
        return torch.ops.aot_ops_tests.without_fake(x) + 1


def test_a_library_operator_without_a_fake_implementation_is_refused_with_what_to_do():
    x = torch.ones(3)
    with pytest.raises(aot_ops.PortError, match=r"aot_ops_tests.without_fake.default has no fake \(meta\) "
                                                r"implementation.*torch.library.register_fake"):
        aot_ops.from_torch(_WithoutFake(), (x,))
    with pytest.raises(aot_ops.Error, match=r"aot_ops_tests::without_fake: cannot run on inputs \(\[3\] float32\).*"
                                            r"no fake \(meta\) implementation.*register_fake"):
        aten.op("aot_ops_tests::without_fake")(to_ms(x))
    torch.testing.assert_close(to_torch(aten.op("aot_ops_tests::scaled_softplus", beta=1.0)(to_ms(x))),
                               scaled_softplus(x, 1.0))  # the next call works


class DoubleInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x.mul_(2)

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class _InPlaceFunction(nn.Module):
    def forward(self, x):
        return DoubleInPlace.apply(x.clone())


def test_a_function_that_writes_its_input_in_place_is_refused_naming_it():
    with pytest.raises(aot_ops.PortError, match=r"DoubleInPlace \(.*test_custom_autograd.py:\d+\) modifies its "
                                                r"input in place \(ctx.mark_dirty\)"):
        aot_ops.from_torch(_InPlaceFunction(), (torch.ones(3),))


# --- the operators' lifetime ----------------------------------------------------------------------------------

class _Rounded(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.scale = scale

    def forward(self, x):
        return RoundThrough.apply(self.linear(x), self.scale)


def test_a_functions_operator_lives_as_long_as_the_ports_calling_it():
    """Two ports applying a Function the same way share its operator; another scale is another operator; each is
    removed from torch's dispatcher when the last cell calling it is freed, and a later port makes a new one."""
    import gc

    from aot_ops._port.trace import functions

    torch.manual_seed(0)
    x = torch.randn(3, 4)
    before = set(functions.live_operators())
    models = [_Rounded(8.0), _Rounded(8.0), _Rounded(2.0)]
    cells = [aot_ops.from_torch(models[0], (x,)), aot_ops.from_torch(models[1], (x,), fuse=True),
             aot_ops.from_torch(models[2], (x,))]
    made = set(functions.live_operators()) - before
    assert len(made) == 2 and all(name.startswith("RoundThrough_") for name in made), made
    del cells[2], cells[0]
    gc.collect()
    (shared,) = made & set(functions.live_operators())
    assert hasattr(torch.ops.aot_ops_fn, shared)
    with torch.no_grad():
        torch.testing.assert_close(to_torch(cells[0](to_ms(x))), models[1](x))  # the fused port still runs it
    del cells[0]
    gc.collect()  # (it may free other tests' cells too: only this test's operators are followed)
    assert not made & set(functions.live_operators())
    assert not hasattr(torch.ops.aot_ops_fn, shared)
    again = aot_ops.from_torch(models[2], (x,))
    with torch.no_grad():
        torch.testing.assert_close(to_torch(again(to_ms(x))), models[2](x))
    (new,) = set(functions.live_operators()) - before - made
    assert new.startswith("RoundThrough_") and hasattr(torch.ops.aot_ops_fn, new)
