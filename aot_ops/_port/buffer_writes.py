"""Buffers a program updates where they live: a key/value cache written in place, not returned and assigned.

A graph that updates a buffer (a StaticCache's `index_copy_` at the positions given) is exported functional: the
new value is an output, which the cell assigns to the buffer's Parameter after the call. For a cache that is the
whole cache, every call: MindSpore allocates it as an output, the program copies it there, and an Assign (a copy
for bfloat16) writes it back. A program that nothing differentiates (an evaluation-only port: from_torch_lm,
from_pretrained, evaluation_only=True) writes the new value into the buffer's own memory instead, which it gets as
an input (zero-copy, as every input): the write node runs in place when that is exact (below), and otherwise the
program copies the value into the input after its last node (program.cpp, program_writes).

Why this is safe in MindSpore (docs/mindspore-notes.md, probed on 2.10 in GRAPH_MODE, PyNative and PyNative under
ms.jit): an aot operator's Parameter input is the Parameter's own memory, with no copy inserted, and a graph whose
only reader of that Parameter is the one program call has nothing to order. A differentiable program keeps the
Assign: its bprop reads the buffers as they were before the call (codegen.py's copies).

When the write node runs in place: its operator has an in-place twin (`index_copy` -> `index_copy_`) whose first
argument is the buffer, nothing else in the graph reads the buffer (no reader after the write can see the new
value, no view of it exists), the value is not also an output of the module, and it has the buffer's dtype and
shape (the twin writes no other).
"""
from __future__ import annotations

import dataclasses

import torch

from .._aten import schema as _schema
from .graph import Graph, Item, Operator


def in_place_twin(target: str) -> str | None:
    """"aten::index_copy.default" -> "aten::index_copy_.default": the overload of the same name and arguments that
    writes its first argument, if there is one."""
    qualified, dot, overload = target.partition(".")
    twin_name = f"{qualified}_{dot}{overload}"
    try:
        functional, twin = _schema.overload_for(target), _schema.overload_for(twin_name)
    except AttributeError:  # no such operator or overload
        return None
    if functional is None or twin is None:
        return None
    arguments = twin._schema.arguments
    if not arguments or arguments[0].alias_info is None or not arguments[0].alias_info.is_write:
        return None
    if [a.name for a in arguments] != [a.name for a in functional._schema.arguments]:
        return None
    return twin_name


def written_in_place(graph: Graph, writes: list[tuple[str, str]], values: dict) -> Graph:
    """`graph` with each write's node made its in-place twin where that is exact (module docstring). `writes`:
    (buffer placeholder, value name) pairs; `values`: value name -> its example (a tensor: dtype and shape)."""
    readers: dict[str, int] = {}
    for step in graph.steps:
        if isinstance(step, Operator):
            for name in step.inputs:
                readers[name] = readers.get(name, 0) + 1
        elif isinstance(step, Item):
            readers[step.of] = readers.get(step.of, 0) + 1
    written_values = [value for _, value in writes]
    producers = {step.name: step for step in graph.steps if isinstance(step, Operator)}
    twins: dict[str, str] = {}
    for placeholder, value in writes:
        step = producers.get(value)
        if step is None or step.num_outputs is not None or not step.inputs or step.inputs[0] != placeholder:
            continue
        twin = in_place_twin(step.target)
        before, after = values.get(placeholder), values.get(value)
        if (twin is None or readers.get(placeholder) != 1 or value in graph.outputs
                or written_values.count(value) != 1 or not isinstance(before, torch.Tensor)
                or not isinstance(after, torch.Tensor) or before.dtype != after.dtype
                or before.shape != after.shape):
            continue
        twins[step.name] = twin
    if not twins:
        return graph
    steps = [dataclasses.replace(s, target=twins[s.name]) if isinstance(s, Operator) and s.name in twins else s
             for s in graph.steps]
    return dataclasses.replace(graph, steps=steps)
