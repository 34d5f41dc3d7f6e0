"""Port a PyTorch ResNet-18 to MindSpore in one call and train it there, side by side with torch.

    ./run.sh demo

aot_ops.from_torch exports the torch module with torch.export and turns it into a mindspore.nn.Cell whose every
node is a bridged ATen operator; parameters and BatchNorm buffers become MindSpore Parameters named after the
state_dict. The cell is trained with MindSpore's autodiff and optimizer (first in PyNative, then in GRAPH_MODE),
while torch trains a copy of the same network on the same batches: the losses are printed side by side. Then the
weights trained in MindSpore go back into the torch module, whose evaluation-mode predictions are compared with
the same module ported again.
"""
import copy
import sys
import time
from pathlib import Path

import mindspore as ms
import torch
import torch.nn.functional as F
from mindspore import nn as msnn

import aot_ops
from aot_ops._core.convert import to_ms, to_torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from resnet import resnet18  # noqa: E402  (torchvision's layout, written with torch.nn)

STEPS_PER_MODE = 3
BATCH, CLASSES = 8, 10


class WithLoss(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, images, labels):
        return F.cross_entropy(self.model(images), labels)


def main():
    ms.set_device("CPU")
    torch.manual_seed(0)
    model = resnet18(num_classes=CLASSES)
    reference = copy.deepcopy(model)  # torch trains this copy
    gen = torch.Generator().manual_seed(1)
    batches = [(torch.randn(BATCH, 3, 64, 64, generator=gen), torch.randint(0, CLASSES, (BATCH,), generator=gen))
               for _ in range(2 * STEPS_PER_MODE)]

    parameters = sum(p.numel() for p in model.parameters())
    print(f"== ResNet-18 in PyTorch ({parameters / 1e6:.1f}M parameters), ported with aot_ops.from_torch")
    start = time.perf_counter()
    cell = aot_ops.from_torch(WithLoss(model), batches[0])
    summary = repr(cell).splitlines()
    print(f"   ported in {time.perf_counter() - start:.1f} s: {summary[1].strip()}")
    print(f"   generated source (one aten.op per torch node): {cell.source_file}")

    print(f"\n== Training: SGD, batch {BATCH} of 3x64x64 images, the same batches in both frameworks")
    optimizer = msnn.SGD(cell.trainable_params(), learning_rate=0.01)
    torch_optimizer = torch.optim.SGD(reference.parameters(), lr=0.01)
    torch_loss_fn = WithLoss(reference)
    print(f"   {'step':>4}  {'MindSpore mode':<14} {'MindSpore loss':>14} {'torch loss':>11} {'|difference|':>12}")
    worst = 0.0
    for k, (images, labels) in enumerate(batches):
        mode = ms.PYNATIVE_MODE if k < STEPS_PER_MODE else ms.GRAPH_MODE
        ms.set_context(mode=mode)
        step = ms.value_and_grad(cell, None, optimizer.parameters)
        loss, grads = step(to_ms(images), to_ms(labels))
        optimizer(grads)
        torch_optimizer.zero_grad()
        expected = torch_loss_fn(images, labels)
        expected.backward()
        torch_optimizer.step()
        ours, theirs = float(loss.asnumpy()), expected.item()
        worst = max(worst, abs(ours - theirs) / abs(theirs))
        name = "PyNative" if mode == ms.PYNATIVE_MODE else "GRAPH_MODE"
        print(f"   {k + 1:>4}  {name:<14} {ours:>14.6f} {theirs:>11.6f} {abs(ours - theirs):>12.2e}")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    # Training a ResNet at batch 8 amplifies rounding: torch against itself, with 1 and then 2 threads, ends these
    # six steps 2e-3 apart (9e-4 relative) on some CPUs; MindSpore's SGD rounds its update differently from torch's.
    assert worst < 1e-2, f"losses differ by {worst:.2e} (relative)"
    print(f"   largest relative difference: {worst:.1e}")


    print("\n== Weights back to torch: WithLoss(model).load_state_dict(cell.torch_state_dict())")
    WithLoss(model).load_state_dict(cell.torch_state_dict())  # parameters and BatchNorm running statistics
    model.eval()
    print("   the torch model now holds the weights trained in MindSpore")

    print("\n== Evaluation mode: that model in torch, and ported again (a cell of the classifier alone)")
    classifier = aot_ops.from_torch(model, (batches[0][0],))
    images = batches[-1][0]
    logits = to_torch(classifier(to_ms(images)))
    expected = model(images).detach()
    print(f"   predicted classes  MindSpore {logits.argmax(1).tolist()}\n"
          f"                      torch     {expected.argmax(1).tolist()}")
    print(f"   logits, largest |difference|: {(logits - expected).abs().max().item():.1e}")
    assert torch.allclose(logits, expected, rtol=1e-4, atol=1e-4)


if __name__ == "__main__":
    main()
