"""Checking an operator the package makes against a torch reference, in every way MindSpore can call it.

    from aot_ops.testing import opcheck
    report = opcheck(lib.mul_custom(), [(a, b), (c, d)], torch.mul, exact=True)   # raises OpCheckError on failure
    print(report)                                                               # one line per check

`opcheck(op, sample_inputs, reference)` runs `op` (any MindSpore operator of aot_ops: a ready operator, an
`aten.op`, a user's `lib.op`, an Ascend C kernel) on each sample (a tuple of torch tensors) and compares with
`reference(*sample)` computed by torch:
- pynative: the eager call (the fast front where it applies);
- graph_static: the operator in a Cell compiled in GRAPH_MODE;
- graph_dynamic: the same Cell with a dynamic first dimension (`set_inputs`), run on the sample and on the sample
  with that dimension halved: one compilation serves both (skipped when an input is 0-dim);
- gradient: `ms.grad` of sum(output * cotangent) against torch autograd of the reference, for floating inputs;
- empty: the sample with its first dimension cut to 0 (inputs of rank >= 1);
- non_contiguous: inputs of rank >= 2 passed as transposed views;
- wrong_dtype: the first input cast to a dtype the reference refuses must raise an error naming the operator
  (skipped when the reference accepts every dtype tried);
- core_orders (Ascend C kernels, `core_orders=True`): the PyNative result in every core order of the emulator is
  the same, bit for bit.
Failures are collected, not stopped at: `OpCheckError` (an AssertionError, so pytest shows it as a test failure)
lists every failed check with its sample and the difference.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from .errors import Error

_TRIED_DTYPES = (torch.complex64, torch.bool, torch.int64, torch.float64, torch.float16)


class OpCheckError(Error, AssertionError):
    """Some checks of opcheck failed; the message lists them."""


@dataclass
class CheckResult:
    check: str
    sample: int
    status: str  # "passed", "failed" or "skipped"
    detail: str = ""


@dataclass
class OpCheckReport:
    name: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "failed"]

    @property
    def ok(self) -> bool:
        return not self.failures

    def passed(self, check: str) -> int:
        return sum(1 for r in self.results if r.check == check and r.status == "passed")

    def __str__(self) -> str:
        lines = [f"opcheck {self.name}: {len(self.results) - len(self.failures)} of {len(self.results)} checks "
                 "passed or skipped"]
        for r in self.results:
            lines.append(f"  {r.status:<7} {r.check:<15} sample {r.sample}" + (f": {r.detail}" if r.detail else ""))
        return "\n".join(lines)


def opcheck(op, sample_inputs: Sequence[Sequence[torch.Tensor]], reference: Callable, *, exact: bool = False,
            rtol: float | None = None, atol: float | None = None, gradients: bool = True, dynamic: bool = True,
            core_orders: bool = False, raise_on_failure: bool = True) -> OpCheckReport:
    """Runs every check on every sample (see the module docstring). `exact`: results must equal the reference bit
    for bit (an Ascend C kernel in fp16 against numpy); otherwise torch.testing.assert_close's tolerances for the
    dtype, or `rtol`/`atol`. Returns the report; raises OpCheckError listing the failures unless
    `raise_on_failure=False`."""
    import mindspore as ms

    name = _name_of(op)
    report = OpCheckReport(name)
    compare = _comparer(exact, rtol, atol)
    previous_mode = ms.get_context("mode")
    try:
        for index, sample in enumerate(sample_inputs):
            sample = tuple(sample)
            checks = [("pynative", _pynative), ("graph_static", _graph_static)]
            if dynamic:
                checks.append(("graph_dynamic", _graph_dynamic))
            if gradients:
                checks.append(("gradient", _gradient))
            checks += [("empty", _empty), ("non_contiguous", _non_contiguous), ("wrong_dtype", _wrong_dtype)]
            if core_orders:
                checks.append(("core_orders", _core_orders))
            for check, run in checks:
                ms.set_context(mode=ms.PYNATIVE_MODE)
                try:
                    outcome = run(op, sample, reference, compare, name)
                except Exception as exc:  # noqa: BLE001 - a check's failure is reported, the others still run
                    report.results.append(CheckResult(check, index, "failed", f"{type(exc).__name__}: {exc}"))
                    continue
                if isinstance(outcome, str):
                    report.results.append(CheckResult(check, index, "skipped", outcome))
                else:
                    report.results.append(CheckResult(check, index, "passed"))
    finally:
        ms.set_context(mode=previous_mode)
    if raise_on_failure and not report.ok:
        raise OpCheckError(str(report))
    return report


# ---- the checks: each returns None (passed) or a reason it was skipped, and raises on failure -------------------

def _pynative(op, sample, reference, compare, name):
    compare(_call(op, sample), _as_tuple(reference(*sample)))


def _graph_static(op, sample, reference, compare, name):
    import mindspore as ms

    ms.set_context(mode=ms.GRAPH_MODE)
    compare(_call(_cell(op), sample), _as_tuple(reference(*sample)))


def _graph_dynamic(op, sample, reference, compare, name):
    import mindspore as ms

    if any(t.dim() == 0 for t in sample) or len({t.shape[0] for t in sample}) != 1 or sample[0].shape[0] < 2:
        return "needs inputs sharing a first dimension of at least 2"
    ms.set_context(mode=ms.GRAPH_MODE)
    cell = _cell(op)
    cell.set_inputs(*[ms.Tensor(shape=[None, *t.shape[1:]], dtype=_ms_dtype(t.dtype)) for t in sample])
    for part in (sample, tuple(t[: t.shape[0] // 2] for t in sample)):
        compare(_call(cell, part), _as_tuple(reference(*part)))


def _gradient(op, sample, reference, compare, name):
    import mindspore as ms

    from ._core.convert import to_ms, to_torch

    wrt = [i for i, t in enumerate(sample) if t.is_floating_point()]
    if not wrt:
        return "no floating input"
    leaves = [t.detach().clone().requires_grad_(i in wrt) for i, t in enumerate(sample)]
    expected_out = _as_tuple(reference(*leaves))
    gen = torch.Generator().manual_seed(0)
    cotangents = [torch.randn(o.shape, generator=gen, dtype=torch.float32).to(o.dtype) if o.is_floating_point()
                  else None for o in expected_out]
    pairs = [(o, c) for o, c in zip(expected_out, cotangents) if c is not None and o.requires_grad]
    if not pairs:
        return "no differentiable output"
    expected = torch.autograd.grad([o for o, _ in pairs], [leaves[i] for i in wrt], [c for _, c in pairs],
                                   allow_unused=True)
    ms_cotangents = [None if c is None else to_ms(c) for c in cotangents]

    def loss(*inputs):
        outs = op(*inputs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        total = None
        for o, c in zip(outs, ms_cotangents):
            if c is not None:
                term = (o * c).sum()
                total = term if total is None else total + term
        return total

    got = ms.grad(loss, grad_position=tuple(wrt))(*[to_ms(t) for t in sample])
    got = got if isinstance(got, tuple) else (got,)
    got = tuple(to_torch(g) for g in got)
    expected = tuple(torch.zeros_like(sample[i]) if e is None else e for i, e in zip(wrt, expected))
    compare(got, expected, what="gradient")


def _empty(op, sample, reference, compare, name):
    if any(t.dim() == 0 for t in sample):
        return "a 0-dim input has no dimension to empty"
    part = tuple(t[:0] for t in sample)
    try:
        expected = _as_tuple(reference(*part))
    except Exception:  # noqa: BLE001 - the reference refuses empty inputs: so must the operator, clearly
        return _expect_error(op, part, name)
    compare(_call(op, part), expected)


def _non_contiguous(op, sample, reference, compare, name):
    import mindspore as ms

    from ._core.convert import to_ms

    if not any(t.dim() >= 2 for t in sample):
        return "no input of rank >= 2"
    # The same values, laid out transposed: ms.Tensor(...).T is a view MindSpore's PyNative does not copy.
    inputs = [to_ms(t.transpose(-1, -2).contiguous()).swapaxes(-1, -2) if t.dim() >= 2 else to_ms(t)
              for t in sample]
    assert ms.get_context("mode") == ms.PYNATIVE_MODE
    compare(_outputs(op(*inputs)), _as_tuple(reference(*sample)))


def _wrong_dtype(op, sample, reference, compare, name):
    for dtype in _TRIED_DTYPES:
        if dtype == sample[0].dtype:
            continue
        bad = (sample[0].to(dtype), *sample[1:])
        try:
            reference(*bad)
        except Exception:  # noqa: BLE001 - this dtype is refused by the reference: the operator must refuse it
            return _expect_error(op, bad, name)
    return "the reference accepts every dtype tried"


def _core_orders(op, sample, reference, compare, name):
    from .ascendc import runtime

    results = {}
    for order in ("in_order", "reversed", "threads"):
        with runtime.emulator(order=order):
            results[order] = _call(op, sample)
    first = results["in_order"]
    for order, got in results.items():
        _comparer(True, None, None)(got, first, what=f"{order} against in_order")
    compare(first, _as_tuple(reference(*sample)))


# ---- helpers ----------------------------------------------------------------------------------------------------

def _expect_error(op, inputs, name):
    try:
        _outputs(op(*[_to_ms(t) for t in inputs]))
    except Exception as exc:  # noqa: BLE001 - any error type, as long as it names the operator
        if name not in str(exc):
            raise AssertionError(f"the error does not name {name}: {type(exc).__name__}: {exc}") from None
        return None
    raise AssertionError(f"inputs the reference refuses ({', '.join(str(t.dtype) for t in inputs)}) gave no error")


def _to_ms(t):
    from ._core.convert import to_ms

    return to_ms(t)


def _call(op, sample):
    return _outputs(op(*[_to_ms(t) for t in sample]))


def _outputs(out):
    from ._core.convert import to_torch

    return tuple(to_torch(o) for o in _as_tuple(out))


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _cell(op):
    from ._core.cells import OpCell

    return OpCell(op)


def _ms_dtype(dtype: torch.dtype):
    from ._core import dtypes as _dtypes

    return _dtypes.to_ms(dtype)


def _name_of(op) -> str:
    inner = getattr(op, "op", op)
    name_for_errors = getattr(inner, "name_for_errors", None)
    return name_for_errors() if callable(name_for_errors) else type(op).__name__


def _comparer(exact: bool, rtol, atol):
    def compare(got, expected, what: str = "output"):
        expected = tuple(e.detach() for e in expected)
        if len(got) != len(expected):
            raise AssertionError(f"{len(got)} {what}s, the reference has {len(expected)}")
        for i, (g, e) in enumerate(zip(got, expected)):
            if g.dtype != e.dtype or g.shape != e.shape:
                raise AssertionError(f"{what} {i}: {g.dtype} {tuple(g.shape)}, the reference gives {e.dtype} "
                                     f"{tuple(e.shape)}")
            if exact:
                torch.testing.assert_close(g, e, rtol=0, atol=0, equal_nan=True,
                                           msg=lambda m: f"{what} {i} (bit-exact comparison): {m}")
            else:
                torch.testing.assert_close(g, e, rtol=rtol, atol=atol, msg=lambda m: f"{what} {i}: {m}")
    return compare


class LanguageModellingLoss(torch.nn.Module):
    """A causal language model's loss on its own input (`lm(input_ids=ids, labels=ids, use_cache=False).loss`): the
    module to port for training a transformers decoder, whole or through an adapter (tests and benchmarks)."""

    def __init__(self, lm: torch.nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=ids, labels=ids, use_cache=False).loss


@contextlib.contextmanager
def same_kernels_as_port(model: torch.nn.Module):
    """torch's `model`, inside the block, computing its layers with the kernels a port's evaluation graphs use where
    they differ from torch's own: torchao's int8 weight-only linear layers by ATen's `_weight_int8pack_mm` (one
    rounding; torchao widens the int8 matrix and rounds twice: docs/porting.md#quantized-models-torchao). The
    reference for comparing a ported quantized model bit for bit, greedy tokens included. It sets those layers'
    `forward` for the block's length: do not port or run the model from another thread meanwhile."""
    from torchao.quantization import Int8Tensor

    from ._core.torch_private import weight_int8pack_mm

    patched = []
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if isinstance(module, torch.nn.Linear) and isinstance(weight, Int8Tensor) and weight.act_quant_kwargs is None:
            def forward(x, weight=weight, bias=module.bias):
                rows = weight_int8pack_mm(x.reshape(-1, x.shape[-1]), weight.qdata, weight.scale.flatten().to(x.dtype))
                out = rows.reshape(*x.shape[:-1], rows.shape[-1])
                return out if bias is None else out + bias
            module.forward = forward
            patched.append(module)
    try:
        yield model
    finally:
        for module in patched:
            del module.forward
