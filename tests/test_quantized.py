"""Quantized models (torchao 0.18): int8 weight-only, int8 dynamic-activation/int8-weight (W8A8) and int4
weight-only (torchao's CPU int4 layout) Llama and Qwen2 models ported with their packed weights as the cell's
Parameters, against torch running the same quantized model: logits bit for bit, greedy tokens with the key/value
cache, LoRA on a quantized base (QLoRA-style) trained to torch's losses; a weight torch.export cannot take apart
refused by name."""
from __future__ import annotations

import contextlib
import warnings

import mindspore as ms
import pytest
import torch
import transformers

import aot_ops
from aot_ops import PortError
from aot_ops._core.convert import torch_view
from aot_ops.testing import same_kernels_as_port
from collective_cases import LmLoss
from support import to_ms, to_torch

torchao_quantization = pytest.importorskip("torchao.quantization")

_SHAPE = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
              num_hidden_layers=2, vocab_size=128, attn_implementation="eager")


def _config(scheme: str):
    from torchao.prototype.quantization.int4.inference_workflow import PrototypeInt4WeightOnlyConfig

    return {"int8": torchao_quantization.Int8WeightOnlyConfig(),
            "w8a8": torchao_quantization.Int8DynamicActivationInt8WeightConfig(),
            # torchao's int4 layout with a CPU kernel (aten::_weight_int4pack_mm_for_cpu); Int4WeightOnlyConfig's
            # default layouts need the mslk package (CUDA) or have no CPU implementation
            "int4": PrototypeInt4WeightOnlyConfig(group_size=32)}[scheme]


def quantized(family: str, scheme: str) -> torch.nn.Module:
    """A 2-layer bfloat16 model with larger random weights (tiny models with the default initialisation repeat one
    token), quantized in place by torchao."""
    cls, config = {"llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig),
                   "qwen2": (transformers.Qwen2ForCausalLM, transformers.Qwen2Config)}[family]
    torch.manual_seed(0)
    model = cls(config(**_SHAPE)).to(torch.bfloat16).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(std=0.3)
    torchao_quantization.quantize_(model, _config(scheme))
    return model


class Models(dict):
    def __missing__(self, key):
        self[key] = quantized(*key)
        return self[key]


@pytest.fixture(scope="module")
def models():
    return Models()


IDS = torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("family,scheme,fuse", [
    ("llama", "int8", False), ("llama", "int8", True), ("llama", "w8a8", False), ("llama", "w8a8", True),
    ("llama", "int4", False), ("llama", "int4", True), ("qwen2", "int8", True), ("qwen2", "w8a8", True),
    ("qwen2", "int4", True)])
def test_quantized_logits_equal_torchs_bit_for_bit(models, family, scheme, fuse):
    """Each scheme as torchao runs it; and int8 weight-only ported for evaluation only as ATen's int8 kernel (torch's
    model then computed with it too, aot_ops.testing.same_kernels_as_port), within bfloat16's roundings of
    torchao's own path."""
    model = models[family, scheme]
    with torch.no_grad():
        expected = model(input_ids=IDS, use_cache=False).logits
    cell = aot_ops.from_torch(model, (), {"input_ids": IDS, "use_cache": False}, fuse=fuse)
    got = to_torch(cell(input_ids=to_ms(IDS)).logits)
    assert torch.equal(got, expected), (got - expected).abs().max()
    # the packed weights as stored: integer Parameters, the model's own bytes (no dequantized copy)
    stored = {p.name: p for p in cell.get_parameters()}
    inner = model.model.layers[0].self_attn.q_proj.weight
    first = stored["model.layers.0.self_attn.q_proj.parametrizations.weight.original0"]
    assert first.dtype == {"int8": ms.int8, "w8a8": ms.int8, "int4": ms.uint8}[scheme]
    assert torch.equal(to_torch(first), getattr(inner, inner.__tensor_flatten__()[0][0]))
    assert not any(p.dtype == ms.bfloat16 and p.name.endswith("q_proj.weight") for p in stored.values())
    if scheme == "int8":
        with torch.no_grad(), same_kernels_as_port(model):
            same_kernels = model(input_ids=IDS, use_cache=False).logits
        # one rounding a layer's product apart, through two layers of a bfloat16 model with large weights:
        # measured up to 3% of the largest logit (8 bfloat16 units); a wrong scale or transpose is far more
        torch.testing.assert_close(same_kernels, expected, rtol=0, atol=2 ** -4 * expected.abs().max().item())
        evaluation = aot_ops.from_torch(model, (), {"input_ids": IDS, "use_cache": False}, fuse=fuse,
                                        evaluation_only=True)
        got = to_torch(evaluation(input_ids=to_ms(IDS)).logits)
        assert torch.equal(got, same_kernels), (got - same_kernels).abs().max()


@pytest.mark.slow  # Inductor compiles each scheme's graph: about 20 s a scheme
@pytest.mark.parametrize("scheme", ["int8", "w8a8", "int4"])
def test_quantized_compiled_equals_torch_compile(models, scheme):
    """fuse="compile": the quantized graph compiled by AOTInductor gives what torch.compile gives for the model, bit
    for bit (both fuse the bfloat16 steps the same way; neither is eager torch's rounding)."""
    model = models["llama", scheme]
    with torch.no_grad():
        expected = torch.compile(model)(input_ids=IDS, use_cache=False).logits
    with warnings.catch_warnings():
        warnings.simplefilter("error", aot_ops.CompileFallbackWarning)  # compiled, not its interpreted fallback
        cell = aot_ops.from_torch(model, (), {"input_ids": IDS, "use_cache": False}, fuse="compile",
                                  evaluation_only=True)
    got = to_torch(cell(input_ids=to_ms(IDS)).logits)
    assert torch.equal(got, expected), (got - expected).abs().max()


def test_quantized_cell_in_graph_mode(models):
    model = models["llama", "w8a8"]
    with torch.no_grad():
        expected = model(input_ids=IDS, use_cache=False).logits
    cell = aot_ops.from_torch(model, (), {"input_ids": IDS, "use_cache": False}, fuse=True)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        got = to_torch(cell(input_ids=to_ms(IDS)).logits)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert torch.equal(got, expected), (got - expected).abs().max()


@pytest.mark.parametrize("family,scheme", [("llama", "int8"), ("qwen2", "w8a8"), ("qwen2", "int4")])
def test_quantized_lm_generates_torchs_greedy_tokens(models, family, scheme):
    model = models[family, scheme]
    prompt = IDS[:1, :5]
    with same_kernels_as_port(model) if scheme == "int8" else contextlib.nullcontext():
        expected = model.generate(prompt, max_new_tokens=32, do_sample=False)
    lm = aot_ops.from_torch_lm(model, batch_size=1, max_length=40, fuse=True)
    # share_weights (from_torch_lm's default): the model's packed weights are the cell's Parameters, held once
    weight = model.model.layers[1].mlp.down_proj.weight
    first = weight.__tensor_flatten__()[0][0]
    parameter = {p.name: p for p in lm.cell.get_parameters()}[
        "model.model.layers.1.mlp.down_proj.parametrizations.weight.original0"]
    assert getattr(weight, first).data_ptr() == torch_view(parameter).data_ptr()
    tokens = aot_ops.generate(lm, to_ms(prompt), max_new_tokens=32, generation_config=model.generation_config)
    assert to_torch(tokens).tolist() == expected.tolist()
    assert len(set(expected[0, 5:].tolist())) > 3  # a decoding that tells models apart (an end token may stop it)


def _qlora_model():
    import peft

    model = peft.get_peft_model(quantized("llama", "int8"), peft.LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    with torch.no_grad():  # B starts at zero in peft: A's first gradient would be zero too
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return model


def test_lora_on_an_int8_base_trains_to_torchs_losses():
    """QLoRA-style: the int8 base frozen, bfloat16 adapters trained by SGD in torch and, from the same start, in
    MindSpore (fused: the backward one program, as torch's); the losses equal at every step."""
    model = _qlora_model()
    loss = LmLoss(model).train()
    ids = IDS[:, :6]
    cell = aot_ops.from_torch(loss, (ids,), input_grads=False, fuse=True)
    params = cell.trainable_params()
    assert len(params) == 2 * 3 * 2 and all("lora_" in p.name for p in params)  # A and B, 3 targets, 2 layers
    grad_fn = ms.value_and_grad(cell, None, params)
    optimizer = ms.nn.SGD(params, learning_rate=0.5)
    torch_optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    for _ in range(3):
        expected = loss(ids)
        torch_optimizer.zero_grad()
        expected.backward()
        torch_optimizer.step()
        got, grads = grad_fn(to_ms(ids))
        optimizer(grads)
        assert float(got.astype(ms.float32).asnumpy()) == float(expected.detach())


def test_lora_on_an_int8_base_per_node_gives_torchs_gradients():
    """Per node MindSpore's autodiff sums a bfloat16 value's gradients in its own order: the adapters' gradients
    within bfloat16's rounding of torch's (a loss trajectory at a large rate then drifts apart, as any two
    roundings of a chaotic fit do)."""
    model = _qlora_model()
    loss = LmLoss(model).train()
    ids = IDS[:, :6]
    cell = aot_ops.from_torch(loss, (ids,), input_grads=False, fuse=False)
    params = cell.trainable_params()
    got, grads = ms.value_and_grad(cell, None, params)(to_ms(ids))
    expected = loss(ids)
    expected.backward()
    assert float(got.astype(ms.float32).asnumpy()) == float(expected.detach())
    torch_grads = {f"model.{name}": p.grad for name, p in model.named_parameters() if p.requires_grad}
    for param, grad in zip(params, grads):
        reference = torch_grads[param.name].float()
        difference = (to_torch(grad).float() - reference).norm() / reference.norm()
        assert difference <= 1e-2, (param.name, difference)  # bfloat16's epsilon: 7.8e-3


class _Tagged(torch.Tensor):
    """A tensor subclass without __tensor_flatten__: torch.export cannot take it apart."""


def test_a_weight_export_cannot_take_apart_is_refused_by_name():
    layer = torch.nn.Linear(4, 3)
    layer.weight = torch.nn.Parameter(layer.weight.detach().as_subclass(_Tagged))
    with pytest.raises(PortError, match=r"Linear: the weight 'weight' is a test_quantized\._Tagged.*"
                                        r"__tensor_flatten__.*Supported: .*torchao"):
        aot_ops.from_torch(layer, (torch.randn(2, 4),))
    plain = torch.nn.Linear(4, 3)  # the next port works
    x = torch.randn(2, 4)
    assert torch.allclose(to_torch(aot_ops.from_torch(plain, (x,))(to_ms(x))), plain(x).detach(), atol=1e-6)


def test_training_through_int4_weights_is_refused_naming_them():
    """ATen's int4 CPU kernel has no derivative (torch cannot train a LoRA on an int4 base either): the port says
    which quantized weights stand in the way, and the next port works."""
    import peft

    model = peft.get_peft_model(quantized("llama", "int4"), peft.LoraConfig(r=4, lora_alpha=8,
                                                                             target_modules=["q_proj"]))
    with pytest.raises(PortError, match=r"_weight_int4pack_mm_for_cpu.*\n.*cannot train through its quantized "
                                        r"weights \('base_model\.model\.model\.layers\.0\.self_attn\.q_proj\."
                                        r"base_layer\.weight' of class Int4OpaqueTensor, and \d+ more\).*evaluation_only"):
        aot_ops.from_torch(model, (), {"input_ids": IDS, "use_cache": False}, fuse=True)
    evaluation = aot_ops.from_torch(model, (), {"input_ids": IDS, "use_cache": False}, fuse=True,
                                    evaluation_only=True)
    with torch.no_grad():
        expected = model(input_ids=IDS, use_cache=False).logits
    assert torch.equal(to_torch(evaluation(input_ids=to_ms(IDS)).logits), expected)


def test_atens_int8_kernel_runs_on_mindspores_buffers():
    """torch 2.14's _weight_int8pack_mm loads its activations and weight with aligned vector instructions: it faulted
    (SIGSEGV) on MindSpore's buffers, which need not be 64-byte aligned. Through the bridge, at several offsets into a
    buffer, it gives torch's result."""
    from aot_ops import aten

    op = aten.op("aten::_weight_int8pack_mm")
    generator = torch.Generator().manual_seed(5)
    flat_x = torch.randn(16 * 64 + 32, generator=generator).to(torch.bfloat16)
    flat_q = torch.randint(-128, 128, (48 * 64 + 64,), generator=generator, dtype=torch.int8)
    scales = torch.rand(48, generator=generator).to(torch.bfloat16)
    for offset in (0, 8, 16, 24):
        x, q = flat_x[offset:offset + 16 * 64].view(16, 64), flat_q[offset:offset + 48 * 64].view(48, 64)
        got = to_torch(op(to_ms(flat_x)[offset:offset + 16 * 64].reshape(16, 64),
                          to_ms(flat_q)[offset:offset + 48 * 64].reshape(48, 64), to_ms(scales)))
        assert torch.equal(got, torch._weight_int8pack_mm(x.clone(), q.clone(), scales)), offset  # clone: aligned
