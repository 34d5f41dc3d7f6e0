"""Quantized checkpoints through aot_ops.load_pretrained / from_pretrained: a folder saved from a torchao-quantized
model (transformers' TorchAoConfig), a full-precision folder quantized as it is read (quantization_config), and
compressed-tensors folders (int4 pack-quantized, W8A8), each against torch running the model transformers loads from
the same folder: the packed weights equal, the port's Parameters that very memory, logits and greedy tokens equal;
what cannot be loaded refused by name."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
import transformers

import aot_ops
from aot_ops import PortError
from aot_ops._core.convert import torch_view
from aot_ops.testing import same_kernels_as_port
from aot_ops.tools.random_checkpoint import write_random_checkpoint
from support import to_ms, to_torch

torchao_quantization = pytest.importorskip("torchao.quantization")

IDS = torch.randint(0, 128, (1, 9), generator=torch.Generator().manual_seed(5))


def _config(scheme: str):
    from torchao.prototype.quantization.int4.inference_workflow import PrototypeInt4WeightOnlyConfig

    return {"int8": torchao_quantization.Int8WeightOnlyConfig(),
            "w8a8": torchao_quantization.Int8DynamicActivationInt8WeightConfig(),
            "int4": PrototypeInt4WeightOnlyConfig(group_size=32)}[scheme]


class Folders(dict):
    """Checkpoint folders made once a module: "plain" (a bfloat16 2-layer Llama) and each scheme's torchao folder
    (saved by transformers from the plain folder loaded with its TorchAoConfig)."""

    def __init__(self, root):
        super().__init__()
        self.root = root

    def __missing__(self, scheme):
        folder = self.root / scheme
        if scheme == "plain":
            write_random_checkpoint(folder, _llama())
        else:
            torch_loaded(self["plain"], scheme).save_pretrained(folder)
        self[scheme] = folder
        return folder


def _llama():
    # larger weights than the default: tiny models otherwise repeat one token
    return transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                    num_key_value_heads=2, num_hidden_layers=2, vocab_size=128,
                                    initializer_range=0.3)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return Folders(tmp_path_factory.mktemp("quantized_checkpoints"))


def torch_loaded(folder, scheme=None):
    """The model as transformers loads it (quantized on load by TorchAoConfig with `scheme`)."""
    quantization = {} if scheme is None else {"quantization_config": transformers.TorchAoConfig(_config(scheme))}
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, **quantization).eval()


def _inner(weight):
    return {name: getattr(weight, name) for name in weight.__tensor_flatten__()[0]}


def _reference(model, scheme):
    """torch's logits, computed with the port's evaluation kernels (int8 weight-only: ATen's int8 kernel)."""
    with torch.no_grad(), same_kernels_as_port(model) if scheme == "int8" else contextlib.nullcontext():
        return model(IDS, use_cache=False).logits


@pytest.mark.parametrize("scheme", ["int8", "w8a8"])
def test_a_folder_saved_quantized_is_read_as_stored(folders, scheme):
    expected_model = torch_loaded(folders[scheme])
    expected_weight = expected_model.model.layers[1].mlp.down_proj.weight
    assert type(expected_weight).__name__ == "Int8Tensor"  # transformers rebuilt it from the folder

    model = aot_ops.load_pretrained(folders[scheme])
    weight = model.model.layers[1].mlp.down_proj.weight
    assert type(weight) is type(expected_weight)
    for name, inner in _inner(expected_weight).items():
        assert torch.equal(_inner(weight)[name], inner), name
    assert weight.act_quant_kwargs == expected_weight.act_quant_kwargs
    # ported with share_weights (load_pretrained's memory is MindSpore's): the cell's integer Parameters are the
    # loaded memory itself
    cell = aot_ops.from_torch(model, (), {"input_ids": IDS, "use_cache": False}, share_weights=True,
                              evaluation_only=True)
    stored = {p.name: p for p in cell.get_parameters()}
    qdata = stored["model.layers.1.mlp.down_proj.parametrizations.weight.original0"]
    assert torch_view(qdata).data_ptr() == weight.qdata.data_ptr()

    expected = _reference(expected_model, scheme)
    got = to_torch(aot_ops.from_pretrained(folders[scheme])(to_ms(IDS), to_ms(torch.ones_like(IDS))).logits)
    assert torch.equal(got, expected), (got - expected).abs().max()


@pytest.mark.parametrize("scheme", ["int8", "int4"])
def test_a_full_precision_folder_quantized_on_load_generates_torchs_tokens(folders, scheme):
    """quantization_config as transformers takes it (TorchAoConfig), each linear weight quantized as read."""
    expected_model = torch_loaded(folders["plain"], scheme)
    config = transformers.TorchAoConfig(_config(scheme))
    model = aot_ops.load_pretrained(folders["plain"], quantization_config=config)
    for path, module in expected_model.named_modules():
        if isinstance(module, torch.nn.Linear):
            weight = model.get_submodule(path).weight
            assert type(weight) is type(module.weight), path  # the output layer left as transformers leaves it
            if _is_quantized(module.weight):
                for name, inner in _inner(module.weight).items():
                    assert torch.equal(_inner(weight)[name], inner), (path, name)

    prompt = IDS[:, :5]
    with same_kernels_as_port(expected_model) if scheme == "int8" else contextlib.nullcontext():
        expected = expected_model.generate(prompt, max_new_tokens=24, do_sample=False)
    lm = aot_ops.from_pretrained(folders["plain"], max_length=32, quantization_config=config)
    tokens = aot_ops.generate(lm, to_ms(prompt), max_new_tokens=24, generation_config=expected_model.generation_config)
    assert to_torch(tokens).tolist() == expected.tolist()
    assert len(set(expected[0, 5:].tolist())) > 3


def _is_quantized(weight) -> bool:
    return type(weight) is not torch.nn.Parameter and hasattr(weight, "__tensor_flatten__")


def test_what_cannot_be_loaded_quantized_is_refused_by_name(folders):
    with pytest.raises(PortError, match="stored quantized already.*without quantization_config"):
        aot_ops.load_pretrained(folders["int8"], quantization_config=_config("int8"))
    with pytest.raises(PortError, match="quantization_config=.*give a torchao configuration"):
        aot_ops.load_pretrained(folders["plain"], quantization_config="int8")
    with pytest.raises(PortError, match="include_input_output_embeddings"):
        aot_ops.load_pretrained(folders["plain"], quantization_config=transformers.TorchAoConfig(
            _config("int8"), include_input_output_embeddings=True))
    # the next load works
    model = aot_ops.load_pretrained(folders["plain"], quantization_config=_config("int8"))
    assert type(model.model.layers[0].self_attn.q_proj.weight).__name__ == "Int8Tensor"
    assert np.isfinite(model(IDS).logits.detach().float().numpy()).all()


@pytest.fixture(scope="module")
def compressed(folders):
    """compressed-tensors folders as llmcompressor writes them (write_random_checkpoint's writer)."""
    return {scheme: write_random_checkpoint(folders.root / f"compressed_{scheme}", _llama(), seed=1, group_size=32,
                                            quantization=f"compressed-tensors:{scheme}")
            for scheme in ("int4", "w8a8")}


@pytest.mark.parametrize("scheme", ["int4", "w8a8"])
def test_a_compressed_tensors_folder_is_read_packed_and_generates(compressed, scheme):
    import safetensors.torch
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32

    model = aot_ops.load_pretrained(compressed[scheme])
    stored = safetensors.torch.load_file(compressed[scheme] / "model.safetensors")
    weight = model.model.layers[1].mlp.down_proj.weight
    prefix = "model.layers.1.mlp.down_proj."
    if scheme == "int4":  # repacked for ATen's CPU int4 kernel: the same values and scales
        values = unpack_from_int32(stored[prefix + "weight_packed"], 4, torch.Size([64, 128]))
        dequantized = (values.float().reshape(64, -1, 32) * stored[prefix + "weight_scale"].float()[..., None])
        through_kernel = torch.nn.functional.linear(torch.eye(128, dtype=torch.bfloat16), weight).t().float()
        torch.testing.assert_close(through_kernel, dequantized.reshape(64, 128), rtol=2 ** -8, atol=0)
        assert weight.qdata.dtype == torch.uint8 and weight.qdata.numel() == 64 * 128 // 2  # 4 bits a weight
    else:  # the int8 matrix and its scales as stored; activations quantized a token as the format says
        assert torch.equal(weight.qdata, stored[prefix + "weight"])
        assert torch.equal(weight.scale, stored[prefix + "weight_scale"].float())
        assert weight.act_quant_kwargs is not None
    assert type(model.lm_head.weight) is torch.nn.Parameter  # ignored by the configuration: as stored

    # transformers' own reading of the folder (compressed-tensors, dequantized bfloat16 weights): the same model
    # within the kernels' roundings and, for W8A8, the activations' quantization error
    reference = transformers.AutoModelForCausalLM.from_pretrained(compressed[scheme], dtype=torch.bfloat16).eval()
    with torch.no_grad():
        expected, got = reference(IDS).logits, model(IDS).logits
    tolerance = {"int4": 2 ** -4, "w8a8": 2 ** -2}[scheme] * expected.abs().max().item()
    torch.testing.assert_close(got, expected, rtol=0, atol=tolerance)

    prompt = IDS[:, :5]
    expected_tokens = model.generate(prompt, max_new_tokens=24, do_sample=False)
    lm = aot_ops.from_pretrained(compressed[scheme], max_length=32)
    tokens = aot_ops.generate(lm, to_ms(prompt), max_new_tokens=24, generation_config=model.generation_config)
    assert to_torch(tokens).tolist() == expected_tokens.tolist()


def test_a_compressed_tensors_scheme_without_a_cpu_path_is_refused_by_name(compressed, tmp_path):
    write_random_checkpoint(tmp_path, _llama(), quantization="compressed-tensors:int4", group_size=16)
    with pytest.raises(PortError, match=r"compressed-tensors group 'group_0' \(format 'pack-quantized', weights "
                                        r"\{num_bits=4, .*group_size=16.*supported: pack-quantized int4"):
        aot_ops.load_pretrained(tmp_path)
    with pytest.raises(PortError, match="stored quantized already"):
        aot_ops.load_pretrained(compressed["int4"], quantization_config=_config("int8"))


def test_a_sharded_torchao_folder_written_shard_by_shard_reads_as_transformers_reads_it(tmp_path):
    """write_random_checkpoint's torchao folders (the memory benchmark's): several shards, each header describing
    every tensor, read by transformers and by load_pretrained to the same packed weights."""
    folder = write_random_checkpoint(tmp_path, _llama(), shard_bytes=16 << 10, quantization=_config("int8"))
    assert len(list(folder.glob("*.safetensors"))) > 2
    expected = torch_loaded(folder)
    model = aot_ops.load_pretrained(folder)
    for path, module in expected.named_modules():
        if isinstance(module, torch.nn.Linear) and _is_quantized(module.weight):
            for name, inner in _inner(module.weight).items():
                assert torch.equal(_inner(model.get_submodule(path).weight)[name], inner), (path, name)
    with torch.no_grad():
        assert torch.equal(model(IDS).logits, expected(IDS).logits)

    # shards whose headers describe only their own tensors are read the same
    import json

    import safetensors
    import safetensors.torch

    for file in folder.glob("*.safetensors"):
        with safetensors.safe_open(str(file), "pt") as opened:
            metadata, keys = opened.metadata(), list(opened.keys())
        tensors = safetensors.torch.load_file(str(file))
        own = [name for name in json.loads(metadata["tensor_names"])
               if any(key == name or key.startswith(name.rpartition(".")[0] + "._") for key in keys)]
        metadata = {"format": "pt", "tensor_names": json.dumps(own), **{name: metadata[name] for name in own}}
        safetensors.torch.save_file(tensors, str(file), metadata=metadata)
    per_shard = aot_ops.load_pretrained(folder)
    with torch.no_grad():
        assert torch.equal(per_shard(IDS).logits, expected(IDS).logits)
