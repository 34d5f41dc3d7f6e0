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


class CollectiveCell(ms.nn.Cell):
    """One collective of a ported graph: MindSpore's operator on the world group, checked against the torch group
    it was traced with. Its gradient is refused with a named error: torch's functional collectives have no
    autograd formula either (tensor-parallel layers pair them in autograd Functions of their own)."""

    def __init__(self, kind: str, ranks: tuple, reduce_op: str | None = None, src: int | None = None,
                 where: str = ""):
        super().__init__()
        from mindspore.communication import GlobalComm

        self.kind = kind
        self.no_gradient = (f"{where}: a gradient through torch's {kind} is not bridged (torch's functional "
                            "collectives have no autograd formula; tensor-parallel layers wrap them in autograd "
                            "Functions)")
        rank, size = _mindspore_rank_and_size()
        if tuple(ranks) != tuple(range(size)):
            raise PortError(f"{where}: {kind} over torch ranks {list(ranks)}, but this MindSpore job has {size} "
                            f"ranks; a ported collective runs over the whole job, its ranks in order "
                            "(sub-groups are not bridged)")
        group = GlobalComm.WORLD_COMM_GROUP
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
