"""Activation checkpointing as the user's module asks for it: `torch.utils.checkpoint` regions marked in the
exported graph, so that the backward recomputes them instead of keeping what they compute.

torch.export drops checkpointing: a non-strict export inlines `checkpoint(fn, ...)` as `fn`'s operators with
nothing saying they were checkpointed (and strict export captures `tag_activation_checkpoint`, then fails). So
while aot_ops exports, the two ways into a checkpoint (`use_reentrant=False`: torch's generator around the call;
`use_reentrant=True`: `CheckpointFunction.apply`) call the function plainly inside `torch.fx.traceback.annotate`,
which puts the region's number in the meta of every node the call makes (`node.meta["custom"]`). Tracing the
module this way computes what torch's checkpoint computes (a checkpoint changes what is kept, not the values).

AOTAutograd's tracer copies a node's "custom" meta to the joint graph (forward and backward nodes alike); the
partition (`recompute_marked`) then tags the marked forward nodes as torch tags its own checkpointed regions
(`CheckpointPolicy.PREFER_RECOMPUTE` and the region as `ac_graph_id`), and torch's partitioner saves each region's
inputs and recomputes the rest in the backward. What is recomputed is an operator of the backward program, run
again (tests/test_checkpointing.py counts them).

The two replacements are module globals of torch.utils.checkpoint (_core/torch_private.py: checkpoint_entries),
swapped while any thread exports through aot_ops (`WhileUsed`); a checkpoint called by a thread that is not
exporting here runs torch's own code.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

import torch
from torch.utils.checkpoint import CheckpointPolicy

from ..._core.torch_private import checkpoint_entries, set_checkpoint_entries
from ..._core.while_used import WhileUsed

MARK = "aot_ops_checkpoint"  # the key of a region's number in node.meta["custom"]

_exporting = threading.local()  # .regions: the region counter of this thread's export, absent outside one


def _next_region() -> int:
    _exporting.regions += 1
    return _exporting.regions


def _in_our_export() -> bool:
    return getattr(_exporting, "regions", None) is not None


class _MarkedCheckpointFunction:
    """Stands for torch's CheckpointFunction (use_reentrant=True): `apply(function, preserve_rng_state, *args)`."""

    def __init__(self, torch_function):
        self._torch = torch_function

    def apply(self, function, preserve_rng_state, *args):
        if not _in_our_export():
            return self._torch.apply(function, preserve_rng_state, *args)
        with torch.fx.traceback.annotate({MARK: _next_region()}):
            return function(*args)

    def __getattr__(self, name):  # torch's other attributes (torch itself calls only `apply`: checkpoint.py)
        return getattr(self._torch, name)


def _install() -> tuple[Any, Callable]:
    before = checkpoint_entries()
    torch_function, torch_generator = before

    def marked_generator(function, args, kwargs, **options) -> Iterator[None]:
        """torch's generator (use_reentrant=False) yields once before the checkpointed call and once after it."""
        if not _in_our_export():
            yield from torch_generator(function, args, kwargs, **options)
            return
        with torch.fx.traceback.annotate({MARK: _next_region()}):
            yield

    set_checkpoint_entries((_MarkedCheckpointFunction(torch_function), marked_generator))
    return before


def _remove(before: tuple[Any, Callable]) -> None:
    set_checkpoint_entries(before)


_marking = WhileUsed(_install, _remove)


class Marked:
    """How many checkpoint regions the module entered while it was exported (`checkpoints_marked`)."""

    regions = 0


@contextlib.contextmanager
def checkpoints_marked() -> Iterator[Marked]:
    """Around torch.export: the checkpoint regions the module calls marked in the nodes' meta (node meta is kept
    only where torch.fx.traceback.preserve_node_meta is on); yields their count once the block ends."""
    marked = Marked()
    with _marking.used(), torch.fx.traceback.preserve_node_meta():
        _exporting.regions = 0
        try:
            yield marked
        finally:
            marked.regions = _exporting.regions
            del _exporting.regions


def mark_region(nodes: list[torch.fx.Node], region: int) -> None:
    """Marks `nodes` (calls of an exported graph) as made in checkpoint region `region`, as a checkpoint call in
    the module would have: the port's own checkpointing (from_torch(checkpoint="layers"))."""
    for node in nodes:
        custom = node.meta.get("custom")
        node.meta["custom"] = {**(custom if isinstance(custom, dict) else {}), MARK: region}


def region_of(node: torch.fx.Node) -> int | None:
    """The checkpoint region a node of an exported (or joint) graph was made in, or None."""
    custom = node.meta.get("custom")
    return custom.get(MARK) if isinstance(custom, dict) else None


def has_checkpoints(graph: torch.fx.Graph) -> bool:
    return any(region_of(node) is not None for node in graph.nodes)


def recompute_marked(joint: torch.fx.GraphModule) -> int:
    """Tags the forward nodes of the joint graph made in a checkpoint region to be recomputed in the backward, as
    torch tags a checkpointed region's; the number of nodes tagged. Backward nodes carry the meta of the forward
    node they differentiate: the forward's are told apart by AOTAutograd's own tag ("is_forward", put on every
    node traced before the backward)."""
    tagged = 0
    for node in joint.graph.nodes:
        region = region_of(node)
        if region is None or node.op != "call_function" or node.meta.get("partitioner_tag") != "is_forward":
            continue
        node.meta["recompute"] = CheckpointPolicy.PREFER_RECOMPUTE
        node.meta["ac_graph_id"] = region
        tagged += 1
    return tagged
