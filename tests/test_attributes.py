"""Attributes travel from Python keyword arguments to typed C++ values, in both modes, without stale caches."""
from __future__ import annotations

import mindspore as ms
import pytest
import torch

import aot_ops
from aot_ops import AotOp
from aot_ops._core.packed_attrs import pack
from support import OpCell, assert_same, run_forward, sample, to_ms, to_torch

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


def test_wrongly_typed_attribute_is_refused_against_the_declared_kind(user_library):
    with pytest.raises(TypeError, match=r"AttrEcho: attribute 'il' must be a list of int, got '3,1,4'"):
        AotOp(user_library, "AttrEcho", attrs=dict(ALL_KINDS, il="3,1,4"))
    with pytest.raises(TypeError, match=r"AttrEcho: attribute 'b' must be a bool, got 1"):
        AotOp(user_library, "AttrEcho", attrs=dict(ALL_KINDS, b=1))


def test_wrongly_typed_attribute_set_by_hand_names_operator_attribute_and_kind(user_library, mode):
    op = AotOp(user_library, "AttrEcho", attrs=ALL_KINDS)
    op.add_prim_attr("il", "3,1,4")  # past the Python check, straight to MindSpore
    with pytest.raises(RuntimeError, match=r"AttrEcho: attribute 'il' \(expected list of int\): \S"):
        run_forward(op, [torch.zeros(1)])
    assert echo(user_library, ALL_KINDS) == expected_echo(ALL_KINDS)


def test_unknown_attribute_is_refused_where_the_operator_is_made(user_library):
    with pytest.raises(TypeError, match=r"LeakyRelu: unknown attribute 'negtive_slope' \(the kernel declares: "
                                        r"negative_slope\)"):
        AotOp(aot_ops.library_path(), "LeakyRelu", attrs={"negtive_slope": 0.2})
    # MS_EXT_KERNEL (no state) declares that the kernel reads no attributes.
    with pytest.raises(TypeError, match=r"Double: unknown attribute 'scale' \(the kernel declares: none\)"):
        AotOp(user_library, "Double", attrs={"scale": 2.0})


def test_kernel_reading_an_undeclared_attribute_names_it(user_library, mode):
    x = sample((4,), torch.float32)
    with pytest.raises(RuntimeError, match=r"ReadsUndeclared: the kernel reads attribute 'scale', which its "
                                           r"Signature does not declare"):
        run_forward(AotOp(user_library, "ReadsUndeclared", attrs={"factor": 2.0}), [x])
    # A kernel that declares nothing is not checked, on either side.
    (y,) = run_forward(AotOp(user_library, "ScaleUndeclared", attrs={"scale": 3.0}), [x])
    assert_same(y, x * 3)


def test_launches_use_the_state_parsed_once(user_library, mode):
    """The shape rule checks the output buffer at every launch with the kernel's parsed state, so repeated launches
    of one kernel parse nothing (MindSpore parses at Init and, in PyNative, at its per-call C++ shape inference)."""
    import ctypes

    parses = ctypes.CDLL(str(user_library)).user_ops_state_parses
    parses.restype = ctypes.c_int64
    cell = OpCell(AotOp(user_library, "CountedScaleOp", attrs={"scale": 1.5}))
    x = sample((3, 2), torch.float32)
    assert_same(to_torch(cell(to_ms(x))), x * 1.5)
    after_first = parses()
    for _ in range(4):
        assert_same(to_torch(cell(to_ms(x))), x * 1.5)
    per_call = (parses() - after_first) / 4
    print(f"state parses per call: {per_call}")
    assert per_call <= (0 if mode == ms.GRAPH_MODE else 1), per_call


# ---- packed attribute tables (aot_ops._core.packed_attrs.pack, read by ms_ext::Attrs::unpack) ------------------------

def packed_echo(library, attrs):
    op = AotOp(library, "PackedAttrEcho", attrs={"packed": pack(attrs)})
    (out,) = run_forward(op, [torch.zeros(1)])
    return out.tolist()


def test_packed_table_round_trips_all_eight_kinds_as_exact_doubles(user_library, mode):
    exact = dict(ALL_KINDS, f=0.1, fl=[1e-5, 2.0], s="a:1:\nb;c,2")  # not float32 values; separators in a text
    got = packed_echo(user_library, exact)
    assert got == expected_echo(exact)
    assert got[2] == 0.1 and 1e-5 in got  # exact doubles, not MindSpore's float32


def test_packed_table_reads_ints_as_floats_and_empty_lists_as_any_list(user_library):
    loose = dict(ALL_KINDS, f=3, fl=[1, 2], f2=[[1], [2, 3]], i2=[])
    assert packed_echo(user_library, loose) == expected_echo(loose)


def test_packed_table_errors_name_the_attribute(user_library):
    with pytest.raises(RuntimeError, match=r"PackedAttrEcho: attribute 'il' \(expected list of int\): "
                                           r"the attribute is a str"):
        packed_echo(user_library, dict(ALL_KINDS, il="3,1,4"))
    with pytest.raises(RuntimeError, match=r"attribute 'i' \(expected int\): the attribute is missing"):
        packed_echo(user_library, {k: v for k, v in ALL_KINDS.items() if k != "i"})
    assert packed_echo(user_library, ALL_KINDS) == expected_echo(ALL_KINDS)


@pytest.mark.parametrize("text, cause", [
    ("b:0:1:1", r"entry 'b' runs past the end of the text"),
    ("b:9:1:1\n", r"entry 'b' has no kind digit"),
    ("b:0:x:1\n", r"a length is malformed"),
    ("b:0:1:1\nb:0:1:0\n", r"an attribute appears twice"),
    (":0:1:1\n", r"an entry has no name"),
])
def test_malformed_packed_text_is_an_error_with_its_byte(user_library, text, cause):
    op = AotOp(user_library, "PackedAttrEcho", attrs={"packed": text})
    with pytest.raises(RuntimeError, match=r"PackedAttrEcho: packed attributes, at byte \d+: " + cause):
        run_forward(op, [torch.zeros(1)])


def test_pack_refuses_what_it_cannot_carry():
    with pytest.raises(ValueError, match=r"attribute name 'a:b' cannot be packed"):
        pack({"a:b": 1})
    with pytest.raises(TypeError, match=r"cannot pack attribute value \{1: 2\}"):
        pack({"a": {1: 2}})
    with pytest.raises(TypeError, match=r"cannot pack attribute value \[True, 2\]"):
        pack({"a": [True, 2]})
