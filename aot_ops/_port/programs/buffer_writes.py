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

When the write nodes run in place: the value written into the buffer is made from the buffer's placeholder by a
chain of writes (one for a step; one per step for a block of decoding steps, kv_cache.py), each by an operator with
an in-place twin (`index_copy` -> `index_copy_`) whose first argument is the previous value of the chain, of the
buffer's dtype and shape (the twin writes no other); everything else that reads what a write overwrites, directly
or through a view (the operators whose schema marks their result as an alias), runs before that write in the
program's order (so no reader sees the new value early, and no view outlives the write), and none of those values
is an output of the module. The chain is made in place as a whole or not at all.
"""
from __future__ import annotations

import dataclasses

import torch

from ..._aten import schema as _schema
from ..._core.torch_private import schema_of
from ..read.graph import Graph, Item, Operator


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
    arguments = schema_of(twin).arguments
    if not arguments or arguments[0].alias_info is None or not arguments[0].alias_info.is_write:
        return None
    if [a.name for a in arguments] != [a.name for a in schema_of(functional).arguments]:
        return None
    return twin_name


def written_in_place(graph: Graph, writes: list[tuple[str, str]], values: dict) -> Graph:
    """`graph` with each write's nodes made their in-place twins where that is exact (module docstring). `writes`:
    (buffer placeholder, value name) pairs; `values`: value name -> its example (a tensor: dtype and shape).

    A buffer may be written several times (a block of decoding steps writes each layer's cache once a step): the
    chain of writes from the placeholder to the value written is made in place as a whole or not at all, each link
    only where everything else reading what it overwrites, directly or through a view, runs before it."""
    position = {step.name: k for k, step in enumerate(graph.steps)}
    producers = {step.name: step for step in graph.steps if isinstance(step, Operator)}
    readers: dict[str, list[Operator | Item]] = {}  # value name -> the steps reading it
    for step in graph.steps:
        for name in [step.of] if isinstance(step, Item) else step.inputs:
            readers.setdefault(name, []).append(step)
    outputs = set(graph.outputs)
    written_values = [value for _, value in writes]
    twins: dict[str, str] = {}
    for placeholder, value in writes:
        chain = _write_chain(placeholder, value, producers, values)
        if (chain is None or value in graph.outputs or written_values.count(value) != 1
                or not all(_nothing_reads_after(readers, position, outputs, step) for step in chain)):
            continue
        twins.update((step.name, in_place_twin(step.target)) for step in chain)
    if not twins:
        return graph
    steps = [dataclasses.replace(s, target=twins[s.name]) if isinstance(s, Operator) and s.name in twins else s
             for s in graph.steps]
    return dataclasses.replace(graph, steps=steps)


def _write_chain(placeholder: str, value: str, producers: dict[str, Operator], values: dict) -> list | None:
    """The write nodes leading from the buffer's placeholder to `value`, each writing (functionally) the previous
    one's result with a value of the buffer's dtype and shape, by an operator with an in-place twin; None if the
    value is not made so."""
    chain: list[Operator] = []
    before = values.get(placeholder)
    while value != placeholder:
        step = producers.get(value)
        after = values.get(value)
        if (step is None or step.num_outputs is not None or not step.inputs or in_place_twin(step.target) is None
                or not isinstance(before, torch.Tensor) or not isinstance(after, torch.Tensor)
                or before.dtype != after.dtype or before.shape != after.shape):
            return None
        chain.insert(0, step)
        value = step.inputs[0]
    return chain


def _nothing_reads_after(readers: dict[str, list], position: dict[str, int], outputs: set[str],
                         write: Operator) -> bool:
    """Whether every other reader of what `write` overwrites (its first input, and views of it, followed through
    the operators whose schema says they return an alias) runs before `write` in the program's order, and none of
    them is an output of the graph. `readers`: value name -> the steps reading it."""
    aliases, pending = set(), [write.inputs[0]]
    while pending:
        name = pending.pop()
        if name in aliases:
            continue
        aliases.add(name)
        for step in readers.get(name, ()):
            if step is write:
                continue
            if position[step.name] > position[write.name] or step.name in outputs:
                return False
            if isinstance(step, Item) or _returns_alias(step.target):
                pending.append(step.name)
    return not aliases.intersection(outputs)


def _returns_alias(target: str) -> bool:
    """Whether the operator's result may be a view of an input (its schema annotates the return with an alias)."""
    overload = _schema.overload_for(target)
    returns = schema_of(overload).returns if overload is not None else []
    return overload is None or any(r.alias_info is not None for r in returns)
