"""Tiling functions written in Python, run in Python and compiled to C++.

A tiling function takes the input shapes and the launch settings and returns the kernel's scalar arguments:

    def mul_tiling(x, y, *, block_dim, ub_bytes):
        n = x.numel()
        ascendc.require(x.rank == y.rank, "x and y must have the same rank")
        ascendc.require(n % (256 * block_dim) == 0, "numel must be a multiple of 256 * block_dim")
        return {"totalLength": n}

`require(condition, reason)` refuses a shape: the ATen fallback runs instead, and `reason` is what
AOT_OPS_ASCENDC_LOG=1 prints. The function may also return "block_dim" to launch on fewer cores.

The same function runs twice. In Python (torch eager, tests), on concrete shapes: `Shape` is a tuple with `numel()`
and `rank`, and require raises `CannotTile`. And once, at `ascendc.load`, on symbolic shapes, to record the
arithmetic and the requirements as C++ (`compile_tiling`), because MindSpore launches kernels on its own threads,
where no Python may run, and a GRAPH_MODE graph with a dynamic batch sees each shape only at launch. So the
function must be straight-line integer arithmetic on sizes (+ - * // %, comparisons, `minimum`/`maximum`,
`where`, `x == y` between two inputs' shapes); an `if` on a size cannot be traced and says so.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..errors import Error


class CannotTile(Error):
    """The kernel cannot run on these shapes (the fallback runs); the message says why."""


class TilingError(Error, TypeError):
    """The tiling function is not one this module can run or compile (the message names the construct)."""


# ---- Python evaluation --------------------------------------------------------------------------------------------

class Shape(tuple):
    """A concrete input shape: a tuple of ints with the two helpers tiling functions use."""

    @property
    def rank(self) -> int:
        return len(self)

    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n


def require(condition, reason: str) -> None:
    """The kernel runs only if `condition` holds; otherwise the fallback runs, for `reason`."""
    if isinstance(condition, Expr):
        _trace().steps.append(("require", condition, reason))
        return
    if not condition:
        raise CannotTile(reason)


def minimum(a, b):
    return Expr.wrap(a)._min(b) if isinstance(a, Expr) or isinstance(b, Expr) else min(a, b)


def maximum(a, b):
    return Expr.wrap(a)._max(b) if isinstance(a, Expr) or isinstance(b, Expr) else max(a, b)


def where(condition, if_true, if_false):
    """`if_true if condition else if_false`, traceable."""
    if isinstance(condition, Expr):
        return Expr("where", (condition, Expr.wrap(if_true), Expr.wrap(if_false)))
    return if_true if condition else if_false


def evaluate(fn: Callable, shapes: Sequence[Sequence[int]], block_dim: int, ub_bytes: int,
             **attrs) -> dict[str, int | float]:
    """Runs the tiling function on concrete shapes (and the operator's attributes, by name): its scalar arguments
    (and "block_dim"), or CannotTile."""
    try:
        result = fn(*(Shape(s) for s in shapes), block_dim=block_dim, ub_bytes=ub_bytes, **attrs)
    except ZeroDivisionError:
        raise CannotTile("the tiling divides by zero for these shapes") from None
    if not isinstance(result, dict):
        raise TilingError(f"the tiling function returned {type(result).__name__}, not a dict of kernel arguments")
    return {name: value if isinstance(value, float) else int(value) for name, value in result.items()}


# ---- tracing ------------------------------------------------------------------------------------------------------

_BINARY = {"add": "+", "sub": "-", "mul": "*", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=",
           "and": "&&", "or": "||"}


class Expr:
    """A size computed from input shapes, recorded for C++."""

    def __init__(self, op: str, args: tuple):
        self.op, self.args = op, args

    @staticmethod
    def wrap(value) -> "Expr":
        if isinstance(value, Expr):
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise TilingError(f"tiling arithmetic is on integers; got {value!r} ({type(value).__name__})")
        return Expr("const", (int(value),))

    def _binary(self, op, other, swap=False):
        a, b = (Expr.wrap(other), self) if swap else (self, Expr.wrap(other))
        return Expr(op, (a, b))

    __add__ = lambda self, o: self._binary("add", o)
    __radd__ = lambda self, o: self._binary("add", o, True)
    __sub__ = lambda self, o: self._binary("sub", o)
    __rsub__ = lambda self, o: self._binary("sub", o, True)
    __mul__ = lambda self, o: self._binary("mul", o)
    __rmul__ = lambda self, o: self._binary("mul", o, True)
    __floordiv__ = lambda self, o: self._binary("floordiv", o)
    __rfloordiv__ = lambda self, o: self._binary("floordiv", o, True)
    __mod__ = lambda self, o: self._binary("mod", o)
    __rmod__ = lambda self, o: self._binary("mod", o, True)
    __lt__ = lambda self, o: self._binary("lt", o)
    __le__ = lambda self, o: self._binary("le", o)
    __gt__ = lambda self, o: self._binary("gt", o)
    __ge__ = lambda self, o: self._binary("ge", o)
    __eq__ = lambda self, o: self._binary("eq", o)
    __ne__ = lambda self, o: self._binary("ne", o)
    __and__ = lambda self, o: self._binary("and", o)
    __or__ = lambda self, o: self._binary("or", o)
    __hash__ = None

    def __neg__(self):
        return Expr("sub", (Expr.wrap(0), self))

    def _min(self, other):
        return Expr("min", (self, Expr.wrap(other)))

    def _max(self, other):
        return Expr("max", (self, Expr.wrap(other)))

    def __truediv__(self, other):
        raise TilingError("tiling arithmetic is on integers: use // instead of /")

    __rtruediv__ = __truediv__

    def __bool__(self):
        raise TilingError("a tiling function is compiled to C++, so it cannot branch on a size with `if`, `and`, "
                          "`or`, `not`, min() or max(): use ascendc.require(...), ascendc.where(...), "
                          "ascendc.minimum/maximum and & | instead")

    def __index__(self):
        raise TilingError("a size is only known at launch: it cannot be used as a Python int (range, indexing)")

    def cpp(self) -> str:
        op, args = self.op, self.args
        if op == "const":
            return f"int64_t{{{args[0]}}}"
        if op == "dim":
            return f"dim(s, {args[0]}, {args[1]})"
        if op == "rank":
            return f"static_cast<int64_t>(s[{args[0]}].size())"
        if op == "numel":
            return f"numel(s[{args[0]}])"
        if op == "same_shape":
            return f"(s[{args[0]}] == s[{args[1]}])"
        if op == "setting":
            return args[0]
        if op == "attr":
            return f"static_cast<int64_t>(attrs[{args[0]}])"
        if op in _BINARY:
            return f"({args[0].cpp()} {_BINARY[op]} {args[1].cpp()})"
        if op in ("floordiv", "mod", "min", "max"):
            return f"{op}({args[0].cpp()}, {args[1].cpp()})"
        if op == "where":
            return f"({args[0].cpp()} ? {args[1].cpp()} : {args[2].cpp()})"
        raise AssertionError(op)


class SymbolicShape:
    """An input's shape during tracing."""

    def __init__(self, index: int):
        self.index = index

    @property
    def rank(self) -> Expr:
        return Expr("rank", (self.index,))

    def numel(self) -> Expr:
        return Expr("numel", (self.index,))

    def __getitem__(self, k):
        if not isinstance(k, int):
            raise TilingError("index a shape with a constant int (shape[-1]); slices and sizes cannot be traced")
        # Reading dimension k needs it to exist: a shape of lower rank is refused there, as in Python (IndexError).
        need = k + 1 if k >= 0 else -k
        _trace().steps.append(("require", self.rank >= need, f"input {self.index} has fewer than {need} dimensions"))
        return Expr("dim", (self.index, k))

    def __eq__(self, other):
        """`x == y`: the two inputs have the same shape (a condition for require)."""
        if not isinstance(other, SymbolicShape):
            raise TilingError("a shape compares only with another input's shape (x == y)")
        return Expr("same_shape", (self.index, other.index))

    def __ne__(self, other):
        return (self == other) == 0

    __hash__ = None

    def __len__(self):
        raise TilingError("len(shape) is only known at launch: use shape.rank")

    def __iter__(self):
        raise TilingError("iterating over a shape cannot be traced (its rank is known at launch only): use "
                          "shape.numel(), shape[i] and shape.rank")


class FloatAttr:
    """A float attribute of the operator during tracing: passed through to a float scalar of the kernel as it is
    (the kernel computes with it; the tiling does integer arithmetic only)."""

    def __init__(self, index: int, name: str):
        self.index, self.name = index, name

    def cpp(self) -> str:
        return f"attrs[{self.index}]"

    def _refuse(self, *args):
        raise TilingError(f"float attribute {self.name!r} can only be returned as a float scalar of the kernel, "
                          "not computed with in the tiling")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _refuse
    __floordiv__ = __mod__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = _refuse


@dataclass
class _Trace:
    steps: list = field(default_factory=list)


_TRACES: list[_Trace] = []


def _trace() -> _Trace:
    if not _TRACES:
        raise TilingError("a symbolic size was used outside of compile_tiling")
    return _TRACES[-1]


@dataclass
class CompiledTiling:
    """A tiling function as C++: `body` fills `args` (in `names` order) and returns "" or the unmet reason."""
    names: list[str]
    body: str


def compile_tiling(fn: Callable, num_inputs: int, scalars: dict[str, str], kernel: str,
                   attrs: dict | None = None) -> CompiledTiling:
    """Traces `fn` on symbolic shapes and writes it as the body of a C++ function `std::string tile(const Shapes
    &s, int64_t block_dim, int64_t ub_bytes, const double *attrs, int64_t *args, double *fargs)`: integer scalars
    go to args[], float ones ("float32"/"float64") to fargs[], at their index in block_dim + `scalars`. The
    operator's attributes reach `fn` by name: ints and bools as sizes, floats to be passed through."""
    attrs = dict(attrs or {})
    scalar_names = list(scalars)
    params = inspect.signature(fn).parameters
    for needed in ("block_dim", "ub_bytes"):
        if needed not in params:
            raise TilingError(f"{kernel}: the tiling function must take keyword argument {needed!r} "
                              f"(def tiling(*shapes, block_dim, ub_bytes))")
    trace = _Trace()
    _TRACES.append(trace)
    try:
        traced_attrs = {name: FloatAttr(i, name) if isinstance(default, float) else Expr("attr", (i,))
                        for i, (name, default) in enumerate(attrs.items())}
        result = fn(*(SymbolicShape(i) for i in range(num_inputs)), block_dim=Expr("setting", ("block_dim",)),
                    ub_bytes=Expr("setting", ("ub_bytes",)), **traced_attrs)
    except TilingError as exc:
        raise TilingError(f"{kernel}: {exc}") from None
    finally:
        _TRACES.pop()
    if not isinstance(result, dict):
        raise TilingError(f"{kernel}: the tiling function returned {type(result).__name__}, not a dict of kernel "
                          "arguments")
    missing = [n for n in scalar_names if n not in result]
    extra = [n for n in result if n not in scalar_names and n != "block_dim"]
    if missing or extra:
        raise TilingError(f"{kernel}: the tiling function returns {sorted(result)}, the kernel takes "
                          f"{list(scalar_names)} (and optionally block_dim)")
    lines = []
    for _, condition, reason in trace.steps:
        lines.append(f"  if (!({condition.cpp()})) return {cpp_string(reason)};")
    names = ["block_dim", *scalar_names]
    values = {"block_dim": Expr("setting", ("block_dim",)), **result}
    for i, name in enumerate(names):
        value = values[name]
        if name != "block_dim" and scalars[name].startswith("float"):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                lines.append(f"  fargs[{i}] = {float(value)!r};  // {name}")
            elif isinstance(value, FloatAttr):
                lines.append(f"  fargs[{i}] = {value.cpp()};  // {name}")
            else:
                raise TilingError(f"{kernel}: float scalar {name!r} must be a float attribute or a constant")
        else:
            if isinstance(value, FloatAttr):
                raise TilingError(f"{kernel}: integer scalar {name!r} cannot take float attribute {value.name!r}")
            lines.append(f"  args[{i}] = {Expr.wrap(value).cpp()};  // {name}")
    return CompiledTiling(names, "\n".join(lines))


def cpp_string(text: str) -> str:
    """`text` as a C++ string literal."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
