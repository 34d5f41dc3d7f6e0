"""Many attributes as ONE string attribute, read back in C++ by `ms_ext::Attrs::unpack` (ms_ext/src/attr_table.cpp
describes the format).

MindSpore converts every attribute of a Custom primitive on every PyNative call, about a microsecond each
(measured: 1,600 attributes add 1.2 ms to a call; one 30,000-character string adds 15 µs). A program of a hundred
ATen calls (from_torch's fuse=True) carries over a thousand, so it sends them packed.
"""
from __future__ import annotations

from typing import Mapping

from .attr_kinds import BOOL, FLOAT, FLOAT_2D, INT, INT_2D, STR, is_int, kind_of


def _items(values) -> str:
    return ",".join(str(v) if is_int(v) else repr(float(v)) for v in values)


def _payload(kind: int, value) -> str:
    """The text of one attribute value of that kind (ms_ext/src/attr_table.cpp)."""
    if kind == BOOL:
        return "1" if value else "0"
    if kind == INT:
        return str(value)
    if kind == FLOAT:
        return repr(value)
    if kind == STR:
        return value
    if kind in (INT_2D, FLOAT_2D):
        return f"{len(value)};" + ";".join(_items(r) for r in value)
    return _items(value)


def pack(attrs: Mapping[str, object]) -> str:
    """The text ms_ext::Attrs::unpack reads: `attrs` exactly as they would be read one by one."""
    parts = []
    for name, value in attrs.items():
        if not name or ":" in name or "\n" in name:
            raise ValueError(f"attribute name {name!r} cannot be packed (empty, or holds ':' or a newline)")
        kind = kind_of(value)
        if kind is None:
            raise TypeError(f"cannot pack attribute value {value!r} (bool, int, float, str, or lists of numbers)")
        payload = _payload(kind, value)
        parts.append(f"{name}:{kind}:{len(payload.encode())}:{payload}\n")
    return "".join(parts)
