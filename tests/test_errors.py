"""Bad input raises an error that names the operator and the cause, and the next call works."""
from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap

import mindspore as ms
import numpy as np
import pytest
import torch
from mindspore import ops

import aot_ops
from support import OpCell, assert_same, run_forward, sample

_identities = itertools.count()
X = np.array([[0.0, -0.1], [-0.2, 1.0]], np.float32)
X_LEAKY = np.array([[0.0, -0.001], [-0.002, 1.0]], np.float32)


def raw_custom(symbol, out_shape, out_dtype, library=None):
    """A hand-written ops.Custom, as users write them: shapes are not checked in Python, so the C++ checks run."""
    op = ops.Custom(f"{library or aot_ops.library_path()}:{symbol}", out_shape=out_shape, out_dtype=out_dtype,
                    func_type="aot")
    # Keep MindSpore from reusing another op's cached inference (not id(op): ids are reused after collection).
    op.add_prim_attr("test_identity", next(_identities))
    return op


def call(op, *arrays):
    return OpCell(op)(*[ms.Tensor(a) for a in arrays]).asnumpy()


def assert_next_call_works():
    np.testing.assert_allclose(call(aot_ops.leaky_relu(), X), X_LEAKY, rtol=1e-6)


def test_classic_leaky_relu_sample(mode):
    op = raw_custom("LeakyRelu", lambda x: x, lambda x: x)
    np.testing.assert_allclose(call(op, X), X_LEAKY, rtol=1e-6)


UNSUPPORTED_INT32 = (r"LeakyRelu: input 0 has dtype int32, which this operator does not support "
                     r"\(supported: float16, float32, float64, bfloat16\)")


def test_unsupported_dtype_is_refused_at_inference(mode):
    """The kernel's C++ InferType (or aot_ops' Python check of its signature) refuses the dtype while MindSpore
    infers the output, before anything is launched."""
    with pytest.raises((TypeError, RuntimeError), match=UNSUPPORTED_INT32):
        call(aot_ops.leaky_relu(), np.array([1, -2], np.int32))
    assert_next_call_works()


def test_unsupported_dtype_is_refused_by_the_kernel(mode):
    """A hand-written ops.Custom skips the Python check; the C++ signature check gives the same text."""
    op = raw_custom("LeakyRelu", lambda x: x, lambda x: x)
    with pytest.raises(RuntimeError, match=UNSUPPORTED_INT32):
        call(op, np.array([1, -2], np.int32))
    assert_next_call_works()


def test_wrong_number_of_arguments_in_cpp(mode):
    op = raw_custom("LeakyRelu", lambda x, y: x, lambda x, y: x)
    with pytest.raises(RuntimeError, match=r"LeakyRelu: expected 1 input\(s\) and 1 output\(s\) \(2 parameters\), "
                                           r"but MindSpore passed 3 parameters"):
        call(op, X, X)
    assert_next_call_works()


def test_wrong_number_of_arguments_in_python(mode):
    with pytest.raises((TypeError, ValueError, RuntimeError), match=r"LeakyRelu: expected 1 input\(s\), got 2"):
        call(aot_ops.leaky_relu(), X, X)
    assert_next_call_works()


def test_mismatched_output_shape(mode):
    op = raw_custom("LeakyRelu", lambda x: [3], lambda x: x)
    with pytest.raises(RuntimeError, match=r"LeakyRelu: output 0 has shape \[3\] and dtype float32, but the "
                                           r"operator produces shape \[2, 2\] and dtype float32"):
        call(op, X)
    assert_next_call_works()


def test_mismatched_output_dtype(mode):
    op = raw_custom("LeakyRelu", lambda x: x, lambda x: ms.float64)
    with pytest.raises(RuntimeError, match=r"LeakyRelu: output 0 has shape \[2, 2\] and dtype float64, but the "
                                           r"operator produces shape \[2, 2\] and dtype float32"):
        call(op, X)
    assert_next_call_works()


def test_aten_error_has_torch_message_without_backtrace(mode):
    """dy and x of different shapes pass the output check (the gradient has x's shape), then ATen refuses them."""
    op = raw_custom("LeakyReluGrad", lambda dy, x: x, lambda dy, x: x)
    with pytest.raises(RuntimeError) as info:
        call(op, np.ones((2, 2), np.float32), np.ones((3,), np.float32))
    text = str(info.value)
    assert "LeakyReluGrad: The size of tensor a (3) must match the size of tensor b (2)" in text
    assert "Exception raised from" not in text  # c10's C++ backtrace is stripped
    assert_next_call_works()


def test_shape_error_caught_at_inference(mode):
    """The kernel's C++ shape rule rejects the shapes while MindSpore infers the output, before any launch."""
    with pytest.raises(RuntimeError, match=r"Matmul: shapes \[2, 3\] and \[4, 5\] cannot be multiplied "
                                           r"\(3 != 4\)"):
        call(aot_ops.matmul(), np.ones((2, 3), np.float32), np.ones((4, 5), np.float32))
    assert_next_call_works()


def test_last_error_is_readable_from_python():
    with pytest.raises(RuntimeError):
        call(raw_custom("LeakyRelu", lambda x: x, lambda x: x), np.array([1], np.int64))
    assert aot_ops.last_error(aot_ops.library_path()).startswith("LeakyRelu: input 0 has dtype int64")


def test_non_std_exception_becomes_an_error(user_library, mode):
    op = raw_custom("ThrowsInt", lambda x: x, lambda x: x, library=user_library)
    with pytest.raises(RuntimeError, match=r"ThrowsInt: a C\+\+ exception that does not derive from "
                                           r"std::exception was thrown"):
        call(op, X)
    assert_next_call_works()


def test_unguarded_non_std_exception_would_abort_mindspore(user_library):
    """Why the boundary matters: the same throw from a hand-written entry point kills the process."""
    script = textwrap.dedent(f"""
        import numpy as np, mindspore as ms
        from mindspore import ops
        ms.set_device("CPU")
        op = ops.Custom("{user_library}:ThrowsIntUnguarded", out_shape=lambda x: x, out_dtype=lambda x: x,
                        func_type="aot")
        try:
            op(ms.Tensor(np.ones(2, np.float32))).asnumpy()
        except Exception:
            pass
        print("survived")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "survived" not in proc.stdout


def test_error_in_backward_names_backward_kernel(mode):
    """A failing gradient kernel reports itself, and training can go on."""
    op = raw_custom("LeakyReluGrad", lambda dy, x: dy, lambda dy, x: dy)
    with pytest.raises(RuntimeError, match=r"LeakyReluGrad: input 1 has dtype int32"):
        call(op, X, np.array([[1, 2], [3, 4]], np.int32))
    x = sample((2, 2), torch.float32)
    (y,) = run_forward(aot_ops.leaky_relu(), [x])
    assert_same(y, torch.nn.functional.leaky_relu(x, 0.01))


@pytest.mark.parametrize("make, expected", [
    (lambda: aot_ops.softmax(dim=[]), r"aot_ops.softmax: dim must be an int, got \[\]"),
    (lambda: aot_ops.sum(dim=float("nan")), r"aot_ops.sum: dim must be an int, got nan"),
    (lambda: aot_ops.max(dim=1, keepdim="yes"), r"aot_ops.max: keepdim must be True or False"),
    (lambda: aot_ops.mean(dim=2**70), r"aot_ops.mean: dim=\d+ does not fit in int64"),
    (lambda: aot_ops.permute([1, "a"]), r"aot_ops.permute: dims must be an int, got 'a'"),
    (lambda: aot_ops.layer_norm(4, eps=None), r"aot_ops.layer_norm: eps must be a number, got None"),
    (lambda: aot_ops.gelu(approximate=None), r"aot_ops.gelu: approximate must be 'none' or 'tanh'"),
    (lambda: aot_ops.leaky_relu("0.2"), r"aot_ops.leaky_relu: negative_slope must be a number"),
])
def test_wrong_keyword_arguments_of_ready_operators_name_them(make, expected):
    with pytest.raises((TypeError, ValueError), match=expected):
        make()
    assert_next_call_works()


def test_unknown_aten_name_quotes_what_was_written():
    from aot_ops import aten

    with pytest.raises(AttributeError, match=r"unknown ATen operator 'aten::torch' \(read from 'torch.neg'\)"):
        aten.op("torch.neg")


def test_result_dtype_without_mindspore_equivalent_names_the_operator(mode):
    from aot_ops import aten

    half = np.zeros((2, 1), np.float16)
    with pytest.raises(TypeError, match=r"aten::add.Tensor: torch dtype torch.complex32 has no MindSpore"):
        call(aten.op("aten::add.Tensor"), half, np.array(1 + 1j, np.complex64))
    assert_next_call_works()


def test_a_refused_operator_fails_a_pytest_test_without_crashing_pytest(user_library, tmp_path):
    """pytest prints the locals of a failing test, the half-made AotOp among them: printing it used to recurse in
    MindSpore's attribute lookup until the process died (SIGSEGV) instead of reporting the error."""
    test_file = tmp_path / "test_refused.py"
    test_file.write_text(textwrap.dedent(f"""
        from aot_ops import AotOp

        def test_refused():
            AotOp({str(user_library)!r}, "Double")  # no shape or dtype rules: refused
    """))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Double: the kernel in" in result.stdout and "has no C++ shape/dtype rules" in result.stdout
    assert "1 failed" in result.stdout
