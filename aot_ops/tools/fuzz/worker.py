"""Runs fuzz cases in this process, one JSON line in, one JSON line out (python -m aot_ops.tools.fuzz.worker).

The parent (campaign.py) counts a worker that dies or stops answering; this file only judges the cases that
return. Outcomes:
    correct        the call returned what the torch reference returns (count, shapes, dtypes, values)
    error          it raised, naming the operator
    error_unnamed  it raised without naming the operator (an error of aot_ops' own API or kernels)
    refused        a hand-written ops.Custom that MindSpore refused before any aot_ops code ran (MindSpore's
                   own message, which cannot name a kernel it never reached)
    wrong          it returned data, and the data differs from the reference (or the call has no meaning)
    broken         it raised, and then a valid call in the same process gave a wrong result
    ambiguous      a hand-written ops.Custom without reg_info whose input count and output count are both wrong, by
                   opposite amounts: MindSpore passes the kernel no counts, only their sum, so the call looks valid
                   to the kernel (it reads an output buffer as its last input). Reported, not a failure: no check
                   in the kernel can see it (README, "Reliability and security").
"""
from __future__ import annotations

import warnings


def _quiet():
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("mindspore").setLevel(logging.ERROR)


_quiet()

import mindspore as ms  # noqa: E402
import torch  # noqa: E402
from mindspore import ops  # noqa: E402
from mindspore.ops import CustomRegOp, DataType  # noqa: E402

import aot_ops  # noqa: E402
from aot_ops._core.cells import ListCall, OpCell  # noqa: E402
from aot_ops._core import dtypes as _dtypes
from aot_ops import aten  # noqa: E402
from aot_ops._core.convert import to_ms, to_torch  # noqa: E402

from . import reference  # noqa: E402
from .campaign import serve  # noqa: E402
from .cases import KERNELS  # noqa: E402

ms.set_device("CPU")
LIBRARY = str(aot_ops.library_path())
SYMBOLS = {"add": ["Add"], "mul": ["Mul"], "matmul": ["Matmul"], "leaky_relu": ["LeakyRelu"], "sum": ["Sum", "SumDims"],
           "mean": ["MeanDims"], "softmax": ["Softmax"], "max": ["MaxDim"], "gelu": ["Gelu"], "permute": ["Permute"],
           "layer_norm": ["LayerNorm"]}


# -- tensors ------------------------------------------------------------------------------------------------------
def make_tensor(spec: dict) -> tuple[torch.Tensor, ms.Tensor]:
    """The tensor a spec describes, in torch and in MindSpore (a strided view in MindSpore when the spec asks)."""
    shape = list(spec["shape"])
    base_shape = list(shape)
    view = spec["view"] if len(shape) >= 2 else None
    if view == "transpose":
        base_shape[-1], base_shape[-2] = base_shape[-2], base_shape[-1]
    elif view == "slice":
        base_shape[-1] *= 2
    base = _values(base_shape, _dtypes.from_ms_name(spec["dtype"]), spec["fill"], spec["seed"])
    ms_base = to_ms(base)
    if view == "transpose":
        return base.transpose(-1, -2), ms_base.swapaxes(-1, -2)
    if view == "slice":
        return base[..., ::2], ms_base[..., ::2]
    return base, ms_base


def _values(shape, dtype, fill, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g) * 2
        if fill == "special" and x.numel():
            specials = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 1e30, -1e-30])
            where = torch.rand(shape, generator=g) < 0.3
            x = torch.where(where, specials[torch.randint(0, 6, shape, generator=g)], x)
        elif fill == "small_int":
            x = torch.randint(-3, 4, shape, generator=g).float()
        return x.to(dtype)
    info = torch.iinfo(dtype)
    if fill == "special":
        choices = torch.tensor([info.min, info.max, 0, -1 if info.min < 0 else 1], dtype=torch.int64)
        return choices[torch.randint(0, 4, shape, generator=g)].to(dtype)
    return torch.randint(max(info.min, -5), min(info.max, 6), shape, generator=g, dtype=dtype)


# -- building and calling the operator of a case -----------------------------------------------------------------
def _reg_info(n_in, n_out):
    r = CustomRegOp("fuzz_reg")
    for i in range(n_in):
        r = r.input(i, f"x{i}")
    for i in range(n_out):
        r = r.output(i, f"y{i}")
    return r.dtype_format(*([DataType.None_None] * (n_in + n_out))).target("CPU").get_op_info()


def _declared(case, expected, torch_inputs):
    """out_shape / out_dtype a hand-written Custom gives: right, wrong, absurd, or left to the C++ inference."""
    shapes = [list(t.shape) for t in expected] if expected else [list(torch_inputs[0].shape) if torch_inputs else [1]]
    dtypes = [t.dtype for t in expected] if expected else [torch.float32]
    n = case["outputs"]
    shapes = (shapes + shapes[-1:] * n)[:n]
    dtypes = (dtypes + dtypes[-1:] * n)[:n]
    if case["declared"] == "wrong":
        shapes = [s[:-1] if s and len(s) % 2 else s + [2] for s in shapes]
    elif case["declared"] == "negative":
        shapes = [[-3] + s for s in shapes]
    elif case["declared"] == "huge":
        shapes = [[2**40] + s for s in shapes]
    if case["out_dtype"] != "same":
        dtypes = [_dtypes.from_ms_name(case["out_dtype"])] * n
    ms_types = [_dtypes.to_ms(d) for d in dtypes]
    if n == 1:
        return shapes[0], ms_types[0]
    return tuple(shapes), tuple(ms_types)


def build_operator(case, expected, torch_inputs):
    kind, name = case["kind"], case["op"]
    if kind == "ready":
        return getattr(aot_ops, name)(**case["kwargs"]), False
    if kind == "aten":
        return aten.op(name, **case["kwargs"]), reference.ATEN.get(name) == "list"
    if kind == "custom":
        out_shape, out_dtype = _declared(case, expected, torch_inputs)
        n_in = KERNELS[name][0]
        op = ops.Custom(f"{LIBRARY}:{name}", out_shape=None if case["declared"] == "cpp" else out_shape,
                        out_dtype=out_dtype, func_type="aot",
                        reg_info=_reg_info(n_in, case["outputs"]) if case["reg_info"] else None)
    else:  # aten_raw
        x = torch_inputs[0] if torch_inputs else torch.zeros(1)
        op = ops.Custom(f"{LIBRARY}:AtenOp", out_shape=list(x.shape), out_dtype=_dtypes.to_ms(x.dtype),
                        func_type="aot")
    for key, value in case["attrs"].items():
        op.add_prim_attr(key, value)
    return op, False


def call(op, ms_inputs, mode, as_list):
    if mode == ms.PYNATIVE_MODE:
        out = op(list(ms_inputs)) if as_list else op(*ms_inputs)
    else:
        out = (ListCall(op) if as_list else OpCell(op))(*ms_inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return tuple(to_torch(o) for o in outs)


def names_of(case) -> list[str]:
    """Strings one of which an error about this case must contain."""
    kind, name = case["kind"], case["op"]
    if kind == "ready":
        return SYMBOLS[name] + [name]
    if kind == "aten":
        return [name, repr(name), "aten.op"] if name else ["aten.op", "''"]
    # A kernel's error reaches the user as MindSpore's "operator failed when executing user defined file <lib>!
    # Error message is <the kernel's message>", and ms_ext starts that message with the entry's name.
    if kind == "custom":
        return [f"Error message is {name}"]
    return ["Error message is AtenOp"]


# -- judging ------------------------------------------------------------------------------------------------------
def expected_of(case, torch_inputs):
    kind = case["kind"]
    try:
        with torch.no_grad():
            if kind == "ready":
                return reference.ready(case["op"], case["kwargs"], torch_inputs), None
            if kind == "aten":
                return reference.aten(case["op"], case["kwargs"], torch_inputs), None
            if kind == "custom":
                return reference.kernel(case["op"], case["attrs"], torch_inputs), None
            return reference.raw_aten(case["attrs"], torch_inputs), None
    except Exception as exc:  # noqa: BLE001 - any refusal by torch or the contract: the call has no meaning
        return None, f"{type(exc).__name__}: {exc}"


def same(actual: tuple, expected: tuple) -> str | None:
    """None when equal; otherwise what differs."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if a.dtype != e.dtype or tuple(a.shape) != tuple(e.shape):
            return f"output {i}: {a.dtype} {tuple(a.shape)}, expected {e.dtype} {tuple(e.shape)}"
        if e.dtype in (torch.float16, torch.bfloat16):
            tol = {"rtol": 1e-2, "atol": 1e-2}
        elif e.dtype in (torch.float32, torch.complex64):
            tol = {"rtol": 1e-5, "atol": 1e-6}
        else:
            tol = {"rtol": 1e-7, "atol": 1e-9} if e.dtype.is_floating_point else {"rtol": 0, "atol": 0}
        try:
            torch.testing.assert_close(a, e, equal_nan=True, **tol)
        except AssertionError as exc:
            return f"output {i}: " + " ".join(str(exc).split())[:300]
    return None


_canary = {}


def next_call_works(mode) -> bool:
    """After an error, a valid call must still be right (no state left broken).

    MindSpore can fail the first operation after it refused to allocate an output (its own ops.add then raises
    "Allocate memory failed" in MallocForOutputs, once; seen after a hand-written Custom declaring a 2 TB output).
    A MindSpore operation runs first and absorbs that, so what is judged is the state of aot_ops' operators."""
    a, b = torch.arange(6.0).reshape(2, 3), torch.ones(2, 3)
    try:
        ops.add(to_ms(a), to_ms(b)).asnumpy()
    except Exception:  # noqa: BLE001 - MindSpore's pending failure, not aot_ops'
        pass
    try:
        (out,) = call(_canary.setdefault("add", aot_ops.add()), (to_ms(a), to_ms(b)), mode, False)
        return torch.equal(out, a + b)
    except Exception:  # noqa: BLE001
        return False


def _ambiguous(case) -> bool:
    if case["kind"] != "custom" or case["reg_info"] or case["declared"] == "cpp":
        return False
    n_in, n_out = KERNELS[case["op"]]
    given = len(case["inputs"])
    return given != n_in and given + case["outputs"] == n_in + n_out


def run_case(case: dict) -> dict:
    mode = ms.PYNATIVE_MODE if case["mode"] == 1 else ms.GRAPH_MODE
    ms.set_context(mode=mode)
    made = [make_tensor(spec) for spec in case["inputs"]]
    torch_inputs, ms_inputs = [t for t, _ in made], [m for _, m in made]
    expected, no_meaning = expected_of(case, torch_inputs)
    try:
        op, as_list = build_operator(case, expected, torch_inputs)
        actual = call(op, ms_inputs, mode, as_list)
    except Exception as exc:  # noqa: BLE001 - every error is judged by its message
        message = " ".join(f"{type(exc).__name__}: {exc}".split())
        named = any(n and n in message for n in names_of(case))
        outcome = "error" if named else "refused" if case["kind"] in ("custom", "aten_raw") else "error_unnamed"
        if not next_call_works(mode):
            outcome = "broken"
        return {"outcome": outcome, "detail": message[:600]}
    if expected is None and _ambiguous(case):
        return {"outcome": "ambiguous", "detail": no_meaning[:600]}
    if expected is None:
        return {"outcome": "wrong", "detail": f"returned data for a call without meaning ({no_meaning})"[:600]}
    difference = same(actual, expected)
    return {"outcome": "wrong", "detail": difference} if difference else {"outcome": "correct", "detail": ""}


def main() -> None:
    serve(run_case)


if __name__ == "__main__":
    main()
