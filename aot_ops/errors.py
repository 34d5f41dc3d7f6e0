"""The base of every exception class aot_ops defines: `except aot_ops.Error` catches any of them.

Each class also derives from the built-in its callers already expect (BuildError is a RuntimeError, InferenceError a
ValueError, TilingError a TypeError, UnsafeCacheError a PermissionError), so existing `except` clauses keep working.
Wrong arguments to a function are reported with the plain built-ins (TypeError, ValueError), as Python's own
functions do.
"""
from __future__ import annotations

import re


class Error(Exception):
    """An error aot_ops raises: a build, a port, a call of a kernel, a check, a cache."""


class NoKernelError(Error, TypeError):
    """MindSpore has no kernel for one of its own operators at the dtypes it was given (on the CPU: AddN, Argmax,
    Assign for bfloat16, ...). Raised by aot_ops' entry points (a ported cell's call, train_step, generate) in place
    of MindSpore's kernel-selection dump, naming the operator, the dtypes, where it happened and what to do; the
    dump stays attached as the cause. A TypeError, as MindSpore's own."""


_KERNEL_SELECT = re.compile(r"Select (\w+) operator\[(\w+)\] fail!.*?but get input\[([^\]]*)\]"
                            r"(?: and output\[([^\]]*)\])?", re.S)


def named_kernel_failure(exc: BaseException, where: str) -> NoKernelError | None:
    """A NoKernelError for `exc` when it is MindSpore's kernel-selection failure; None for any other error."""
    found = _KERNEL_SELECT.search(str(exc))
    if found is None:
        return None
    device, operator, inputs, outputs = found.groups()
    dtypes = ", ".join(inputs.split())
    result = f", output {', '.join(outputs.split())}" if outputs else ""
    return NoKernelError(
        f"{where}: MindSpore has no {device} kernel for its operator {operator} with input dtypes ({dtypes}){result}. "
        "It is one of MindSpore's own operators (the graph around bridged calls, its autodiff or an optimizer), not "
        "a bridged ATen call: cast its inputs to a dtype it has (float32) around it, or compute it inside the "
        "ported torch module, where torch runs it")
