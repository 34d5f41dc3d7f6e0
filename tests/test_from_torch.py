"""aot_ops.from_torch: whole torch networks as MindSpore Cells, checked against torch in both modes."""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import mindspore as ms
import pytest
import torch
from mindspore import nn as msnn
from mindspore import ops
from torch import nn

import aot_ops
from aot_ops._port.programs.program_inputs import ProgramInput
from aot_ops._core import mindspore_private
from graph_compiles import GraphCompiles
from port_support import LR, assert_state_close, batches, train_mindspore, train_torch
from support import to_ms, to_torch
from torch_nets import (AttentionNet, ConcatNet, ContainerNet, ConvNet, DictMLP, GroupedAttentionNet, LookupNet,
                        LSTMNet, MaskedAttentionNet, MemoryNet, NormalizedNet, ResNet, RoundThrough, TiedEmbeddingNet,
                        TinyGPT, TinyViT, TokenNet, TransformerClassifier, UpsamplingDecoder, WithLoss)

pytestmark = pytest.mark.spread  # each test function a group of its own (tests/scheduling.py); ports are shared

TRAINED = [
    (TransformerClassifier, (8, 6, 32)),
    (ConvNet, (4, 3, 8, 8)),
    (ResNet, (2, 3, 16, 16)),
    (ConcatNet, (6, 12)),
    (AttentionNet, (4, 5, 16)),
    (ContainerNet, (6, 12)),
    (LSTMNet, (4, 7, 12)),
    (TinyViT, (2, 3, 8, 8)),
    (TinyGPT, (4, 6)),
    (UpsamplingDecoder, (2, 3, 6, 6)),
]


@pytest.fixture(params=[False, True], ids=["per_node", "fused"])
def fuse(request):
    """from_torch's two ways of running a graph: one aot call per node, or one per graph (fuse=True)."""
    return request.param


@pytest.mark.parametrize("make,shape", TRAINED, ids=[m.__name__ for m, _ in TRAINED])
def test_training_matches_torch(make, shape, mode, fuse, shared_ports):
    torch.manual_seed(1)
    model = make()
    reference = WithLoss(copy.deepcopy(model))
    data = batches(shape)
    cell = shared_ports.port(make.__name__, WithLoss(model), data[0], fuse=fuse)
    losses = train_mindspore(cell, data)
    expected = train_torch(reference, data)
    for ours, theirs in zip(losses, expected):
        assert abs(ours - theirs) <= 1e-4 * abs(theirs), (losses, expected)
    assert_state_close(cell, reference)


@pytest.mark.parametrize("make,shape", [(ResNet, (2, 3, 16, 16)), (ConvNet, (4, 3, 8, 8))], ids=["ResNet", "ConvNet"])
def test_evaluation_mode_forward_matches_torch(make, shape, mode, fuse, shared_ports):
    torch.manual_seed(2)
    model = make()
    train_torch(WithLoss(model), batches(shape, count=2, seed=5))  # non-trivial running statistics
    model.eval()
    x = torch.randn(*shape)
    cell = shared_ports.port(make.__name__, model, (x,), fuse=fuse)
    assert not cell.training
    torch.testing.assert_close(to_torch(cell(to_ms(x))), model(x).detach(), rtol=1e-5, atol=1e-6)
    assert_state_close(cell, model)  # evaluation leaves the running statistics alone


def test_evaluation_only_ports_the_evaluation_graph_alone(mode, fuse, shared_ports):
    torch.manual_seed(2)
    model = ResNet()
    train_torch(WithLoss(model), batches((2, 3, 16, 16), count=2, seed=5))  # non-trivial running statistics
    x = torch.randn(2, 3, 16, 16)
    cell = shared_ports.port("ResNet", model, (x,), fuse=fuse, evaluation_only=True)  # the module is in training mode
    assert not cell.training  # the cell starts in the only mode it has
    assert cell.modes == ("eval",)
    if fuse:  # no AOTAutograd: the inference program alone
        programs = cell.mode_programs["eval"]
        assert programs.program("forward") is None and programs.program("backward") is None
        assert programs.program("inference") is not None
    model.eval()
    torch.testing.assert_close(to_torch(cell(to_ms(x))), model(x).detach(), rtol=1e-5, atol=1e-6)
    with pytest.raises(aot_ops.PortError, match="ResNet was ported with evaluation_only=True.*without "
                                                "evaluation_only to train it"):
        cell.set_train(True)
    torch.testing.assert_close(to_torch(cell(to_ms(x))), model(x).detach(), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="evaluation_only='yes'; give True or False"):
        aot_ops.from_torch(model, (x,), evaluation_only="yes")


def test_shared_weights_are_one_memory_seen_from_both_sides(mode, fuse):
    """share_weights=True: the module's tensors are views of the cell's Parameters. A MindSpore training step
    (BatchNorm statistics included) shows in the torch module, equal to the same steps taken by torch on a copy;
    the module's load_state_dict shows in the cell; the cell's load_torch_state_dict keeps the sharing."""
    torch.manual_seed(3)
    model = WithLoss(ConvNet())
    twin = copy.deepcopy(model)
    data = batches((4, 3, 8, 8), count=2, seed=8)
    cell = aot_ops.from_torch(model, data[0], fuse=fuse, share_weights=True)
    storage = {k: t.data_ptr() for k, t in model.state_dict().items()}
    assert train_mindspore(cell, data) == pytest.approx(train_torch(twin, data), rel=1e-4)
    assert {k: t.data_ptr() for k, t in model.state_dict().items()} == storage  # updated in place
    for key, value in twin.state_dict().items():  # the torch module holds MindSpore's updates
        torch.testing.assert_close(model.state_dict()[key], value, rtol=1e-4, atol=1e-5, msg=key)
    fresh = WithLoss(ConvNet()).state_dict()
    model.load_state_dict(fresh)  # torch writes in place: the cell sees it
    assert_state_close(cell, model)
    cell.load_torch_state_dict(twin.state_dict())  # MindSpore's side written in place: the module sees it
    assert_state_close(cell, twin)
    assert_state_close(cell, model)
    with pytest.raises(TypeError, match="share_weights='no'; give True or False"):
        aot_ops.from_torch(model, data[0], share_weights="no")


class _Autocast(nn.Module):
    """A module running its inner module under torch.autocast: float32 weights, bfloat16 matrix products."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.inner(*args).float()


@pytest.mark.parametrize("precision", ["bfloat16_weights", "autocast"])
def test_half_precision_training_matches_torch(mode, fuse, precision, shared_ports):
    """Half precision trains as torch does: a bfloat16 model (gradients against torch's own backward: bit for bit
    fused; per node, where each operator's backward rounds on its own, within bfloat16's rounding), and float32
    master weights under torch.autocast (three SGD steps, weights compared)."""
    torch.manual_seed(0)
    data = batches((8, 6, 32), count=3, seed=9)
    exact = fuse
    if precision == "autocast":
        model = _Autocast(WithLoss(TransformerClassifier()))
        twin = copy.deepcopy(model)
        cell = shared_ports.port("TransformerClassifier", model, data[0], fuse=fuse)
        assert train_mindspore(cell, data) == pytest.approx(train_torch(twin, data), rel=1e-5 if exact else 1e-3)
        if exact:
            assert_state_close(cell, twin)
        assert {v.dtype for v in cell.torch_state_dict().values() if v.is_floating_point()} == {torch.float32}
        return
    model = WithLoss(TransformerClassifier()).to(torch.bfloat16)
    x, y = data[0][0].bfloat16(), data[0][1]
    cell = shared_ports.port("TransformerClassifier", model, (x, y), fuse=fuse)
    loss, grads = ms.value_and_grad(cell, None, cell.trainable_params())(to_ms(x), to_ms(y))
    expected = model(x, y)
    expected.backward()
    assert to_torch(loss) == expected.detach()
    for grad, parameter in zip(grads, model.parameters()):
        assert to_torch(grad).dtype == torch.bfloat16
        if exact:
            assert torch.equal(to_torch(grad), parameter.grad)
        else:  # a few units of bfloat16's last place, relative to the gradient's scale
            scale = float(parameter.grad.float().abs().max()) or 1.0
            assert float((to_torch(grad).float() - parameter.grad.float()).abs().max()) <= 2e-2 * scale


class _KeepWeights(msnn.Optimizer):
    """An optimizer that reads the gradients and changes nothing."""

    def construct(self, grads):
        return ops.depend(True, grads)


class _MarginLoss(msnn.Cell):
    """A loss of MindSpore operators around a ported cell: the largest logit of each row, summed."""

    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def construct(self, x):
        return ops.ArgMaxWithValue(axis=-1)(self.cell(x))[1].sum()


def test_a_mindspore_operator_without_a_half_precision_kernel_is_named(mode):
    """MindSpore's CPU ArgMaxWithValue has no bfloat16 kernel: a training step through it fails with an error
    naming the operator and the dtypes and saying what to do, instead of MindSpore's kernel-selection dump."""
    torch.manual_seed(0)
    x = torch.randn(8, 6, 32).bfloat16()
    loss = _MarginLoss(aot_ops.from_torch(TransformerClassifier().to(torch.bfloat16), (x,)))
    step = aot_ops.train_step(loss, _KeepWeights(0.1, loss.trainable_params()))
    with pytest.raises(aot_ops.NoKernelError, match=r"train_step of _MarginLoss: MindSpore has no CPU kernel for "
                                                     r"its operator ArgMaxWithValue with input dtypes \(BFloat16, "
                                                     r"Int64, Bool\).*cast its inputs"):
        step(to_ms(x))
    assert not mindspore_private.recording_gradients()  # the failed step left no gradient recording behind
    assert isinstance(aot_ops.NoKernelError("x"), TypeError)
    from aot_ops.errors import named_kernel_failure
    assert named_kernel_failure(RuntimeError("something else"), "here") is None


class _InPlaceNet(nn.Module):
    """In-place calls an evaluation graph keeps: on a local (x += y, relu_), on a buffer (a call counter read
    afterwards), and, when `view_written`, through a view whose base is read after the write (not rewritable:
    torch's functionalisation is used)."""

    def __init__(self, view_written: bool = False):
        super().__init__()
        self.linear = nn.Linear(6, 6)
        self.register_buffer("calls", torch.zeros(()))
        self.view_written = view_written

    def forward(self, x):
        h = self.linear(x)
        h += x
        h.relu_()
        self.calls.add_(1)
        if self.view_written:
            h[:, 0] = 0.5
        return h * self.calls


@pytest.mark.parametrize("view_written", [False, True], ids=["rewritten", "functionalised_by_torch"])
def test_evaluation_only_ports_in_place_calls_exactly(mode, fuse, view_written, shared_ports):
    from aot_ops._port.trace.export import Inputs, export
    from aot_ops._port.trace.functionalize import functionalize

    torch.manual_seed(4)
    model = _InPlaceNet(view_written).eval()
    x = torch.randn(3, 6)
    program = torch.export.export(model, (x,))
    assert functionalize(program) is not view_written
    if not view_written:  # the rewrite: functional twins, the buffer written as an output of the program
        assert not any(n.target._schema.is_mutable for n in program.graph.nodes
                       if isinstance(n.target, torch._ops.OpOverload))
        assert [s.target for s in program.graph_signature.output_specs if s.kind.name == "BUFFER_MUTATION"] == \
            ["calls"]
    cell = shared_ports.port(f"_InPlaceNet({view_written})", copy.deepcopy(model), (x,), fuse=fuse,
                             evaluation_only=True)
    with torch.no_grad():
        for _ in range(3):  # the counter advances on both sides
            torch.testing.assert_close(to_torch(cell(to_ms(x))), model(x), rtol=1e-5, atol=1e-6)
    assert float(cell.torch_state_dict()["calls"]) == float(model.calls) == 3.0
    exported = export(model, Inputs((x,)), None, training=False, backward=False).program  # either way: functional
    assert not any(n.target._schema.is_mutable for n in exported.graph.nodes
                   if isinstance(n.target, torch._ops.OpOverload))
    assert [s.target for s in exported.graph_signature.output_specs if s.kind.name == "BUFFER_MUTATION"] == ["calls"]


def test_fused_training_step_is_two_aot_calls(mode, shared_ports):
    """fuse=True: a training step crosses MindSpore twice (the forward program and the backward program); the
    BatchNorm buffers are updated by Assign, not by aot calls."""
    torch.manual_seed(6)
    data = batches((4, 3, 8, 8), count=3)
    cell = shared_ports.port("ConvNet", WithLoss(ConvNet()), data[0], fuse=True)
    train_mindspore(cell, data[:1])  # compiles (GRAPH_MODE) and initialises the kernels
    programs, per_node, seconds = aot_ops.program_launches(), aot_ops.aten_launches(), aot_ops.program_seconds()
    start = time.perf_counter()
    train_mindspore(cell, data[1:])
    elapsed = time.perf_counter() - start
    assert aot_ops.program_launches() - programs == 2 * 2
    assert aot_ops.aten_launches() == per_node
    assert 0 < aot_ops.program_seconds() - seconds < elapsed  # the launches' own time, inside the steps'


def test_a_training_step_compiled_as_one_graph_trains_like_torch(fuse, shared_ports):
    """GRAPH_MODE's idiom: forward, backward and the optimizer in one ms.jit function. BatchNorm's buffer updates
    (Assign) run inside it; fused, a step still crosses into aot twice."""
    torch.manual_seed(9)
    model = WithLoss(ConvNet())
    reference = copy.deepcopy(model)
    data = batches((4, 3, 8, 8), count=4)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        cell = shared_ports.port("ConvNet", model, data[0], fuse=fuse)
        optimizer = msnn.SGD(cell.trainable_params(), learning_rate=LR)
        grad_fn = ms.value_and_grad(cell, None, optimizer.parameters)

        @ms.jit
        def train_step(x, target):
            loss, grads = grad_fn(x, target)
            optimizer(grads)
            return loss

        losses = []
        for k, (x, target) in enumerate(data):
            programs = aot_ops.program_launches()
            losses.append(float(train_step(to_ms(x), to_ms(target)).asnumpy()))
            if fuse and k > 0:
                assert aot_ops.program_launches() - programs == 2
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    expected = train_torch(reference, data)
    for ours, theirs in zip(losses, expected):
        assert abs(ours - theirs) <= 1e-4 * abs(theirs), (losses, expected)
    assert_state_close(cell, reference)


def test_fused_modes_agree_with_each_other_and_with_per_node(shared_ports):
    torch.manual_seed(7)
    model = TransformerClassifier()
    data = batches((8, 6, 32), count=3)
    results = {}
    for fuse in (False, True):
        for mode in (ms.PYNATIVE_MODE, ms.GRAPH_MODE):
            ms.set_context(mode=mode)
            try:
                cell = shared_ports.port("TransformerClassifier", WithLoss(copy.deepcopy(model)), data[0], fuse=fuse)
                results[fuse, mode] = (train_mindspore(cell, data), cell.torch_state_dict())
            finally:
                ms.set_context(mode=ms.PYNATIVE_MODE)
    base_losses, base_state = results[False, ms.PYNATIVE_MODE]
    for key, (losses, state) in results.items():
        assert max(abs(a - b) for a, b in zip(losses, base_losses)) <= 1e-6, (key, losses, base_losses)
        for name, value in base_state.items():
            torch.testing.assert_close(state[name], value, rtol=1e-6, atol=1e-6, msg=f"{key} {name}")


@pytest.mark.parametrize("input_grads", [True, False], ids=["input_grads", "no_input_grads"])
def test_input_grads_false_makes_the_inputs_constants_of_autodiff(mode, fuse, input_grads, shared_ports):
    """input_grads=False: the input's gradient is zero (ops.stop_gradient) and the fused backward does not compute
    it; the parameters' gradients are torch's either way."""
    torch.manual_seed(8)
    model = WithLoss(ConvNet())
    x, target = batches((4, 3, 8, 8), count=1)[0]
    cell = shared_ports.port("ConvNet", copy.deepcopy(model), (x, target), fuse=fuse, input_grads=input_grads)
    params = cell.trainable_params()
    loss, (x_grad, grads) = ms.value_and_grad(cell, 0, params)(to_ms(x), to_ms(target))
    leaf = x.clone().requires_grad_()
    expected = model(leaf, target)
    expected.backward()
    assert abs(float(loss.asnumpy()) - expected.item()) <= 1e-5 * abs(expected.item())
    for param, grad in zip(params, grads):
        torch.testing.assert_close(to_torch(grad), dict(model.named_parameters())[param.name].grad, rtol=1e-4,
                                   atol=1e-6, msg=param.name)
    if input_grads:
        torch.testing.assert_close(to_torch(x_grad), leaf.grad, rtol=1e-4, atol=1e-6)
    else:
        assert not to_torch(x_grad).any()
    if fuse:
        fused = (cell.mode_programs.get("train") or cell.mode_programs["both"]).fused
        x_position = fused.inputs.index(ProgramInput.user(cell.input_names[0]))
        assert (fused.grads[x_position] is None) == (not input_grads)


def test_fused_evaluation_runs_the_module_outputs_alone_and_still_differentiates(mode, shared_ports):
    """In evaluation a fused cell runs the inference program: the exported graph alone, returning the module's
    outputs and nothing saved for a backward. A gradient asked in evaluation (an input's saliency) runs the
    forward program again, then the backward program, and equals torch's."""
    torch.manual_seed(13)
    model = TransformerClassifier().eval()
    x = torch.randn(4, 6, 32)
    cell = shared_ports.port("TransformerClassifier", model, (x,), fuse=True)
    (programs,) = cell.mode_programs.values()
    assert programs.program("inference").num_outputs == 1 < programs.program("forward").num_outputs
    programs = aot_ops.program_launches()
    torch.testing.assert_close(to_torch(cell(to_ms(x))), model(x).detach(), rtol=1e-5, atol=1e-6)
    assert aot_ops.program_launches() - programs == 1
    x_grad, weight_grads = ms.grad(cell, grad_position=0, weights=cell.trainable_params())(to_ms(x))
    leaf = x.clone().requires_grad_()
    model(leaf).sum().backward()
    torch.testing.assert_close(to_torch(x_grad), leaf.grad, rtol=1e-4, atol=1e-6)
    params = dict(model.named_parameters())
    for param, grad in zip(cell.trainable_params(), weight_grads):
        torch.testing.assert_close(to_torch(grad), params[param.name].grad, rtol=1e-4, atol=1e-6, msg=param.name)


def test_fused_error_names_the_node_and_its_source_line(mode):
    class Indexing(nn.Module):
        def forward(self, x, index):
            return torch.nn.functional.embedding(index, x)

    x, index = torch.randn(4, 3), torch.tensor([0, 2])
    cell = aot_ops.from_torch(Indexing(), (x, index), fuse=True)
    with pytest.raises(RuntimeError, match=r"Indexing \(training and evaluation\) forward: node \d+ "
                                           r"\(aten::embedding.* at test_from_torch.py:\d+: return torch.nn.functional"
                                           r".embedding\(index, x\)\): .*index out of range"):
        to_torch(cell(to_ms(x), to_ms(torch.tensor([0, 9]))))  # to_torch waits for the launch
    # the next call works (in GRAPH_MODE MindSpore would fail every later run of the failed graph)
    for _ in range(2):
        torch.testing.assert_close(to_torch(cell(to_ms(x), to_ms(index))), x[index])


@pytest.mark.slow  # each failure recompiles the graph: 6-7 s a case
def test_calls_after_a_failed_step_work(mode, fuse):
    """MindSpore fails every later run of a graph in which a kernel failed; the ported cell recompiles instead."""
    class Indexing(nn.Module):
        def forward(self, x, index):
            return torch.nn.functional.embedding(index, x) * 2

    x, index = torch.randn(4, 3), torch.tensor([0, 2])
    cell = aot_ops.from_torch(Indexing(), (x, index), fuse=fuse)
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r"embedding.*index out of range"):
            to_torch(cell(to_ms(x), to_ms(torch.tensor([0, 9]))))
        for _ in range(2):
            torch.testing.assert_close(to_torch(cell(to_ms(x), to_ms(index))), x[index] * 2)


def test_dict_output_keeps_its_structure(mode, fuse, shared_ports):
    torch.manual_seed(3)
    model = DictMLP()
    x = torch.randn(4, 12)
    out = shared_ports.port("DictMLP", model, (x,), fuse=fuse)(to_ms(x))
    expected = model(x)
    assert isinstance(out, dict) and list(out) == ["logits", "features"]
    for key in expected:
        torch.testing.assert_close(to_torch(out[key]), expected[key].detach(), rtol=1e-5, atol=1e-6)
    data = batches((4, 12))
    reference = WithLoss(copy.deepcopy(model), key="logits")
    cell = shared_ports.port("DictMLP-logits", WithLoss(model, key="logits"), data[0], fuse=fuse)
    losses = train_mindspore(cell, data)
    assert max(abs(a - b) / abs(b) for a, b in zip(losses, train_torch(reference, data))) < 1e-4


def test_tuple_output(fuse):
    class Pair(nn.Module):
        def forward(self, x):
            return torch.relu(x), (x * 2, x.sum())

    x = torch.randn(3, 4)
    out = aot_ops.from_torch(Pair(), (x,), fuse=fuse)(to_ms(x))
    assert isinstance(out, tuple) and isinstance(out[1], tuple)
    torch.testing.assert_close(to_torch(out[1][1]), x.sum())


def test_set_train_switches_between_the_graphs(mode, fuse, shared_ports):
    torch.manual_seed(4)
    model = ConvNet()
    x = torch.randn(4, 3, 8, 8)
    cell = shared_ports.port("ConvNet", model, (x,), fuse=fuse)
    assert cell.training  # the module was in training mode
    before = cell.torch_state_dict()["bn1.running_mean"].clone()
    train_out = to_torch(cell(to_ms(x)))
    torch.testing.assert_close(train_out, model(x).detach(), rtol=1e-5, atol=1e-6)  # torch updates too
    assert not torch.equal(cell.torch_state_dict()["bn1.running_mean"], before)
    cell.set_train(False)
    model.eval()
    stats = cell.torch_state_dict()["bn1.running_mean"].clone()
    torch.testing.assert_close(to_torch(cell(to_ms(x))), model(x).detach(), rtol=1e-5, atol=1e-6)
    assert torch.equal(cell.torch_state_dict()["bn1.running_mean"], stats)
    cell.set_train(True)
    model.train()
    torch.testing.assert_close(to_torch(cell(to_ms(x))), model(x).detach(), rtol=1e-5, atol=1e-6)


def test_state_dict_round_trip(fuse):
    torch.manual_seed(5)
    model, other = ResNet(), ResNet()
    x = torch.randn(2, 3, 16, 16)
    cell = aot_ops.from_torch(model, (x,), fuse=fuse)
    names = {p.name for p in cell.get_parameters()}
    assert set(model.state_dict()) <= names  # Parameters are named after the state_dict keys
    trainable = {p.name for p in cell.trainable_params()}
    assert trainable == {k for k, p in model.named_parameters()}
    cell.load_torch_state_dict(other.state_dict())  # a checkpoint from elsewhere
    model.load_state_dict(cell.torch_state_dict())  # and back into torch
    for key, value in other.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    cell.set_train(False)
    other.eval()
    torch.testing.assert_close(to_torch(cell(to_ms(x))), other(x).detach(), rtol=1e-5, atol=1e-6)
    with pytest.raises(aot_ops.PortError, match=r"missing keys: \['fc.bias'\]"):
        cell.load_torch_state_dict({k: v for k, v in other.state_dict().items() if k != "fc.bias"})
    before = {key: value.clone() for key, value in cell.torch_state_dict().items()}
    with pytest.raises(aot_ops.PortError, match=r"'fc.weight' has shape \(3, 16\)"):
        cell.load_torch_state_dict(dict(ResNet().state_dict(), **{"fc.weight": torch.zeros(3, 16)}))
    for key, value in cell.torch_state_dict().items():  # refused whole: no key before fc.weight was written
        assert torch.equal(value, before[key]), key


def test_names_that_are_not_identifiers_keep_their_state_dict_keys():
    torch.manual_seed(6)
    model = ContainerNet()
    x = torch.randn(3, 12)
    cell = aot_ops.from_torch(model, (x,))
    assert {p.name for p in cell.trainable_params()} == set(model.state_dict())
    assert cell.scales.item_0 is not None and cell.blocks.item_in_proj is not None  # where they sit in the cell
    other = ContainerNet()
    cell.load_torch_state_dict(other.state_dict())
    torch.testing.assert_close(to_torch(cell(to_ms(x))), other(x).detach(), rtol=1e-5, atol=1e-6)


def test_print_shows_structure_and_operator_counts():
    model = ResNet()
    cell = aot_ops.from_torch(model, (torch.randn(2, 3, 16, 16),))
    text = repr(cell)
    assert re.search(r"ResNet, bridged operators: \d+ in evaluation, \d+ in training", text)
    assert re.search(r"\(layer2\): ModuleListCell\(\s*Sequential.*\n\s*\(0\): ModuleCell\(\s*BasicBlock", text)
    assert "(downsample): ModuleListCell(" in text
    source = open(cell.source_file).read()
    assert "aten.op('aten::conv2d.default'" in source and "def forward_train(self, x):" in source
    assert "layer2 (Sequential)" in source or "layer2.0" in source  # comments name the torch module


@pytest.mark.parametrize("fuse", [False, True], ids=["node", "fused"])
def test_compiling_a_long_module_list_reads_each_item_a_bounded_number_of_times(fuse, monkeypatch):
    """MindSpore's parser turns a CellList into the tuple of all its cells wherever the source names it: a graph
    reading `self.layers[i].weight` for each of n layers resolved n * 2n items, a compile quadratic in the depth
    (module_tree.Structure reads each list once per method)."""
    from aot_ops._port.cells.module_tree import ModuleListCell

    class Deep(nn.Module):
        def __init__(self, depth):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(depth))

        def forward(self, x):
            for layer in self.layers:
                x = torch.tanh(layer(x))
            return x

    depth = 24
    torch.manual_seed(0)
    model, x = Deep(depth), torch.randn(2, 4)
    cell = aot_ops.from_torch(model, (x,), fuse=fuse)
    reads = []
    item = ModuleListCell.__getitem__
    monkeypatch.setattr(ModuleListCell, "__getitem__", lambda self, i: reads.append(i) or item(self, i))
    previous = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        cell.set_train(False)
        out = cell(to_ms(x))
    finally:
        ms.set_context(mode=previous)
    torch.testing.assert_close(to_torch(out), model(x).detach(), rtol=1e-5, atol=1e-6)
    assert reads and len(reads) <= 4 * depth, len(reads)  # 2 * depth * depth (1,152) before

class LossAndGrads(msnn.Cell):
    """A training graph: the loss and its gradients with respect to the trainable parameters."""

    def __init__(self, net):
        super().__init__(auto_prefix=False)  # as MindSpore's own wrappers: the parameters keep their names
        self.net = net
        self.params = ms.ParameterTuple(net.trainable_params())
        self.grad = ms.ops.GradOperation(get_by_list=True)

    def construct(self, x, target):
        return self.net(x, target), self.grad(self.net, self.params)(x, target)


def compiles_of_every_batch_size(fuse: bool) -> list:
    """Ports a classifier with a dynamic batch, runs it and a training graph over it in GRAPH_MODE at batch sizes
    3, 8 and 5 (checking loss and gradient against torch each time) and returns, after each size, the graphs
    compiled so far, as (class name, MindSpore's phase key)."""
    with pytest.MonkeyPatch.context() as patch:  # also run outside pytest, in a fresh process
        compiles = GraphCompiles()
        compiles.install(patch)
        return _compile_every_batch_size(fuse, compiles)


def _compile_every_batch_size(fuse: bool, compiles: GraphCompiles) -> list:
    torch.manual_seed(6)
    model = WithLoss(TransformerClassifier())
    cell = aot_ops.from_torch(model, batches((4, 6, 32), count=1)[0], dynamic_batch=True, fuse=fuse)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        step = LossAndGrads(cell)
        step.set_inputs(*cell.get_inputs())  # from_torch gave the cell dynamic inputs; a wrapper takes them over
        compiled = []
        for batch in (3, 8, 5):
            x, target = batches((batch, 6, 32), count=1, seed=batch)[0]
            loss = cell(to_ms(x), to_ms(target))
            loss_too, grads = step(to_ms(x), to_ms(target))
            reference = copy.deepcopy(model)
            expected = reference(x, target)
            expected.backward()
            assert abs(float(loss.asnumpy()) - expected.item()) < 1e-5
            assert abs(float(loss_too.asnumpy()) - expected.item()) < 1e-5
            torch.testing.assert_close(to_torch(grads[0]), reference.model.encoder.self_attn.in_proj_weight.grad,
                                       rtol=1e-4, atol=1e-6)
            compiled.append([(c.owner, c.phase) for c in compiles.new() if c.kind == "graph"])
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    x, target = batches((7, 6, 32), count=1)[0]
    assert abs(float(cell(to_ms(x), to_ms(target)).asnumpy()) - model(x, target).item()) < 1e-5
    return compiled


@pytest.mark.slow  # a fresh process, two ports, GRAPH_MODE training graphs: about 25 s
def test_dynamic_batch_runs_every_batch_size_in_one_graph():
    # MindSpore keys a compiled Cell graph on an arguments key that is process-wide: one key per input signature,
    # shared by every Cell with that signature and dropped when any of them is deleted. Its compile() takes the key
    # before its own gc.collect(), which can delete such a Cell (garbage of an earlier port of the same network, in
    # reference cycles): the graph just compiled is then under a key no later call gets, and a Cell called through
    # Cell.__call__ compiles it once more at its next call (docs/mindspore-notes.md). A ported cell runs its
    # compiled graph directly after the first call, under the key it compiled with (run_compiled_graph), so it is
    # compiled once whatever the process holds. The training graph here is a plain Cell of the test's own, so the
    # test runs in a fresh process, both fuse modes in turn: the per-node port's cells are the garbage the fused
    # port's first compile collects, as late in a long session.
    code = ("import json, mindspore as ms; ms.set_device('CPU'); import test_from_torch as t; "
            "print('RESULT', json.dumps([t.compiles_of_every_batch_size(f) for f in (False, True)]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))[len("RESULT "):])
    for fuse, compiled in zip(("per_node", "fused"), results):
        names = [[name for name, _ in after] for after in compiled]
        assert names[0] and "LossAndGrads" in names[0], f"{fuse}: the first batch compiled {names[0]}"
        assert compiled[0] == compiled[-1], f"{fuse}: graphs compiled again for another batch size: {compiled}"


def test_dynamic_batch_lstm_indexes_its_one_layer_state(mode, fuse, shared_ports):
    # The initial state is unbound over its size-1 layer dimension: a list of one tensor, which the per-node
    # operator gives as the tensor itself, also when MindSpore infers its shape in C++.
    torch.manual_seed(8)
    model = WithLoss(LSTMNet(learned_state=True))
    cell = shared_ports.port("LSTMNet(learned_state=True)", model, batches((4, 7, 12), count=1)[0],
                             dynamic_batch=True, fuse=fuse)
    for batch in (3, 6):
        x, target = batches((batch, 7, 12), count=1, seed=batch)[0]
        expected = model(x, target).item()
        assert abs(float(cell(to_ms(x), to_ms(target)).asnumpy()) - expected) <= 1e-5 * abs(expected)


def assert_gradients_at_batch_sizes(cell, model, example, sizes):
    """The loss and every parameter's gradient (ms.value_and_grad) equal torch's, at each batch size."""
    params = cell.trainable_params()
    step = ms.value_and_grad(cell, None, params)
    for batch in sizes:
        x, target = example(batch, batch)
        loss, grads = step(to_ms(x), to_ms(target))
        reference = copy.deepcopy(model)
        expected = reference(x, target)
        expected.backward()
        assert abs(float(loss.asnumpy()) - expected.item()) <= 1e-5 * abs(expected.item())
        torch_grads = dict(reference.named_parameters())
        for param, grad in zip(params, grads):
            torch.testing.assert_close(to_torch(grad), torch_grads[param.name].grad, rtol=1e-4, atol=1e-6,
                                       msg=param.name)


def token_batch(batch, seed, vocab=30, length=6, classes=4):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, length), generator=gen), torch.randint(0, classes, (batch,), generator=gen)


@pytest.mark.slow  # three networks at two batch sizes: 10-13 s in all
@pytest.mark.parametrize("make,example", [
    (MaskedAttentionNet, lambda b, seed: batches((b, 7, 12), count=1, seed=seed)[0]),
    (TiedEmbeddingNet, lambda b, seed: batches((b, 7, 3), count=1, seed=seed)[0]),
    (TokenNet, token_batch),
], ids=["MaskedAttentionNet", "TiedEmbeddingNet", "TokenNet"])
def test_dynamic_batch_gradients_match_torch(make, example, mode, fuse, shared_ports):
    torch.manual_seed(9)
    model = WithLoss(make())
    cell = shared_ports.port(make.__name__, model, example(4, 0), dynamic_batch=True, fuse=fuse)
    assert_gradients_at_batch_sizes(cell, model, example, (3, 5))


def test_integer_indexing_trains_with_a_dynamic_batch(mode, fuse, shared_ports):
    """aten::index with integer indices (a table's rows by token id, a bias table by a buffer of positions) has the
    indices' shape: bridged, forward and backward, with any batch size."""
    torch.manual_seed(11)
    model = WithLoss(LookupNet())
    cell = shared_ports.port("LookupNet", model, token_batch(4, 0), dynamic_batch=True, fuse=fuse)
    if not fuse:
        assert open(cell.source_file).read().count("aten.op('aten::index.Tensor'") == 2
    assert_gradients_at_batch_sizes(cell, model, token_batch, (3, 5))


def test_attention_is_one_operator_with_its_mask_scale_and_grouped_heads(mode, fuse, shared_ports):
    """scaled_dot_product_attention with dropout_p=0 draws nothing: bridged whole (not decomposed into matmuls and
    a softmax, whose strides differ from the kernel's), with a boolean mask, a scale and GQA, forward and backward."""
    torch.manual_seed(12)
    model = WithLoss(GroupedAttentionNet())
    data = batches((4, 6, 12), count=3)
    cell = shared_ports.port("GroupedAttentionNet", WithLoss(copy.deepcopy(model.model)), data[0], fuse=fuse)
    if not fuse:
        source = open(cell.source_file).read()
        assert "aten::scaled_dot_product_attention" in source and "aten::_softmax" not in source
    losses = train_mindspore(cell, data)
    expected = train_torch(model, data)
    for ours, theirs in zip(losses, expected):
        assert abs(ours - theirs) <= 1e-4 * abs(theirs), (losses, expected)
    assert_state_close(cell, model)


@pytest.mark.slow  # two networks at two batch sizes: 8-10 s in all
@pytest.mark.parametrize("make,shape", [(LSTMNet, (4, 7, 12)), (MemoryNet, (4, 7, 12))],
                         ids=["LSTM-zero-state", "MemoryNet"])
def test_dynamic_batch_sizes_from_other_inputs(make, shape, mode, fuse, shared_ports):
    # A zero initial state sized by the batch (no tensor input), a parameter expanded to the batch: one program
    # reads every input's shape; an operator per node takes the input whose shape shows the batch along, for its
    # shape only (aten.op's shape_inputs).
    torch.manual_seed(10)
    model = WithLoss(make())
    example = batches(shape, count=1)[0]
    cell = shared_ports.port(make.__name__, model, example, dynamic_batch=True, fuse=fuse)
    if not fuse:
        assert "shape_inputs=1" in open(cell.source_file).read()
    assert_gradients_at_batch_sizes(cell, model, lambda b, seed: batches((b, *shape[1:]), count=1, seed=seed)[0],
                                    (3, 5))


class SizeAddedToATensor(torch.nn.Module):
    """A tensor plus a size known at run time (Bloom: `seq_length + past_length`): aten.add.Tensor given the size
    where it takes a tensor, as a wrapped number."""

    def forward(self, x, offset):
        return x * (offset + x.shape[0])


def test_a_size_where_a_tensor_is_taken_is_a_number_known_at_run_time(mode, fuse):
    model = SizeAddedToATensor()
    offset = torch.tensor(2)
    cell = aot_ops.from_torch(model, (torch.randn(4, 3), offset), dynamic_batch=True, fuse=fuse,
                              evaluation_only=True)
    for batch in (3, 5):
        x = torch.randn(batch, 3)
        assert torch.equal(to_torch(cell(to_ms(x), to_ms(offset))), model(x, offset))


class LastRows(torch.nn.Module):
    """The last len(rows) positions of another input's length (a mask's rows at the end of the keys): the slice
    starts at -s0, the size expression "-1 d0.0 *", whose -1 is a value, not MindSpore's unknown dimension."""

    def forward(self, rows, keys):
        return torch.arange(keys.shape[0])[-rows.shape[0]:] * 2.0


def test_a_negative_size_is_computed_at_run_time(mode, fuse):
    model = LastRows()
    sizes = ({0: torch.export.Dim("rows", min=1, max=32)}, {0: torch.export.Dim("keys", min=2, max=64)})
    cell = aot_ops.from_torch(model, (torch.zeros(3), torch.zeros(9)), dynamic_shapes=sizes, fuse=fuse,
                              evaluation_only=True)
    for rows, keys in ((3, 9), (1, 9), (5, 17)):
        inputs = torch.zeros(rows), torch.zeros(keys)
        assert torch.equal(to_torch(cell(*(to_ms(t) for t in inputs))), model(*inputs))


def test_other_shapes_are_refused_with_the_expected_shape(mode):
    cell = aot_ops.from_torch(ConcatNet(), (torch.randn(6, 12),))
    with pytest.raises(ValueError, match=r"ConcatNet was ported for input x of shape \(6, 12\); "
                                         r"port it with .*dynamic_batch=True.*got \(4, 12\)"):
        cell(to_ms(torch.randn(4, 12)))
    dynamic = aot_ops.from_torch(ConcatNet(), (torch.randn(6, 12),), dynamic_batch=True)
    with pytest.raises(ValueError, match=r"shape \(any, 12\) \(a dimension shown as 'any' takes any size\).*"
                                         r"got \(4, 10\)"):
        dynamic(to_ms(torch.randn(4, 10)))
    assert dynamic(to_ms(torch.randn(4, 12))).shape == (4, 5)


def test_another_dtype_is_refused_naming_the_dtype_not_the_batch(mode):
    """A float16 input (from a float16 layer in front, or mixed precision) has the batch the cell was ported for: the
    error must be about the dtype, in PyNative and GRAPH_MODE alike."""
    cell = aot_ops.from_torch(ConcatNet(), (torch.randn(6, 12),))
    with pytest.raises(TypeError, match=r"ConcatNet was ported for input x of dtype float32: cast the input to "
                                        r"float32 .*got Float16") as refused:
        cell(to_ms(torch.randn(6, 12)).astype(ms.float16))
    assert "batch" not in str(refused.value)
    assert cell(to_ms(torch.randn(6, 12))).shape == (6, 5)  # the next call works

    class Float16InFront(msnn.Cell):  # the check generated into the cell's construct, for calls from other graphs
        def __init__(self, ported):
            super().__init__()
            self.ported = ported

        def construct(self, x):
            return self.ported(x.astype(ms.float16))

    with pytest.raises(TypeError, match=r"of dtype float32: cast the input to float32 .*got Float16"):
        Float16InFront(cell)(to_ms(torch.randn(6, 12)))


# ---- what cannot be ported is refused, naming the torch node and its source line ------------------------------

def test_dropout_in_training_is_refused_with_what_to_do():
    model = TransformerClassifier(dropout=0.1)
    x = torch.randn(2, 6, 32)
    with pytest.raises(aot_ops.PortError, match=r"node 'scaled_dot_product_attention' .* in encoder.self_attn "
                                                r"\(MultiheadAttention\) .*cannot be bridged: it draws random numbers, "
                                                r"which cannot match torch \(dropout_p > 0: attention dropout.*\)\. Set "
                                                r"the attention dropout to 0 for training"):
        aot_ops.from_torch(model, (x,))
    model.encoder.self_attn.dropout = 0.0  # then the feed-forward's nn.Dropout is the first random node
    with pytest.raises(aot_ops.PortError, match=r"native_dropout.*in encoder.*cannot be bridged: it draws random "
                                                r"numbers.*set the dropout probability to 0"):
        aot_ops.from_torch(model, (x,))
    model.eval()
    cell = aot_ops.from_torch(model, (x,))  # evaluation works: dropout does nothing there
    torch.testing.assert_close(to_torch(cell(to_ms(x))), model(x).detach(), rtol=1e-5, atol=1e-6)
    with pytest.raises(aot_ops.PortError, match="ported for evaluation only"):
        cell.set_train(True)


def test_no_grad_regions_pass_no_gradient(mode, fuse, shared_ports):
    # torch.export marks a torch.no_grad() block as a region that run_decompositions inlines; MindSpore would
    # differentiate through it (twice torch's gradient here) unless its results are detached
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 4)

        def forward(self, x):
            h = self.linear(x)
            with torch.no_grad():
                scale = h.mean(0, keepdim=True) * 3
            return (h * scale).sum()

    torch.manual_seed(14)
    model, x = Scaled(), torch.randn(3, 4)
    model(x).backward()
    cell = shared_ports.port("test_no_grad_regions", model, (x,), fuse=fuse)
    grads = ms.grad(cell, None, cell.trainable_params())(to_ms(x))
    torch.testing.assert_close(to_torch(grads[0]), model.linear.weight.grad)
    torch.testing.assert_close(to_torch(grads[1]), model.linear.bias.grad)


def test_a_buffer_used_then_reassigned_gives_torchs_gradient(mode, fuse, shared_ports):
    # the backward must see the buffer's value before the forward's update (the bprop read the updated one)
    class Decaying(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(4))
            self.register_buffer("rate", torch.full((4,), 2.0))

        def forward(self, x):
            y = (x * self.weight * self.rate).sum()
            self.rate = self.rate * 0.5
            return y

    torch.manual_seed(15)
    model, x = Decaying(), torch.randn(3, 4)
    reference = copy.deepcopy(model)
    cell = shared_ports.port("test_a_buffer_used_then_reassigned", model, (x,), fuse=fuse)
    loss, grads = ms.value_and_grad(cell, None, cell.trainable_params())(to_ms(x))
    expected = reference(x)
    expected.backward()
    assert abs(float(loss.asnumpy()) - expected.item()) <= 1e-5 * abs(expected.item())
    torch.testing.assert_close(to_torch(grads[0]), reference.weight.grad)
    torch.testing.assert_close(cell.torch_state_dict()["rate"], reference.rate)


def test_parametrized_layers_train_like_torch(mode, fuse, shared_ports):
    # weight_norm and spectral_norm: a ParametrizationList holds parameters beside numbered children, and
    # spectral_norm's power iteration (under no_grad) updates buffers. In float64 to 1e-9: differentiating the
    # power iteration showed in float32 only as a 1e-4 drift of its vectors, easy to take for rounding.
    torch.manual_seed(13)
    model = WithLoss(NormalizedNet()).double()
    reference = copy.deepcopy(model)
    data = [(x.double(), target) for x, target in batches((4, 7, 12))]
    cell = shared_ports.port("NormalizedNet", model, data[0], fuse=fuse)
    params = cell.trainable_params()
    step = ms.value_and_grad(cell, None, params)
    losses = []
    lr = ms.Tensor(LR, ms.float64)  # a Python float would be multiplied as float32
    for x, target in data:  # SGD by hand: MindSpore's SGD kernel has no float64
        loss, grads = step(to_ms(x), to_ms(target))
        for param, grad in zip(params, grads):
            ms.ops.assign(param, param - lr * grad)  # set_data would not reach GRAPH_MODE's compiled step
        losses.append(float(loss.asnumpy()))
    expected = train_torch(reference, data)
    for ours, theirs in zip(losses, expected):
        assert abs(ours - theirs) <= 1e-9 * abs(theirs), (losses, expected)
    ours, theirs = cell.torch_state_dict(), reference.state_dict()
    assert list(ours) == list(theirs)
    for key, value in theirs.items():
        torch.testing.assert_close(ours[key], value, rtol=1e-9, atol=1e-11, msg=key)


def test_outputs_that_alias_inputs_or_each_other(mode, fuse, shared_ports):
    # an input returned as it is, a view of a parameter, a view of another output, one tensor twice
    class Aliasing(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 3)

        def forward(self, x):
            y = torch.tanh(self.linear(x))
            return y, x, self.linear.weight.t(), y.t(), y

    torch.manual_seed(12)
    model, x = Aliasing(), torch.randn(2, 4)
    cell = shared_ports.port("test_outputs_that_alias", model, (x,), fuse=fuse)
    expected = model(x)
    outputs = cell(to_ms(x))
    assert len(outputs) == len(expected)
    for ours, theirs in zip(outputs, expected):
        torch.testing.assert_close(to_torch(ours), theirs.detach())
    sum(t.sum() for t in expected).backward()
    grads = ms.grad(cell, None, cell.trainable_params())(to_ms(x))  # every output's gradient is ones
    torch.testing.assert_close(to_torch(grads[0]), model.linear.weight.grad)
    torch.testing.assert_close(to_torch(grads[1]), model.linear.bias.grad)


@pytest.mark.parametrize("detached", [False, True], ids=["autograd_function", "detach"])
def test_a_straight_through_round_gets_its_gradient_in_either_form(detached, fuse):
    # Differentiating round itself would give zero gradients: the Function's own backward (ported with it,
    # tests/test_custom_autograd.py) and the detach form both pass the gradient through.
    class Quantized(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 4)

        def forward(self, x):
            h = self.linear(x) * 3
            h = h + (torch.round(h) - h).detach() if detached else RoundThrough.apply(h)
            return (h ** 2).sum()

    torch.manual_seed(11)
    model, x = Quantized(), torch.randn(3, 4)
    model(x).backward()
    cell = aot_ops.from_torch(model, (x,), fuse=fuse)
    assert RoundThrough.apply(torch.tensor([0.4])).item() == 0.0  # torch's apply is itself again after the port
    grads = ms.grad(cell, None, cell.trainable_params())(to_ms(x))
    assert model.linear.weight.grad.abs().sum() > 0
    torch.testing.assert_close(to_torch(grads[0]), model.linear.weight.grad, rtol=1e-5, atol=1e-5)


def test_unsupported_operator_names_node_and_line():
    class Select(nn.Module):
        def forward(self, x):
            return x[x > 0]  # boolean indexing: the size depends on the data

    with pytest.raises(aot_ops.PortError, match=r"node '.*' \(aten::.*\) at .*test_from_torch.py:\d+: return x\[x > 0\]"):
        aot_ops.from_torch(Select(), (torch.randn(4),))


def test_data_dependent_shape_is_refused():
    class Nonzero(nn.Module):
        def forward(self, x):
            return torch.nonzero(x).float().sum() * x

    with pytest.raises(aot_ops.PortError, match=r"aten::nonzero.*test_from_torch.py:\d+.*"
                                                r"its output size depends on the input values.*from_torch_split"):
        aot_ops.from_torch(Nonzero(), (torch.randn(4),))


def test_an_error_of_aot_ops_own_code_while_tracing_is_not_labelled_torch_s(monkeypatch):
    """Errors torch raises while tracing become PortErrors in torch's words; one raised by aot_ops' own code (here
    made to fail: the helper the AOTAutograd trace calls on every output is given aot_ops' frames(), which fails
    on a tensor) surfaces with its own type and traceback."""
    from aot_ops._port import errors
    from aot_ops._port.programs import fused

    monkeypatch.setattr(fused, "_unaliased", lambda output, _inputs: errors.frames(output))
    monkeypatch.setenv("AOT_OPS_PORT_CACHE", "0")
    with pytest.raises(AttributeError) as raised:
        aot_ops.from_torch(nn.Linear(3, 2), (torch.randn(2, 3),), fuse=True)
    assert not isinstance(raised.value, aot_ops.PortError)
    assert raised.traceback[-1].path.name == "errors.py"


class KeptRows(nn.Module):
    """A feature extractor, the rows whose score is positive (a data-dependent count), a head on those rows."""

    def __init__(self):
        super().__init__()
        self.features, self.score, self.head = nn.Linear(6, 8), nn.Linear(8, 1), nn.Linear(8, 3)

    def forward(self, x):
        f = torch.relu(self.features(x))
        kept = f[self.score(f).squeeze(1) > 0]
        return self.head(kept).softmax(-1), kept.shape[0] * torch.ones(1)


def test_a_network_with_a_data_dependent_size_is_split_and_evaluates_like_torch(mode):
    torch.manual_seed(0)
    model = KeptRows().eval()
    port = aot_ops.from_torch_split(model)
    for rows in (7, 7, 9):  # a second size ports its graphs again
        x = torch.randn(rows, 6)
        expected = model(x)
        probabilities, count = port(to_ms(x))
        assert int(count.asnumpy()[0]) == expected[1].item() == expected[0].shape[0] > 0
        torch.testing.assert_close(to_torch(probabilities), expected[0].detach(), rtol=1e-6, atol=1e-7)
    ported = [p for p in port.parts if p.cell is not None]
    assert len(ported) >= 2 and {s for p in ported for s in p.input_shapes} >= {(7, 6), (9, 6)}  # before and after


def test_a_split_port_evaluates_only():
    with pytest.raises(aot_ops.PortError, match="KeptRows is in training mode.*module.eval"):
        aot_ops.from_torch_split(KeptRows().train())


def test_in_place_on_an_input_is_refused():
    class AddInPlace(nn.Module):
        def forward(self, x):
            x.add_(1)
            return x * 2

    with pytest.raises(aot_ops.PortError, match=r"modifies the input 'x' in place"):
        aot_ops.from_torch(AddInPlace(), (torch.randn(4),))


def test_unsupported_dtype_is_refused():
    class Half32(nn.Module):
        def forward(self, x):
            return torch.view_as_complex(x).to(torch.complex32)

    with pytest.raises(aot_ops.PortError, match=r"produces a torch.complex32 tensor, which MindSpore has no dtype"):
        aot_ops.from_torch(Half32(), (torch.randn(4, 2),))


def test_non_tensor_arguments_are_refused():
    with pytest.raises(TypeError, match="argument 1 is a int; give tensors as positional arguments, and other values "
                                        "as keyword arguments"):
        aot_ops.from_torch(ConcatNet(), (torch.randn(2, 12), 3))
    with pytest.raises(TypeError, match="keyword argument 'scale' is a object"):
        aot_ops.from_torch(ConcatNet(), (torch.randn(2, 12),), {"scale": object()})


def test_fused_dynamic_batch_computes_sizes_no_node_input_shows(mode, shared_ports):
    """The backward of a sum expands a 0-dim gradient to the batch size: that node reads the size from the program's
    inputs, since its own input has none."""
    class WeightedSum(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(5))

        def forward(self, x):
            return (x * self.weight).sum()

    torch.manual_seed(8)
    model = WeightedSum()
    cell = shared_ports.port("test_fused_dynamic_batch_computes_sizes", model, (torch.randn(4, 5),), dynamic_batch=True,
                             fuse=True)
    grad_fn = ms.grad(cell, grad_position=0, weights=cell.trainable_params())
    for batch in (2, 7):
        x = torch.randn(batch, 5, requires_grad=True)
        x_grad, (w_grad,) = grad_fn(to_ms(x.detach()))
        reference = copy.deepcopy(model)
        reference(x).backward()
        torch.testing.assert_close(to_torch(x_grad), x.grad)
        torch.testing.assert_close(to_torch(w_grad), reference.weight.grad, rtol=1e-5, atol=1e-5)
