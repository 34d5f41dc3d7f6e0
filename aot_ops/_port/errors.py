"""The error from_torch raises, and how it names a torch graph node."""
from __future__ import annotations

import re
from pathlib import Path

import torch

from .._core.torch_private import OpOverload, schema_of
from ..errors import Error


class PortError(Error, RuntimeError):
    """A torch module cannot be ported as it is; the message names the node and what to do."""


_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)


def raised_by_aot_ops(exc: BaseException) -> bool:
    """Whether the innermost Python frame of `exc`'s traceback is aot_ops' own code (a bug of ours, or a check of
    ours), as opposed to torch's, a library's or the user's: a fallback for what torch cannot do must not hide it."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return str(Path(tb.tb_frame.f_code.co_filename).resolve()).startswith(_PACKAGE_DIR + "/")


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')
_TORCH_DIR = str(Path(torch.__file__).resolve().parent)


def frames(node: torch.fx.Node) -> list[tuple[str, int, str]]:
    """(file, line, code) of the Python frames that made this node, outermost first."""
    trace = node.meta.get("stack_trace") or ""
    return [(f, int(line), code.strip()) for f, line, _fn, code in _FRAME.findall(trace)]


def source_line(node: torch.fx.Node, short: bool = False) -> str:
    """'/src/model.py:12: y = self.fc(x)': the innermost frame of the user's code (not torch's own modules), with
    the innermost frame inside torch when the operator was made there ('... -> functional.py:2910: ...').
    `short`: the file's name only."""
    found = frames(node)
    if not found:
        return ""
    user = [f for f in found if not f[0].startswith(_TORCH_DIR)]
    chosen = user[-1] if user else found[-1]
    text = f"{Path(chosen[0]).name if short else chosen[0]}:{chosen[1]}: {chosen[2]}"
    if found[-1] is not chosen:
        text += f" -> {Path(found[-1][0]).name}:{found[-1][1]}: {found[-1][2]}"
    return text


def module_of(node: torch.fx.Node) -> tuple[str, str]:
    """(path, class name) of the innermost module that made this node ('' for the root)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", ""
    path, kind = list(stack.values())[-1]
    kind = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    return path, kind.rsplit(".", 1)[-1]


def describe(node: torch.fx.Node) -> str:
    """"node 'linear_2' (aten::linear) in encoder.linear1 (Linear) at model.py:12: ..." for error messages."""
    target = node.target
    op = f"{schema_of(target).name}.{schema_of(target).overload_name}".rstrip(".") \
        if isinstance(target, OpOverload) else getattr(target, "__name__", str(target))
    text = f"node '{node.name}' ({op})"
    path, kind = module_of(node)
    if path:
        text += f" in {path} ({kind})"
    where = source_line(node)
    if where:
        text += f" at {where}"
    return text


# Where a node's output sizes depend on tensor values (data-dependent): the way such networks port
SPLIT_ADVICE = (". To evaluate such a network (a detector, a mask-selecting head), port it with "
                "aot_ops.from_torch_split(model): each graph between such operators becomes a cell, and torch runs "
                "the operators whose sizes depend on values")
