"""Fused programs kept across ports: a graph AOTAutograd already traced is not traced again.

Tracing an exported graph jointly with its backward (fused.fuse) is most of what a training port costs: 21 s of
a 36 s port of a 22-layer Llama-shaped model, where the two exports take 11 s. The programs it produces depend on
nothing but the exported graph and the port's options, so they are kept in the build cache
(<cache>/fused/<key>.pkl) under a key covering

- the exported graph: its code, every placeholder's shape (with its size symbols), dtype and strides, the graph
  signature (what each input and output is), the dynamic sizes' ranges, the values of the graph's constants, and
  which nodes a checkpoint region made (the code is the same with checkpointing or without);
- the options that change the programs: which parameters are trained, input gradients, the label in its names;
- what makes them: the torch version and AOTAutograd's settings, and the source of aot_ops itself (any change to
  the package makes new keys).

A graph is kept only when every operator it calls is torch's own (`aten`): a user's torch.library operator or a
ported autograd.Function (functions.py, whose operator names are numbered per process) may change between two
processes under the same name. Failed traces are not kept. `fuse="compile"` needs the traced torch modules as well
(compiled.py), which are not kept: those ports trace every time. AOT_OPS_PORT_CACHE=0 turns the cache off.
"""
from __future__ import annotations

import hashlib
import json
import logging
import operator

import torch
from torch.export import ExportedProgram

from ..._build import cache
from ..._core.torch_private import OpOverload
from ..read.graph import Graph
from ..trace.checkpoints import region_of
from . import kept

log = logging.getLogger(__name__)

FORMAT = 1  # the layout of a kept entry; raising it makes every older entry a miss
_PLAIN_TARGETS = {operator.getitem}


def fuse(program: ExportedProgram, graph: Graph, trainable: set[str], label: str, input_grads: bool,
         keep_sources: bool):
    """fused.fuse(program, graph, trainable, label, input_grads) for a training port, from the cache when the same
    graph was traced before. `keep_sources`: the caller compiles the programs (fuse="compile"): trace anyway."""
    from .fused import fuse as trace

    key = None if keep_sources or not kept.enabled() else _key(program, trainable, label, input_grads)
    if key is None:
        return trace(program, graph, trainable, label, input_grads)
    path = kept.entry("fused", key)
    found = kept.read(path)
    if found is not None:
        log.debug("%s: fused programs from the cache (%s)", label, path)
        return found
    fused = trace(program, graph, trainable, label, input_grads)
    kept.write(path, fused.to_keep())
    return fused


def _key(program: ExportedProgram, trainable: set[str], label: str, input_grads: bool) -> str | None:
    """The entry's key, or None when the graph must not be kept (it calls operators torch does not define)."""
    nodes = list(program.graph.nodes)
    for node in nodes:
        if node.op == "get_attr" or (node.op == "call_function" and not _torch_defined(node.target)):
            return None
    code = "\n".join(line for line in program.graph_module.code.splitlines() if not line.strip().startswith("#"))
    placeholders = []
    for node in nodes:
        if node.op == "placeholder":
            value = node.meta.get("val")
            if isinstance(value, torch.Tensor):
                placeholders.append((node.name, str(tuple(value.shape)), str(value.dtype), str(value.stride()),
                                     value.requires_grad))
            else:
                placeholders.append((node.name, repr(value)))
    checkpointed = [(node.name, region) for node in nodes if (region := region_of(node)) is not None]
    description = dict(
        format=FORMAT, code=code, placeholders=placeholders, checkpointed=checkpointed,
        signature=str(program.graph_signature),
        ranges=sorted((str(k), str(v)) for k, v in program.range_constraints.items()),
        trainable=sorted(trainable), input_grads=input_grads, label=label, torch=torch.__version__,
        functorch=kept.functorch_settings(), aot_ops=kept.package_digest())
    digest = hashlib.sha256(json.dumps(description, sort_keys=True, default=str).encode())
    for name, value in sorted(program.constants.items()):
        if not isinstance(value, torch.Tensor):
            return None  # a script object: its state is not in the key
        digest.update(name.encode() + b"\0" + str(value.dtype).encode() + str(tuple(value.shape)).encode())
        digest.update(value.detach().cpu().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())  # 0-dim too
    return digest.hexdigest()[:cache.KEY_LENGTH * 2]


def _torch_defined(target) -> bool:
    if target in _PLAIN_TARGETS:
        return True
    return isinstance(target, OpOverload) and target.namespace in kept.TORCH_NAMESPACES
