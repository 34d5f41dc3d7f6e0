"""A ported cell in PyNative mode, MindSpore's default: each call runs as one compiled MindSpore graph (from_torch's
jit=True), and what works on a MindSpore Cell keeps working on it: training loops, set_train, dynamic sizes, hooks,
MindSpore's own training cells, checkpoints, MINDIR; aot_ops.train_step runs a whole step as one graph."""
from __future__ import annotations

import copy

import mindspore as ms
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mindspore import nn as msnn
from torch import nn

import aot_ops
from port_support import LR, assert_state_close, batches, train_torch
from support import to_ms, to_torch
from torch_nets import ConvNet, TransformerClassifier, WithLoss


@pytest.fixture(params=[False, True], ids=["per_node", "fused"])
def fuse(request):
    return request.param


class BatchNormDict(nn.Module):
    """BatchNorm (training and evaluation differ) and a dict output (the flat twin)."""

    def __init__(self):
        super().__init__()
        self.bn, self.out = nn.BatchNorm1d(6), nn.Linear(6, 3)

    def forward(self, x):
        return {"out": self.out(self.bn(x)), "normalized": self.bn.running_mean * 1.0}


class Parent(msnn.Cell):
    def __init__(self, child):
        super().__init__()
        self.child = child

    def construct(self, x):
        return self.child(x)


def test_a_call_is_one_graph_compiled_once_per_mode(fuse, graph_compiles):
    torch.manual_seed(0)
    model = ConvNet()
    x = torch.randn(4, 3, 8, 8) * 2 + 1
    cell = aot_ops.from_torch(copy.deepcopy(model), (x,), fuse=fuse)
    assert cell.jit is True
    cell.set_train(False)
    model.eval()
    with graph_compiles.counting() as compiles:
        for expected_compiles in (1, 1):
            torch.testing.assert_close(to_torch(cell(to_ms(x))), model(x).detach(), rtol=1e-5, atol=1e-6)
            assert compiles() == expected_compiles
        cell.set_train(True)
        model.train()
        torch.testing.assert_close(to_torch(cell(to_ms(x))), model(x).detach(), rtol=1e-5, atol=1e-6)
        assert compiles() == 2
        assert_state_close(cell, model)  # the training graph updated BatchNorm's running statistics
        # switched through a parent (only `training` changes): the evaluation graph again, not compiled anew
        parent = Parent(cell)
        parent.set_train(False)
        model.eval()
        torch.testing.assert_close(to_torch(cell(to_ms(x))), model(x).detach(), rtol=1e-5, atol=1e-6)
        assert compiles() == 2


def test_dict_outputs_follow_set_train_in_both_modes(mode):
    # A top-level graph returning a dict runs through the flat twin, whose phase must follow the ported cell's
    # mode: otherwise the graph compiled first keeps running (evaluation results, no running-statistics update).
    torch.manual_seed(1)
    model = BatchNormDict()
    x = torch.randn(8, 6) * 3 + 1
    cell = aot_ops.from_torch(copy.deepcopy(model), (x,))
    for training in (False, True, False, True):
        cell.set_train(training)
        model.train(training)
        out, expected = cell(to_ms(x)), model(x)
        for key in ("out", "normalized"):
            torch.testing.assert_close(to_torch(out[key]), expected[key].detach(), rtol=1e-5, atol=1e-6, msg=key)
    assert_state_close(cell, model)


def test_a_plain_training_loop_trains_like_torch_with_one_compilation(fuse, graph_compiles):
    torch.manual_seed(2)
    model = WithLoss(TransformerClassifier())
    data = batches((8, 6, 32), count=5)
    cell = aot_ops.from_torch(copy.deepcopy(model), data[0], fuse=fuse)
    optimizer = msnn.SGD(cell.trainable_params(), learning_rate=LR)
    grad_fn = ms.value_and_grad(cell, None, optimizer.parameters)
    losses, counts = [], []
    with graph_compiles.counting() as compiles:
        for x, target in data:
            loss, grads = grad_fn(to_ms(x), to_ms(target))
            optimizer(grads)
            losses.append(float(loss.asnumpy()))
            counts.append(compiles())
    assert counts[0] >= 1 and counts[-1] == counts[0], f"the training loop compiled again after step 1: {counts}"
    expected = train_torch(model, data)
    assert max(abs(a - b) / abs(b) for a, b in zip(losses, expected)) < 1e-4
    assert_state_close(cell, model)


def test_jit_false_runs_operator_by_operator_and_can_be_switched(graph_compiles):
    torch.manual_seed(3)
    model = WithLoss(TransformerClassifier())
    data = batches((8, 6, 32), count=3)
    cell = aot_ops.from_torch(copy.deepcopy(model), data[0], fuse=True, jit=False)
    assert cell.jit is False
    optimizer = msnn.SGD(cell.trainable_params(), learning_rate=LR)
    grad_fn = ms.value_and_grad(cell, None, optimizer.parameters)
    optimizer(grad_fn(to_ms(data[0][0]), to_ms(data[0][1]))[1])  # the optimizer's own graph, compiled once
    losses = []
    with graph_compiles.counting() as compiles:
        for step, (x, target) in enumerate(data[1:]):
            if step == 1:
                assert compiles() == 0
                cell.jit = True
            loss, grads = grad_fn(to_ms(x), to_ms(target))
            optimizer(grads)
            losses.append(float(loss.asnumpy()))
        assert compiles() >= 1
    assert max(abs(a - b) / abs(b) for a, b in zip(losses, train_torch(model, data)[1:])) < 1e-4
    with pytest.raises(TypeError, match="jit must be True or False"):
        cell.jit = "yes"
    with pytest.raises(TypeError, match=r"from_torch: jit='graph'"):
        aot_ops.from_torch(model, data[0], jit="graph")


def test_a_cell_with_hooks_runs_them(graph_compiles):
    # Hooks run around construct in Cell.__call__, which a graph call would bypass: such a cell runs per call.
    torch.manual_seed(4)
    model = TransformerClassifier()
    x = torch.randn(2, 6, 32)
    cell = aot_ops.from_torch(model, (x,), fuse=True)
    seen = []
    handle = cell.register_forward_hook(lambda _cell, _inputs, output: seen.append(to_torch(output)))
    with graph_compiles.counting() as compiles:
        out = cell(to_ms(x))
        assert compiles() == 0
    handle.remove()
    torch.testing.assert_close(seen[0], model(x).detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(to_torch(out), seen[0])


def test_dynamic_batch_is_one_graph_for_every_size(fuse, graph_compiles):
    torch.manual_seed(5)
    model = WithLoss(TransformerClassifier())
    cell = aot_ops.from_torch(model, batches((4, 6, 32), count=1)[0], dynamic_batch=True, fuse=fuse)
    params = cell.trainable_params()
    grad_fn = ms.value_and_grad(cell, None, params)
    counts = []
    with graph_compiles.counting() as compiles:
        for batch in (3, 8, 5):
            x, target = batches((batch, 6, 32), count=1, seed=batch)[0]
            loss = cell(to_ms(x), to_ms(target))
            loss_too, grads = grad_fn(to_ms(x), to_ms(target))
            reference = copy.deepcopy(model)
            expected = reference(x, target)
            expected.backward()
            for value in (loss, loss_too):
                assert abs(float(value.asnumpy()) - expected.item()) <= 1e-5 * abs(expected.item())
            torch_grads = dict(reference.named_parameters())
            for param, grad in zip(params, grads):
                torch.testing.assert_close(to_torch(grad), torch_grads[param.name].grad, rtol=1e-4, atol=1e-6)
            counts.append(compiles())
    assert counts[0] >= 2 and counts[0] == counts[-1], f"graphs compiled again for another batch size: {counts}"


class NativeFront(msnn.Cell):
    """A MindSpore layer, then the ported cell, then a MindSpore loss: gradients cross both kinds of cells."""

    def __init__(self, ported, dense: nn.Linear):
        super().__init__()
        self.dense = msnn.Dense(dense.in_features, dense.out_features)
        self.dense.weight.set_data(to_ms(dense.weight.detach()))
        self.dense.bias.set_data(to_ms(dense.bias.detach()))
        self.ported = ported
        self.loss = msnn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    def construct(self, x, target):
        return self.loss(self.ported(self.dense(x)), target)


def test_gradients_flow_through_ported_and_native_cells(fuse):
    torch.manual_seed(6)
    front, body = nn.Linear(10, 32), TransformerClassifier()
    x, target = torch.randn(4, 6, 10), torch.randint(0, 5, (4,))
    net = NativeFront(aot_ops.from_torch(copy.deepcopy(body), (torch.randn(4, 6, 32),), fuse=fuse), front)
    loss, grads = ms.value_and_grad(net, None, net.trainable_params())(to_ms(x), to_ms(target.int()))
    expected = F.cross_entropy(body(front(x)), target)
    expected.backward()
    assert abs(float(loss.asnumpy()) - expected.item()) <= 1e-5 * abs(expected.item())
    torch_grads = {f"dense.{k}": p.grad for k, p in front.named_parameters()}
    torch_grads.update({f"ported.{k}": p.grad for k, p in body.named_parameters()})
    names = [p.name for p in net.trainable_params()]
    assert set(names) == set(torch_grads)
    for name, grad in zip(names, grads):
        torch.testing.assert_close(to_torch(grad), torch_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def _dataset(data):
    import mindspore.dataset as ds

    return ds.GeneratorDataset([(x.numpy(), t.numpy().astype(np.int32)) for x, t in data], ["x", "target"],
                               shuffle=False)


def test_mindspores_training_cells_and_model_train_the_ported_cell_like_torch():
    torch.manual_seed(7)
    model = ConvNet()
    data = batches((4, 3, 8, 8), count=4)
    loss_fn = msnn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    # nn.TrainOneStepCell over nn.WithLossCell, called step by step
    cell = aot_ops.from_torch(copy.deepcopy(model), (data[0][0],), fuse=True)
    step = msnn.TrainOneStepCell(msnn.WithLossCell(cell, loss_fn), msnn.SGD(cell.trainable_params(),
                                                                            learning_rate=LR))
    losses = [float(step(to_ms(x), to_ms(t.int())).asnumpy()) for x, t in data]
    reference = copy.deepcopy(model)
    expected = train_torch(WithLoss(reference), data)
    assert max(abs(a - b) / abs(b) for a, b in zip(losses, expected)) < 1e-4
    assert_state_close(cell, reference)
    # ms.train.Model: train one epoch over a dataset, then evaluate
    cell = aot_ops.from_torch(copy.deepcopy(model), (data[0][0],), fuse=True)
    trainer = ms.train.Model(cell, loss_fn, msnn.SGD(cell.trainable_params(), learning_rate=LR),
                             metrics={"loss"})
    trainer.train(1, _dataset(data))
    assert_state_close(cell, reference)
    evaluated = trainer.eval(_dataset(data))
    reference.eval()
    with torch.no_grad():
        expected_loss = np.mean([F.cross_entropy(reference(x), t).item() for x, t in data])
    assert abs(evaluated["loss"] - expected_loss) <= 1e-5 * expected_loss


def test_checkpoints_and_mindir_keep_the_ported_cell(tmp_path):
    torch.manual_seed(8)
    model = ConvNet().eval()
    x = torch.randn(4, 3, 8, 8)
    cell = aot_ops.from_torch(copy.deepcopy(model), (x,), fuse=True)
    ms.save_checkpoint(cell, str(tmp_path / "cell.ckpt"))
    other = aot_ops.from_torch(ConvNet().eval(), (x,), fuse=True)
    ms.load_checkpoint(str(tmp_path / "cell.ckpt"), other)
    torch.testing.assert_close(to_torch(other(to_ms(x))), model(x).detach(), rtol=1e-5, atol=1e-6)
    ms.export(cell, to_ms(x), file_name=str(tmp_path / "cell"), file_format="MINDIR")
    loaded = msnn.GraphCell(ms.load(str(tmp_path / "cell.mindir")))
    torch.testing.assert_close(to_torch(loaded(to_ms(x))), model(x).detach(), rtol=1e-5, atol=1e-6)


def test_train_step_is_the_plain_loop_as_one_graph(mode, fuse):
    torch.manual_seed(9)
    model = WithLoss(TransformerClassifier())
    data = batches((8, 6, 32), count=4)
    cell = aot_ops.from_torch(copy.deepcopy(model), data[0], fuse=fuse, input_grads=False)
    step = aot_ops.train_step(cell, msnn.SGD(cell.trainable_params(), learning_rate=LR))
    losses = [float(step(to_ms(x), to_ms(t)).asnumpy()) for x, t in data]
    assert max(abs(a - b) / abs(b) for a, b in zip(losses, train_torch(model, data))) < 1e-4
    assert_state_close(cell, model)


class LossAndLogits(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, target):
        logits = self.model(x)
        return F.cross_entropy(logits, target), logits


def test_train_step_is_one_graph_for_every_batch_size_of_a_dynamic_batch_cell(mode, graph_compiles):
    torch.manual_seed(11)
    model = WithLoss(TransformerClassifier())
    cell = aot_ops.from_torch(copy.deepcopy(model), batches((4, 6, 32), count=1)[0], dynamic_batch=True, fuse=True)
    step = aot_ops.train_step(cell, msnn.SGD(cell.trainable_params(), learning_rate=LR))
    data = [batches((batch, 6, 32), count=1, seed=batch)[0] for batch in (3, 8, 5)]
    compiled = []
    with graph_compiles.counting() as compiles:
        losses = []
        for x, target in data:
            losses.append(float(step(to_ms(x), to_ms(target)).asnumpy()))
            compiled.append(compiles())
    assert compiled[0] >= 1 and compiled[0] == compiled[-1], f"the step compiled again for another size: {compiled}"
    assert max(abs(a - b) / abs(b) for a, b in zip(losses, train_torch(model, data))) < 1e-4
    assert_state_close(cell, model)


def test_train_step_returns_auxiliary_outputs_and_refuses_what_is_not_a_step():
    torch.manual_seed(10)
    model = LossAndLogits(TransformerClassifier())
    data = batches((8, 6, 32), count=2)
    cell = aot_ops.from_torch(copy.deepcopy(model), data[0], fuse=True)
    step = aot_ops.train_step(cell, msnn.SGD(cell.trainable_params(), learning_rate=LR), has_aux=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for x, target in data:
        loss, logits = step(to_ms(x), to_ms(target))
        optimizer.zero_grad()
        expected_loss, expected_logits = model(x, target)
        expected_loss.backward()
        optimizer.step()
        assert abs(float(loss.asnumpy()) - expected_loss.item()) <= 1e-5 * expected_loss.item()
        torch.testing.assert_close(to_torch(logits), expected_logits.detach(), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match="optimizer must be a mindspore.nn.Optimizer"):
        aot_ops.train_step(cell, torch.optim.SGD(model.parameters(), lr=LR))
    with pytest.raises(TypeError, match="loss_cell must be a mindspore.nn.Cell"):
        aot_ops.train_step(model, msnn.SGD(cell.trainable_params(), learning_rate=LR))
