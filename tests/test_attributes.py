"""Attributes travel from Python keyword arguments to typed C++ values, in both modes, without stale caches."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import aot_ops
from aot_ops import AotOp
from support import assert_same, run_forward, sample

ALL_KINDS = {
    "b": True,
    "i": -7,
    "f": 0.625,
    "s": "tanh",
    "il": [3, -1, 4],
    "fl": [0.5, -1.25],
    "i2": [[1, 2], [3], []],
    "f2": [[0.25], [1.5, -2.5]],
}


def echo(library, attrs):
    op = AotOp(library, "AttrEcho", attrs=attrs)
    (out,) = run_forward(op, [torch.zeros(1)])
    return out.tolist()


def expected_echo(a):
    out = [float(a["b"]), float(a["i"]), a["f"], float(len(a["s"]))] + [float(ord(c)) for c in a["s"]]
    out += [float(len(a["il"]))] + [float(v) for v in a["il"]]
    out += [float(len(a["fl"]))] + list(a["fl"])
    out += [float(len(a["i2"]))]
    for row in a["i2"]:
        out += [float(len(row))] + [float(v) for v in row]
    out += [float(len(a["f2"]))]
    for row in a["f2"]:
        out += [float(len(row))] + list(row)
    return out


def test_all_eight_attribute_kinds_round_trip(user_library, mode):
    assert echo(user_library, ALL_KINDS) == expected_echo(ALL_KINDS)  # the values are exact in float32


def test_changed_attribute_values_reach_the_kernel(user_library, mode):
    changed = dict(ALL_KINDS, b=False, i=12, s="none", il=[], i2=[[5, 6, 7]])
    assert echo(user_library, changed) == expected_echo(changed)
    assert echo(user_library, ALL_KINDS) == expected_echo(ALL_KINDS)


def test_missing_attribute_names_operator_attribute_and_kind(user_library, mode):
    attrs = {k: v for k, v in ALL_KINDS.items() if k != "s"}
    with pytest.raises(RuntimeError, match=r"AttrEcho: attribute 's' \(expected str\): the attribute is missing"):
        echo(user_library, attrs)
    assert echo(user_library, ALL_KINDS) == expected_echo(ALL_KINDS)


def test_wrongly_typed_attribute_names_operator_attribute_and_kind(user_library, mode):
    with pytest.raises(RuntimeError, match=r"AttrEcho: attribute 'il' \(expected list of int\): \S"):
        echo(user_library, dict(ALL_KINDS, il="3,1,4"))
    assert echo(user_library, ALL_KINDS) == expected_echo(ALL_KINDS)


@pytest.mark.parametrize("slopes", [(0.1, 0.3, 0.1, 0.3)])
def test_slope_changes_the_result_every_time(slopes, mode):
    x = sample((4, 5), torch.float32)
    for slope in slopes:
        (y,) = run_forward(aot_ops.leaky_relu(negative_slope=slope), [x])
        assert_same(y, F.leaky_relu(x, slope))


def test_gelu_modes_differ_and_match_torch(mode):
    x = sample((64,), torch.float64)
    (exact,) = run_forward(aot_ops.gelu(), [x])
    (tanh,) = run_forward(aot_ops.gelu(approximate="tanh"), [x])
    assert_same(exact, F.gelu(x))
    assert_same(tanh, F.gelu(x, approximate="tanh"))
    assert not torch.equal(exact, tanh)


def test_invalid_attribute_value_fails_at_init_with_the_kernels_explanation(mode):
    x = sample((3,), torch.float32)
    with pytest.raises(RuntimeError, match=r'Gelu: kernel initialisation failed: attribute \'approximate\' must be '
                                           r'"none" or "tanh", got "erf"'):
        run_forward(aot_ops.gelu(approximate="erf"), [x])
    (y,) = run_forward(aot_ops.gelu(), [x])
    assert_same(y, F.gelu(x))


def test_configurations_get_their_own_identity_and_are_cached():
    a, b = aot_ops.leaky_relu(negative_slope=0.1), aot_ops.leaky_relu(negative_slope=0.3)
    assert a is aot_ops.leaky_relu(negative_slope=0.1)
    assert a.attrs["aot_ops_identity"] != b.attrs["aot_ops_identity"]
    assert aot_ops.sum(dim=1) is aot_ops.sum(dim=[1])


def test_reduction_dims_list_and_keepdim(mode):
    x = sample((2, 3, 4, 5), torch.float32)
    for dims, keepdim in (([1, 3], False), ([-1], True), ([], False), ([0, 1, 2, 3], True)):
        (s,) = run_forward(aot_ops.sum(dim=dims, keepdim=keepdim), [x])
        (m,) = run_forward(aot_ops.mean(dim=dims, keepdim=keepdim), [x])
        assert_same(s, torch.sum(x, dims, keepdim=keepdim))
        assert_same(m, torch.mean(x, dims, keepdim=keepdim))


def test_repeated_reduction_dim_is_refused(mode):
    with pytest.raises(RuntimeError, match=r"SumDims: dim 1 appears multiple times in the list of dims"):
        run_forward(aot_ops.sum(dim=[1, -1]), [sample((2, 3), torch.float32)])


def test_permute_rejects_a_wrong_permutation(mode):
    with pytest.raises(RuntimeError, match=r"Permute: number of dims don't match in permute"):
        run_forward(aot_ops.permute([1, 0]), [sample((2, 3, 4), torch.float32)])


def test_floats_from_python_arrive_as_exact_doubles(user_library, mode):
    """MindSpore keeps float attributes as float32; aot_ops sends them as text, which ms_ext reads back exactly."""
    exact = dict(ALL_KINDS, f=0.1, fl=[1e-5, 1 / 3])
    assert echo(user_library, exact) == expected_echo(exact)


def test_float_set_by_hand_is_read_as_mindspores_float32(user_library, mode):
    op = AotOp(user_library, "AttrEcho", attrs=dict(ALL_KINDS, f=0.0))
    op.add_prim_attr("f", 0.1)  # straight to MindSpore, which keeps a float32
    (out,) = run_forward(op, [torch.zeros(1)])
    assert out[2].item() == float(np.float32(0.1))


def test_ready_operators_use_the_exact_float(mode):
    x = sample((5,), torch.float64)
    (y,) = run_forward(aot_ops.leaky_relu(negative_slope=0.1), [-x.abs()])
    assert torch.equal(y, F.leaky_relu(-x.abs(), 0.1))  # float32's 0.1 differs in the 8th digit
    w, b = sample((5,), torch.float64, 1), sample((5,), torch.float64, 2)
    (z,) = run_forward(aot_ops.layer_norm([5], eps=1e-5), [x.reshape(1, 5), w, b])
    assert torch.equal(z, F.layer_norm(x.reshape(1, 5), [5], w, b, eps=1e-5))
