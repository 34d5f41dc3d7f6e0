"""A fixed subset of PyTorch's OpInfo database through the conformance runner (the full run is
`python -m aot_ops conformance`)."""
from __future__ import annotations

import pytest
import torch

from aot_ops._core import mindspore_private
from aot_ops.tools import conformance

pytestmark = pytest.mark.slow  # PyTorch's OpInfo samples through the bridge in both modes

IN_SCOPE = ["add", "mul", "sub", "div.no_rounding_mode", "sin", "exp", "tanh", "sigmoid", "abs", "clamp",
            "where", "sum", "mean", "amax", "matmul", "mm", "bmm", "addmm", "softmax", "log_softmax",
            "nn.functional.gelu", "nn.functional.leaky_relu", "nn.functional.conv2d", "nn.functional.max_pool2d",
            "nn.functional.layer_norm", "nn.functional.mse_loss", "nn.functional.cross_entropy", "gather",
            "index_select", "topk", "sort", "max.reduction_with_dim", "cat", "transpose", "cumsum"]
# In scope by behaviour although their operators are tagged random or value-sized: indexing with integer tensors,
# attention samples without dropout (its dropout sample is skipped as random), repeat_interleave with a scalar.
IN_SCOPE += ["__getitem__", "index_put", "take_along_dim", "repeat_interleave",
             "nn.functional.scaled_dot_product_attention"]
OUT_OF_SCOPE = {"nonzero": "data-dependent output", "rand_like": "random", "masked_select": "data-dependent",
                "new_empty": "uninitialised allocation", "empty_like": "uninitialised allocation"}


@pytest.fixture(scope="module")
def results():
    names = IN_SCOPE + list(OUT_OF_SCOPE)
    ops = conformance.select_ops(names)
    found = {o.name + (f".{o.variant_test_name}" if o.variant_test_name else "") for o in ops}
    assert set(names) <= found | {n.split(".")[0] for n in found}, f"unknown OpInfo names: {set(names) - found}"
    return {r.name: r for r in (conformance.check_op(o, samples=2, graph=True) for o in ops)}


@pytest.mark.parametrize("name", IN_SCOPE)
def test_opinfo_samples_match_torch_in_both_modes_with_gradient(results, name):
    r = results[name]
    assert r.in_scope, r.reason
    assert r.forward_pynative and r.forward_graph, r.reason
    # differentiable (OpInfo's supports_autograd): the gradient was checked; otherwise it was not asked
    assert r.gradient is (True if r.differentiable else None), r.reason


@pytest.mark.parametrize("name,why", list(OUT_OF_SCOPE.items()))
def test_ops_that_are_not_tensor_to_tensor_are_listed_out_of_scope(results, name, why):
    r = results[name]
    assert not r.in_scope and why in r.reason


def test_scope_is_judged_per_sample_by_behaviour(results):
    (opinfo,) = conformance.select_ops(["nn.functional.scaled_dot_product_attention"])
    picked = conformance.pick_samples(list(opinfo.sample_inputs("cpu", torch.float32)), 4)
    random = sum(s.kwargs.get("dropout_p", 0.0) > 0 for s in picked)
    assert 1 <= random < len(picked)  # some with dropout_p > 0, some without
    attention = conformance.check_op(opinfo, samples=4, graph=False)
    assert attention.in_scope and attention.forward_pynative and attention.gradient, attention.reason
    assert attention.samples == 4 - random and attention.out_of_scope_samples == random  # the random ones only
    indexing = results["__getitem__"]
    assert indexing.in_scope and "aten::index.Tensor" in indexing.aten_ops  # integer indices: sized by shapes


def test_summary_counts():
    r = [conformance.OpResult("a", forward_pynative=True, forward_graph=True, differentiable=True, gradient=True),
         conformance.OpResult("b", forward_pynative=False, differentiable=True, reason="forward_pynative: x"),
         conformance.OpResult("c", in_scope=False, reason="random")]
    totals = conformance.summarize(r)
    assert totals["in_scope"] == 2 and totals["forward_pynative_pct"] == 50.0 and totals["out_of_scope"] == 1
    assert totals["differentiable"] == 2 and totals["gradient_pct"] == 50.0



def _inject(monkeypatch, fail_at: int):
    """Make the `fail_at`-th bridged run of the op's calls raise (1-based)."""
    real = conformance.run_calls
    count = {"n": 0}

    def run_calls(*args, **kwargs):
        count["n"] += 1
        if count["n"] == fail_at:
            raise RuntimeError("injected failure")
        return real(*args, **kwargs)

    monkeypatch.setattr(conformance, "run_calls", run_calls)


def test_a_forward_failure_on_a_later_sample_is_a_forward_failure(monkeypatch):
    """Sample 0 runs PyNative forward (run 1), GRAPH forward (2) and the gradient (3); sample 1's PyNative
    forward is run 4. Its failure is a forward failure, and the gradient, not verified on every sample, does
    not count as passing."""
    (opinfo,) = conformance.select_ops(["mul"])  # several samples
    _inject(monkeypatch, fail_at=4)
    result = conformance.check_op(opinfo, samples=2, graph=True)
    assert result.forward_pynative is False and result.forward_graph is True and result.gradient is False
    assert result.reason == "forward_pynative (sample 1): injected failure"


def test_a_gradient_failure_leaves_the_forward_passing(monkeypatch):
    (opinfo,) = conformance.select_ops(["mul"])  # several samples
    _inject(monkeypatch, fail_at=3)
    result = conformance.check_op(opinfo, samples=2, graph=True)
    assert result.forward_pynative is True and result.forward_graph is True and result.gradient is False
    assert result.reason == "gradient (sample 0): injected failure"
    # the failure inside the gradient's forward left MindSpore recording no later eager call (mindspore-notes.md)
    assert not mindspore_private.recording_gradients()


# Upsampling by a scale factor: eager records upsample_*.default (`float?` scales), an exported graph keeps
# upsample_*.vec (`float[]? scale_factors`), so these are also checked as ported networks.
PORTED = ["nn.functional.interpolate." + mode for mode in ("nearest", "linear", "bilinear", "bicubic", "area")]


@pytest.mark.parametrize("name", PORTED)
def test_interpolate_by_size_and_by_scale_factor_ports_like_torch(name):
    (opinfo,) = conformance.select_ops([name])
    samples = conformance.pick_samples(list(opinfo.sample_inputs("cpu", torch.float32)), 2)
    assert [s.kwargs.get("scale_factor") is not None for s in samples] == [False, True]  # both ways of calling
    r = conformance.check_op(opinfo, samples=2, graph=False, ported=True)
    assert r.in_scope and r.samples == 2, r.reason
    assert r.forward_pynative and r.ported and r.gradient, r.reason
