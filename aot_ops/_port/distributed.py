"""torch's process groups on MindSpore's ranks: the collectives of a ported graph run by MindSpore's communication.

Each rank of a MindSpore job (msrun) ports the same module: torch.distributed there is initialised with torch's
fake backend at MindSpore's rank and size (torch_process_group), so that the module's functional collectives trace
with their groups; the ported cell runs each (read/collectives.py: Collective) with MindSpore's operator
(`ops.AllReduce`, `ops.AllGather`, `ops.Broadcast`) on MindSpore's group of the same ranks. docs/distributed.md.
"""
from __future__ import annotations

import mindspore as ms
from mindspore import ops

from .errors import PortError


def torch_process_group() -> tuple[int, int]:
    """Initialises torch.distributed for tracing on this MindSpore rank (torch's fake backend: nothing is
    communicated by torch), with MindSpore's rank and group size; MindSpore's communication is initialised first if
    it is not yet. Returns (rank, size). Call it once on each rank before `from_torch` ports a module that calls
    `torch.distributed._functional_collectives`; a torch.distributed already initialised (torchrun) is left as is
    when it agrees with MindSpore's rank and size."""
    import torch.distributed as dist

    from .._core.torch_private import init_fake_process_group

    rank, size = _mindspore_rank_and_size()
    if dist.is_initialized():
        if (dist.get_rank(), dist.get_world_size()) != (rank, size):
            raise PortError(f"torch.distributed is rank {dist.get_rank()} of {dist.get_world_size()}, MindSpore's "
                            f"communication rank {rank} of {size}: a port needs both to agree")
        return rank, size
    init_fake_process_group(rank, size)
    return rank, size


def _mindspore_rank_and_size() -> tuple[int, int]:
    from mindspore.communication import GlobalComm, get_group_size, get_rank, init

    if not GlobalComm.INITED:
        init()
    return get_rank(), get_group_size()


_REDUCE = {"sum": ops.ReduceOp.SUM, "avg": ops.ReduceOp.SUM, "product": ops.ReduceOp.PROD,
           "min": ops.ReduceOp.MIN, "max": ops.ReduceOp.MAX}


def _world_group(kind: str, ranks, where: str) -> tuple[str, int]:
    """MindSpore's group for a collective traced over torch's `ranks`, and its size: the job's world group, which
    must be those ranks in order."""
    from mindspore.communication import GlobalComm

    _rank, size = _mindspore_rank_and_size()
    if tuple(ranks) != tuple(range(size)):
        raise PortError(f"{where}: {kind} over torch ranks {list(ranks)}, but this MindSpore job has {size} "
                        f"ranks; a ported collective runs over the whole job, its ranks in order "
                        "(sub-groups are not bridged)")
    return GlobalComm.WORLD_COMM_GROUP, size


def collective_cell(kind: str, ranks: tuple, reduce_op: str | None = None, src: int | None = None,
                    where: str = "") -> ms.nn.Cell:
    """The cell running one collective of a ported graph (read/collectives.py's kinds): torch's functional
    collectives (CollectiveCell) or a tensor-parallel region (parallel_regions.py: ReduceCell, CopyCell,
    GatherCell)."""
    regions = {"tp_reduce": ReduceCell, "tp_copy": CopyCell, "tp_gather": GatherCell}
    if kind in regions:
        return regions[kind](ranks, src, where)
    return CollectiveCell(kind, ranks, reduce_op, src, where)


class CollectiveCell(ms.nn.Cell):
    """One of torch's functional collectives: MindSpore's operator on the world group. Its gradient is refused with
    a named error: torch's functional collectives have no autograd formula either (tensor-parallel layers pair them
    with their gradients: parallel_regions.py)."""

    def __init__(self, kind: str, ranks: tuple, reduce_op: str | None = None, src: int | None = None,
                 where: str = ""):
        super().__init__()
        self.kind = kind
        self.no_gradient = (f"{where}: a gradient through torch's {kind} is not bridged (torch's functional "
                            "collectives have no autograd formula; tensor-parallel layers wrap them in autograd "
                            "Functions)")
        group, size = _world_group(kind, ranks, where)
        self.size = size
        self.scale = 1.0 / size if reduce_op == "avg" else None
        # MindSpore 2.10's CPU AllReduce sums whatever reduction it is given (docs/distributed.md): there, the other
        # reductions gather every rank's tensor and reduce it here, size times the bytes, but the right answer
        self.gathered_reduce = (reduce_op if kind == "all_reduce" and reduce_op in ("max", "min", "product")
                                and ms.get_context("device_target") == "CPU" else None)
        if self.gathered_reduce is not None:
            self.op = ops.AllGather(group)
        elif kind == "all_reduce":
            self.op = ops.AllReduce(_REDUCE[reduce_op], group)
        elif kind == "all_gather_into_tensor":
            self.op = ops.AllGather(group)
        elif kind == "broadcast":
            self.op = ops.Broadcast(src, group)
        else:
            raise PortError(f"{where}: the collective {kind} is not bridged")

    def construct(self, x):
        if self.kind == "broadcast":
            return self.op((x,))[0]
        if self.gathered_reduce is not None:
            each = self.op(x).reshape((self.size,) + x.shape)  # rank by rank
            if self.gathered_reduce == "max":
                return each.max(0)
            if self.gathered_reduce == "min":
                return each.min(0)
            return each.prod(0)
        out = self.op(x)
        if self.scale is not None:
            out = out * self.scale
        return out

    def bprop(self, x, out, dout):
        raise RuntimeError(self.no_gradient)  # compiled with the graph: a builtin exception, its text made before


class ReduceCell(ms.nn.Cell):
    """A row-parallel layer's end (parallel_regions.reduce): the ranks' partial products summed; the gradient
    passed back as it is."""

    def __init__(self, ranks: tuple, _rank: int | None = None, where: str = ""):
        super().__init__()
        group, _size = _world_group("reduce", ranks, where)
        self.op = ops.AllReduce(ops.ReduceOp.SUM, group)

    def construct(self, x):
        return self.op(x)

    def bprop(self, x, out, dout):
        return (dout,)


class CopyCell(ms.nn.Cell):
    """A column-parallel layer's start (parallel_regions.copy): the input as it is; the gradient summed over the
    ranks, each of which sent back its slice's part."""

    def __init__(self, ranks: tuple, _rank: int | None = None, where: str = ""):
        super().__init__()
        group, _size = _world_group("copy", ranks, where)
        self.op = ops.AllReduce(ops.ReduceOp.SUM, group)

    def construct(self, x):
        return x

    def bprop(self, x, out, dout):
        return (self.op(dout),)


class GatherCell(ms.nn.Cell):
    """A column-parallel output needed whole (parallel_regions.gather): the ranks' slices of the last dimension
    put together (MindSpore's AllGather stacks them along the first); the gradient, this rank's slice."""

    def __init__(self, ranks: tuple, rank: int, where: str = ""):
        super().__init__()
        group, self.size = _world_group("gather", ranks, where)
        self.position = list(ranks).index(rank)
        self.op = ops.AllGather(group)

    def construct(self, x):
        stacked = self.op(x).reshape((self.size,) + x.shape)              # rank, ..., slice
        moved = ops.moveaxis(stacked, 0, -2)                               # ..., rank, slice
        return moved.reshape(x.shape[:-1] + (self.size * x.shape[-1],))

    def bprop(self, x, out, dout):
        width = x.shape[-1]
        return (dout[..., self.position * width:(self.position + 1) * width],)
