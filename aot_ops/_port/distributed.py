"""torch's process groups on MindSpore's ranks: the collectives of a ported graph run by MindSpore's communication.

Each rank of a MindSpore job (msrun) ports the same module: torch.distributed there is initialised with torch's
fake backend at MindSpore's rank and size (torch_process_group), so that the module's functional collectives trace
with their groups; the ported cell runs each (read/collectives.py: Collective) with MindSpore's operator
(`ops.AllReduce`, `ops.AllGather`, `ops.ReduceScatter`, `ops.AlltoAll`, `ops.Broadcast`) on MindSpore's group of
the same ranks, with the gradient torch's autograd gives it. docs/distributed.md.
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


def split_over_job(size: bool | int, where: str, argument: str = "tensor_parallel") -> tuple[int, int]:
    """(this rank, ranks) for a model split over this job: `size` True for the job's ranks, or a number of ranks,
    which must be the job's (a split over fewer ranks than run would leave the rest waiting in its collectives)."""
    rank, ranks = torch_process_group()
    if size is not True and (isinstance(size, bool) or not isinstance(size, int) or size != ranks):
        raise PortError(f"{where}: {argument}={size!r}, but this MindSpore job has {ranks} ranks (msrun "
                        f"--worker_num): give {argument}=True or {ranks}, or launch {size} workers")
    return rank, ranks


def _mindspore_rank_and_size() -> tuple[int, int]:
    from mindspore.communication import GlobalComm, get_group_size, get_rank, init

    if not GlobalComm.INITED:
        init()
    return get_rank(), get_group_size()


def gathered_whole(state: dict, split: dict) -> dict:
    """A split model's state_dict (torch tensors) with each split tensor put together from every rank's share, in
    rank order along its dimension (cells.cell.PortedCell.torch_state_dict). Every rank calls it."""
    whole = type(state)(state)  # the same keys in the same order, the split ones replaced
    for key, (dim, _start, _stop, _size) in split.items():
        share = state[key]
        joined = _all_gathered(share.movedim(dim, 0))  # AllGather joins along dimension 0
        whole[key] = joined.to(share.dtype).movedim(0, dim).contiguous()
    return whole


def _all_gathered(tensor):
    """The ranks' torch tensors one after the other along dimension 0, in float32 (the CPU's AllGather has no
    bfloat16 kernel; exact: float32 holds every bfloat16 and float16 value)."""
    import torch
    from mindspore.communication import GlobalComm

    gather = ops.AllGather(GlobalComm.WORLD_COMM_GROUP)
    return torch.from_numpy(gather(ms.Tensor(tensor.contiguous().float().numpy())).asnumpy())


def gathered_flat_shards(state: dict, flats: dict) -> dict:
    """A sharded model's state_dict (torch tensors) with every flat shard gathered from the ranks and cut back into
    its parameters (sharded.unflattened). Every rank calls it."""
    from .sharded import unflattened

    return unflattened(state, flats, {key: _all_gathered(state[key]) for key in flats})


_REDUCE = {"sum": ops.ReduceOp.SUM, "avg": ops.ReduceOp.SUM, "product": ops.ReduceOp.PROD,
           "min": ops.ReduceOp.MIN, "max": ops.ReduceOp.MAX}
ON_CPU_BY_GATHERING = ("max", "min", "product")  # MindSpore 2.10's CPU AllReduce sums whatever it is given


def _world_group(kind: str, ranks, where: str) -> tuple[str, int, int]:
    """MindSpore's group for a collective traced over torch's `ranks`, its size and this rank's place in it: the
    job's world group, which must be those ranks in order."""
    from mindspore.communication import GlobalComm

    rank, size = _mindspore_rank_and_size()
    if tuple(ranks) != tuple(range(size)):
        raise PortError(f"{where}: {kind} over torch ranks {list(ranks)}, but this MindSpore job has {size} "
                        f"ranks; a ported collective runs over the whole job, its ranks in order "
                        "(sub-groups are not bridged)")
    return GlobalComm.WORLD_COMM_GROUP, size, rank


def collective_cell(kind: str, ranks: tuple, reduce_op: str | None = None, src: int | None = None,
                    dtype: str | None = None, where: str = "") -> ms.nn.Cell:
    """The cell running one collective of a ported graph (read/collectives.py's kinds): one of torch's functional
    collectives, or a region (parallel_regions.py), each with the gradient torch gives it."""
    cells = {"all_reduce": AllReduceCell, "reduce_scatter_tensor": ReduceScatterCell,
             "all_gather_into_tensor": AllGatherCell, "all_to_all_single": AllToAllCell,
             "broadcast": BroadcastCell, "tp_reduce": ReduceCell, "tp_copy": CopyCell, "tp_gather": GatherCell,
             "tp_unshard": UnshardCell}
    if kind not in cells:
        raise PortError(f"{where}: the collective {kind} is not bridged")
    if kind == "tp_unshard":
        return UnshardCell(kind, ranks, where, dtype=dtype)
    return cells[kind](kind, ranks, where, reduce_op=reduce_op, src=src)


class CollectiveCell(ms.nn.Cell):
    """A collective on the job's world group, and what its kinds are made of: MindSpore's AllReduce (sum),
    AllGather, ReduceScatter and AlltoAll. MindSpore 2.10's CPU backend has neither of the last two: there a
    reduce-scatter is the all-reduce's sum sliced, an all-to-all the all-gather's pieces picked (the bytes of a
    whole sum or gather, the right answer; docs/distributed.md), and on Ascend or GPU HCCL's and NCCL's own
    operators run. Subclasses give the forward (`forward`) and torch's gradient (`backward`, of the output's
    gradient alone: none of torch's formulas needs the input)."""

    def __init__(self, kind: str, ranks: tuple, where: str, reduce_op: str | None = None, src: int | None = None):
        super().__init__()
        self.group_name, self.size, self.rank = _world_group(kind, ranks, where)
        self.where, self.reduce_op, self.src = where, reduce_op, src
        self.on_cpu = ms.get_context("device_target") == "CPU"
        self.sum_op = ops.AllReduce(ops.ReduceOp.SUM, self.group_name)
        self.gather_op = ops.AllGather(self.group_name)
        if not self.on_cpu:
            self.scatter_op = ops.ReduceScatter(ops.ReduceOp.SUM, self.group_name)
            self.exchange_op = ops.AlltoAll(self.size, 0, 0, self.group_name)

    # MindSpore 2.10's CPU AllReduce, AllGather and Broadcast (and Reshape, around them) have no bfloat16 kernel:
    # there a collective runs in float32 and rounds its result once (a sum of two is then the narrow type's own
    # sum; of more, a closer one). float16 takes the same detour, though a probe (2 CPU workers, 2026-12-01) found
    # float16 AllReduce and AllGather kernels: the same values, the float32 bytes.
    def construct(self, x):
        if self.on_cpu and x.dtype in (ms.bfloat16, ms.float16):
            return self.forward(x.astype(ms.float32)).astype(x.dtype)
        return self.forward(x)

    def bprop(self, x, out, dout):
        if self.on_cpu and dout.dtype in (ms.bfloat16, ms.float16):
            return (self.backward(dout.astype(ms.float32)).astype(dout.dtype),)
        return (self.backward(dout),)

    def all_sum(self, x):
        return self.sum_op(x)

    def all_gather(self, x):
        """The ranks' tensors one after the other along dimension 0."""
        return self.gather_op(x)

    def own_block(self, x):
        """This rank's block of dimension 0 (of `size` equal blocks)."""
        rows = x.shape[0] // self.size
        return x[self.rank * rows:(self.rank + 1) * rows]

    def reduce_scatter_sum(self, x):
        """This rank's block of dimension 0 of the ranks' sum."""
        if self.on_cpu:
            return self.own_block(self.all_sum(x))
        return self.scatter_op(x)

    def all_to_all(self, x):
        """Block j of dimension 0 to rank j; from every rank, its block for this one, in rank order."""
        if self.on_cpu:
            rows = x.shape[0] // self.size
            everyone = self.all_gather(x).reshape((self.size, self.size, rows) + x.shape[1:])  # from, to, rows
            return everyone[:, self.rank].reshape(x.shape)
        return self.exchange_op(x)

    def reduced_over_ranks(self, x):
        """max / min / product over the ranks, from every rank's tensor (MindSpore's CPU AllReduce only sums)."""
        each = self.all_gather(x).reshape((self.size,) + x.shape)
        if self.reduce_op == "max":
            return each.max(0)
        if self.reduce_op == "min":
            return each.min(0)
        return each.prod(0)


class _ReducingCell(CollectiveCell):
    """A reduction over the ranks by `reduce_op`: sum and avg (a sum scaled) with AllReduce's sum, max / min /
    product gathered and reduced on the CPU (whose AllReduce only sums), HCCL's and NCCL's own elsewhere."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scale = 1.0 / self.size if self.reduce_op == "avg" else None
        self.by_gathering = self.reduce_op in ON_CPU_BY_GATHERING

    def scaled(self, x):
        if self.scale is not None:
            return x * self.scale
        return x


class AllReduceCell(_ReducingCell):
    """funcol.all_reduce. Gradient (torch's): the same all-reduce of the output's gradient, for sum and avg; none
    for the other reductions (torch raises, and so does the port)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.by_gathering and not self.on_cpu:
            self.reduce_other = ops.AllReduce(_REDUCE[self.reduce_op], self.group_name)
        self.no_gradient = (f"{self.where}: all_reduce backward only supports 'sum' and 'avg' reductions, got "
                            f"'{self.reduce_op}' (as in torch)")

    def forward(self, x):
        if self.by_gathering:
            if self.on_cpu:
                return self.reduced_over_ranks(x)
            return self.reduce_other(x)
        return self.scaled(self.all_sum(x))

    def backward(self, dout):
        if self.by_gathering:
            raise RuntimeError(self.no_gradient)  # compiled with the graph: a builtin exception, its text made before
        return self.scaled(self.all_sum(dout))


class ReduceScatterCell(_ReducingCell):
    """funcol.reduce_scatter_tensor (dimension 0; torch chunks and joins around it for another). Gradient
    (torch's): the output's gradients gathered, for sum only."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.by_gathering and not self.on_cpu:
            self.scatter_other = ops.ReduceScatter(_REDUCE[self.reduce_op], self.group_name)
        self.no_gradient = (f"{self.where}: reduce_scatter_tensor backward only supports 'sum' reduction, got "
                            f"'{self.reduce_op}' (as in torch)")

    def forward(self, x):
        if self.by_gathering:
            if self.on_cpu:
                return self.own_block(self.reduced_over_ranks(x))
            return self.scatter_other(x)
        return self.scaled(self.reduce_scatter_sum(x))

    def backward(self, dout):
        if self.reduce_op != "sum":
            raise RuntimeError(self.no_gradient)
        return self.all_gather(dout)


class AllGatherCell(CollectiveCell):
    """funcol.all_gather_tensor: the ranks' tensors along dimension 0. Gradient (torch's): the output's gradient
    reduce-scattered (summed over the ranks, this rank's block)."""

    def forward(self, x):
        return self.all_gather(x)

    def backward(self, dout):
        return self.reduce_scatter_sum(dout)


class AllToAllCell(CollectiveCell):
    """funcol.all_to_all_single with equal splits. Gradient (torch's): the output's gradient sent back, an
    all-to-all again."""

    def forward(self, x):
        return self.all_to_all(x)

    def backward(self, dout):
        return self.all_to_all(dout)


class BroadcastCell(CollectiveCell):
    """funcol.broadcast from the group rank `src`. Gradient: torch 2.14 registers none for broadcast and passes the
    output's gradient through as it is, on every rank; the port does the same."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.broadcast_op = ops.Broadcast(self.src, self.group_name)

    def forward(self, x):
        return self.broadcast_op((x,))[0]

    def backward(self, dout):
        return dout


class ReduceCell(CollectiveCell):
    """A row-parallel layer's end (parallel_regions.reduce): the ranks' partial products summed; the gradient
    passed back as it is (Megatron's: every rank computes the same loss from the summed output)."""

    def forward(self, x):
        return self.all_sum(x)

    def backward(self, dout):
        return dout


class CopyCell(CollectiveCell):
    """A column-parallel layer's start (parallel_regions.copy): the input as it is; the gradient summed over the
    ranks, each of which sent back its slice's part."""

    def forward(self, x):
        return x

    def backward(self, dout):
        return self.all_sum(dout)


class GatherCell(CollectiveCell):
    """A column-parallel output needed whole (parallel_regions.gather): the ranks' slices of the last dimension
    put together (MindSpore's AllGather stacks them along the first); the gradient, this rank's slice."""

    def forward(self, x):
        stacked = self.all_gather(x).reshape((self.size,) + x.shape)      # rank, ..., slice
        moved = ops.moveaxis(stacked, 0, -2)                               # ..., rank, slice
        return moved.reshape(x.shape[:-1] + (self.size * x.shape[-1],))

    def backward(self, dout):
        width = dout.shape[-1] // self.size
        return dout[..., self.rank * width:(self.rank + 1) * width]


class UnshardCell(CollectiveCell):
    """A unit's flat shard gathered (parallel_regions.unshard, sharded.py): the ranks' shards one after the other,
    in the parameters' dtype; the gradient reduce-scattered and averaged over the ranks, in the shard's dtype (the
    master weights'). Off the CPU the shard is cast before the all-gather and the gradient reduce-scattered in the
    parameters' dtype (half the bytes of float32 for bfloat16); on the CPU, whose collectives run in float32, the
    float32 shard is gathered and cast after, the gradient summed in float32: the same gathered values, a sum
    rounded once."""

    def __init__(self, kind: str, ranks: tuple, where: str, dtype: str):
        super().__init__(kind, ranks, where)
        self.dtype = getattr(ms, dtype)
        self.scale = 1.0 / self.size

    def construct(self, shard):
        if self.on_cpu:
            return self.all_gather(shard.astype(ms.float32)).astype(self.dtype)
        return self.all_gather(shard.astype(self.dtype))

    def bprop(self, shard, out, dout):
        return (self.shard_gradient(shard, dout),)

    def shard_gradient(self, shard, dout):
        """The gradient of `shard` from its gathered tensor's `dout` (GatheredPiece's backward calls it too)."""
        if self.on_cpu:
            return (self.reduce_scatter_sum(dout.astype(ms.float32)) * self.scale).astype(shard.dtype)
        return (self.reduce_scatter_sum(dout) * self.scale).astype(shard.dtype)


class GatheredPiece(ms.nn.Cell):
    """A piece of a sharded port (programs/pieces.py) with the all-gathers of the layer weights it alone takes:
    it gathers them, runs the piece's forward program and lets them go; its backward gathers them again for the
    piece's backward program, whose weight gradients it reduce-scatters (UnshardCell.shard_gradient). So MindSpore's
    autodiff keeps the shards, not the gathered weights: a layer's whole weights live while it runs. The generated
    cell (codegen.py) subclasses it with a construct and a bprop naming their inputs (GRAPH_MODE compiles both
    from source); `gather_<k>` is the UnshardCell of input k."""

    def __init__(self, piece, piece_bprop, gathers: dict):
        super().__init__()
        self.piece, self.piece_bprop = piece, piece_bprop
        for position, cell in gathers.items():
            setattr(self, f"gather_{position}", cell)
