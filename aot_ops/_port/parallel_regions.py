"""The three collectives of tensor-parallel layers, as torch operators with the gradients Megatron-LM gives them.

torch's functional collectives have no autograd formula; tensor-parallel code pairs each with the gradient its
place in the network needs, for a loss every rank computes alike:
- `reduce` (the end of a row-parallel layer): the sum of the ranks' partial products; its gradient is the output's
  gradient as it is, on each rank;
- `copy` (the start of a column-parallel layer): the replicated input as it is; its gradient is the sum over the
  ranks of what each rank's slice of the layer sends back;
- `gather` (a column-parallel layer whose output the next step needs whole: the LM head's logits): the ranks'
  slices of the last dimension put together; its gradient is this rank's slice of the output's.
And one of sharded data parallel (sharded.py), for a loss each rank computes on its own part of the batch:
- `unshard` (a layer's flat parameter shard, gathered before the layer runs): the ranks' shards one after the other,
  in the compute dtype; its gradient is the output's gradient reduce-scattered and averaged over the ranks (the
  gradient of the whole batch's mean loss), in the shard's dtype.
Each is a torch.library operator of the `aot_ops_tp` namespace, so torch.export keeps it as one node, which the
port reads as a collective with that gradient (read/collectives.py, distributed.py). Run by torch itself (under
torchrun, a process group of torch's), each calls torch's functional collectives: the same module trains in torch.
"""
from __future__ import annotations

import torch

from .._core.torch_private import functional_collectives

NAMESPACE = "aot_ops_tp"


@torch.library.custom_op(f"{NAMESPACE}::reduce", mutates_args=())
def reduce(x: torch.Tensor, ranks: list[int]) -> torch.Tensor:
    return functional_collectives().all_reduce(x, "sum", ranks).wait()


@torch.library.custom_op(f"{NAMESPACE}::copy", mutates_args=())
def copy(x: torch.Tensor, ranks: list[int]) -> torch.Tensor:
    return x.clone()


@torch.library.custom_op(f"{NAMESPACE}::gather", mutates_args=())
def gather(x: torch.Tensor, ranks: list[int], rank: int) -> torch.Tensor:
    return functional_collectives().all_gather_tensor(x, x.dim() - 1, ranks).wait()


@torch.library.custom_op(f"{NAMESPACE}::unshard", mutates_args=())
def unshard(shard: torch.Tensor, ranks: list[int], dtype: torch.dtype) -> torch.Tensor:
    return functional_collectives().all_gather_tensor(shard.to(dtype), 0, ranks).wait()


@reduce.register_fake
def _(x, ranks):
    return torch.empty_like(x)


@copy.register_fake
def _(x, ranks):
    return torch.empty_like(x)


@gather.register_fake
def _(x, ranks, rank):
    return x.new_empty((*x.shape[:-1], x.shape[-1] * len(ranks)))


@unshard.register_fake
def _(shard, ranks, dtype):
    return shard.new_empty((shard.shape[0] * len(ranks),), dtype=dtype)


def _setup(ctx, inputs, output):
    ctx.ranks = inputs[1]
    ctx.rank = inputs[2] if len(inputs) > 2 else None


reduce.register_autograd(lambda ctx, grad: (grad, None), setup_context=_setup)
copy.register_autograd(lambda ctx, grad: (reduce(grad, ctx.ranks), None), setup_context=_setup)
gather.register_autograd(
    lambda ctx, grad: (grad.chunk(len(ctx.ranks), -1)[ctx.ranks.index(ctx.rank)].contiguous(), None, None),
    setup_context=_setup)


def _shard_gradient(ctx, grad):
    averaged = functional_collectives().reduce_scatter_tensor(grad, "avg", 0, ctx.ranks).wait()
    return averaged.to(ctx.shard_dtype), None, None


def _setup_unshard(ctx, inputs, output):
    ctx.ranks, ctx.shard_dtype = inputs[1], inputs[0].dtype


unshard.register_autograd(_shard_gradient, setup_context=_setup_unshard)
