"""torch's functional collectives in an exported graph, read as MindSpore communication operators.

A module written for `torch.distributed` calls `torch.distributed._functional_collectives` (Megatron-style tensor
parallel layers do); torch.export keeps those calls as `_c10d_functional` operators naming their process group by
a string, each followed by a `wait_tensor` (docs/distributed.md). The reader turns each into a Collective step, the
group resolved to its ranks while the module is traced (torch's process group, aot_ops.torch_process_group()), and
every `wait_tensor` into its input: MindSpore's communication operators return their result when it is ready.
The tensor-parallel regions (parallel_regions.py: `aot_ops_tp` operators, with their gradients) are read the same
way. The cell runs a Collective with MindSpore's operator on MindSpore's group of those ranks (distributed.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..._core.torch_private import collective_name, process_group_ranks
from ..errors import PortError, describe, module_of, source_line
from ..parallel_regions import NAMESPACE as REGIONS

# torch's reductions that MindSpore's AllReduce has ("avg": a sum divided by the group's size)
REDUCE_OPS = ("sum", "avg", "product", "min", "max")


@dataclass
class Collective:
    """`name = <kind>(input)` over the ranks of a torch process group."""

    name: str
    kind: str                  # "all_reduce", "reduce_scatter_tensor", "all_gather_into_tensor",
                               # "all_to_all_single", "broadcast"; "tp_reduce", "tp_copy", "tp_gather",
                               # "tp_unshard" (parallel_regions.py)
    inputs: list[str]          # the one tensor it is called with
    ranks: tuple[int, ...]     # the torch group's ranks, in its order
    reduce_op: str | None      # all_reduce, reduce_scatter_tensor: one of REDUCE_OPS
    src: int | None            # broadcast: the group rank whose tensor every rank receives; tp_gather: this rank
    module: str
    source: str
    dtype: str | None = None   # tp_unshard: the dtype it gathers to (torch's name: "bfloat16")


def is_wait(target) -> bool:
    return collective_name(target) == "wait_tensor"


def is_collective(target) -> bool:
    return collective_name(target) not in (None, "wait_tensor") or _region(target) is not None


def is_copy_region(target) -> bool:
    """A column-parallel layer's input region (parallel_regions.py): the identity forward, a sum backward."""
    return _region(target) == "copy"


def _region(target) -> str | None:
    """"reduce", "copy", "gather" or "unshard" for a region's operator (parallel_regions.py), else None."""
    if getattr(target, "namespace", None) != REGIONS:
        return None
    return str(target.name()).split("::")[-1].split(".")[0]


def read_collective(node: torch.fx.Node, input_name: str) -> Collective:
    """The Collective of a `_c10d_functional` node (not wait_tensor) or of a tensor-parallel region's
    (parallel_regions.py), or a PortError naming what cannot run."""
    args = node.args
    path, _kind = module_of(node)
    common = dict(name=node.name, inputs=[input_name], module=path, source=source_line(node, short=True))
    region = _region(node.target)
    if region == "unshard":  # a flat shard (sharded.py) and the dtype it is gathered to
        return Collective(kind="tp_unshard", ranks=tuple(int(r) for r in args[1]), reduce_op=None, src=None,
                          dtype=str(args[2]).removeprefix("torch."), **common)
    if region is not None:  # ranks given as a list of ints; gather also names this rank
        return Collective(kind=f"tp_{region}", ranks=tuple(int(r) for r in args[1]), reduce_op=None,
                          src=int(args[2]) if region == "gather" else None, **common)
    name = collective_name(node.target)
    if name == "all_reduce":
        reduce_op = str(args[1]).lower()
        if reduce_op not in REDUCE_OPS:
            raise PortError(f"{describe(node)}: all_reduce with '{args[1]}' has no MindSpore AllReduce; "
                            f"the reductions bridged are {', '.join(REDUCE_OPS)}")
        return Collective(kind=name, ranks=_ranks(node, args[2]), reduce_op=reduce_op, src=None, **common)
    if name == "all_gather_into_tensor":
        ranks = _ranks(node, args[2])
        if int(args[1]) != len(ranks):
            raise PortError(f"{describe(node)}: all_gather over {args[1]} ranks of a group of {len(ranks)}")
        return Collective(kind=name, ranks=ranks, reduce_op=None, src=None, **common)
    if name == "reduce_scatter_tensor":
        reduce_op = str(args[1]).lower()
        if reduce_op not in REDUCE_OPS:
            raise PortError(f"{describe(node)}: reduce_scatter_tensor with '{args[1]}' is not bridged; the "
                            f"reductions bridged are {', '.join(REDUCE_OPS)}")
        ranks = _ranks(node, args[3])
        if int(args[2]) != len(ranks) or (_rows(node) or 0) % len(ranks):
            raise PortError(f"{describe(node)}: reduce_scatter_tensor of {_rows(node)} rows over {args[2]} ranks "
                            f"of a group of {len(ranks)}: the rows must divide by the group's size")
        return Collective(kind=name, ranks=ranks, reduce_op=reduce_op, src=None, **common)
    if name == "all_to_all_single":
        ranks = _ranks(node, args[3])
        rows, size = _rows(node), len(ranks)
        equal = [rows // size] * size if rows is not None else None
        if rows is None or rows % size or any(s is not None and [int(n) for n in s] != equal for s in args[1:3]):
            raise PortError(f"{describe(node)}: all_to_all_single of {rows} rows with split sizes {args[1]} / "
                            f"{args[2]} over {size} ranks: only equal splits of a size known when traced are "
                            "bridged")
        return Collective(kind=name, ranks=ranks, reduce_op=None, src=None, **common)
    if name == "broadcast":
        return Collective(kind=name, ranks=_ranks(node, args[2]), reduce_op=None, src=int(args[1]), **common)
    raise PortError(f"{describe(node)}: the collective {name} is not bridged (all_reduce, reduce_scatter_tensor, "
                    "all_gather_into_tensor, all_to_all_single and broadcast are)")


def _rows(node: torch.fx.Node) -> int | None:
    """The first dimension of a collective's input (the one it splits), None where it is a symbol."""
    rows = node.args[0].meta["val"].shape[0]
    return rows if isinstance(rows, int) else None


def _ranks(node: torch.fx.Node, group_name) -> tuple[int, ...]:
    try:
        return tuple(process_group_ranks(str(group_name)))
    except Exception as exc:  # torch names an unknown group in a ValueError or RuntimeError
        raise PortError(f"{describe(node)}: its process group '{group_name}' is not known to torch.distributed "
                        f"here ({exc}); trace the module on a rank of the job (aot_ops.torch_process_group())") from exc
