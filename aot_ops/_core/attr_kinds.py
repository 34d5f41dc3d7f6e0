"""ms_ext's eight attribute kinds (ms_ext_attr_kind, ms_ext/c_api.h) seen from Python: their names, which Python
values a kernel declaring each accepts (signature.py checks users' attributes with it), and the kind a value is sent
as (packed_attrs.py writes it into packed tables)."""
from __future__ import annotations

BOOL, INT, FLOAT, STR, INT_LIST, FLOAT_LIST, INT_2D, FLOAT_2D = range(8)


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return is_int(value) or isinstance(value, float)


def _is_list_of(value, item) -> bool:
    return isinstance(value, (list, tuple)) and all(item(x) for x in value)


# kind: its name in messages, and the Python values a kernel declaring it accepts (ints pass for floats).
ATTR_KINDS = {
    BOOL: ("bool", lambda v: isinstance(v, bool)),
    INT: ("int", is_int),
    FLOAT: ("float", is_number),
    STR: ("str", lambda v: isinstance(v, str)),
    INT_LIST: ("list of int", lambda v: _is_list_of(v, is_int)),
    FLOAT_LIST: ("list of float", lambda v: _is_list_of(v, is_number)),
    INT_2D: ("list of lists of int", lambda v: _is_list_of(v, lambda row: _is_list_of(row, is_int))),
    FLOAT_2D: ("list of lists of float", lambda v: _is_list_of(v, lambda row: _is_list_of(row, is_number))),
}


def kind_of(value) -> int | None:
    """The most specific kind `value` travels as (an empty list as a list of int), None when it has none."""
    if isinstance(value, bool):
        return BOOL
    if is_int(value):
        return INT
    if isinstance(value, float):
        return FLOAT
    if isinstance(value, str):
        return STR
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(r, (list, tuple)) for r in value):
            cells = [c for r in value for c in r]
            if all(is_number(c) for c in cells):
                return INT_2D if all(is_int(c) for c in cells) else FLOAT_2D
        elif all(is_number(v) for v in value):
            return INT_LIST if all(is_int(v) for v in value) else FLOAT_LIST
    return None
