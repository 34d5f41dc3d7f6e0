"""What the passes that rewrite one operator's calls in an exported graph share (grouped_attention.py,
int8_products.py): each call offered to the pass's rewrite, and the graph checked and recompiled once if any
changed."""
from __future__ import annotations

from typing import Callable

import torch
from torch.export import ExportedProgram


def rewrite_calls(program: ExportedProgram, target, rewrite: Callable[[torch.fx.Graph, torch.fx.Node], bool]) -> int:
    """`rewrite(graph, node)` for each call of `target` (True when it rewrote the node); the number rewritten."""
    graph = program.graph
    rewritten = 0
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is target and rewrite(graph, node):
            rewritten += 1
    if rewritten:
        graph.lint()
        program.graph_module.recompile()
    return rewritten
