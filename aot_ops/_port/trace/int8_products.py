"""An int8 weight-only linear layer as ATen's int8 kernel.

torchao's int8 weight-only weight (Int8WeightOnlyConfig) computes its product on the CPU as `mm(x, t(q).to(D)) *
scale`: the whole int8 matrix widened to the activations' dtype D at every call, then an ordinary product, then the
rows scaled. Decoding is bound by reading the weights, and that path reads the int8 matrix, writes and reads it
again at twice its size: a decoding step of TinyLlama's shape ran at 0.4-0.5x the bfloat16 model's speed, in torch
and ported alike. ATen's `_weight_int8pack_mm(x, q, scale)` reads the int8 matrix once, multiplies in float32 and
rounds once (a 1 x 2048 by 5632 x 2048 product, one thread: 0.73 ms, against 2.0 ms in bfloat16 and 7.3 ms widened).

The two round differently (torchao's rounds the product to D, then the scaled product again): by about one unit
in D's last place, so a bfloat16 model's greedy tokens may part from torch's at a near tie. Only the graphs of ports
that take no gradient are rewritten (from_torch_lm, evaluation_only): the kernel has no derivative, and a port that
can train evaluates as it trains (a LoRA on an int8 base gets torchao's exact gradients).
`aot_ops.testing.same_kernels_as_port` makes torch compute the same way, for comparisons bit for bit."""
from __future__ import annotations

import torch
from torch.export import ExportedProgram

from .rewrites import rewrite_calls

_aten = torch.ops.aten
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_TRANSPOSES = (_aten.t.default, _aten.transpose.int, _aten.permute.default)
_ERASABLE = (_aten.mm.default, _aten._to_copy.default, _aten.to.dtype, *_TRANSPOSES)


def int8_weight_products(program: ExportedProgram) -> int:
    """Rewrites each `mul(mm(x, t(q) cast), scale)` of an int8 matrix `q` as `_weight_int8pack_mm(x, q, scale)`;
    the number rewritten."""
    return rewrite_calls(program, _aten.mul.Tensor, _rewrite)


def _rewrite(graph: torch.fx.Graph, mul: torch.fx.Node) -> bool:
    found = _matched(mul)
    if found is None:
        return False
    x, q, scale = found
    with graph.inserting_before(mul):
        product = graph.call_function(_aten._weight_int8pack_mm.default, (x, q, scale))
    product.meta.update(mul.meta)
    mul.replace_all_uses_with(product)
    # the product, the widened matrix and its transpose, unless something else reads them (a metadata assert)
    dead = [mul]
    while dead:
        node = dead.pop()
        inputs = [a for a in node.all_input_nodes if a.op == "call_function"]
        graph.erase_node(node)
        dead.extend(a for a in inputs if not a.users and a.target in _ERASABLE)
    return True


def _matched(mul: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node] | None:
    """(x, q, scale) when `mul` is (x @ q.T cast to x's dtype) times a vector of one scale a row of q."""
    if len(mul.args) != 2 or mul.kwargs or mul.meta.get("val") is None:
        return None
    for product, scale in (mul.args, mul.args[::-1]):
        if not (isinstance(product, torch.fx.Node) and isinstance(scale, torch.fx.Node)):
            continue
        if product.target is not _aten.mm.default or len(product.users) != 1:
            continue
        x, widened = product.args
        q = _int8_matrix(widened)
        if q is None:
            continue
        x_value, q_value, scale_value = x.meta.get("val"), q.meta.get("val"), scale.meta.get("val")
        if x_value is None or scale_value is None:
            continue
        dtype = x_value.dtype
        if (dtype in _DTYPES and x_value.dim() == 2 and scale_value.dtype == dtype
                and tuple(scale_value.shape) == (q_value.shape[0],) and mul.meta["val"].dtype == dtype):
            return x, q, scale
    return None


def _int8_matrix(widened) -> torch.fx.Node | None:
    """q when `widened` is `t(q)` cast to another dtype (read by nothing else), of a 2-D int8 `q`."""
    if not isinstance(widened, torch.fx.Node) or len(widened.users) != 1:
        return None
    # `to.dtype` as exported (an evaluation graph made functional in place), `_to_copy` once decomposed
    if widened.target is _aten.to.dtype:
        if widened.kwargs or len(widened.args) != 2:
            return None
    elif widened.target is not _aten._to_copy.default or set(widened.kwargs) - {"dtype"}:
        return None
    transposed = widened.args[0]
    if not isinstance(transposed, torch.fx.Node) or transposed.target not in _TRANSPOSES:
        return None
    if transposed.target is _aten.transpose.int and sorted(a % 2 for a in transposed.args[1:]) != [0, 1]:
        return None
    if transposed.target is _aten.permute.default and list(transposed.args[1]) != [1, 0]:
        return None
    q = transposed.args[0]
    value = q.meta.get("val") if isinstance(q, torch.fx.Node) else None
    if value is None or value.dtype != torch.int8 or value.dim() != 2:
        return None
    return q
