"""Conformance of the ATen bridge on PyTorch's own test suite (the OpInfo database).

    python -m aot_ops conformance [--ops add,mul] [--samples 3] [--ported] [--json report.json]
    python -m aot_ops conformance --argument-types

For every OpInfo (torch.testing._internal.common_methods_invocations.op_db) and its CPU float32 sample inputs:
1. run the op in torch eager while a TorchDispatchMode records the ATen calls it makes;
2. replay those calls through the bridge inside MindSpore (aot_ops.aten: the AtenOp entry point), in PyNative,
   and each call once more as a GRAPH_MODE cell;
3. compare outputs with torch eager, and the gradient (MindSpore autodiff through the bridged operators' backward
   kernels) with torch autograd;
4. with --ported, also port each sample's call as a network (aot_ops.from_torch: torch.export, then the graph
   reader), because export keeps operators that eager decomposes before a dispatch mode sees them
   (F.interpolate(scale_factor=...) is upsample_nearest2d.vec with a `float[]?` argument in an exported graph,
   upsample_nearest2d.default with `float?` ones in eager).
The samples checked are the op's first ones, chosen so that every way of calling it among its samples (which
non-tensor arguments are given, and their types) comes first: interpolate by size and by scale_factor.
`--argument-types` checks the other way round, over the schemas: every argument type the bridge claims
(aot_ops/_aten/argtypes.py), optional or not, encoded for real operators and read back by the kernel's own reader.
Ops that are not tensor -> tensor (factories, random, data-dependent output sizes, non-tensor results) are listed
as out of scope with the reason, judged per sample by behaviour, not by an operator's tags: a sample is random when
two seeds give different results, and a call value-sized when it cannot run on fake tensors (shapes, no values). Factory calls inside an op (torch.zeros in a composite) are replayed as the
constants they produced; in-place calls are replayed with their functional overload.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from .._core.convert import to_ms, to_torch
from .._core.mindspore_private import end_aborted_gradient
from .._core.torch_private import (FakeTensorMode, TorchDispatchMode, all_schemas, op_db, schema_of, tree_flatten,
                                   tree_map)
from ..errors import Error

RTOL, ATOL = 1e-4, 1e-5


class OutOfScope(Error):
    """The op is not a tensor -> tensor operator the bridge is meant for."""


class SampleOutOfScope(OutOfScope):
    """This sample is not (it draws random numbers, or sizes an output by values); the op's other samples may be."""


class StageFailure(Error):
    """A sample failed in one stage: forward_pynative, forward_graph or gradient."""

    def __init__(self, stage: str, cause: BaseException):
        super().__init__(f"{stage}: {cause}")
        self.stage, self.cause = stage, cause


@contextlib.contextmanager
def _stage(name: str):
    """Attribute any failure inside the block to stage `name` (whatever sample it happens on)."""
    try:
        yield
    except OutOfScope:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure is a result of the stage
        end_aborted_gradient()  # a failure inside a gradient's forward would leave PyNative recording
        raise StageFailure(name, exc) from exc


@dataclass
class OpResult:
    name: str
    in_scope: bool = True
    reason: str = ""               # out-of-scope reason, or the first failure
    samples: int = 0               # samples checked (in scope)
    out_of_scope_samples: int = 0  # samples that are not tensor -> tensor (a random one among deterministic ones)
    forward_pynative: bool | None = None
    forward_graph: bool | None = None
    ported: bool | None = None     # None: not asked (--ported), or no sample could be exported
    differentiable: bool = False   # OpInfo.supports_autograd
    gradient: bool | None = None   # None: not checked (not differentiable, or no float input/output)
    aten_ops: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Call:
    func: Any          # OpOverload
    args: tuple
    kwargs: dict
    out: Any


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls: list[Call] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.calls.append(Call(func, args, kwargs, out))
        return out


def _tensors(value) -> list[torch.Tensor]:
    return [v for v in tree_flatten(value)[0] if isinstance(v, torch.Tensor)]


def _qualified(func) -> str:
    s = schema_of(func)
    return f"{s.name}.{s.overload_name}" if s.overload_name else s.name


def _is_constant_producer(func, args, kwargs) -> bool:
    """Calls whose result the replay takes as a constant: factories (no tensor argument) and lift_fresh."""
    return not _tensors((args, kwargs)) or schema_of(func).name in ("aten::lift_fresh", "aten::lift_fresh_copy")


def _functional_of(func):
    """aten::add_.Tensor -> aten::add.Tensor (the replay of an in-place call)."""
    schema = schema_of(func)
    base = schema.name.split("::")[1]
    if not base.endswith("_"):
        return None
    packet = getattr(torch.ops.aten, base[:-1], None)
    if packet is None:
        return None
    return getattr(packet, schema.overload_name or "default", None)


def record(op, sample) -> tuple[list[Call], Any]:
    recorder = _Recorder()
    with torch.no_grad(), recorder:
        out = op(sample.input, *sample.args, **sample.kwargs)
    return recorder.calls, out


_UNINITIALISED = {"aten::empty_like", "aten::new_empty", "aten::new_empty_strided", "aten::empty_strided",
                  "aten::empty", "aten::empty_permuted"}


def classify(calls: list[Call], out) -> None:
    """Raises OutOfScope for what the bridge does not cover."""
    if not _tensors(out):
        raise OutOfScope("returns no tensor")
    # Tensors holding an uninitialised allocation: made by an empty-like call, or views and aliases of one
    # (empty_like(x).detach() is still uninitialised memory). A call that writes a tensor (zero_, fill_, an
    # out= overload) clears the mark.
    uninitialised: dict[int, str] = {}
    for call in calls:
        schema = schema_of(call.func)
        source = None
        if schema.name in _UNINITIALISED:
            source = _qualified(call.func)
        elif any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):  # a view
            source = next((uninitialised[id(t)] for t in _tensors((call.args, call.kwargs))
                           if id(t) in uninitialised), None)
        for t in _tensors(call.out):
            if source is None:
                uninitialised.pop(id(t), None)
            else:
                uninitialised[id(t)] = source
    for t in _tensors(out):
        if id(t) in uninitialised and t.numel() > 0:  # an empty allocation of no elements is fully defined
            raise OutOfScope(f"output is an uninitialised allocation ({uninitialised[id(t)]}) or is written "
                             "through views of one, which the replay cannot follow")
    if not calls:
        raise OutOfScope("makes no ATen call (Python-level op)")
    for call in calls:
        tags = call.func.tags
        name = _qualified(call.func)
        returns = [str(r.type) for r in schema_of(call.func).returns]
        if returns and any(r not in ("Tensor", "List[Tensor]") for r in returns):
            raise OutOfScope(f"returns a non-tensor ({name} -> {', '.join(returns)})")
        # A tag says what an operator MAY do; whether this call does is judged by its behaviour, as the bridge
        # judges calls (index with integer indices is in scope, a boolean index is not; attention with
        # dropout_p = 0 is, with dropout_p > 0 it is not).
        if torch.Tag.nondeterministic_seeded in tags and (_always_random(name) or _call_draws_random_numbers(call)):
            raise SampleOutOfScope(f"random ({name})")
        if (torch.Tag.dynamic_output_shape in tags or torch.Tag.data_dependent_output in tags) \
                and not _sizes_follow_shapes(call):
            raise SampleOutOfScope(f"data-dependent output ({name})")


def _identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        return torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)
    return torch.equal(a, b)


def _always_random(name: str) -> bool:
    """An operator whose every call draws random numbers (randn_like, multinomial), as the bridge's policy says,
    even where a sample draws none (an empty tensor, probabilities of 0 and 1)."""
    from .._core.native_state import aten_refusal

    return name.startswith("aten::") and "random" in aten_refusal(name)


def _call_draws_random_numbers(call: Call) -> bool:
    """Whether two runs of one call under different seeds differ (an op that reseeds around it, as OpInfo's
    randn_like does, is still random inside)."""
    results = []
    for seed in (1, 2):
        with torch.random.fork_rng(), torch.no_grad():
            torch.manual_seed(seed)
            results.append([t.clone() for t in _tensors(call.func(*call.args, **call.kwargs))])  # in-place: self
    return not all(_identical(a, b) for a, b in zip(*results))


def draws_random_numbers(opinfo, sample) -> str:
    """The random call of a sample whose results differ between two seeds ("" when they do not: dropout with
    p = 0 or in evaluation, attention with dropout_p = 0). Judged on the whole sample too, as a random call may be
    an untagged in-place one (the math attention's bernoulli_)."""
    results, calls = [], []
    for seed in (1, 2):
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            recorded, out = record(opinfo.op, sample)
        results.append(_tensors(out))
        calls = recorded
    if all(_identical(a, b) for a, b in zip(*results)):
        return ""
    tagged = [c for c in calls if torch.Tag.nondeterministic_seeded in c.func.tags]
    return _qualified((tagged or calls)[0].func) if (tagged or calls) else "no ATen call"


def _sizes_follow_shapes(call: Call) -> bool:
    """Whether the call's output sizes follow from its inputs' shapes: it runs on fake tensors (shapes and dtypes,
    no values), where an output sized by values (nonzero, a boolean index) raises. A call with no fake kernel is
    taken to depend on values, as its tag says."""
    mode = FakeTensorMode()
    fake = lambda v: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v  # noqa: E731
    args, kwargs = tree_map(fake, (call.args, call.kwargs))
    try:
        with mode:
            call.func(*args, **kwargs)
    except Exception:  # noqa: BLE001 - DynamicOutputShapeException, data-dependent guards, no fake kernel
        return False
    return True


def run_calls(calls: list[Call], torch_inputs: list[torch.Tensor], ms_inputs: list, graph: bool = False) -> dict:
    """{id(torch tensor): MindSpore tensor} for every tensor the calls produced, computed through the bridge."""
    from .._aten.operator import operator_for
    from .._aten.schema import bind

    values = {id(t): m for t, m in zip(torch_inputs, ms_inputs)}

    def ms_of(value):
        if isinstance(value, torch.Tensor):
            if id(value) not in values:  # a tensor made outside the recorded calls: a constant
                values[id(value)] = to_ms(value)
            return values[id(value)]
        if isinstance(value, (list, tuple)):
            return type(value)(ms_of(v) for v in value)
        return value

    def bridged(func, args, kwargs):
        operator, tensors = operator_for(bind(func, args, kwargs))
        return _run_graph(operator, tensors) if graph else operator(*tensors)

    for call in calls:
        if not schema_of(call.func).returns:
            continue  # a check that returns nothing (aten::_linalg_check_errors): it already passed in torch
        if _is_constant_producer(call.func, call.args, call.kwargs):
            for t in _tensors(call.out):
                values[id(t)] = to_ms(t)
            continue
        if schema_of(call.func).name == "aten::copy_":
            # self.copy_(src) as functional operators that have gradients (aten::copy has none in torch).
            self_, src = call.args[0], call.args[1]
            expanded = bridged(torch.ops.aten.expand.default, (ms_of(src), list(self_.shape)), {})
            values[id(self_)] = bridged(torch.ops.aten._to_copy.default, (expanded,), {"dtype": self_.dtype})
            for t in _tensors(call.out):
                values[id(t)] = values[id(self_)]
            continue
        func, mutated = call.func, None
        if schema_of(func).is_mutable:
            func = _functional_of(func)
            if func is None:
                raise RuntimeError(f"in-place call {_qualified(call.func)} has no functional overload")
            mutated = call.args[0]
        result = bridged(func, ms_of(call.args), ms_of(call.kwargs))
        results = list(result) if isinstance(result, tuple) else [result]
        produced = _tensors(call.out)
        if mutated is not None:
            values[id(mutated)] = results[0]
        for t, r in zip(produced, results):
            values[id(t)] = r
    return values


def _run_graph(operator, tensors):
    """One bridged call as its own GRAPH_MODE cell."""
    import mindspore as ms

    from .._core.cells import OpCell

    previous = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        return OpCell(operator)(*tensors)
    finally:
        ms.set_context(mode=previous)


def _close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    if actual.shape != expected.shape:
        raise AssertionError(f"shape {tuple(actual.shape)} != {tuple(expected.shape)}")
    if actual.dtype != expected.dtype:
        raise AssertionError(f"dtype {actual.dtype} != {expected.dtype}")
    if expected.dtype in (torch.uint16, torch.uint32, torch.uint64):
        actual, expected = actual.long(), expected.long()
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL, equal_nan=True)


def check_sample(opinfo, sample, result: OpResult, graph: bool, gradient: bool, ported: bool = False) -> None:
    if any(t.layout != torch.strided for t in _tensors((sample.input, sample.args, sample.kwargs))):
        raise OutOfScope("sparse tensors")
    calls, out = record(opinfo.op, sample)
    classify(calls, out)
    random_call = draws_random_numbers(opinfo, sample)
    if random_call:
        raise SampleOutOfScope(f"random ({random_call})")
    result.aten_ops = sorted(set(result.aten_ops) | {_qualified(c.func) for c in calls})
    torch_inputs = _tensors((sample.input, sample.args, sample.kwargs))
    expected = _tensors(out)

    with _stage("forward_pynative"):
        ms_inputs = [to_ms(t) for t in torch_inputs]
        values = run_calls(calls, torch_inputs, ms_inputs)
        for e in expected:
            _close(to_torch(values[id(e)]), e)
        result.forward_pynative = True

    if graph:
        with _stage("forward_graph"):
            values = run_calls(calls, torch_inputs, ms_inputs, graph=True)
            for e in expected:
                _close(to_torch(values[id(e)]), e)
            result.forward_graph = True

    if ported:
        with _stage("ported"):
            _check_ported(opinfo, sample, result, torch_inputs, ms_inputs, expected)

    if gradient:
        with _stage("gradient"):
            _check_gradient(opinfo, sample, result, calls, torch_inputs, ms_inputs, expected)


class _SampleCall(torch.nn.Module):
    """The op called on one sample, with the sample's tensors as the module's inputs (its other arguments fixed),
    as a network calls it."""

    def __init__(self, op, sample, tensors: list[torch.Tensor]):
        super().__init__()
        self.op, self.sample, self.tensors = op, sample, tensors

    def forward(self, *tensors):
        s = _rebuild(self.sample, self.tensors, list(tensors))
        return self.op(s.input, *s.args, **s.kwargs)


def _check_ported(opinfo, sample, result: OpResult, torch_inputs, ms_inputs, expected) -> None:
    """The sample's call exported and ported (from_torch, per node); an op that torch.export itself cannot
    trace leaves the stage unverified."""
    from .. import from_torch

    module = _SampleCall(opinfo.op, sample, torch_inputs)
    detached = tuple(t.detach() for t in torch_inputs)
    try:
        torch.export.export(module, detached, strict=False)
    except Exception:  # noqa: BLE001 - torch.export's own limits are not the bridge's
        return
    cell = from_torch(module, detached)
    outputs = cell(*ms_inputs)
    outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    if len(outputs) != len(expected):
        raise AssertionError(f"{len(outputs)} outputs, torch has {len(expected)}")
    for o, e in zip(outputs, expected):
        _close(to_torch(o), e.detach())
    result.ported = True


def _check_gradient(opinfo, sample, result: OpResult, calls, torch_inputs, ms_inputs, expected) -> None:
    import mindspore as ms

    # OpInfo marks the inputs torch differentiates (requires_grad); others (a loss's target, batch norm's
    # running statistics) are constants for the gradient.
    diff = [i for i, t in enumerate(torch_inputs) if t.requires_grad and t.dtype.is_floating_point]
    outs = [e for e in expected if e.dtype.is_floating_point]
    if not diff or not outs:
        return
    gen = torch.Generator().manual_seed(0)
    cotangents = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs]
    leaves = [t.detach().clone().requires_grad_(i in diff) for i, t in enumerate(torch_inputs)]
    sample_leaves = _rebuild(sample, torch_inputs, leaves)
    torch_out = _tensors(opinfo.op(sample_leaves.input, *sample_leaves.args, **sample_leaves.kwargs))
    pairs = [(o, c) for o, c in zip([o for o in torch_out if o.dtype.is_floating_point], cotangents)
             if o.requires_grad]
    if not pairs:
        return
    expected_grads = torch.autograd.grad([o for o, _ in pairs], [leaves[i] for i in diff],
                                         [c for _, c in pairs], allow_unused=True)
    ms_cot = [to_ms(c) for c in cotangents]

    def loss(*diff_inputs):
        inputs = list(ms_inputs)
        for i, x in zip(diff, diff_inputs):
            inputs[i] = x
        vals = run_calls(calls, torch_inputs, inputs)
        total = 0
        for e, c in zip(outs, ms_cot):
            total = total + (vals[id(e)] * c).sum()
        return total

    grads = ms.grad(loss, grad_position=tuple(range(len(diff))))(*[ms_inputs[i] for i in diff])
    grads = grads if isinstance(grads, tuple) else (grads,)
    for g, e, i in zip(grads, expected_grads, diff):
        _close(to_torch(g), e if e is not None else torch.zeros_like(torch_inputs[i]))
    result.gradient = True


def _rebuild(sample, old: list[torch.Tensor], new: list[torch.Tensor]):
    """The sample with its tensors replaced (same structure), for the autograd reference."""
    mapping = {id(o): n for o, n in zip(old, new)}

    def swap(v):
        return mapping.get(id(v), v) if isinstance(v, torch.Tensor) else v

    return type(sample)(tree_map(swap, sample.input), args=tree_map(swap, sample.args),
                        kwargs=tree_map(swap, sample.kwargs))


def _call_pattern(sample) -> tuple:
    """How a sample calls its op: the type of each non-tensor argument it gives (None: left out)."""
    kind = lambda v: "tensor" if isinstance(v, torch.Tensor) else type(v).__name__  # noqa: E731
    positional = tuple(kind(v) for v in sample.args)
    named = tuple(sorted((k, kind(v)) for k, v in sample.kwargs.items()))
    return positional, named


def pick_samples(inputs: list, count: int) -> list:
    """`count` samples, the first of each call pattern first (in the op's order), then the others in order."""
    seen, firsts, rest = set(), [], []
    for i, sample in enumerate(inputs):
        pattern = _call_pattern(sample)
        (rest if pattern in seen else firsts).append(i)
        seen.add(pattern)
    return [inputs[i] for i in sorted((firsts + rest)[:count])]


def check_op(opinfo, samples: int, graph: bool, ported: bool = False) -> OpResult:
    result = OpResult(name=opinfo.name + (f".{opinfo.variant_test_name}" if opinfo.variant_test_name else ""))
    start = time.perf_counter()
    if torch.float32 not in opinfo.supported_dtypes("cpu"):
        result.in_scope, result.reason = False, "no float32 support on CPU"
        return result
    try:
        inputs = pick_samples(list(opinfo.sample_inputs("cpu", torch.float32,
                                                        requires_grad=bool(opinfo.supports_autograd))), samples)
    except Exception as exc:  # noqa: BLE001 - an OpInfo that cannot make float32 samples
        result.in_scope, result.reason = False, f"no float32 samples ({type(exc).__name__})"
        return result
    if not inputs:
        result.in_scope, result.reason = False, "no float32 samples"
        return result
    gradient = result.differentiable = bool(opinfo.supports_autograd)
    skipped = []  # why samples were out of scope: judged per sample (dropout with p = 0 is in scope, p > 0 is not)
    for k, sample in enumerate(inputs):
        try:
            check_sample(opinfo, sample, result, graph=graph and result.samples == 0, gradient=gradient,
                         ported=ported)
            result.samples += 1
        except SampleOutOfScope as exc:
            skipped.append(str(exc))
            continue
        except OutOfScope as exc:
            result.in_scope, result.reason = False, str(exc)
            break
        except StageFailure as failure:
            # Attributed to the stage that raised, on whichever sample: a forward failure on sample 2 is a
            # forward failure, and the op's gradient is then not verified either.
            setattr(result, failure.stage, False)
            if failure.stage != "gradient" and result.differentiable:
                result.gradient = False
            text = str(failure.cause).strip()
            text = text.splitlines()[0] if text else type(failure.cause).__name__
            result.reason = f"{failure.stage} (sample {k}): {text[:300]}"
            break
        except Exception as exc:  # noqa: BLE001 - tracing the op in torch failed: its forward cannot be bridged
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            result.forward_pynative = False
            if result.differentiable:
                result.gradient = False
            result.reason = f"forward_pynative (sample {k}): {text[:300]}"
            break
    result.out_of_scope_samples = len(skipped)
    if skipped and result.samples == 0 and result.forward_pynative is None:
        result.in_scope, result.reason = False, skipped[0]
    result.seconds = time.perf_counter() - start
    return result


def select_ops(names: list[str] | None):
    database = op_db()
    if not names:
        return list(database)
    wanted = set(names)
    return [o for o in database if o.name in wanted or
            f"{o.name}.{o.variant_test_name}" in wanted]


# A value of each schema type the bridge claims (argtypes.ARG_TYPES), for check_argument_types; a str argument takes
# its default (an operator's strings are its own: a reduction name, a rounding mode), so a str with no default is
# not sampled.
_TYPE_SAMPLES = {
    "Tensor": lambda: torch.ones(2, 3), "List[Tensor]": lambda: [torch.ones(2, 3), torch.ones(2, 3)],
    "List[Optional[Tensor]]": lambda: [None, torch.zeros(2, dtype=torch.long)],
    "int": lambda: 1, "SymInt": lambda: 1, "List[int]": lambda: [1, 1], "List[SymInt]": lambda: [1, 1],
    "float": lambda: 0.1, "List[float]": lambda: [0.1, 2.5], "bool": lambda: True, "List[bool]": lambda: [True],
    "number": lambda: 0.1, "ScalarType": lambda: torch.float64, "Layout": lambda: torch.strided,
    "Device": lambda: "cpu", "MemoryFormat": lambda: torch.contiguous_format, "str": None,
}


_STR_SAMPLES = {"rounding_mode": "floor"}  # optional strings whose default is None


def _sample_value(arg, type_name: str):
    """A value for the argument, or raises LookupError when there is none to give: a sample of a claimed type (a
    str's default, not None), the default (None included) of a type the table does not claim."""
    if type_name not in _TYPE_SAMPLES:
        if not arg.has_default_value():
            raise LookupError(arg.name)
        return arg.default_value
    make = _TYPE_SAMPLES[type_name]
    if make is not None:
        return make()
    if arg.name in _STR_SAMPLES:
        return _STR_SAMPLES[arg.name]
    if not arg.has_default_value() or arg.default_value is None:
        raise LookupError(arg.name)
    return arg.default_value


@dataclass
class TypeResult:
    type: str                 # the schema type, "Optional[...]" when the argument is optional
    operators: list[str] = field(default_factory=list)  # where a value of it was encoded and read back
    failure: str = ""         # the first refusal of a sampled call, naming operator and argument


def check_argument_types(per_type: int = 3) -> list[TypeResult]:
    """For every schema argument type the bridge claims, optional or not: a value of it (not None) in up to
    `per_type` ATen operators that the kernel's policy runs, encoded as aot_ops encodes calls and read back by the
    kernel's own attribute reader (aot_ops_aten_call_refusal reads the packed attributes every fused program and
    every PyNative front call carries; MindSpore's own attributes are read by the same kinds). Types that no ATen
    schema uses (SymInt reads as int in a schema) are left out; one that no operator could sample is reported
    with no operators."""
    from .._aten.argtypes import ARG_TYPES, real_type
    from .._aten.encode import encode
    from .._aten.schema import BoundCall, check_in_scope
    from .._core.native_state import aten_refusal

    results = {(name, optional): TypeResult(f"Optional[{name}]" if optional else name)
               for name in ARG_TYPES for optional in (False, True)}
    used = set()
    for schema in all_schemas():
        if not schema.name.startswith("aten::") or schema.is_mutable or not schema.returns:
            continue
        args = [a for a in schema.arguments if not a.is_out]
        types = [real_type(a) for a in args]
        used.update(types)
        wanted = [(t, o) for t, o in types if (t, o) in results and len(results[t, o].operators) < per_type
                  and not results[t, o].failure and t in _TYPE_SAMPLES]
        if not wanted:
            continue
        qualified = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
        if aten_refusal(qualified):
            continue
        overload = getattr(getattr(torch.ops.aten, schema.name[6:]), schema.overload_name or "default", None)
        try:
            values = [_sample_value(a, t) for a, (t, _) in zip(args, types)]
        except LookupError:
            continue
        if overload is None:
            continue
        call = BoundCall(overload, tuple(values))
        try:
            attrs, _, _ = encode(call)
            check_in_scope(call, attrs)
            failure = ""
        except (TypeError, ValueError) as exc:
            failure = f"{qualified}: {exc}"
        for key in set(wanted):
            if failure:
                results[key].failure = results[key].failure or failure
            results[key].operators.append(qualified)
    return [r for key, r in results.items() if key in used]



def summarize(results: list[OpResult]) -> dict:
    in_scope = [r for r in results if r.in_scope]
    # A differentiable op whose forward already failed counts as a gradient failure too.
    diff = [r for r in in_scope if r.differentiable]
    fwd_py = sum(1 for r in in_scope if r.forward_pynative)
    fwd_graph = sum(1 for r in in_scope if r.forward_graph)
    grad_ok = sum(1 for r in diff if r.gradient)
    pct = lambda a, b: round(100.0 * a / b, 1) if b else 0.0  # noqa: E731
    return {
        "ops": len(results), "in_scope": len(in_scope), "out_of_scope": len(results) - len(in_scope),
        "forward_pynative_ok": fwd_py, "forward_pynative_pct": pct(fwd_py, len(in_scope)),
        "forward_graph_ok": fwd_graph, "forward_graph_pct": pct(fwd_graph, len(in_scope)),
        "differentiable": len(diff), "gradient_ok": grad_ok, "gradient_pct": pct(grad_ok, len(diff)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aot_ops conformance", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", help="comma-separated OpInfo names (default: all)")
    parser.add_argument("--samples", type=int, default=3, help="sample inputs per op (default 3)")
    parser.add_argument("--no-graph", action="store_true", help="skip the GRAPH_MODE forward check")
    parser.add_argument("--ported", action="store_true", help="also port each sample as a network (from_torch)")
    parser.add_argument("--argument-types", action="store_true",
                        help="only check every schema argument type the bridge claims (no MindSpore run)")
    parser.add_argument("--json", default="conformance.json", help="where to write the report")
    args = parser.parse_args(argv)

    if args.argument_types:
        types = check_argument_types()
        for t in types:
            status = "FAIL" if t.failure else ("ok" if t.operators else "-")
            print(f"{t.type:<36} {status:<4} {t.failure or ', '.join(t.operators)}")
        return 1 if any(t.failure for t in types) else 0

    import mindspore as ms

    ms.set_device("CPU")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ops = select_ops(args.ops.split(",") if args.ops else None)
    results = []
    print(f"{'op':<40} {'scope':<6} {'fwd':<4} {'graph':<5} {'grad':<4} note")
    for opinfo in ops:
        r = check_op(opinfo, args.samples, graph=not args.no_graph, ported=args.ported)
        results.append(r)
        mark = lambda v: "-" if v is None else ("ok" if v else "FAIL")  # noqa: E731
        print(f"{r.name:<40} {'yes' if r.in_scope else 'no':<6} {mark(r.forward_pynative):<4} "
              f"{mark(r.forward_graph):<5} {mark(r.gradient):<4} {r.reason}", flush=True)
    totals = summarize(results)
    print("\ntotals:", json.dumps(totals))
    with open(args.json, "w") as fh:
        json.dump({"totals": totals, "ops": [asdict(r) for r in results]}, fh, indent=1)
    print(f"report: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
