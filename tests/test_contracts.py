"""Tables kept in two languages, compared: what the C++ side declares is what the Python side sends and reads.

A drift in any of them would not fail to compile or import; it would send one argument kind as another, read an
attribute as the wrong kind, or call a C function with the wrong argument types."""
from __future__ import annotations

import ctypes
import re

import pytest

from aot_ops._core import attr_kinds as _attr_kinds
from aot_ops._native import opener as _clib
from aot_ops._aten.argtypes import ArgKind
from support import REPO

C_SOURCES = [*(REPO / "ms_ext").rglob("*.h"), *(REPO / "ms_ext").rglob("*.cpp"),
             *(REPO / "kernels").rglob("*.h"), *(REPO / "kernels").rglob("*.cpp")]


def enum_values(text: str, start: str) -> dict[str, int]:
    """NAME -> value of the enum whose declaration starts with `start`."""
    body = text[text.index(start):]
    body = body[body.index("{") + 1:body.index("}")]
    body = re.sub(r"//[^\n]*|/\*.*?\*/", "", body, flags=re.S)
    return {name: int(value) for name, value in re.findall(r"(\w+)\s*=\s*(\d+)", body)}


def upper_snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).upper()


def test_argument_kinds_are_the_same_in_python_and_cpp():
    cpp = enum_values((REPO / "kernels" / "aten" / "generic" / "aten_plan.h").read_text(), "enum class ArgKind")
    assert {upper_snake(name): value for name, value in cpp.items()} == {k.name: k.value for k in ArgKind}


def test_attribute_kinds_are_the_same_in_python_and_c():
    c = enum_values((REPO / "ms_ext" / "include" / "ms_ext" / "c_api.h").read_text(), "typedef enum {")
    python = {name: getattr(_attr_kinds, name) for name in
              ("BOOL", "INT", "FLOAT", "STR", "INT_LIST", "FLOAT_LIST", "INT_2D", "FLOAT_2D")}
    assert {name.removeprefix("MS_EXT_ATTR_"): value for name, value in c.items()} == python
    assert sorted(_attr_kinds.ATTR_KINDS) == sorted(python.values())


def test_the_attribute_kind_names_the_library_gives_are_those_python_uses():
    import aot_ops

    lib = ctypes.CDLL(str(aot_ops.library_path()))
    lib.ms_ext_attr_kind_name.restype = ctypes.c_char_p
    names = {kind: lib.ms_ext_attr_kind_name(kind).decode() for kind in _attr_kinds.ATTR_KINDS}
    for kind, (python_name, _accepts) in _attr_kinds.ATTR_KINDS.items():
        # C: "int list", "float 2d list"; Python: "list of int", "list of lists of float": the same base type
        assert python_name.split()[-1] in names[kind], (kind, python_name, names[kind])


def declaration(name: str) -> tuple[str, list[str]]:
    """(return type, parameter types) of the exported C function `name`, from the sources."""
    pattern = re.compile(r"MS_EXT_EXPORT\s+([\w\s\*]+?)\b" + name + r"\s*\(([^)]*)\)")
    for path in C_SOURCES:
        found = pattern.search(path.read_text())
        if found:
            params = [p.strip() for p in found.group(2).split(",") if p.strip() and p.strip() != "void"]
            # drop the parameter's name: the last identifier after the type
            types = [re.sub(r"\s*\b\w+$", "", p) if re.search(r"[\w\*]\s+\**\w+$", p) else p for p in params]
            return found.group(1).strip(), [t.strip() for t in types]
    raise AssertionError(f"{name} is declared in _clib but exported nowhere in ms_ext/ or kernels/")


def ctype_matches(ctype, text: str) -> bool:
    """Whether the ctypes type `ctype` passes the C type `text` correctly."""
    text = re.sub(r"\bconst\b", "", text).replace(" ", "")
    scalars = {"int": ctypes.c_int, "int64_t": ctypes.c_int64, "size_t": ctypes.c_size_t}
    if text in scalars:
        return ctype is scalars[text]
    if text == "void":
        return ctype is None
    if text == "char*":
        return ctype is ctypes.c_char_p
    if text.endswith("*"):
        pointee = scalars.get(text[:-1])
        return ctype is ctypes.c_void_p or (pointee is not None and ctype is ctypes.POINTER(pointee))
    return False


@pytest.mark.parametrize("name", sorted(_clib._PROTOTYPES))
def test_every_c_prototype_python_declares_is_the_exported_one(name):
    restype, argtypes = _clib._PROTOTYPES[name]
    c_return, c_params = declaration(name)
    assert ctype_matches(restype, c_return), (name, restype, c_return)
    if argtypes is not None:  # None: called with explicitly typed arguments (ms_ext_guarded_call)
        assert len(argtypes) == len(c_params), (name, argtypes, c_params)
        for ctype, text in zip(argtypes, c_params):
            assert ctype_matches(ctype, text), (name, ctype, text)


def test_every_operator_is_made_through_an_operator_definition():
    """One mechanism: every path that makes an operator (bundled, aten.op, Library.op, Ascend C, CUDA, a ported
    network's programs) builds an OpDef, so no AotOp is constructed anywhere but in OpDef.build."""
    import ast

    makers = []
    for path in sorted((REPO / "aot_ops").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if name == "AotOp":
                    makers.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert makers and all(m.startswith("aot_ops/_core/opdef.py:") for m in makers), makers


# torch APIs whose name has an underscore but which torch documents as public
_PUBLIC_UNDERSCORED = {"torch._check"}
_SHIMS = {"aot_ops/_core/torch_private.py", "aot_ops/_core/mindspore_private.py"}


def _private_names(tree) -> list[tuple[int, str]]:
    """(line, dotted name) of every torch or MindSpore name with a private part that the module reads or imports."""
    import ast

    def dotted(node):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None

    def private(name: str) -> bool:
        parts = name.split(".")
        if parts[0] not in ("torch", "mindspore") or name in _PUBLIC_UNDERSCORED or parts[:2] == ["torch", "ops"]:
            return False  # (operators such as torch.ops.aten._to_copy are named by their schema, not private API)
        return any(p.startswith("_") and not p.endswith("__") for p in parts[1:])

    for node in ast.walk(tree):  # each attribute chain is read from its outermost attribute
        for child in ast.iter_child_nodes(node):
            child.parent = node
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Attribute) and not isinstance(getattr(node, "parent", None), ast.Attribute):
            names = [dotted(node)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found += [(node.lineno, n) for n in names if n and private(n)]
    return found


def test_private_torch_and_mindspore_names_are_used_in_the_shims_alone():
    """Every private torch or MindSpore name aot_ops relies on is reached through _core/torch_private.py or
    _core/mindspore_private.py, which say what breaks without each: an upgrade that moves one breaks those two
    modules, not code spread over the package."""
    import ast

    outside = []
    for path in sorted((REPO / "aot_ops").rglob("*.py")):
        relative = str(path.relative_to(REPO))
        if relative in _SHIMS:
            continue
        outside += [f"{relative}:{line} {name}" for line, name in _private_names(ast.parse(path.read_text(), relative))]
    assert not outside, outside
    shim = ast.parse((REPO / "aot_ops/_core/torch_private.py").read_text())
    assert any(name.startswith("torch._") for _line, name in _private_names(shim))  # the scan sees them there
