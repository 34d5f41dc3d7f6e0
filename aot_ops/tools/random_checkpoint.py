"""A Hugging Face checkpoint folder of random weights, written shard by shard: what `save_pretrained` writes
(config.json, safetensors shards and their index), for models of any size without holding the model in memory.

    from transformers import LlamaConfig
    write_random_checkpoint("ckpt", LlamaConfig(...), dtype=torch.bfloat16, shard_bytes=2 << 30)

The model is built on the meta device (no memory) to learn its tensors' names and shapes; each tensor is then
drawn and written in turn, so the peak memory is one shard. Tied weights are written once, under the first name
that holds them (as save_pretrained does). Values: normal with the config's initializer_range, norm weights near
one; reproducible from `seed`.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch


def write_random_checkpoint(folder: str | Path, config, *, dtype: torch.dtype = torch.bfloat16,
                            shard_bytes: int = 2 << 30, seed: int = 0, model_class=None) -> Path:
    """Writes `config` and random weights for it into `folder` (created); returns the folder."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config.dtype = dtype
    with torch.device("meta"):
        model = (model_class or AutoModelForCausalLM).from_config(config, dtype=dtype)
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
        nbytes = value.numel() * value.element_size()
        if shards[-1] and size + nbytes > shard_bytes:
            _write(folder, shards, save_file)
            shards.append({})
            size = 0
        shards[-1][key] = value
        size += nbytes
        total += nbytes
    _write(folder, shards, save_file)
    _write_index(folder, len(shards), total)
    config.save_pretrained(folder)
    return folder


def _shard_name(index: int, count: int | None) -> str:
    return f"model-{index + 1:05d}-of-{count:05d}.safetensors" if count else f"model-{index + 1:05d}.part"


def _write(folder: Path, shards: list[dict[str, torch.Tensor]], save_file) -> None:
    """Writes the last shard under a provisional name (the count is known at the end) and frees its tensors."""
    index = len(shards) - 1
    save_file(shards[index], str(folder / _shard_name(index, None)), metadata={"format": "pt"})
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
