"""What the from_torch tests share: data, training loops in both frameworks, and the state comparison."""
from __future__ import annotations

import mindspore as ms
import torch
from mindspore import nn as msnn

from support import to_ms

STEPS = 10
LR = 0.1


def batches(shape, classes=5, count=STEPS, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(*shape, generator=gen), torch.randint(0, classes, (shape[0],), generator=gen))
            for _ in range(count)]


def train_mindspore(cell, data):
    """SGD steps through MindSpore's autodiff and optimizer; the losses."""
    optimizer = msnn.SGD(cell.trainable_params(), learning_rate=LR)
    step = ms.value_and_grad(cell, None, optimizer.parameters)
    losses = []
    for x, target in data:
        loss, grads = step(to_ms(x), to_ms(target))
        optimizer(grads)
        losses.append(float(loss.asnumpy()))
    return losses


def train_torch(module, data):
    optimizer = torch.optim.SGD(module.parameters(), lr=LR)
    losses = []
    for x, target in data:
        optimizer.zero_grad()
        loss = module(x, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def assert_state_close(cell, module):
    """Every parameter and buffer of the cell equals the torch module's (BatchNorm statistics included)."""
    ours = cell.torch_state_dict()
    theirs = module.state_dict()
    assert list(ours) == list(theirs)
    for key, value in theirs.items():
        if value.is_floating_point():
            torch.testing.assert_close(ours[key], value, rtol=1e-4, atol=1e-5, msg=key)
        else:
            assert torch.equal(ours[key], value), key
