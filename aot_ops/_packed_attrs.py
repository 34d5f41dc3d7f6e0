"""Many attributes as ONE string attribute, read back in C++ by `ms_ext::Attrs::unpack` (ms_ext/src/attr_table.cpp
describes the format).

MindSpore converts every attribute of a Custom primitive on every PyNative call, about a microsecond each
(measured: 1,600 attributes add 1.2 ms to a call; one 30,000-character string adds 15 µs). A program of a hundred
ATen calls (from_torch's fuse=True) carries over a thousand, so it sends them packed.
"""
from __future__ import annotations

from typing import Mapping

# ms_ext_attr_kind (ms_ext/c_api.h)
BOOL, INT, FLOAT, STR, INT_LIST, FLOAT_LIST, INT_2D, FLOAT_2D = range(8)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return _is_int(value) or isinstance(value, float)


def _items(values) -> str:
    return ",".join(str(v) if _is_int(v) else repr(float(v)) for v in values)


def _entry(value) -> tuple[int, str]:
    """(kind, payload) of one attribute value."""
    if isinstance(value, bool):
        return BOOL, "1" if value else "0"
    if _is_int(value):
        return INT, str(value)
    if isinstance(value, float):
        return FLOAT, repr(value)
    if isinstance(value, str):
        return STR, value
    if isinstance(value, (list, tuple)):
        rows = list(value)
        if rows and all(isinstance(r, (list, tuple)) for r in rows):
            cells = [c for r in rows for c in r]
            if all(_is_number(c) for c in cells):
                kind = INT_2D if all(_is_int(c) for c in cells) else FLOAT_2D
                return kind, f"{len(rows)};" + ";".join(_items(r) for r in rows)
        elif all(_is_number(v) for v in rows):
            return (INT_LIST if all(_is_int(v) for v in rows) else FLOAT_LIST), _items(rows)
    raise TypeError(f"cannot pack attribute value {value!r} (bool, int, float, str, or lists of numbers)")


def pack(attrs: Mapping[str, object]) -> str:
    """The text ms_ext::Attrs::unpack reads: `attrs` exactly as they would be read one by one."""
    parts = []
    for name, value in attrs.items():
        if not name or ":" in name or "\n" in name:
            raise ValueError(f"attribute name {name!r} cannot be packed (empty, or holds ':' or a newline)")
        kind, payload = _entry(value)
        parts.append(f"{name}:{kind}:{len(payload.encode())}:{payload}\n")
    return "".join(parts)
