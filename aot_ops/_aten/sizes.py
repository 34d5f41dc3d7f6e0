"""Sizes computed from input shapes when the operator runs: `aten.size(i, d)` and arithmetic on it.

    op = aten.op("aten::view", size=[aten.size(0, 0) * 16, 64])   # works for every batch size

A graph exported with a dynamic batch computes some sizes from the input shapes (torch.export writes them as
SymInts such as `16*s0`). Such a size travels to the kernel as a small postfix program over the dimensions of the
operator's own tensor inputs, which kernels/aten/generic/size_expr.h evaluates at every launch (and in the C++
shape inference, where MindSpore's unknown dimensions make the result unknown).
"""
from __future__ import annotations

from typing import Mapping, Sequence, Union

Size = Union[int, "SizeExpr"]

_BINARY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
           "//": lambda a, b: a // b, "%": lambda a, b: a % b, "max": max, "min": min}


class SizeExpr:
    """A size that depends on input shapes. Build it from `size(input, dim)`, integers, + - * // %, and
    `size_max`/`size_min`; pass it wherever an ATen argument takes an int or a list of ints."""

    __slots__ = ("tokens",)

    def __init__(self, tokens: Sequence[str]):
        self.tokens = tuple(tokens)

    def _binary(self, other: Size, op: str, reverse: bool = False) -> "SizeExpr":
        other_tokens = _tokens(other)
        if other_tokens is None:
            return NotImplemented
        left, right = (other_tokens, self.tokens) if reverse else (self.tokens, other_tokens)
        return SizeExpr(left + right + (op,))

    def __add__(self, other): return self._binary(other, "+")
    def __radd__(self, other): return self._binary(other, "+", True)
    def __sub__(self, other): return self._binary(other, "-")
    def __rsub__(self, other): return self._binary(other, "-", True)
    def __mul__(self, other): return self._binary(other, "*")
    def __rmul__(self, other): return self._binary(other, "*", True)
    def __floordiv__(self, other): return self._binary(other, "//")
    def __rfloordiv__(self, other): return self._binary(other, "//", True)
    def __mod__(self, other): return self._binary(other, "%")
    def __rmod__(self, other): return self._binary(other, "%", True)

    def __eq__(self, other):
        return isinstance(other, SizeExpr) and other.tokens == self.tokens

    def __hash__(self):
        return hash(self.tokens)

    def encode(self) -> str:
        """The text the kernel parses ("d0.0 16 *")."""
        return " ".join(self.tokens)

    def inputs(self) -> set[int]:
        """The tensor inputs whose shapes this size reads."""
        return {int(t[1:].split(".")[0]) for t in self.tokens if t.startswith("d")}

    def evaluate(self, shapes: Sequence[Sequence[int] | None]) -> int:
        """The value for these input shapes (Python's twin of the kernel's evaluation)."""
        stack: list[int] = []
        for token in self.tokens:
            if token in _BINARY:
                b = stack.pop()
                stack.append(_BINARY[token](stack.pop(), b))
            elif token.startswith("d"):
                i, d = (int(part) for part in token[1:].split("."))
                stack.append(int(shapes[i][d]))
            else:
                stack.append(int(token))
        return stack[0]

    def __repr__(self) -> str:
        stack: list[tuple[str, bool]] = []  # (text, is a bare binary expression)
        for token in self.tokens:
            if token in ("max", "min"):
                (b, _), (a, _) = stack.pop(), stack.pop()
                stack.append((f"aten.size_{token}({a}, {b})", False))
            elif token in _BINARY:
                (b, b_bare), (a, a_bare) = stack.pop(), stack.pop()
                a, b = (f"({a})" if a_bare else a), (f"({b})" if b_bare else b)
                stack.append((f"{a} {token} {b}", True))
            elif token.startswith("d"):
                i, d = token[1:].split(".")
                stack.append((f"aten.size({i}, {d})", False))
            else:
                stack.append((token, False))
        return stack[0][0]


def _tokens(value) -> tuple[str, ...] | None:
    if isinstance(value, SizeExpr):
        return value.tokens
    if isinstance(value, int) and not isinstance(value, bool):
        return (str(value),)
    return None


def size(input: int, dim: int) -> SizeExpr:
    """Dimension `dim` of the operator's tensor input `input` (both counted from 0), known when it runs."""
    if input < 0 or dim < 0:
        raise ValueError(f"aten.size({input}, {dim}): input and dimension are counted from 0")
    return SizeExpr((f"d{int(input)}.{int(dim)}",))


def size_max(a: Size, b: Size) -> Size:
    return _combine(a, b, "max")


def size_min(a: Size, b: Size) -> Size:
    return _combine(a, b, "min")


def _combine(a: Size, b: Size, op: str) -> Size:
    if isinstance(a, int) and isinstance(b, int):
        return _BINARY[op](a, b)
    return SizeExpr(_tokens(a) + _tokens(b) + (op,))


def is_symbolic(value) -> bool:
    """Whether a value (an int, a size expression, or a list of them) depends on input shapes."""
    if isinstance(value, (list, tuple)):
        return any(isinstance(v, SizeExpr) for v in value)
    return isinstance(value, SizeExpr)


def evaluate(value, shapes: Sequence[Sequence[int] | None]):
    """`value` with every size expression replaced by its value for these input shapes."""
    if isinstance(value, SizeExpr):
        return value.evaluate(shapes)
    if isinstance(value, (list, tuple)):
        return [evaluate(v, shapes) for v in value]
    return value


def encode_shapes(shapes: Sequence[Sequence[Size]]) -> str:
    """Output shapes for the kernel's C++ shape inference: outputs separated by '|', dimensions by ','."""
    return "|".join(",".join(_as_expr(d).encode() for d in shape) for shape in shapes)


def _as_expr(value: Size) -> SizeExpr:
    return value if isinstance(value, SizeExpr) else SizeExpr(_tokens(value))


def from_sympy(expr, bindings: Mapping[object, SizeExpr]) -> Size:
    """A torch symbolic size (a sympy expression over symbols such as s0) as a size expression, with each symbol
    bound to an input dimension. Raises ValueError for what the kernel cannot evaluate."""
    import sympy

    if isinstance(expr, (int, sympy.Integer)):
        return int(expr)
    if isinstance(expr, sympy.Symbol):
        try:
            return bindings[expr]
        except KeyError:
            raise ValueError(f"the size {expr} is not a dimension of any input") from None
    name = type(expr).__name__
    args = [from_sympy(a, bindings) for a in expr.args]
    if name == "Add":
        return _fold(args, "+")
    if name == "Mul":
        return _fold(args, "*")
    if name in ("FloorDiv", "CleanDiv", "IntTrueDiv") and len(args) == 2:
        return _apply(args[0], args[1], "//")
    if name in ("Mod", "PythonMod") and len(args) == 2:
        return _apply(args[0], args[1], "%")
    if name == "Max":
        return _fold(args, "max")
    if name == "Min":
        return _fold(args, "min")
    if name == "Pow" and len(args) == 2 and isinstance(args[1], int) and args[1] >= 0:
        return _fold([args[0]] * args[1], "*") if args[1] else 1
    raise ValueError(f"the size {expr} uses {name}, which cannot be evaluated in the kernel")


def _apply(a: Size, b: Size, op: str) -> Size:
    if isinstance(a, int) and isinstance(b, int):
        return _BINARY[op](a, b)
    return SizeExpr(_tokens(a) + _tokens(b) + (op,))


def _fold(values: list[Size], op: str) -> Size:
    result = values[0]
    for v in values[1:]:
        result = _apply(result, v, op)
    return result
