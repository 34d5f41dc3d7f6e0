"""The bundled CPU operators against torch: every dtype, both modes, forward and gradient, edge-case shapes."""
from __future__ import annotations

import builtins
import re
from dataclasses import dataclass
from typing import Callable

import pytest
import torch
import torch.nn.functional as F

import aot_ops
from support import (ALL_DTYPES, FLOAT_DTYPES, as_tuple, assert_same, run_forward, run_vjp, sample,
                     torch_vjp)


@dataclass(frozen=True)
class Case:
    make_op: Callable            # aot_ops factory
    torch_fn: Callable           # the torch reference
    shapes: tuple                # input shapes of the main test (with broadcasting where it applies)
    symbol: str                  # the kernel's name, which error messages start with


CASES = {
    "leaky_relu": Case(lambda: aot_ops.leaky_relu(negative_slope=0.2), lambda x: F.leaky_relu(x, 0.2), ((3, 4),),
                       "LeakyRelu"),
    "add": Case(aot_ops.add, torch.add, ((3, 4), (4,)), "Add"),
    "mul": Case(aot_ops.mul, torch.mul, ((2, 1, 4), (3, 1)), "Mul"),
    "sum": Case(aot_ops.sum, torch.sum, ((3, 4),), "SumDims"),
    "sum_dims": Case(lambda: aot_ops.sum(dim=(0, 2), keepdim=True), lambda x: torch.sum(x, (0, 2), keepdim=True),
                     ((2, 3, 4),), "SumDims"),
    "mean_dims": Case(lambda: aot_ops.mean(dim=-1), lambda x: torch.mean(x, -1), ((3, 4),), "MeanDims"),
    "matmul": Case(aot_ops.matmul, torch.matmul, ((2, 3, 4), (4, 5)), "Matmul"),
    "softmax": Case(lambda: aot_ops.softmax(dim=0), lambda x: torch.softmax(x, 0), ((3, 4),), "Softmax"),
    "max": Case(lambda: aot_ops.max(dim=0, keepdim=True), lambda x: tuple(torch.max(x, 0, keepdim=True)),
                ((3, 4),), "MaxDim"),
    "gelu": Case(lambda: aot_ops.gelu(approximate="tanh"), lambda x: F.gelu(x, approximate="tanh"), ((3, 4),),
                 "Gelu"),
    "gelu_exact": Case(aot_ops.gelu, F.gelu, ((3, 4),), "Gelu"),
    "layer_norm": Case(lambda: aot_ops.layer_norm([4], eps=1e-3),
                       lambda x, w, b: F.layer_norm(x, [4], w, b, eps=1e-3), ((3, 4), (4,), (4,)), "LayerNorm"),
    "permute": Case(lambda: aot_ops.permute([2, 0, 1]), lambda x: x.permute(2, 0, 1).contiguous(), ((2, 3, 4),),
                    "Permute"),
}

# Shapes for the edge cases: 0-dim, empty, and large (>= 1M elements).
SCALAR_SHAPES = {"leaky_relu": ((),), "add": ((), ()), "mul": ((), (3,)), "sum": ((),), "mean_dims": ((),),
                 "softmax": ((),), "gelu": ((),)}
EMPTY_SHAPES = {"leaky_relu": ((0, 3),), "add": ((0, 3), (3,)), "mul": ((0, 3), (0, 3)), "sum": ((0, 3),),
                "sum_dims": ((0, 3, 2),), "matmul": ((0, 4), (4, 5)), "softmax": ((0, 3),), "max": ((2, 3, 0),),
                "gelu": ((0, 3),), "layer_norm": ((0, 4), (4,), (4,)), "permute": ((0, 3, 2),)}
LARGE_SHAPES = {"leaky_relu": ((1024, 1024),), "add": ((1024, 1024), (1024,)), "mul": ((1024, 1024), (1024, 1)),
                "sum_dims": ((64, 1024, 16),), "mean_dims": ((1024, 1024),), "matmul": ((1024, 1024), (1024, 64)),
                "softmax": ((1024, 1024),), "max": ((1024, 1024),), "gelu": ((1024, 1024),),
                "layer_norm": ((1 << 18, 4), (4,), (4,)), "permute": ((64, 128, 128),)}


def torch_supports(case: Case, inputs) -> bool:
    try:
        case.torch_fn(*inputs)
        return True
    except (RuntimeError, TypeError, NotImplementedError):
        return False


def inputs_for(shapes, dtype, seed=0):
    return [sample(s, dtype, seed + i) for i, s in enumerate(shapes)]


def check_forward(case: Case, inputs):
    expected = as_tuple(case.torch_fn(*inputs))
    actual = run_forward(case.make_op(), inputs)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert_same(a, e)


def check_gradient(case: Case, inputs):
    expected_out = as_tuple(case.torch_fn(*inputs))
    cotangents = [sample(o.shape, o.dtype, seed=100 + i) for i, o in enumerate(expected_out)]
    expected = torch_vjp(case.torch_fn, inputs, cotangents)
    actual = run_vjp(case.make_op(), inputs, cotangents)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert_same(a, e)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("name", CASES)
def test_forward_matches_torch_for_every_dtype(name, dtype, mode):
    """Where ATen supports the dtype on CPU the result equals torch's; where it does not, the kernel's signature
    does not list it either, and the operator's dtype check refuses the call before the kernel runs, in both
    modes: a TypeError that names the operator and the dtype."""
    case = CASES[name]
    inputs = inputs_for(case.shapes, dtype)
    if torch_supports(case, inputs):
        check_forward(case, inputs)
    else:
        with pytest.raises(TypeError) as info:
            run_forward(case.make_op(), inputs)
        message = str(info.value)
        assert message.startswith(f"{case.symbol}: "), message
        assert re.search(rf"\b{str(dtype).replace('torch.', '')}\b", message), message  # the dtype given


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", CASES)
def test_gradient_matches_torch_autograd(name, dtype, mode):
    check_gradient(CASES[name], inputs_for(CASES[name].shapes, dtype))


def check_forward_and_gradient(name, shapes):
    inputs = inputs_for(shapes, torch.float32)
    check_forward(CASES[name], inputs)
    check_gradient(CASES[name], inputs)


@pytest.mark.parametrize("name", SCALAR_SHAPES)
def test_zero_dim_inputs(name, mode):
    check_forward_and_gradient(name, SCALAR_SHAPES[name])


@pytest.mark.parametrize("name", EMPTY_SHAPES)
def test_empty_inputs(name, mode):
    check_forward_and_gradient(name, EMPTY_SHAPES[name])


@pytest.mark.parametrize("name", LARGE_SHAPES)
def test_large_inputs(name, mode):
    assert builtins.sum(torch.Size(s).numel() for s in LARGE_SHAPES[name]) >= 1 << 20
    check_forward_and_gradient(name, LARGE_SHAPES[name])


@pytest.mark.parametrize("a_dtype,b_dtype", [(torch.int32, torch.float32), (torch.bool, torch.int8),
                                             (torch.float16, torch.float64), (torch.uint8, torch.int16)],
                         ids=str)
@pytest.mark.parametrize("name", ["add", "mul"])
def test_type_promotion_follows_torch(name, a_dtype, b_dtype, mode):
    case = CASES[name]
    inputs = [sample((3, 4), a_dtype, 0), sample((4,), b_dtype, 1)]
    check_forward(case, inputs)


@pytest.mark.parametrize("a_dtype,b_dtype", [(torch.float16, torch.float64), (torch.bfloat16, torch.float32)],
                         ids=str)
@pytest.mark.parametrize("name", ["add", "mul"])
def test_zero_dim_operand_of_a_wider_dtype_is_computed_in_the_result_dtype(name, a_dtype, b_dtype, mode):
    """MindSpore infers dtypes without ranks, so half + 0-dim double is double; it must be computed in double,
    not in half (ATen's own choice for a 0-dim operand) and then widened."""
    a, b = sample((4, 4), a_dtype, 0), sample((), b_dtype, 1)
    (actual,) = run_forward(CASES[name].make_op(), [a, b])
    expected = CASES[name].torch_fn(a.to(b_dtype), b)
    assert actual.dtype == b_dtype
    torch.testing.assert_close(actual, expected, rtol=1e-6 if b_dtype == torch.float32 else 1e-12, atol=0)


@pytest.mark.parametrize("shapes", [((4,), (4,)), ((4,), (4, 5)), ((3, 4), (4,)), ((2, 1, 3, 4), (5, 4, 2))],
                         ids=str)
def test_matmul_ranks_and_broadcast_batches(shapes, mode):
    case = CASES["matmul"]
    inputs = inputs_for(shapes, torch.float64)
    check_forward(case, inputs)
    check_gradient(case, inputs)
