"""Tables kept in two languages, compared: what the C++ side declares is what the Python side sends and reads.

A drift in any of them would not fail to compile or import; it would send one argument kind as another, read an
attribute as the wrong kind, or call a C function with the wrong argument types."""
from __future__ import annotations

import ast
import ctypes
import functools
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


# ---- private names of other libraries: in the shims alone -------------------------------------------------------

# The shims: every private name of torch, transformers or MindSpore the package uses is reached through one of them.
_SHIMS = {"aot_ops/_core/torch_private.py", "aot_ops/_core/mindspore_private.py",
          "aot_ops/_core/transformers_private.py"}
# torch APIs whose name has an underscore but which torch documents as public
_PUBLIC_UNDERSCORED = {"torch._check"}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _dotted(node) -> str | None:
    """"a.b.c" for a chain of names, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _package_module_file(module: str):
    """The file of the package module `module` ("aot_ops._core.native_state"), or None where it is none."""
    if module != "aot_ops" and not module.startswith("aot_ops."):
        return None
    base = REPO.joinpath(*module.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


_DEFINITIONS = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


@functools.lru_cache(maxsize=None)
def _defined_in(module: str) -> frozenset[str]:
    """The classes and functions the package module `module` defines at its top level. Not the names it imports or
    assigns: those may be other libraries' objects (the shims' OpOverload is torch's class)."""
    path = _package_module_file(module)
    if path is None:
        return frozenset()
    return frozenset(node.name for node in ast.parse(path.read_text()).body if isinstance(node, _DEFINITIONS))


class _Bindings:
    """What a package file's names are bound to, as far as the package is concerned: a module of the package (by
    its imports, relative or absolute), a class or function the package defines (in this file, or imported from
    the module defining it), or torch.ops.<namespace>. Any other object is taken as another library's or the
    user's: its private attributes are theirs."""

    def __init__(self, tree, relative: str):
        dotted = relative.removesuffix(".py").replace("/", ".")
        self.package = dotted.removesuffix(".__init__") if relative.endswith("__init__.py") \
            else dotted.rpartition(".")[0]
        self.modules: dict[str, str] = {}  # name -> the package module it is bound to
        self.defined = {node.name for node in tree.body if isinstance(node, _DEFINITIONS)}
        self.operator_namespaces: set[str] = set()  # names bound to torch.ops.<namespace>
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _package_module_file(alias.name):
                        bound = alias.asname or alias.name.partition(".")[0]
                        self.modules[bound] = alias.name if alias.asname else bound
            elif isinstance(node, ast.ImportFrom):
                source = self.absolute(node)
                if _package_module_file(source) is None:
                    continue
                for alias in node.names:
                    bound = alias.asname or alias.name
                    if _package_module_file(f"{source}.{alias.name}"):
                        self.modules[bound] = f"{source}.{alias.name}"
                    elif alias.name in _defined_in(source):
                        self.defined.add(bound)
            elif isinstance(node, ast.Assign) and (_dotted(node.value) or "").startswith("torch.ops."):
                self.operator_namespaces |= {t.id for t in node.targets if isinstance(t, ast.Name)}

    def absolute(self, node: ast.ImportFrom) -> str:
        """The module a `from ... import` reads from, relative imports resolved."""
        if not node.level:
            return node.module or ""
        parts = self.package.split(".")
        parts = parts[:len(parts) - node.level + 1]
        return ".".join(parts + ([node.module] if node.module else []))

    def module(self, node) -> str | None:
        """The package module `node` (a name, or a chain of attributes) is, or None."""
        if isinstance(node, ast.Name):
            return self.modules.get(node.id)
        if isinstance(node, ast.Attribute):
            parent = self.module(node.value)
            if parent and _package_module_file(f"{parent}.{node.attr}"):
                return f"{parent}.{node.attr}"
        return None

    def is_the_packages(self, node) -> bool:
        """Whether `node` is a module of the package or a class or function the package defines."""
        if self.module(node):
            return True
        if isinstance(node, ast.Name):
            return node.id in self.defined
        if isinstance(node, ast.Attribute):
            parent = self.module(node.value)
            return parent is not None and node.attr in _defined_in(parent)
        return False


def _class_members(tree) -> dict[str, set[str]]:
    """Each class of the file -> the private names it declares: its methods, class attributes and the attributes
    its methods set on `self`."""
    members = {}
    for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
        declared = {node.name for node in cls.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for statement in cls.body:
            targets = statement.targets if isinstance(statement, ast.Assign) else \
                [statement.target] if isinstance(statement, ast.AnnAssign) else []
            declared |= {target.id for target in targets if isinstance(target, ast.Name)}
        declared |= {node.attr for node in ast.walk(cls)
                     if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                     and isinstance(node.value, ast.Name) and node.value.id == "self"}
        members[cls.name] = {name for name in declared if _is_private(name)}
    return members


def _named(node) -> tuple[ast.expr, str] | None:
    """(object, attribute name) where a call or subscript reaches an attribute by a constant name: getattr(x, "_a"),
    setattr, hasattr, delattr, object.__setattr__(x, "_a", v) and the like, x.__dict__["_a"]."""
    if isinstance(node, ast.Call) and len(node.args) >= 2 and (
            (isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr", "hasattr", "delattr"))
            or (isinstance(node.func, ast.Attribute)
                and node.func.attr in ("__getattribute__", "__setattr__", "__delattr__"))):
        owner, key = node.args[0], node.args[1]
    elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "__dict__":
        owner, key = node.value.value, node.slice
    else:
        return None
    return (owner, key.value) if isinstance(key, ast.Constant) and isinstance(key.value, str) else None


def _foreign_private_names(source: str, relative: str) -> list[tuple[int, str]]:
    """(line, expression) of every private name of another library the package file `relative` uses: imports of a
    private module or name (from torch._guards import ...), and private attributes of any object that is not the
    package's own, read, written or deleted (`x._name`, and with the name as a constant: getattr and the like,
    object.__setattr__, x.__dict__["_name"]). The package's own are:
    - `self` and `cls` (a class's own members);
    - the package's modules, classes and functions, by this file's imports and definitions (native_state's
      helpers, library._load);
    - another instance of a class of this file, in a private name a class of this file declares, accessed inside a
      class of this file or on an expression starting from the class (Expr.wrap(a)._min);
    - attributes named _aot_ops_*: the package's marks on tensors (convert.owned_view).
    torch.ops.<namespace>.<_name> (torch.ops.aten._to_copy) is an operator named by its schema, not private API."""
    tree = ast.parse(source, relative)
    bindings = _Bindings(tree, relative)
    members = _class_members(tree)
    declared_here = set().union(*members.values())

    def root(node):
        while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
            node = node.func if isinstance(node, ast.Call) else node.value
        return node

    def foreign(value, name: str, in_class: bool) -> bool:
        dotted = _dotted(value) or ""
        start = root(value)
        return not (
            (isinstance(value, ast.Name) and value.id in ("self", "cls"))
            or dotted.startswith("torch.ops.") or dotted in bindings.operator_namespaces
            or f"{dotted}.{name}" in _PUBLIC_UNDERSCORED
            or bindings.is_the_packages(value)
            or (name in declared_here and (in_class or (isinstance(start, ast.Name) and start.id in members)))
            or name.startswith("_aot_ops_"))

    found = []

    def visit(node, in_class: bool) -> None:
        named = _named(node)
        if isinstance(node, ast.Attribute) and _is_private(node.attr) and foreign(node.value, node.attr, in_class):
            found.append((node.lineno, ast.unparse(node)))
        elif named is not None and _is_private(named[1]) and foreign(*named, in_class):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, f"import {alias.name}") for alias in node.names
                         if not _package_module_file(alias.name) and any(map(_is_private, alias.name.split("."))))
        elif isinstance(node, ast.ImportFrom) and not node.level and not _package_module_file(node.module):
            found.extend((node.lineno, f"from {node.module} import {alias.name}") for alias in node.names
                         if any(map(_is_private, [*node.module.split("."), alias.name])))
        for child in ast.iter_child_nodes(node):
            visit(child, in_class or isinstance(node, ast.ClassDef))

    visit(tree, False)
    # torch._C._is_alias_of is one use, not two (torch._C inside it)
    return sorted({(line, text) for line, text in found
                   if not any(other == line and longer.startswith(text + ".") for other, longer in found)})


def test_the_private_name_scan_tells_other_libraries_names_from_the_packages():
    source = """
import torch
import torch._dynamo
from torch._guards import detect_fake_mode
from transformers.modeling_utils import _init_weights
from .._core import library as _library, native_state
from .._core.torch_private import OpOverload, schema_of
from .programs import kept

_aten = torch.ops.aten


class Expr:
    def __init__(self):
        self._low = 0

    def _min(self, other):
        return self._low if other._low > 0 else 0          # another Expr, inside its class


def uses(model, program, overload, node, tensor, layers):
    model._from_config(None)                              # 1
    init = getattr(model, "_init_weights", None)          # 2
    program._graph_signature = None                       # 3
    program._state_dict["w"] = None                       # 4
    node.target._schema                                   # 5
    layers._modules = {}                                  # 6
    OpOverload._schema                                    # 7: a shim's torch class
    tensor._low                                           # 8: not an Expr (outside its class)
    torch._C._is_alias_of(tensor, tensor)                 # 9: once
    model.config._attn_implementation                     # 10
    object.__setattr__(model, "_create_time", 0)          # 11
    model.__dict__["_compile_phase"]                      # 12
    self.__dict__["_jit"], object.__setattr__(self, "_jit", 1)
    schema_of(overload)
    _library._load("x")                                   # the package's modules, classes and functions
    native_state.last_error()
    kept._private_helper
    Expr.wrap(1)._min(2)
    tensor._aot_ops_owner = None
    torch.ops.aten._to_copy.default
    _aten._unsafe_view
    torch._check(True)
    return init
"""
    found = [text for _line, text in _foreign_private_names(source, "aot_ops/_port/example.py")]
    assert found == ["import torch._dynamo", "from torch._guards import detect_fake_mode",
                     "from transformers.modeling_utils import _init_weights",
                     "model._from_config", "getattr(model, '_init_weights', None)", "program._graph_signature",
                     "program._state_dict", "node.target._schema", "layers._modules", "OpOverload._schema",
                     "tensor._low", "torch._C._is_alias_of", "model.config._attn_implementation",
                     "object.__setattr__(model, '_create_time', 0)", "model.__dict__['_compile_phase']"], found


def test_private_names_of_other_libraries_are_used_in_the_shims_alone():
    """Every private name of torch, transformers or MindSpore aot_ops relies on, a module, a function or an object's
    attribute, is reached through _core/torch_private.py, _core/transformers_private.py or
    _core/mindspore_private.py, which say what breaks without each: an upgrade that moves one breaks those modules,
    not code spread over the package, and what the package changes in place in torch's objects and the user's is
    changed there. A failure names each use (file:line: expression): move it into a shim, as a small named
    function saying why it is needed and which test shows it."""
    outside = []
    for path in sorted((REPO / "aot_ops").rglob("*.py")):
        relative = str(path.relative_to(REPO))
        if relative not in _SHIMS:
            uses = _foreign_private_names(path.read_text(), relative)
            outside += [f"{relative}:{line}: {text}" for line, text in uses]
    assert not outside, ("private names of other libraries used outside the shims (_core/torch_private.py, "
                         "_core/transformers_private.py, _core/mindspore_private.py):\n  " + "\n  ".join(outside))
    # the scan sees them in the shims: each holds the names it is there for
    for shim, library in (("torch_private", "torch"), ("mindspore_private", "mindspore"),
                          ("transformers_private", None)):
        relative = f"aot_ops/_core/{shim}.py"
        uses = _foreign_private_names((REPO / relative).read_text(), relative)
        assert uses and (library is None or any(library in text for _line, text in uses)), (shim, uses)


# The port's stages in the order a port runs them (aot_ops/_port/__init__.py): a stage's modules import the stages
# before it, never one after; the root's shared modules (errors, modes, plan) import no stage.
_STAGES = ["trace", "read", "programs", "cells", "lm"]
_SHARED_ROOT = {"errors", "modes", "plan"}


def _port_imports(path) -> set[str]:
    """The modules of aot_ops._port a file imports (dotted, relative to aot_ops._port), at any depth in the file."""
    package = ("aot_ops." + ".".join(path.relative_to(REPO / "aot_ops").with_suffix("").parts)).rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[:len(base) - node.level + 1]
                names = [".".join(base + ([node.module] if node.module else []))]
            elif node.module:
                names = [node.module]
            names = [f"{n}.{a.name}" for n in names for a in node.names] + names
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found |= {n[len("aot_ops._port."):] for n in names if n.startswith("aot_ops._port.")}
    return found


def test_the_port_s_stages_import_only_the_stages_before_them():
    broken = []
    for path in sorted((REPO / "aot_ops" / "_port").rglob("*.py")):
        parts = path.relative_to(REPO / "aot_ops" / "_port").parts
        stage = parts[0] if len(parts) > 1 else None
        if stage is None and path.stem not in _SHARED_ROOT:
            continue  # the pipeline (__init__), plan_cache and split sit above every stage
        allowed = set(_STAGES[:_STAGES.index(stage) + 1]) if stage else set()
        for imported in _port_imports(path):
            target = imported.split(".")[0]
            if target in _STAGES and target not in allowed:
                broken.append(f"{path.relative_to(REPO)} imports aot_ops._port.{imported}")
    assert not broken, "\n".join(broken)
    # and each stage says its job and what it may import
    for stage in _STAGES:
        opening = ast.get_docstring(ast.parse((REPO / "aot_ops" / "_port" / stage / "__init__.py").read_text()))
        assert opening and "May import" in opening, stage
