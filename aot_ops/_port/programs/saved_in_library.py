"""The tensors a forward program saves for its backward, kept in the bundled library instead of handed to MindSpore.

A fused forward program returns the module's outputs, then the activations its backward reads; the bprop passes
those back (`out[k]`). Under a PyNative gradient that cost 1.6-1.8x torch's peak (docs/performance.md, training
memory): as one ms.jit graph, MindSpore's forward and backward graphs each keep their memory from call to call
(ms.ms_memory_recycle() or the executor's clear_res() after each step brought it to torch's), and operator by
operator its autodiff holds the forward's outputs, saved activations included, beside what the next step
allocates. The keeping variant of the programs avoids both: the cell's call runs operator by operator, the forward
program keeps its saved tensors in the library (kernels/aten/generic/program.cpp: SavedSets) and returns a ticket in
their place, and the backward program takes the set of that ticket, freeing each tensor after its last reader, as
torch's autograd does. MindSpore then holds the ticket.

A ported cell runs the keeping variant where its backward is sure to follow and the memory matters: a PyNative
training call recording a gradient whose saved tensors and gradients reach MIN_KEPT_BYTES (PortedCell.__call__). GRAPH_MODE,
`aot_ops.train_step`, a call outside a gradient and small models run the programs as before: a graph frees the
saved outputs itself, a forward whose backward never runs must not leave a set behind, and a small step would pay
PyNative's per-operator queues for memory nobody misses.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from .program import Program, with_key
from .program_inputs import SavedFrom

# Output shapes that read no input's size: a backward's inputs from a set have no shape when MindSpore infers them.
_STATIC_SHAPES = re.compile(r"[0-9,|]*")


@dataclass(frozen=True)
class SavedInLibrary:
    """How a mode's programs are wired when their saved tensors stay in the library."""

    kept_from: int                            # forward outputs from this position on are kept (the ticket replaces them)
    store_inputs: tuple[tuple[int, int], ...]  # (backward input, position in the kept set)

    def from_set(self, backward_input: int) -> bool:
        return any(index == backward_input for index, _ in self.store_inputs)


def wiring(fused) -> SavedInLibrary | None:
    """The keeping wiring of a FusedGraph (fused.py), or None where there is nothing to keep or it cannot be kept:
    no backward, no saved tensor of the forward's own, or a backward whose output shapes read its inputs' sizes
    (a dynamic size: MindSpore infers the shapes before the set is known)."""
    if fused.forward is None or fused.backward is None:
        return None
    shown = set(fused.user_outputs) | {k for _, k in fused.buffer_updates} | set(fused.tangents)
    kept = sorted({s.index for s in fused.saved if s.source is SavedFrom.OUTPUT and s.index not in shown})
    count = fused.forward.num_outputs
    if not kept or kept != list(range(count - len(kept), count)) or len(kept) == count:
        return None  # the saved tensors follow the module's outputs (fused.forward_program); anything else: as is
    if not _STATIC_SHAPES.fullmatch(fused.backward.attrs.get("program_out_shapes", "-")):
        return None
    kept_from = count - len(kept)
    store = tuple((k, s.index - kept_from) for k, s in enumerate(fused.saved)
                  if s.source is SavedFrom.OUTPUT and s.index >= kept_from)
    return SavedInLibrary(kept_from, store)


# Below this many bytes at stake a step keeps its saved tensors as MindSpore outputs and runs as one ms.jit graph:
# the memory it would save is small, and a call operator by operator costs PyNative's queues (docs/performance.md).
MIN_KEPT_BYTES = 64 << 20


def worth_keeping(fused) -> bool:
    """Whether a PyNative gradient of this mode should keep its saved tensors in the library: it can (`wiring`),
    and the memory at stake is big enough to matter (MIN_KEPT_BYTES). At stake is what the cell's ms.jit graphs
    hold from call to call: the forward's saved outputs and the backward's own outputs, the gradients (a
    checkpointed model saves little but still has every weight's gradient). A size that depends on the inputs
    counts as big."""
    wired = wiring(fused)
    if wired is None:
        return False
    saved = _bytes(fused.forward.attrs["program_out_shapes"].split("|")[wired.kept_from:],
                   fused.forward.out_dtypes[wired.kept_from:])
    gradients = _bytes(fused.backward.attrs["program_out_shapes"].split("|"), fused.backward.out_dtypes)
    return saved is None or gradients is None or saved + gradients >= MIN_KEPT_BYTES


def _bytes(shapes: list[str], dtypes) -> int | None:
    """Bytes of tensors of these program_out_shapes entries and dtypes; None where a size reads an input's."""
    total = 0
    for shape, dtype in zip(shapes, dtypes):
        dims = shape.split(",") if shape else []
        if not all(d.isdigit() for d in dims):
            return None
        total += math.prod(int(d) for d in dims) * dtype.itemsize
    return total


def keeping_forward(forward: Program, wired: SavedInLibrary) -> Program:
    """The forward program returning its outputs before `kept_from`, then an int64 ticket of the kept set."""
    attrs = with_key({**forward.attrs, "program_kept_from": wired.kept_from})
    return Program(attrs, forward.num_inputs, [*forward.out_dtypes[:wired.kept_from], torch.int64])


def taking_backward(backward: Program, wired: SavedInLibrary) -> Program:
    """The backward program taking the ticket first, then its inputs that do not come from the set, in order."""
    attrs = with_key({**backward.attrs,
                      "program_store_inputs": [n for pair in wired.store_inputs for n in pair]})
    return Program(attrs, backward.num_inputs - len(wired.store_inputs) + 1, list(backward.out_dtypes))
