"""A checkpoint's port kept by what its model is built from: a later from_pretrained of the same model skips
torch.export and AOTAutograd, most of its time (a 22-layer Llama: 3.7 s of 3.8 s from a cold disk).

from_pretrained builds its model itself, from the folder's config.json, with a transformers class: no code of the
user's is in it, so the graph torch.export would trace depends only on
- the model: its class and the source file defining it, the transformers version, the configuration (every
  field; the attention implementation chosen), every parameter's and buffer's name, shape, dtype and trainability;
- the port: its options (from_pretrained's cell kind, max_length, batch_size, fuse, jit);
- what makes it: the versions of torch and AOTAutograd's settings, and aot_ops' own source (kept.package_digest).
The port's plan (what `port` makes before the cell: each mode's graph read and its fused programs) is kept under a
key over all of these (<cache>/plans/<key>.pkl, kept.py). Not kept: a model whose class is not transformers' own
(from_pretrained's `model_class` may be anyone's), `fuse="compile"` ports (Inductor needs the traced torch modules,
which do not pickle), and a plan whose graphs call an operator torch does not define (a ported autograd.Function's
operators are numbered per process). AOT_OPS_PORT_CACHE=0 turns it off (kept.enabled).
"""
from __future__ import annotations

import hashlib
import inspect
import json
import logging
from dataclasses import replace
from typing import Any, Callable, TypeVar

import torch

from .._build import cache
from .._core.transformers_private import attention_implementation
from .programs import kept
from .trace import tensor_subclasses

log = logging.getLogger(__name__)

FORMAT = 1  # the layout of a kept plan; raising it makes every older entry a miss
T = TypeVar("T")


def key(model: torch.nn.Module, options: dict[str, Any]) -> str | None:
    """The key of the port of `model` (built by from_pretrained from its configuration) with `options`; None when
    such a port must not be kept."""
    kind = type(model)
    if not kept.enabled() or not kind.__module__.startswith("transformers."):
        return None
    import transformers

    settings = model.config.to_dict()
    for where_it_came_from in ("_name_or_path", "transformers_version"):  # not the model: the folder, the writer
        settings.pop(where_it_came_from, None)
    # a quantized weight (a tensor subclass) by its class and inner tensors too: int8 and int4 weights of one
    # shape and dtype are different graphs
    state = [(name, tuple(t.shape), str(t.dtype), t.requires_grad, isinstance(t, torch.nn.Parameter),
              tensor_subclasses.structure(t))
             for name, t in [*model.named_parameters(remove_duplicate=False),
                             *model.named_buffers(remove_duplicate=False)]]
    description = dict(
        format=FORMAT, model=f"{kind.__module__}.{kind.__qualname__}", source=_source_digest(kind),
        transformers=transformers.__version__, config=settings, attention=attention_implementation(model.config),
        state=state, options=options, torch=torch.__version__, functorch=kept.functorch_settings(),
        aot_ops=kept.package_digest())
    text = json.dumps(description, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:cache.KEY_LENGTH * 2]


def read(plan_key: str):
    """The plan kept under `plan_key`, or None."""
    plan = kept.read(kept.entry("plans", plan_key))
    if plan is not None:
        log.debug("port plan %s from the cache", plan_key)
    return plan


def write(plan_key: str, plan) -> None:
    """Keeps `plan` (a _Plan of `port`) under `plan_key`, unless a graph of it calls an operator torch does not
    define. The exported programs are not kept: the cell is made from the graphs and fused programs."""
    for use in plan.uses.values():
        foreign = [op.target for op in use.graph.operators
                   if op.target.partition("::")[0] not in kept.TORCH_NAMESPACES]
        if foreign:
            log.debug("port plan %s not kept: it calls %s", plan_key, foreign[0])
            return
    kept.write(kept.entry("plans", plan_key),
               replace(plan, uses={mode: replace(use, program=None, fused=use.fused and use.fused.to_keep())
                                   for mode, use in plan.uses.items()}))


def remembered(plan_key: str | None, what: str, compute: Callable[[], T]) -> T:
    """compute(), a value the port derives from the model alone (from_torch_lm's cache shapes, from a call of the
    model on fake tensors), kept beside the plan of `plan_key` (None: computed every time)."""
    if plan_key is None:
        return compute()
    path = kept.entry("plans", f"{plan_key}.{what}")
    value = kept.read(path)
    if value is None:
        value = compute()
        kept.write(path, value)
    return value


def _source_digest(kind: type) -> str:
    try:
        with open(inspect.getsourcefile(kind), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except (TypeError, OSError):  # no source file: the version alone
        return ""
