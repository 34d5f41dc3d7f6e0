"""Ported cells made once per test run and lent to every test that asks for the same port.

A port (torch.export, AOTAutograd, the generated cell) costs seconds and does not depend on MindSpore's mode nor
on the weights' values, so tests that port the same network with the same example shapes and options, in either
mode, share one cell. Before each loan the cell is reset to the module the test built: its weights and buffers
(`load_torch_state_dict`) and its training flag. A test thus sees exactly what a fresh port of its own module
would give, while the export runs once per worker. Tests whose subject is the port itself (its errors, weight
sharing with the module, memory, fresh processes) port on their own.
"""
from __future__ import annotations

import inspect
from typing import Any, Hashable

import torch

import aot_ops


def _shapes(args) -> tuple:
    """The example inputs' shapes and dtypes, which the port is specialised to."""
    flat, _ = torch.utils._pytree.tree_flatten(args)
    return tuple((tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else repr(t) for t in flat)


_DEFAULTS = {name: p.default for name, p in inspect.signature(aot_ops.from_torch).parameters.items()
             if p.kind is inspect.Parameter.KEYWORD_ONLY}


def _dtypes(module: torch.nn.Module) -> tuple:
    return tuple(sorted({str(t.dtype) for t in module.state_dict().values()}))


class SharedPorts:
    def __init__(self):
        self._cells: dict[Hashable, Any] = {}

    def port(self, name: Hashable, module: torch.nn.Module, args=(), kwargs=None, **options):
        """`aot_ops.from_torch(module, args, kwargs, **options)`, or the cell an earlier call made for the same
        `name` (the network: its class and constructor arguments), example shapes and options, reset to `module`'s
        state and training mode."""
        assert not options.get("share_weights"), "a cell sharing its module's memory cannot be lent to another"
        options = {k: v for k, v in options.items() if _DEFAULTS.get(k, inspect.Parameter.empty) != v}
        key = (name, type(module).__qualname__, module.training, _dtypes(module), _shapes((args, kwargs)),
               tuple(sorted(options.items())))
        if key not in self._cells:
            cell = aot_ops.from_torch(module, args, kwargs, **options)
            self._cells[key] = (cell, cell.training)
            return cell
        cell, training = self._cells[key]
        cell.load_torch_state_dict(module.state_dict())
        cell.set_train(training)  # as a fresh port of the module starts
        return cell
