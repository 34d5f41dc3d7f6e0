"""Runs raw-argument cases (raw_cases.py) in this process: python -m aot_ops.tools.fuzz.raw_worker, one JSON line in,
one JSON line out, as worker.py (the parent counts deaths and hangs). No MindSpore: the functions are called
through ctypes with the arguments MindSpore would pass, then garbled.

Launches go through the library's ms_ext_guarded_call and shape inference through ms_ext_guarded_infer_shape: the
C++ frames that catch what the entry points throw (MindSpore catches it itself; ctypes cannot). Init and the
dtype rule are plain C functions and are called directly. Outcomes:
    correct        the call succeeded (a fault it may ignore) and its result is right
    error          it failed, and the last error names the operator and the cause
    error_unnamed  it failed without naming the operator or the cause
    wrong          it succeeded on garbage it must refuse, or gave a wrong result
    broken         after it, a valid call of the same function gave a wrong result

AOT_OPS_FUZZ_RAW_LIBRARIES=<folder> fuzzes the libaot_ops_*.so files in that folder instead of the bundled ones
(to measure another build); the guarded shape-inference call then comes from the bundled library.
"""
from __future__ import annotations

import ctypes
import os
from ctypes import POINTER, c_char_p, c_int, c_int64, c_void_p
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from aot_ops._build.bundled import library_path
from aot_ops._core.dtypes import checked_ms_name
from aot_ops._core.packed_attrs import pack
from aot_ops._native.opener import last_error, open_library

from .campaign import serve
from .raw_cases import CAUSES, may_succeed

LIBRARIES_ENV = "AOT_OPS_FUZZ_RAW_LIBRARIES"

NEG_ATTRS = {"aten_op": "aten::neg", "aten_num_inputs": 1, "aten_num_outputs": 1, "aten_kinds": [0],
             "aten_arg_0": 0, "aten_out_op": "", "aten_out_shapes": "d0.0,d0.1"}
NEG_NODE = {f"n0_{k}": v for k, v in NEG_ATTRS.items() if k != "aten_out_shapes"}
PROGRAM_ATTRS = {"program_name": "fuzz program", "program_key": "raw-fuzz-neg", "program_num_inputs": 1,
                 "program_num_nodes": 1, "program_outputs": [1], "program_out_shapes": "d0.0,d0.1",
                 "program_nodes": pack(dict(NEG_NODE, n0_slots=[0], n0_results=1))}


@dataclass(frozen=True)
class Target:
    library: str                 # the bundled library: "cpu" or "ascendc"
    attrs: dict                  # the attributes of a valid call
    reference: Callable[[list, dict], list]  # the outputs for the inputs and attributes ({}: none given)
    names: tuple                 # an error about it names one of these
    several: bool = False        # its shape inference returns several shapes
    inputs: int = 1              # how many input tensors, each of `shape` (float32)
    shape: tuple = (2, 3)


def _leaky(x, attrs):
    return [F.leaky_relu(x[0], attrs.get("negative_slope", 0.01))]


def _max(x, attrs):
    return list(torch.max(x[0], attrs.get("dim", -1), attrs.get("keepdim", False)))


def _negated(x, attrs):
    if not attrs:
        raise ValueError("the generic entries have no meaning without their attributes")
    return [-x[0]]


TARGETS = {
    "LeakyRelu": Target("cpu", {"negative_slope": 0.2}, _leaky, ("LeakyRelu",)),
    "Add": Target("cpu", {}, lambda x, a: [x[0] + x[1]], ("Add",), inputs=2),
    "MaxDim": Target("cpu", {"dim": 0, "keepdim": False, "ms_ext_io": [1, 2]}, _max, ("MaxDim",), several=True),
    "AtenOp": Target("cpu", NEG_ATTRS, _negated, ("AtenOp", "aten::neg")),
    "AtenProgram": Target("cpu", PROGRAM_ATTRS, _negated, ("AtenProgram", "fuzz program")),
    "LeakyReluCustom": Target("ascendc", {"negative_slope": 0.2}, _leaky, ("LeakyReluCustom",)),
}


# -- libraries ------------------------------------------------------------------------------------------------------
def library(kind: str) -> ctypes.CDLL:
    folder = os.environ.get(LIBRARIES_ENV)
    path = Path(folder) / f"libaot_ops_{kind}.so" if folder else library_path(kind)
    return open_library(path)


def infer_shim(lib: ctypes.CDLL) -> ctypes.CDLL:
    """The library whose ms_ext_guarded_infer_shape calls a shape inference: the target's own, or the bundled one."""
    shim = lib if hasattr(lib, "ms_ext_guarded_infer_shape") else open_library(library_path("cpu"))
    shim.ms_ext_guarded_infer_shape.restype = c_int64
    shim.ms_ext_guarded_infer_shape.argtypes = [c_void_p, c_int, c_void_p, c_void_p, c_void_p, c_void_p, c_int64]
    return shim


# -- arguments ------------------------------------------------------------------------------------------------------
class Arrays:
    """params, ndims, shapes and dtypes for some tensors, built as MindSpore builds them."""

    def __init__(self, tensors: list[torch.Tensor]):
        n = len(tensors)
        self.count = n
        self.params = (c_void_p * n)(*(t.data_ptr() for t in tensors))
        self.ndims = (c_int * n)(*(t.dim() for t in tensors))
        self.rows = [(c_int64 * t.dim())(*t.shape) for t in tensors]
        self.shapes = (POINTER(c_int64) * n)(*(ctypes.cast(r, POINTER(c_int64)) if len(r) else None
                                                for r in self.rows))
        self.dtypes = (c_char_p * n)(*(checked_ms_name(t.dtype).encode() for t in tensors))

    def garbled(self, faults: list[dict]) -> dict:
        """The arguments with the faults applied (the arrays are changed in place)."""
        args = {"nparam": self.count, "params": self.params, "ndims": self.ndims, "shapes": self.shapes,
                "dtypes": self.dtypes}
        for fault in faults:
            arg = fault["arg"]
            if arg in ("params", "ndims", "shapes", "dtypes"):
                args[arg] = None
            elif arg == "nparam":
                args["nparam"] = fault["value"]
            elif arg == "rank":
                self.ndims[fault["index"]] = fault["value"]
            elif arg == "shape_row":
                self.shapes[fault["index"]] = None
            elif arg == "dtype_entry":
                self.dtypes[fault["index"]] = None
        return args


class CallExtra:
    """An ms_ext call extra holding a target's attributes: what stands for MindSpore's AotExtra in a valid call."""

    def __init__(self, lib: ctypes.CDLL, attrs: dict):
        text = pack(attrs).encode()
        self.lib, self.address = lib, lib.ms_ext_call_extra_new(text, len(text))
        if not self.address:
            raise RuntimeError(last_error(lib))

    def free(self):
        self.lib.ms_ext_call_extra_free(self.address)


_keep: list = []  # garbage extras stay alive while a case runs


def _buffer(data: bytes) -> int:
    buffer = ctypes.create_string_buffer(data, len(data))
    _keep.append(buffer)
    return ctypes.addressof(buffer)


def _words(values: list[int]) -> int:
    array = (ctypes.c_uint64 * len(values))(*values)
    _keep.append(array)
    return ctypes.addressof(array)


def _unmapped(lib: ctypes.CDLL) -> int:
    """An address nothing is mapped at (checked with ms_ext_mapped)."""
    lib.ms_ext_mapped.restype, lib.ms_ext_mapped.argtypes = c_int, [c_void_p, ctypes.c_size_t]
    for k in range(64):
        address = 0x1000_0000_0000 + k * 0x10_0000_0000
        if not lib.ms_ext_mapped(address, 4096):
            return address
    raise RuntimeError("no unmapped address found")


def garbage_extra(kind: str, valid: int, lib: ctypes.CDLL) -> int | None:
    """An `extra` that is not MindSpore's AotExtra nor an ms_ext call extra (raw_cases.EXTRAS)."""
    if kind == "null":
        return None
    if kind == "zeros":
        return _buffer(bytes(4096))
    if kind == "ones":
        return _buffer(b"\xff" * 4096)
    if kind == "text":
        return _buffer(b"A" * 4096)
    if kind == "zero_vtable":  # a vtable pointer to mapped zeros: every virtual function NULL
        return _words([_buffer(bytes(4096)) + 64, 0, 0, 0, 0])
    if kind == "heap_vtable":  # a complete vtable whose functions point at heap data, not code
        data = _buffer(b"\xcc" * 256)
        return _words([_words([0, 0] + [data] * 16) + 16, 0, 0, 0, 0])
    if kind == "unmapped":
        return _unmapped(lib)
    if kind == "low":
        return 0x10
    if kind == "misaligned":
        return valid + 1
    raise ValueError(f"unknown extra {kind!r}")


# -- the four entries ---------------------------------------------------------------------------------------------
def inputs_of(target: Target) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return [torch.randn(target.shape, generator=g) for _ in range(target.inputs)]


def launch(lib, symbol, args: dict, extra) -> tuple[int, str]:
    function = ctypes.cast(getattr(lib, symbol), c_void_p)
    status = lib.ms_ext_guarded_call(function, c_int(args["nparam"]), args["params"], args["ndims"], args["shapes"],
                                     args["dtypes"], c_void_p(None), c_void_p(extra))
    return status, last_error(lib) if status else ""


def init(lib, symbol, args: dict, extra) -> tuple[int, str]:
    function = getattr(lib, f"{symbol}Init")
    function.restype, function.argtypes = c_int, [c_void_p] * 4
    status = function(args["ndims"], args["shapes"], args["dtypes"], extra)
    return status, last_error(lib) if status else ""


def infer_shape(lib, symbol, several: bool, args: dict, extra) -> tuple[int, str, list]:
    """Status, error, and the shapes the function inferred (decoded from [count, rank, dims..., rank, ...])."""
    shim = infer_shim(lib)
    function = ctypes.cast(getattr(lib, f"{symbol}InferShape"), c_void_p)
    out = (c_int64 * 64)()
    size = shim.ms_ext_guarded_infer_shape(function, int(several), args["ndims"], args["shapes"], extra, out, 64)
    if size < 0:
        return 1, last_error(shim), []
    values, shapes, at = list(out[:size]), [], 1
    for _ in range(values[0]):
        shapes.append(values[at + 1:at + 1 + values[at]])
        at += 1 + values[at]
    return 0, "", shapes


def output_types(lib, symbol, n_out: int, names: list[str], faults: list[dict]) -> tuple[int, str, list]:
    function = getattr(lib, f"ms_ext_output_types_{symbol}")
    function.restype, function.argtypes = c_int, [c_int, c_void_p, c_void_p, c_int]
    given = (c_char_p * len(names))(*(n.encode() for n in names))
    out = (c_char_p * n_out)()
    num_inputs, input_dtypes, output_dtypes, capacity = len(names), given, out, n_out
    for fault in faults:
        arg, value = fault["arg"], fault["value"]
        if arg == "input_dtypes":
            input_dtypes = None
        elif arg == "output_dtypes":
            output_dtypes = None
        elif arg == "input_dtype_entry":
            given[fault["index"]] = None
        elif arg == "num_inputs":
            num_inputs = value
        elif arg == "capacity":
            capacity = value
    status = function(num_inputs, input_dtypes, output_dtypes, capacity)
    if status:
        return status, last_error(lib), []
    return 0, "", [(n or b"(null)").decode() for n in out]


# -- a case -------------------------------------------------------------------------------------------------------
def differs(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> str | None:
    for i, (a, e) in enumerate(zip(actual, expected)):
        if a.dtype != e.dtype or a.shape != e.shape or not torch.allclose(a, e, rtol=1e-5, atol=1e-6):
            return f"output {i}: {a.tolist()}, expected {e.tolist()}"
    return None


@dataclass
class Setup:
    """One call of a target's function: the library, the tensors, the extra it gets and what it must produce."""
    lib: ctypes.CDLL
    symbol: str
    target: Target
    inputs: list
    outputs: list
    expected: list | None  # None: the call has no meaning (the generic entries without attributes)
    extra: int | None
    valid_extra: int


def _run_launch(setup: Setup, args: dict, faults: list[dict]) -> tuple[int, str, str | None]:
    status, error = launch(setup.lib, setup.symbol, args, setup.extra)
    return status, error, None if status else _check(setup.outputs, setup.expected)


def _run_init(setup: Setup, args: dict, faults: list[dict]) -> tuple[int, str, str | None]:
    """Init, then (when it succeeded) a valid launch with the state it kept."""
    status, error = init(setup.lib, setup.symbol, args, setup.extra)
    if status:
        return status, error, None
    if setup.extra != setup.valid_extra:
        return 0, "", "Init accepted an extra that is not one"
    return _run_launch(setup, Arrays(setup.inputs + setup.outputs).garbled([]), [])


def _run_infer_shape(setup: Setup, args: dict, faults: list[dict]) -> tuple[int, str, str | None]:
    status, error, shapes = infer_shape(setup.lib, setup.symbol, setup.target.several, args, setup.extra)
    wanted = [list(e.shape) for e in setup.expected] if setup.expected else None
    return status, error, None if status or shapes == wanted else f"shapes {shapes}, expected {wanted}"


def _run_output_types(setup: Setup, args: dict, faults: list[dict]) -> tuple[int, str, str | None]:
    names = [checked_ms_name(t.dtype) for t in setup.inputs]
    status, error, got = output_types(setup.lib, setup.symbol, len(setup.outputs), names, faults)
    wanted = [checked_ms_name(o.dtype) for o in setup.outputs]
    return status, error, None if status or got == wanted else f"dtypes {got}, expected {wanted}"


RUNNERS = {"launch": _run_launch, "init": _run_init, "infer_shape": _run_infer_shape,
           "output_types": _run_output_types}


def run_entry(case: dict, faults: list[dict]) -> tuple[int, str, str | None]:
    """Calls the case's entry with these faults: (status, error text, what is wrong with a successful result)."""
    target = TARGETS[case["target"]]
    lib = library(target.library)
    x = inputs_of(target)
    valid = CallExtra(lib, target.attrs)
    try:
        extra_fault = next((f["value"] for f in faults if f["arg"] == "extra"), None)
        extra = valid.address if extra_fault is None else garbage_extra(extra_fault, valid.address, lib)
        try:
            expected = target.reference(x, target.attrs if extra is not None else {})
        except ValueError:
            expected = None  # no meaning: the call must fail
        # the outputs MindSpore would allocate for the attributes the call gets (any, when it has no meaning)
        outputs = [torch.empty_like(e) for e in expected or target.reference(x, target.attrs)]
        setup = Setup(lib, case["target"], target, x, outputs, expected, extra, valid.address)
        return RUNNERS[case["entry"]](setup, Arrays(x + outputs).garbled(faults), faults)
    finally:
        valid.free()
        _keep.clear()


def _check(outputs, expected) -> str | None:
    if expected is None:
        return "the call succeeded without the attributes that give it a meaning"
    return differs(outputs, expected)


def cause_words(fault: dict) -> tuple:
    if fault["arg"] == "extra" and fault["value"] == "null":
        return ("extra", "attribute")  # no attributes: the generic entries say which one they miss
    return CAUSES[fault["arg"]]


def run_case(case: dict) -> dict:
    faults = case["faults"]
    status, error, wrong = run_entry(case, faults)
    if not status and wrong is None and not all(may_succeed(case["entry"], f) for f in faults):
        wrong = "it succeeded on arguments it must refuse"
    after = run_entry(case, [])  # the same function, called validly
    if after[0] or after[2]:
        return {"outcome": "broken", "detail": f"then a valid call: {after[1] or after[2]}"[:600]}
    if not status:
        return {"outcome": "wrong", "detail": wrong} if wrong else {"outcome": "correct", "detail": ""}
    named = any(name in error for name in TARGETS[case["target"]].names)
    caused = any(word in error for fault in faults for word in cause_words(fault))
    return {"outcome": "error" if named and caused else "error_unnamed", "detail": error[:600]}


def main() -> None:
    serve(run_case)


if __name__ == "__main__":
    main()
