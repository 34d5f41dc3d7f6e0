"""Any ATen operator through the generic entry point: forward and gradient against torch, both modes, and errors."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import mindspore as ms
import pytest
import torch
import torch.nn.functional as F

from aot_ops import aten
from support import ListCall, OpCell, as_tuple, assert_same, run_forward, run_vjp, sample, to_ms, to_torch, \
    torch_vjp


def f64(*shape, seed=0):
    return sample(shape, torch.float64, seed)


def index(high, *shape, seed=0):
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))


@dataclass(frozen=True)
class Case:
    name: str                      # the aten operator aten.op() makes
    fixed: dict                    # its non-tensor arguments
    inputs: Callable[[], list]     # the tensors it is called with
    reference: Callable            # torch on the same tensors
    gradient: bool = True
    tolerances: dict = field(default_factory=dict)


CASES = [
    Case("aten::leaky_relu", {"negative_slope": 0.2}, lambda: [f64(3, 4)], lambda x: F.leaky_relu(x, 0.2)),
    Case("aten::add.Tensor", {"alpha": 2}, lambda: [f64(3, 4), f64(4, seed=1)], lambda a, b: torch.add(a, b, alpha=2)),
    Case("aten::where.self", {}, lambda: [f64(3, 4) > 0, f64(3, 4, seed=1), f64(1, 4, seed=2)], torch.where),
    Case("aten::sum.dim_IntList", {"dim": [1], "keepdim": True}, lambda: [f64(3, 4, 5)],
         lambda x: torch.sum(x, [1], keepdim=True)),
    Case("aten::amax", {"dim": [0, 2]}, lambda: [f64(3, 4, 5)], lambda x: torch.amax(x, [0, 2])),
    Case("aten::addmm", {"beta": 0.5, "alpha": 2.0}, lambda: [f64(5), f64(3, 4, seed=1), f64(4, 5, seed=2)],
         lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0)),
    Case("aten::bmm", {}, lambda: [f64(2, 3, 4), f64(2, 4, 5, seed=1)], torch.bmm),
    Case("aten::convolution", {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "transposed": False,
                               "output_padding": [0, 0], "groups": 1},
         lambda: [f64(2, 3, 6, 6), f64(4, 3, 3, 3, seed=1), f64(4, seed=2)],
         lambda x, w, b: F.conv2d(x, w, b, padding=1)),
    Case("aten::max_pool2d_with_indices", {"kernel_size": [2, 2]}, lambda: [f64(2, 3, 6, 6)],
         lambda x: F.max_pool2d(x, 2, return_indices=True)),
    Case("aten::avg_pool2d", {"kernel_size": [2, 2]}, lambda: [f64(2, 3, 6, 6)], lambda x: F.avg_pool2d(x, 2)),
    Case("aten::native_layer_norm", {"normalized_shape": [8], "eps": 1e-5},
         lambda: [f64(4, 8), f64(8, seed=1), f64(8, seed=2)],
         lambda x, w, b: torch.native_layer_norm(x, [8], w, b, 1e-5)),
    Case("aten::group_norm", {"num_groups": 2}, lambda: [f64(2, 4, 3, 3), f64(4, seed=1), f64(4, seed=2)],
         lambda x, w, b: F.group_norm(x, 2, w, b)),
    Case("aten::gather", {"dim": 1}, lambda: [f64(3, 4), index(4, 3, 2)], lambda x, i: torch.gather(x, 1, i)),
    Case("aten::index_select", {"dim": 0}, lambda: [f64(5, 3), index(5, 4)],
         lambda x, i: torch.index_select(x, 0, i)),
    Case("aten::scatter.src", {"dim": 1}, lambda: [f64(3, 5), torch.tensor([[0, 3], [1, 4], [2, 0]]), f64(3, 2)],
         lambda x, i, s: torch.scatter(x, 1, i, s)),
    Case("aten::_softmax", {"dim": 1, "half_to_float": False}, lambda: [f64(3, 4)], lambda x: torch.softmax(x, 1)),
    Case("aten::_log_softmax", {"dim": 1, "half_to_float": False}, lambda: [f64(3, 4)],
         lambda x: torch.log_softmax(x, 1)),
    Case("aten::mse_loss", {"reduction": "sum"}, lambda: [f64(3, 4), f64(3, 4, seed=1)],
         lambda x, y: F.mse_loss(x, y, reduction="sum")),
    Case("aten::nll_loss", {"weight": None, "reduction": "mean"},
         lambda: [torch.log_softmax(f64(4, 5), 1), index(5, 4)], lambda x, t: F.nll_loss(x, t)),
    Case("aten::smooth_l1_loss", {"reduction": "none", "beta": 0.5}, lambda: [f64(3, 4), f64(3, 4, seed=1)],
         lambda x, y: F.smooth_l1_loss(x, y, reduction="none", beta=0.5)),
    Case("aten::topk", {"k": 2}, lambda: [f64(3, 5)], lambda x: tuple(torch.topk(x, 2))),
    Case("aten::sort", {"dim": -1}, lambda: [f64(3, 5)], lambda x: tuple(torch.sort(x, -1))),
    Case("aten::max.dim", {"dim": 1}, lambda: [f64(3, 5)], lambda x: tuple(torch.max(x, 1))),
    Case("aten::cumsum", {"dim": 1}, lambda: [f64(3, 4)], lambda x: torch.cumsum(x, 1)),
    Case("aten::transpose.int", {"dim0": 0, "dim1": 1}, lambda: [f64(3, 4)], lambda x: x.transpose(0, 1)),
    Case("aten::clamp", {"min": -0.5, "max": 0.5}, lambda: [f64(3, 4)], lambda x: torch.clamp(x, -0.5, 0.5)),
    Case("aten::pow.Tensor_Scalar", {"exponent": 3}, lambda: [f64(3, 4)], lambda x: torch.pow(x, 3)),
    # Tagged random or value-sized, but this call is neither (the call decides, not the tag): integer indices,
    # attention without dropout, one_hot with num_classes, repeat_interleave with output_size, dropout in eval.
    Case("aten::index.Tensor", {"indices": [aten.INPUT, None, aten.INPUT]},
         lambda: [f64(5, 3, 4), index(5, 2, 3), index(4, 2, 3, seed=1)],
         lambda x, i, j: torch.ops.aten.index.Tensor(x, [i, None, j])),
    Case("aten::scaled_dot_product_attention", {"scale": 0.3},
         lambda: [f64(2, 3, 5, 8), f64(2, 3, 6, 8, seed=1), f64(2, 3, 6, 8, seed=2), f64(5, 6, seed=3)],
         lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3)),
    Case("aten::scaled_dot_product_attention", {"attn_mask": None, "is_causal": True, "enable_gqa": True},
         lambda: [f64(2, 4, 5, 8), f64(2, 2, 5, 8, seed=1), f64(2, 2, 5, 8, seed=2)],
         lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)),
    Case("aten::scaled_dot_product_attention", {},
         lambda: [f64(2, 3, 5, 8), f64(2, 3, 5, 8, seed=1), f64(2, 3, 5, 8, seed=2),
                  torch.ones(5, 5, dtype=torch.bool).tril()],
         lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)),
    Case("aten::_scaled_dot_product_flash_attention_for_cpu", {"dropout_p": 0.0, "is_causal": True},
         lambda: [f64(2, 3, 5, 8), f64(2, 3, 5, 8, seed=1), f64(2, 3, 5, 8, seed=2)],
         lambda q, k, v: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)),
    Case("aten::one_hot", {"num_classes": 6}, lambda: [index(6, 3, 2)], lambda i: F.one_hot(i, 6), gradient=False),
    Case("aten::repeat_interleave.Tensor", {"output_size": 6}, lambda: [torch.tensor([1, 2, 3])],
         lambda r: torch.repeat_interleave(r, output_size=6), gradient=False),
    Case("aten::dropout", {"p": 0.5, "train": False}, lambda: [f64(3, 4)], lambda x: F.dropout(x, 0.5, False)),
]
IDS = [c.name.split("::")[1] + (f"_{k}" if k else "")
       for c, k in zip(CASES, [sum(d.name == c.name for d in CASES[:i]) for i, c in enumerate(CASES)])]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_matches_torch(case, mode):
    inputs = case.inputs()
    actual = run_forward(aten.op(case.name, **case.fixed), inputs)
    expected = as_tuple(case.reference(*inputs))
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert_same(a, e.contiguous())


@pytest.mark.parametrize("case", [c for c in CASES if c.gradient], ids=[i for c, i in zip(CASES, IDS) if c.gradient])
def test_gradient_matches_torch_autograd(case, mode):
    inputs = case.inputs()
    outputs = as_tuple(case.reference(*inputs))
    cotangents = [sample(o.shape, o.dtype, seed=50 + k) for k, o in enumerate(outputs)]
    expected = torch_vjp(case.reference, inputs, cotangents)
    actual = run_vjp(aten.op(case.name, **case.fixed), inputs, cotangents)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert_same(a, e)


def test_pynative_functional_calls_like_torch_ops_aten():
    x, y = f64(3, 4), f64(4, seed=1)
    out = aten.add.Tensor(to_ms(x), to_ms(y), alpha=2)
    assert_same(torch.from_numpy(out.asnumpy()), torch.add(x, y, alpha=2))
    values, indices = aten.max(to_ms(x), 1)  # overload picked from the arguments, as torch does: max.dim
    assert_same(torch.from_numpy(indices.asnumpy()), torch.max(x, 1).indices)
    idx, values = torch.tensor([2, 0]), f64(2, 4, seed=3)
    put = aten.index_put(to_ms(x), [to_ms(idx)], to_ms(values))  # a list of optional tensors
    assert_same(torch.from_numpy(put.asnumpy()), torch.index_put(x, [idx], values))
    cat = aten.cat([to_ms(x), to_ms(x)], 1)
    assert_same(torch.from_numpy(cat.asnumpy()), torch.cat([x, x], 1))


def test_pynative_gradient_through_a_functional_chain():
    x = f64(3, 4)
    dx = ms.grad(lambda t: aten.sum(aten.mul.Tensor(aten.sin(t), t)))(to_ms(x))
    leaf = x.clone().requires_grad_()
    torch.sum(torch.sin(leaf) * leaf).backward()
    assert_same(torch.from_numpy(dx.asnumpy()), leaf.grad)


def test_operators_are_cached_per_configuration():
    assert aten.op("aten::leaky_relu", negative_slope=0.2) is aten.op("aten::leaky_relu", negative_slope=0.2)
    assert aten.op("aten::leaky_relu", negative_slope=0.2) is not aten.op("aten::leaky_relu", negative_slope=0.3)


def test_operator_cache_is_bounded_and_keeps_the_recently_used(monkeypatch):
    from aot_ops._aten import operator

    monkeypatch.setattr(operator, "MAX_CACHED_OPERATORS", 3)
    monkeypatch.setattr(operator, "_operators", operator.collections.OrderedDict())
    kept = aten.op("aten::leaky_relu", negative_slope=0.5)
    for slope in (0.1, 0.2, 0.3, 0.4):
        aten.op("aten::leaky_relu", negative_slope=slope)
        assert aten.op("aten::leaky_relu", negative_slope=0.5) is kept  # used again: stays cached
    assert len(operator._operators) == 3
    x = sample((5,), torch.float32)
    (y,) = run_forward(kept, [x])  # an operator evicted or not keeps working
    assert_same(y, F.leaky_relu(x, 0.5))


def test_float_arguments_keep_double_precision():
    """MindSpore stores float attributes as float32; the bridge sends floats as text so ATen gets the double."""
    x = torch.tensor([1.0], dtype=torch.float64)
    (y,) = run_forward(aten.op("aten::mul.Scalar", other=0.1), [x])
    assert y.item() == 0.1


# ---- errors -----------------------------------------------------------------------------------------------------

def assert_next_call_works():
    x = f64(2, 3)
    (y,) = run_forward(aten.op("aten::leaky_relu", negative_slope=0.2), [x])
    assert_same(y, F.leaky_relu(x, 0.2))


def test_unknown_operator():
    with pytest.raises(AttributeError, match=r"unknown ATen operator 'aten::not_an_operator'"):
        aten.op("aten::not_an_operator")
    with pytest.raises(AttributeError, match=r"aten::add has no overload 'Nope'"):
        aten.op("aten::add.Nope")
    assert_next_call_works()


def test_wrong_arguments_show_the_schema():
    with pytest.raises(TypeError, match=r"aten::add.Tensor\(Tensor self, Tensor other, \*, Scalar alpha=1\) -> "
                                        r"Tensor: missing required argument 'other'"):
        aten.add.Tensor(to_ms(f64(2)))
    with pytest.raises(TypeError, match=r"aten::leaky_relu: no overload matches these arguments:\n.*"
                                        r"argument 'negative_slope' must be number, not str"):
        aten.leaky_relu(to_ms(f64(2)), "steep")
    with pytest.raises(TypeError, match=r"got an unexpected keyword argument 'slope'"):
        aten.op("aten::leaky_relu", slope=0.1)
    assert_next_call_works()


@pytest.mark.parametrize("name,why", [("aten::nonzero", "its output size depends on the input values"),
                                      ("aten::masked_select", "its output size depends on the input values"),
                                      ("aten::bernoulli", "it draws random numbers"),
                                      ("aten::add_.Tensor", "no overload|modifies its arguments")])
def test_operators_that_are_not_tensor_to_tensor_are_refused_at_creation(name, why):
    with pytest.raises((ValueError, AttributeError, TypeError), match=why):
        aten.op(name)
    assert_next_call_works()


@pytest.mark.parametrize("name,fixed,why", [
    ("aten::scaled_dot_product_attention", {"dropout_p": 0.1},
     r"it draws random numbers, which cannot match torch \(dropout_p > 0.*with dropout_p=0 it is bridged\)"),
    ("aten::dropout", {"p": 0.5, "train": True}, "it draws random numbers"),
    ("aten::one_hot", {}, r"its output size depends on the input values \(num_classes=-1 .*give num_classes\)"),
    ("aten::repeat_interleave.Tensor", {}, r"its output size depends on the input values \(give output_size\)"),
])
def test_calls_that_draw_random_numbers_or_size_by_values_are_refused_at_creation(name, fixed, why):
    with pytest.raises(ValueError, match=f"{name} cannot be bridged: {why}"):
        aten.op(name, **fixed)
    assert_next_call_works()


def test_a_boolean_index_is_refused_when_its_dtype_is_known(mode):
    """index.Tensor is made without knowing its indices' dtype; the output inference, which sees it, refuses a
    mask (a boolean index sizes its result by its values), and integer indices keep working."""
    op = aten.op("aten::index.Tensor", indices=[aten.INPUT])
    x = f64(5, 3)
    with pytest.raises(ValueError, match=r"aten::index.Tensor cannot be bridged: its output size depends on the input "
                                         r"values \(a boolean index selects as many elements"):
        run_forward(op, [x, x[:, 0] > 0])
    (y,) = run_forward(op, [x, index(5, 4)])
    assert_same(y, x[index(5, 4)])
    with pytest.raises(ValueError, match="a boolean index"):
        aten.index(to_ms(x), [to_ms(x[:, 0] > 0)])
    assert_next_call_works()


def test_shape_errors_are_found_while_inferring(mode):
    with pytest.raises(ValueError, match=r"aten::mm: cannot run on inputs \(\[2, 3\] float64, \[4, 5\] float64\)"):
        run_forward(aten.op("aten::mm"), [f64(2, 3), f64(4, 5)])
    assert_next_call_works()


def test_aten_runtime_error_has_torchs_message_without_backtrace(mode):
    with pytest.raises(RuntimeError) as info:
        run_forward(aten.op("aten::index_select", dim=0), [f64(3, 2), torch.tensor([0, 7])])
    text = str(info.value)
    assert "aten::index_select: index out of range in self" in text
    assert "Exception raised from" not in text
    assert_next_call_works()


# ---- forms of arguments -----------------------------------------------------------------------------------------

def test_eval_mode_batch_norm_follows_the_cpu_kernel(mode):
    """The meta kernel says save_mean/save_invstd have C elements; the CPU kernel returns empty ones. Outputs are
    inferred with fake CPU tensors, which follow the CPU kernel."""
    x, w, b, rm, rv = f64(2, 4, 3, 3), f64(4, seed=1), f64(4, seed=2), f64(4, seed=3), f64(4, seed=4).abs() + 0.5
    op = aten.op("aten::_native_batch_norm_legit_no_training", momentum=0.1, eps=1e-5)
    actual = run_forward(op, [x, w, b, rm, rv])
    expected = torch.ops.aten._native_batch_norm_legit_no_training(x, w, b, rm, rv, 0.1, 1e-5)
    assert [tuple(a.shape) for a in actual] == [(2, 4, 3, 3), (0,), (0,)]
    assert_same(actual[0], expected[0])
    cotangent = f64(2, 4, 3, 3, seed=9)
    grads = run_vjp(op, [x, w, b, rm, rv], [cotangent, torch.zeros(0, dtype=torch.float64),
                                            torch.zeros(0, dtype=torch.float64)])
    reference = torch_vjp(lambda *t: torch.ops.aten._native_batch_norm_legit_no_training(*t, rm, rv, 0.1, 1e-5)[0],
                          [x, w, b], [cotangent])
    for a, e in zip(grads[:3], reference):
        assert_same(a, e)
    assert not grads[3].any() and not grads[4].any()  # running statistics are not differentiable


def test_optional_tensors_left_out_are_none(mode):
    logits, target = f64(4, 10), index(10, 4)
    op = aten.op("aten::cross_entropy_loss")
    (loss,) = run_forward(op, [logits, target])
    assert_same(loss, F.cross_entropy(logits, target))
    weight = f64(10, seed=3).abs()
    (weighted,) = run_forward(op, [logits, target, weight])
    assert_same(weighted, F.cross_entropy(logits, target, weight))
    (dlogits, dtarget) = run_vjp(op, [logits, target], [torch.tensor(1.0, dtype=torch.float64)])
    assert_same(dlogits, torch_vjp(lambda a: F.cross_entropy(a, target), [logits],
                                   [torch.tensor(1.0, dtype=torch.float64)])[0])
    assert not dtarget.any()
    norm = aten.op("aten::layer_norm", normalized_shape=[4])
    (y,) = run_forward(norm, [f64(3, 4)])
    assert_same(y, F.layer_norm(f64(3, 4), [4]))


def test_wrong_number_of_tensors_is_an_error_naming_the_operator(mode):
    with pytest.raises((TypeError, RuntimeError), match=r"aten::neg: expected 1 input\(s\), got 2"):
        run_forward(aten.op("aten::neg"), [f64(2), f64(2)])
    with pytest.raises((TypeError, RuntimeError), match=r"aten::cross_entropy_loss: expected 2 to 3 inputs, got 1"):
        aten.op("aten::cross_entropy_loss").op(to_ms(f64(4, 10)))
    assert_next_call_works()


@pytest.mark.parametrize("name,reference", [("aten::cat", lambda *t: torch.cat(t, 1)),
                                            ("aten::stack", lambda *t: torch.stack(t, 1))], ids=["cat", "stack"])
def test_tensor_lists_at_call_time(name, reference, mode):
    op = aten.op(name, dim=1)
    for count in (2, 3):
        tensors = [f64(2, 3, seed=k) for k in range(count)]
        (out,) = run_forward(ListCall(op), tensors)
        assert_same(out, reference(*tensors))
        cotangent = f64(*out.shape, seed=7)
        grads = run_vjp(ListCall(op), tensors, [cotangent])
        for a, e in zip(grads, torch_vjp(reference, tensors, [cotangent])):
            assert_same(a, e)


def test_sizes_from_input_shapes_in_one_dynamic_graph():
    op = aten.op("aten::view", size=[aten.size(0, 0) * 3, 2], out_shapes=[[aten.size(0, 0) * 3, 2]],
                 out_dtypes=[torch.float64])
    cell = OpCell(op)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        cell.set_inputs(ms.Tensor(shape=[None, 6], dtype=ms.float64))
        for batch in (1, 4, 7):
            x = f64(batch, 6, seed=batch)
            assert_same(to_torch(cell(to_ms(x))), x.view(batch * 3, 2))
            dx = ms.grad(cell)(to_ms(x))
            assert_same(to_torch(dx), torch.ones(batch, 6, dtype=torch.float64))
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    for batch in (2, 5):  # PyNative, the same operator
        x = f64(batch, 6)
        assert_same(to_torch(op(to_ms(x))), x.view(batch * 3, 2))


class FirstSum(ms.nn.Cell):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, x):
        return self.op(x).sum()


@pytest.mark.parametrize("make,reference", [
    (lambda: aten.op("aten::unbind.int"), torch.unbind),
    (lambda: aten.op("aten::unbind.int", out_shapes=[[aten.size(0, 1), 3]], out_dtypes=[torch.float64]),
     torch.unbind),
    (lambda: aten.op("aten::split.Tensor", split_size=4, dim=1), lambda t: torch.split(t, 4, dim=1)),
], ids=["unbind", "unbind_cpp_shapes", "split"])
def test_a_list_of_one_tensor_is_the_tensor_itself(make, reference, mode):
    # torch returns a list of one tensor (unbind over a size-1 dimension: an LSTM's initial state); MindSpore's
    # one-output operators return the tensor itself (a tuple of one breaks GRAPH_MODE's autodiff), so it is that.
    op = make()
    x = f64(1, 4, 3)
    expected = reference(x)
    assert len(expected) == 1
    result = OpCell(op)(to_ms(x))
    assert isinstance(result, ms.Tensor)
    assert_same(to_torch(result), expected[0])
    dx = ms.grad(FirstSum(op))(to_ms(x))
    assert_same(to_torch(dx), torch.ones_like(x))


def test_a_size_as_a_scalar_argument_is_evaluated_at_run_time():
    # x / batch: what a mean over a dynamic batch divides by, given to a Scalar argument
    op = aten.op("aten::div.Scalar", other=aten.size(0, 0), out_shapes=[[aten.size(0, 0), 3]],
                 out_dtypes=[torch.float64])
    cell = OpCell(op)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        cell.set_inputs(ms.Tensor(shape=[None, 3], dtype=ms.float64))
        for batch in (2, 5):
            x = f64(batch, 3, seed=batch)
            assert_same(to_torch(cell(to_ms(x))), x / batch)
            assert_same(to_torch(ms.grad(cell)(to_ms(x))), torch.full((batch, 3), 1 / batch, dtype=torch.float64))
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    x = f64(4, 3)
    assert_same(to_torch(op(to_ms(x))), x / 4)


def test_several_outputs_with_run_time_sizes_have_gradients(mode):
    # the backward of an operator of two outputs whose shapes MindSpore infers in C++ takes both cotangents
    op = aten.op("aten::split_with_sizes", split_sizes=[2, 3], dim=1,
                 out_shapes=[[aten.size(0, 0), 2], [aten.size(0, 0), 3]], out_dtypes=[torch.float64] * 2)
    x = f64(4, 5)
    cotangents = [f64(4, 2, seed=1), f64(4, 3, seed=2)]
    expected = torch_vjp(lambda t: torch.split(t, [2, 3], dim=1), [x], cotangents)
    actual = run_vjp(op, [x], cotangents)
    assert len(actual) == 1
    assert_same(actual[0], expected[0])


def test_factories_run_only_in_programs_and_never_read_files():
    # A program (from_torch's fuse=True) may create a tensor from sizes alone (an RNN's zero state sized by the
    # batch); a lone operator, which runs whatever its attributes name, may not; nothing may read a file.
    from aot_ops._core.native_state import aten_refusal

    assert "a factory function" in aten_refusal("aten::zeros")
    assert aten_refusal("aten::zeros", allow_factories=True) == ""
    assert aten_refusal("aten::from_file", allow_factories=True) == "it reads a file"


def test_dynamic_shapes_without_output_shapes_are_a_clear_error():
    cell = OpCell(aten.op("aten::neg"))
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        cell.set_inputs(ms.Tensor(shape=[None, 3], dtype=ms.float64))
        with pytest.raises((ValueError, RuntimeError), match=r"aten::neg: input shapes are unknown until run time "
                                                              r"\(\[-1, 3\] float64.*Give its output shapes"):
            cell(to_ms(f64(2, 3)))
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert_next_call_works()


@pytest.mark.parametrize("name,message", [
    ("", r"'' is not an operator name"),
    ("aten::.Tensor", r"'aten::.Tensor' is not an operator name"),
    ("aten::add.", r"'aten::add.' is not an operator name"),
    ("prims::neg", r"prims::neg.*it is not an ATen operator \(prims:: operators are torch's own"),
    ("mylib::nothing", r"unknown operator \(none is registered with torch.library\) 'mylib::nothing'"),
    ("aten::__dict__", r"unknown ATen operator 'aten::__dict__'"),
])
def test_malformed_operator_names_are_named_in_the_error(name, message):
    with pytest.raises((ValueError, AttributeError), match=message):
        aten.op(name)
    assert_next_call_works()


def test_integers_beyond_int64_name_the_argument():
    with pytest.raises(TypeError, match=r"aten::add.*argument 'other': 1180591620717411303424 does not fit in int64"):
        aten.add(to_ms(f64(2)), 2 ** 70)
    assert_next_call_works()


def _torch_message_constant(name: str) -> str:
    import re

    from support import REPO

    source = (REPO / "kernels" / "aten" / "generic" / "aten_plan.h").read_text()
    return re.search(rf'constexpr const char \*{name} = "(.*)";', source).group(1).replace("\\'", "'")


def test_the_torch_messages_the_bridge_reacts_to_are_still_worded_so():
    """aten_plan.h recognises two torch errors by their text; the installed torch must still produce it."""
    import numpy as np

    resize = _torch_message_constant("kTorchResizeRefused")
    with pytest.raises(RuntimeError, match=resize):
        torch.from_numpy(np.zeros(2)).resize_(10)  # a storage torch does not own, like MindSpore's buffers

    not_differentiable = _torch_message_constant("kTorchNotDifferentiable")
    x, w, b = torch.randn(4, 3), torch.ones(3), torch.zeros(3)
    running_mean = torch.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError) as info:
        torch.ops.aten.native_batch_norm(x, w, b, running_mean, torch.ones(3), True, 0.1, 1e-5)
    assert not_differentiable + "running_mean'" in str(info.value)


def test_every_argument_type_the_bridge_claims_is_read_back_by_the_kernel():
    """A value of each schema type (optional or not) in real operators, encoded as a call is encoded and read by
    the kernel's attribute reader: a `float[]?` once reached the kernel as a string it refused."""
    from aot_ops.tools.conformance import check_argument_types

    results = check_argument_types(per_type=2)
    assert not [f"{r.type}: {r.failure}" for r in results if r.failure]
    unsampled = {r.type for r in results if not r.operators}
    assert unsampled <= {"List[float]", "Optional[List[Optional[Tensor]]]"}, unsampled  # no runnable operator
    assert {"Optional[List[float]]", "Optional[float]", "List[int]", "Optional[str]", "number"} <= \
        {r.type for r in results if r.operators}
