"""ms_ext's argument decoding and checks, exercised through the harness (the seven raw arguments, no MindSpore)."""
from __future__ import annotations

import pytest
import torch

import aot_ops
from aot_ops._core import dtypes as _dtypes
from aot_ops import harness
from support import sample

MS_DTYPE_STRINGS = {
    **{name: _dtypes.from_ms_name(name) for name in _dtypes.NAMES},
    # aliases in MindSpore's documentation, with C's meaning
    "float": torch.float32, "int": torch.int32, "uint": torch.uint32,
}


@pytest.mark.parametrize("name", MS_DTYPE_STRINGS)
def test_every_dtype_string_maps_to_a_type_of_the_right_size(user_library, name):
    """Identity copies element by element: a wrong mapping would copy the wrong number of bytes or values."""
    dtype = MS_DTYPE_STRINGS[name]
    x = sample((3, 5), dtype, seed=1)
    y = torch.zeros_like(x)
    harness.call(user_library, "Identity", [x], [y], dtypes=[name, name])
    assert torch.equal(y.view(torch.uint8), x.view(torch.uint8))


def test_the_aliases_are_the_c_types():
    """'float' data is float32: LeakyRelu reads it as such and gets torch's answer."""
    x = torch.tensor([-2.0, 3.0])
    y = torch.empty(2)
    harness.call(aot_ops.library_path(), "LeakyRelu", [x], [y], dtypes=["float", "float"])
    assert torch.equal(y, torch.nn.functional.leaky_relu(x, 0.01))


@pytest.mark.parametrize("bad", ["float8", "string", "typetype", "", "Float32"])
def test_unknown_dtype_string_is_an_error_naming_it(bad):
    x = torch.ones(2)
    with pytest.raises(harness.AotCallError, match=f"LeakyRelu: unsupported dtype string '{bad}'"):
        harness.call(aot_ops.library_path(), "LeakyRelu", [x], [torch.empty(2)], dtypes=[bad, "float32"])


def test_dtype_rule_takes_and_gives_mindspore_names():
    """The C interface of a kernel's dtype rule speaks MindSpore's dtype names, in both directions."""
    import ctypes

    from aot_ops._native import opener as _clib
    from aot_ops._core.signature import read_signature

    path = str(aot_ops.library_path())
    signature = read_signature(path, "Add")
    for a, b in [(torch.int8, torch.float32), (torch.uint8, torch.int16), (torch.bool, torch.bool),
                 (torch.float16, torch.bfloat16), (torch.int32, torch.complex64)]:
        assert signature.output_dtypes([a, b]) == [torch.promote_types(a, b)]

    rule = getattr(_clib.open_library(path), "ms_ext_output_types_Add")
    names_out = (ctypes.c_char_p * 1)()
    assert rule(2, (ctypes.c_char_p * 2)(b"float16", b"int64"), names_out, 1) == 0
    assert names_out[0] == b"float16"
    assert rule(2, (ctypes.c_char_p * 2)(b"float8", b"int64"), names_out, 1) == -1
    assert "Add: unsupported dtype string 'float8'" in _clib.last_error(_clib.open_library(path))


def test_wrong_parameter_count_is_an_error_before_any_access():
    x = torch.ones(2)
    with pytest.raises(harness.AotCallError, match=r"Add: expected 2 input\(s\) and 1 output\(s\) \(3 parameters\), "
                                                   r"but MindSpore passed 2"):
        harness.call(aot_ops.library_path(), "Add", [x], [torch.empty(2)])


def test_zero_dim_tensor_arrives_with_null_shape():
    """The harness passes shapes[i] == NULL for 0-dim tensors, as MindSpore does."""
    x, y = torch.tensor(-4.0), torch.tensor(0.0)
    harness.call(aot_ops.library_path(), "LeakyRelu", [x], [y])
    assert y.item() == pytest.approx(-0.04)


def test_empty_tensor_without_buffer():
    x = torch.empty(0, 3)
    out = torch.full((), 7.0)  # 0 elements sum to 0
    harness.call(aot_ops.library_path(), "SumDims", [x], [out])
    assert out.item() == 0.0


def test_none_input_is_an_error():
    with pytest.raises(harness.AotCallError, match=r"Add: input 1 is None, but the operator needs a tensor"):
        harness.call(aot_ops.library_path(), "Add", [torch.ones(2), None], [torch.empty(2)])


def test_output_resized_by_the_kernel_is_an_error(user_library):
    x = torch.ones(2, 2)
    with pytest.raises(harness.AotCallError, match=r"ShrinksOutput: output 0 no longer views MindSpore's buffer "
                                                   r"of shape \[2, 2\]"):
        harness.call(user_library, "ShrinksOutput", [x], [torch.empty(2, 2)])


def test_wrong_output_shape_leaves_the_buffer_untouched():
    x = torch.ones(2, 3)
    out = torch.full((3, 2), 5.0)  # same number of elements, wrong shape
    with pytest.raises(harness.AotCallError, match=r"LeakyRelu: output 0 has shape \[3, 2\]"):
        harness.call(aot_ops.library_path(), "LeakyRelu", [x], [out])
    assert torch.equal(out, torch.full((3, 2), 5.0))


def test_last_error_is_recorded_per_thread_and_cleared_by_success():
    lib = aot_ops.library_path()
    with pytest.raises(harness.AotCallError):
        harness.call(lib, "LeakyRelu", [torch.ones(2, dtype=torch.int32)], [torch.empty(2, dtype=torch.int32)])
    assert aot_ops.last_error(lib, any_thread=False).startswith("LeakyRelu: input 0 has dtype int32")
    harness.call(lib, "LeakyRelu", [torch.ones(2)], [torch.empty(2)])
    assert aot_ops.last_error(lib, any_thread=False) == ""


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8, torch.bfloat16], ids=str)
def test_inputs_are_views_of_the_callers_buffer(user_library, dtype):
    x = sample((256, 256), dtype, seed=3)
    before = x.clone()
    y = torch.empty_like(x)
    harness.call(user_library, "IncrementInput", [x], [y])
    assert torch.equal(x, before + 1) and torch.equal(y, x)


@pytest.mark.parametrize("threads", [1, 2])
def test_kernels_use_torch_s_thread_count_on_mindspore_s_threads(user_library, mode, threads):
    """OpenMP keeps the thread count per thread: a launch on one of MindSpore's threads must still follow
    torch.set_num_threads, not use every core beside MindSpore's own threads."""
    from aot_ops import AotOp
    from support import run_forward

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        (out,) = run_forward(AotOp(user_library, "TorchThreads"), [torch.zeros(3)])
    finally:
        torch.set_num_threads(before)
    assert out.tolist() == [float(threads)] * 3


# ---- the harness with attributes: an ms_ext call extra instead of MindSpore's AotExtra -------------------------

def test_harness_passes_attributes_and_runs_init_as_mindspore_does():
    x = torch.randn(64)
    y = torch.empty(64)
    library = aot_ops.library_path()
    states = aot_ops.live_kernel_states(library)
    harness.call(library, "LeakyRelu", [x], [y], attrs={"negative_slope": 0.3})
    torch.testing.assert_close(y, torch.nn.functional.leaky_relu(x, 0.3), rtol=0, atol=0)
    assert aot_ops.live_kernel_states(library) == states  # Init's state was freed with the call extra


def test_harness_attributes_of_every_kind_reach_the_kernel(user_library):
    from test_attributes import ALL_KINDS, expected_echo

    expected = expected_echo(ALL_KINDS)
    out = torch.empty(len(expected), dtype=torch.float64)
    harness.call(user_library, "AttrEcho", [torch.zeros(1)], [out], attrs=ALL_KINDS)
    assert out.tolist() == expected


def test_harness_attribute_errors_name_operator_and_attribute(user_library):
    from test_attributes import ALL_KINDS

    attrs = {k: v for k, v in ALL_KINDS.items() if k != "s"}
    with pytest.raises(harness.AotCallError, match=r"AttrEcho: kernel initialisation failed: attribute 's' "
                                                   r"\(expected str\): the attribute is missing"):
        harness.call(user_library, "AttrEcho", [torch.zeros(1)], [torch.empty(1, dtype=torch.float64)], attrs=attrs)
    with pytest.raises(ValueError, match="give attrs or extra, not both"):
        harness.call(user_library, "AttrEcho", [torch.zeros(1)], [torch.empty(1)], attrs={}, extra=1)
