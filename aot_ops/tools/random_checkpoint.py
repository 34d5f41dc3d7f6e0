"""A Hugging Face checkpoint folder of random weights, written shard by shard: what `save_pretrained` writes
(config.json, safetensors shards and their index), for models of any size without holding the model in memory.

    from transformers import LlamaConfig
    write_random_checkpoint("ckpt", LlamaConfig(...), dtype=torch.bfloat16, shard_bytes=2 << 30)

The model is built on the meta device (no memory) to learn its tensors' names and shapes; each tensor is then
drawn and written in turn, so the peak memory is one shard. Tied weights are written once, under the first name
that holds them (as save_pretrained does). Values: normal with the config's initializer_range, norm weights near
one; reproducible from `seed`.

`quantization` writes the linear layers' weights (every nn.Linear but the output embedding) quantized, as the tools
people use save them (docs/porting.md#quantized-checkpoints):
- a torchao configuration (Int8WeightOnlyConfig(), ...): as transformers saves a model quantized with TorchAoConfig
  (each weight's inner tensors under `<layer>._weight_<name>`, torchao's description of every tensor in each
  shard's header, `quantization_config` in config.json);
- "compressed-tensors:int4" (pack-quantized, symmetric, a scale per `group_size` inputs) or "compressed-tensors:w8a8"
  (int-quantized, symmetric, a scale a row, dynamic int8 activations a token): as llmcompressor saves them, the
  scales each group's or row's largest magnitude over the largest value.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch


def write_random_checkpoint(folder: str | Path, config, *, dtype: torch.dtype = torch.bfloat16,
                            shard_bytes: int = 2 << 30, seed: int = 0, model_class=None, quantization=None,
                            group_size: int = 128) -> Path:
    """Writes `config` and random weights for it into `folder` (created); returns the folder."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config.dtype = dtype
    with torch.device("meta"):
        model = (model_class or AutoModelForCausalLM).from_config(config, dtype=dtype)
    quantizer = _quantizer(quantization, model, group_size)
    std = getattr(config, "initializer_range", 0.02)
    generator = torch.Generator().manual_seed(seed)
    seen: set[int] = set()
    total = 0
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for key, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:  # tied: written once
            continue
        seen.add(id(tensor))
        value = torch.randn(tensor.shape, generator=generator, dtype=torch.float32).mul_(std)
        if tensor.dim() == 1 and "norm" in key:
            value.add_(1.0)
        value = value.to(tensor.dtype if tensor.is_floating_point() else dtype)
        stored = quantizer.stored(key, value) if quantizer and key in quantizer.keys else {key: value}
        del value
        nbytes = sum(v.numel() * v.element_size() for v in stored.values())
        if shards[-1] and size + nbytes > shard_bytes:
            _write(folder, shards, save_file, quantizer)
            shards.append({})
            size = 0
        shards[-1].update(stored)
        size += nbytes
        total += nbytes
    _write(folder, shards, save_file, quantizer)
    _write_index(folder, len(shards), total)
    if quantizer is not None:
        config.quantization_config = quantizer.config_entry()
    config.save_pretrained(folder)
    return folder


def _shard_name(index: int, count: int | None) -> str:
    return f"model-{index + 1:05d}-of-{count:05d}.safetensors" if count else f"model-{index + 1:05d}.part"


def _write(folder: Path, shards: list[dict[str, torch.Tensor]], save_file, quantizer=None) -> None:
    """Writes the last shard under a provisional name (the count is known at the end) and frees its tensors."""
    index = len(shards) - 1
    metadata = {"format": "pt", **(quantizer.header() if quantizer is not None else {})}
    save_file(shards[index], str(folder / _shard_name(index, None)), metadata=metadata)
    shards[index] = {key: None for key in shards[index]}


def _write_index(folder: Path, count: int, total: int) -> None:
    weight_map = {}
    for index in range(count):
        final = folder / _shard_name(index, count)
        (folder / _shard_name(index, None)).rename(final)
        from safetensors import safe_open

        with safe_open(str(final), framework="pt") as f:
            weight_map.update({key: final.name for key in f.keys()})
    if count == 1:
        (folder / _shard_name(0, 1)).rename(folder / "model.safetensors")
        return
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))


def _quantizer(quantization, model: torch.nn.Module, group_size: int):
    if quantization is None:
        return None
    output = model.get_output_embeddings()
    keys = [f"{path}.weight" for path, module in model.named_modules()
            if isinstance(module, torch.nn.Linear) and module is not output]
    if isinstance(quantization, str):
        scheme = quantization.removeprefix("compressed-tensors:")
        if scheme not in ("int4", "w8a8") or scheme == quantization:
            raise ValueError(f"quantization={quantization!r}: a torchao configuration, 'compressed-tensors:int4' or "
                             "'compressed-tensors:w8a8'")
        return _CompressedTensors(scheme, keys, group_size)
    return _TorchAo(quantization, model, keys)


class _TorchAo:
    """Weights as transformers saves a TorchAoConfig model (torchao's flatten_tensor_state_dict)."""

    def __init__(self, config, model: torch.nn.Module, keys: list[str]):
        import json

        self.config, self.keys = config, set(keys)
        # every shard's header describes every tensor (as transformers writes it, and reads it back merged): the
        # descriptions depend on the shapes only, so they are made first, from one weight of zeros a shape
        described: dict[tuple, str] = {}
        self.metadata: dict[str, str] = {}
        for key, tensor in model.state_dict().items():
            if key in self.keys:
                if tuple(tensor.shape) not in described:
                    _, metadata = self._flattened(key, torch.zeros(tensor.shape, dtype=tensor.dtype))
                    described[tuple(tensor.shape)] = metadata[key]
                self.metadata[key] = described[tuple(tensor.shape)]
            else:
                self.metadata[key] = json.dumps({"_type": "Tensor"})
        self.metadata["tensor_names"] = json.dumps(list(self.metadata))

    def _flattened(self, key: str, weight: torch.Tensor):
        from torchao.prototype.safetensors.safetensors_support import flatten_tensor_state_dict
        from torchao.quantization import quantize_

        linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
        linear.weight = torch.nn.Parameter(weight, requires_grad=False)
        quantize_(linear, self.config)
        return flatten_tensor_state_dict({key: linear.weight})

    def stored(self, key: str, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        return self._flattened(key, weight)[0]

    def header(self) -> dict[str, str]:
        return self.metadata

    def config_entry(self):
        from transformers import TorchAoConfig

        return TorchAoConfig(self.config)


class _CompressedTensors:
    """Weights as llmcompressor saves them (compressed-tensors' packing and configuration)."""

    def __init__(self, scheme: str, keys: list[str], group_size: int):
        self.scheme, self.keys, self.group_size = scheme, set(keys), group_size

    def stored(self, key: str, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

        path = key.removesuffix(".weight")
        full = weight.float()
        if self.scheme == "int4":
            groups = full.reshape(full.shape[0], -1, self.group_size)
            scale = (groups.abs().amax(-1) / 7.5).to(weight.dtype)
            values = (groups / scale.float()[..., None]).round().clamp(-8, 7).to(torch.int8).reshape(full.shape)
            return {f"{path}.weight_packed": pack_to_int32(values, 4), f"{path}.weight_scale": scale,
                    f"{path}.weight_shape": torch.tensor(list(full.shape))}
        scale = (full.abs().amax(-1, keepdim=True) / 127).to(weight.dtype)
        return {f"{path}.weight": (full / scale.float()).round().clamp(-128, 127).to(torch.int8),
                f"{path}.weight_scale": scale}

    def header(self) -> dict[str, str]:
        return {}

    def config_entry(self) -> dict:
        from compressed_tensors.quantization import QuantizationArgs, QuantizationConfig, QuantizationScheme

        if self.scheme == "int4":
            form, group = "pack-quantized", QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(
                num_bits=4, type="int", symmetric=True, strategy="group", group_size=self.group_size))
        else:
            form, group = "int-quantized", QuantizationScheme(
                targets=["Linear"], weights=QuantizationArgs(num_bits=8, type="int", symmetric=True,
                                                             strategy="channel"),
                input_activations=QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="token",
                                                   dynamic=True))
        entry = QuantizationConfig(config_groups={"group_0": group}, format=form, ignore=["lm_head"],
                                   quantization_status="compressed").model_dump(mode="json")
        entry["quant_method"] = "compressed-tensors"
        return entry
