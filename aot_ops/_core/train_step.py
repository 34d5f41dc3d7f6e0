"""aot_ops.train_step: one training step (forward, backward, optimizer) as one compiled MindSpore graph.

In GRAPH_MODE MindSpore compiles a training step written as one function or Cell into one graph; in PyNative, the
default mode, `ms.value_and_grad` and the optimizer run as separate calls through PyNative's queues, which cost
about a whole torch step on a 2-core machine (docs/performance.md). MindSpore's own `ms.jit` removes that cost
inside PyNative when the whole step is one function; this helper is that function, built on nn.TrainOneStepCell
(which also averages the gradients across devices under data parallel).
"""
from __future__ import annotations

import mindspore as ms
from mindspore import nn, ops

from ..errors import named_kernel_failure
from .mindspore_private import end_aborted_gradient


class TrainStep(nn.TrainOneStepCell):
    """nn.TrainOneStepCell computing the loss and the gradients in one pass (value_and_grad), whose construct is one
    graph in both modes. Calling it runs one step and returns the loss (with has_aux, the loss cell's whole output:
    the first value is the loss, the others are returned as they are, with no gradient through them)."""

    def __init__(self, network: nn.Cell, optimizer: nn.Cell, has_aux: bool = False):
        super().__init__(network, optimizer)
        self.grad_fn = ops.value_and_grad(network, None, self.weights, has_aux=has_aux)
        self.has_aux = has_aux
        dynamic = network.get_inputs()
        if dynamic:  # a ported cell with dynamic sizes: one graph for every size, as the cell has
            self.set_inputs(*dynamic)

    def __call__(self, *args, **kwargs):
        try:
            return super().__call__(*args, **kwargs)
        except (TypeError, RuntimeError) as exc:
            end_aborted_gradient()
            named = named_kernel_failure(exc, f"aot_ops.train_step of {type(self.network).__name__}")
            if named is not None:
                raise named from exc
            raise

    @ms.jit
    def construct(self, *inputs):
        output, grads = self.grad_fn(*inputs)
        grads = self.grad_reducer(grads)
        return ops.depend(output, self.optimizer(grads))


def train_step(loss_cell: nn.Cell, optimizer: nn.Cell, *, has_aux: bool = False) -> TrainStep:
    """A Cell running one training step of `loss_cell` (a Cell returning the loss, or `(loss, *aux)` with
    has_aux=True) with `optimizer` (an nn.Optimizer over the parameters to train) as ONE compiled MindSpore graph,
    in PyNative and GRAPH_MODE alike:

        step = aot_ops.train_step(loss_cell, nn.SGD(loss_cell.trainable_params(), learning_rate=0.1))
        for x, y in data:
            loss = step(x, y)

    It computes what `loss, grads = ms.value_and_grad(loss_cell, None, optimizer.parameters)(x, y);
    optimizer(grads)` computes; under data parallel (msrun) the gradients are averaged across devices first, as
    nn.TrainOneStepCell does. The first call for each input signature compiles the graph; a loss cell with dynamic
    inputs (set_inputs, as from_torch's dynamic_batch gives) gives the step the same, so one graph serves every
    size."""
    if not isinstance(loss_cell, nn.Cell):
        raise TypeError(f"aot_ops.train_step: loss_cell must be a mindspore.nn.Cell, got {type(loss_cell).__name__}")
    if not isinstance(optimizer, nn.Optimizer):
        raise TypeError("aot_ops.train_step: optimizer must be a mindspore.nn.Optimizer (nn.SGD, nn.Adam, ...), got "
                        f"{type(optimizer).__name__}")
    return TrainStep(loss_cell, optimizer, has_aux=has_aux)
