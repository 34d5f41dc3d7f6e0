"""A record of MindSpore's graph compilations, for tests that check how often a graph is compiled.

Two executors compile: GRAPH_MODE Cells go through the cell graph executor, which answers (phase, True) when it
compiled and (phase, False) when it reused a graph; PyNative `ms.jit` graphs (a ported cell's default) go through
the jit executor, and a new one enters MindSpore's process-wide set of compiled phases (`ms_compile_cache`).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from mindspore.graph import api as graph_api


@dataclass(frozen=True)
class Compile:
    kind: str    # "graph" (a GRAPH_MODE Cell) or "jit" (a PyNative ms.jit graph)
    owner: str   # the compiled Cell's class name ("" for a jit graph)
    phase: str
    new: bool    # compiled now, not reused


class GraphCompiles:
    def __init__(self):
        self.calls: list[Compile] = []

    def install(self, monkeypatch) -> None:
        executor = type(graph_api._cell_graph_executor)
        cell_compile, jit_compile = executor.compile, graph_api._JitExecutor.compile
        calls = self.calls

        def recording_cell_compile(self, obj, *args, **kwargs):
            answer = cell_compile(self, obj, *args, **kwargs)
            phase, new = answer if isinstance(answer, tuple) else (answer, False)
            calls.append(Compile("graph", type(obj).__name__, str(phase), bool(new)))
            return answer

        def recording_jit_compile(self, *args, **kwargs):
            known = len(graph_api.ms_compile_cache)
            phase = jit_compile(self, *args, **kwargs)
            calls.append(Compile("jit", "", str(phase), len(graph_api.ms_compile_cache) > known))
            return phase

        monkeypatch.setattr(executor, "compile", recording_cell_compile)
        monkeypatch.setattr(graph_api._JitExecutor, "compile", recording_jit_compile)

    def new(self, since: int = 0) -> list[Compile]:
        """The compilations that made a new graph, from call number `since` on."""
        return [c for c in self.calls[since:] if c.new]

    def count(self) -> int:
        """How many compile calls so far (a mark for `new(since=...)`)."""
        return len(self.calls)

    @contextlib.contextmanager
    def counting(self):
        """Yields a function giving how many new graphs were compiled since the block began."""
        mark = self.count()
        yield lambda: len(self.new(since=mark))
