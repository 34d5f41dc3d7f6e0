"""A compressed-tensors checkpoint (the format llmcompressor writes; `quant_method: "compressed-tensors"` in
config.json) read into torchao's CPU tensor subclasses, so that its layers run as torchao's quantized layers do and
are ported the same way (trace/tensor_subclasses.py).

What is read (docs/porting.md#quantized-checkpoints), per linear layer the configuration's groups target:
- `pack-quantized` int4 weight-only, symmetric, per group of 32, 64 or 128: `weight_packed` (int32, eight 4-bit
  values a word, each stored +8: the format's packing), `weight_scale` (a scale a group), `weight_shape`. Repacked
  for ATen's CPU int4 kernel (torchao's Int4OpaqueTensor: `_convert_weight_to_int4pack_for_cpu`, the scales beside
  zero offsets of 0): the same 4-bit values and scales, so (q - 8) * scale is the stored weight. The repacking is
  the checkpoint reader's, after its plain reads (beside the port in from_pretrained).
- `int-quantized` int8, symmetric, one scale a row (channel): `weight` (int8), `weight_scale`; with dynamic int8
  activations a token (W8A8) or without (weight-only): torchao's Int8Tensor, the int8 matrix read from the file
  straight into its Parameter, the scales as float32 (exact: torchao keeps its scales so).
Anything else (other bit widths, asymmetric zero points, static activation scales, float8, sparsity) is refused with
a PortError naming the group, its format and arguments, and what is supported.
"""
from __future__ import annotations

import re
from typing import Any, Callable

import torch

from ..._core.heap import release_free_memory
from ..errors import PortError
from .checkpoint import Checkpoint, StoredTensor
from .quantized_weights import Installed, NewWeight, set_weight

_REPACK_ROWS = 256  # rows repacked at a time: a multiple of ATen's blocks of 64

SUPPORTED = ("pack-quantized int4 weight-only (symmetric, strategy 'group', group_size 32/64/128); int-quantized "
             "int8 (symmetric, strategy 'channel'), weight-only or with dynamic int8 activations a token (W8A8)")


def is_compressed_tensors(config: Any) -> bool:
    quantization = getattr(config, "quantization_config", None)
    method = quantization.get("quant_method") if isinstance(quantization, dict) else \
        getattr(quantization, "quant_method", None)
    return str(getattr(method, "value", method)) == "compressed-tensors"


class CompressedTensors:
    """The quantized linear layers of a compressed-tensors checkpoint: which weight is stored how, and reading it."""

    def __init__(self, config: Any, model: torch.nn.Module, checkpoint: Checkpoint):
        quantization = config.quantization_config
        quantization = quantization if isinstance(quantization, dict) else quantization.to_dict()
        self.checkpoint, self.folder = checkpoint, checkpoint.folder
        if quantization.get("sparsity_config") or quantization.get("transform_config"):
            raise PortError(f"load_pretrained: {self.folder} is compressed-tensors with sparsity or transforms; "
                            f"supported: {SUPPORTED}")
        default_format = quantization.get("format")
        ignore = quantization.get("ignore") or []
        self.kinds: dict[str, str] = {}  # model key ('...q_proj.weight') -> "int4" / "int8" / "w8a8"
        self.group_sizes: dict[str, int] = {}
        for group_name, group in (quantization.get("config_groups") or {}).items():
            kind, group_size = self._kind(group_name, group, group.get("format") or default_format)
            for path, module in model.named_modules():
                if isinstance(module, torch.nn.Linear) and _targeted(path, module, group.get("targets") or [],
                                                                     ignore, group_name, self.folder):
                    self.kinds[f"{path}.weight"] = kind
                    self.group_sizes[f"{path}.weight"] = group_size

    def _kind(self, group_name: str, group: dict, form: str | None) -> tuple[str, int]:
        weights, activations = group.get("weights") or {}, group.get("input_activations")
        refused = PortError(f"load_pretrained: {self.folder}: compressed-tensors group '{group_name}' (format "
                            f"{form!r}, weights {_arguments(weights)}, input activations {_arguments(activations)}, "
                            f"output activations {_arguments(group.get('output_activations'))}) is not supported; "
                            f"supported: {SUPPORTED}")
        if weights.get("type") != "int" or not weights.get("symmetric", True) or weights.get("dynamic") or \
                group.get("output_activations"):
            raise refused
        if form == "pack-quantized" and weights.get("num_bits") == 4 and weights.get("strategy") == "group" \
                and weights.get("group_size") in (32, 64, 128) and activations is None:
            return "int4", weights["group_size"]
        if form in ("int-quantized", "naive-quantized") and weights.get("num_bits") == 8 and \
                weights.get("strategy") == "channel":
            if activations is None:
                return "int8", 0
            if activations.get("type") == "int" and activations.get("num_bits") == 8 and \
                    activations.get("symmetric", True) and activations.get("dynamic") is True and \
                    activations.get("strategy") == "token":
                return "w8a8", 0
        raise refused

    def install(self, model: torch.nn.Module, key: str, stored: StoredTensor | None,
                new_weight: NewWeight) -> Installed | None:
        """Gives the model's weight `key` its quantized tensor over new Parameters; returns what is still to be
        read into them (the int8 matrices; an int4 layer's repacking); None for a layer left unquantized."""
        if key not in self.kinds:
            return None
        path = key.rpartition(".")[0]
        module = model.get_submodule(path)
        shape = (module.out_features, module.in_features)
        dtype = module.weight.dtype
        if self.kinds[key] == "int4":
            weight, repack = self._int4(path, shape, dtype, self.group_sizes[key], new_weight)
            set_weight(model, key, weight)
            return Installed([], self._used(key), (repack,))
        return Installed(self._int8(model, key, path, shape, dtype, new_weight), self._used(key))

    def _int8(self, model: torch.nn.Module, key: str, path: str, shape: tuple[int, int], dtype: torch.dtype,
              new_weight: NewWeight) -> list:
        """The int8 layer's Int8Tensor over new Parameters (its scales read now); returns its int8 matrix's read."""
        from torchao.quantization import Int8Tensor
        from torchao.quantization.granularity import PerRow
        from torchao.quantization.quant_primitives import MappingType
        from torchao.quantization.quantize_.workflows.int8.int8_tensor import QuantizeTensorToInt8Kwargs

        stored = self._stored(path, "weight", torch.int8, shape)
        scale = self._small(path, "weight_scale", (shape[0], 1)).to(torch.float32)
        qdata = new_weight(f"{path}.weight", shape, torch.int8)
        scale_view = new_weight(f"{path}.weight_scale", (shape[0], 1), torch.float32)
        zero_point = new_weight(f"{path}.weight_zero_point", (shape[0], 1), torch.int8)
        with torch.no_grad():
            scale_view.copy_(scale)
            zero_point.zero_()
        activations = QuantizeTensorToInt8Kwargs(granularity=PerRow(), mapping_type=MappingType.SYMMETRIC) \
            if self.kinds[key] == "w8a8" else None
        set_weight(model, key, Int8Tensor(qdata, scale_view, block_size=[1, shape[1]], dtype=dtype,
                                          zero_point=zero_point, act_quant_kwargs=activations))
        return [(stored, qdata.detach())]

    def _int4(self, path: str, shape: tuple[int, int], dtype: torch.dtype, group_size: int,
              new_weight: NewWeight) -> tuple[torch.Tensor, Callable[[], None]]:
        """The int4 layer's Int4OpaqueTensor over new Parameters (its scales read now), and the repacking of its
        stored words into them (for the reader)."""
        from torchao.prototype.quantization.int4 import Int4OpaqueTensor
        from torchao.quantization.utils import pack_tinygemm_scales_and_zeros

        rows, columns = shape
        if columns % group_size or columns % 8:
            raise PortError(f"load_pretrained: '{path}' of {self.folder}: {columns} input features are not whole "
                            f"groups of {group_size}")
        stored_shape = self._small(path, "weight_shape", (2,))
        if stored_shape.tolist() != [rows, columns]:
            raise PortError(f"load_pretrained: '{path}.weight_shape' of {self.folder} is {stored_shape.tolist()}, "
                            f"the model's layer is {[rows, columns]}")
        if rows % 16:
            raise PortError(f"load_pretrained: '{path}' of {self.folder}: ATen's CPU int4 kernel needs a multiple of "
                            f"16 output features, the layer has {rows}")
        stored = self._stored(path, "weight_packed", torch.int32, (rows, columns // 8))
        qdata = new_weight(f"{path}.weight_packed", (rows, columns // 2), torch.uint8)
        scale = self._small(path, "weight_scale", (rows, columns // group_size)).to(dtype)
        scale_and_zero = pack_tinygemm_scales_and_zeros(scale, torch.zeros_like(scale), dtype)
        scales = new_weight(f"{path}.weight_scale", tuple(scale_and_zero.shape), scale_and_zero.dtype)
        with torch.no_grad():
            scales.copy_(scale_and_zero)
        weight = Int4OpaqueTensor(qdata, scales, block_size=[1, group_size], shape=torch.Size(shape))
        return weight, lambda: self._repack_int4(stored, qdata.detach())

    def _repack_int4(self, stored: StoredTensor, qdata: torch.Tensor) -> None:
        """Reads the stored int4 words into `qdata` in the layout of ATen's CPU int4 kernel."""
        rows, columns = qdata.shape[0], qdata.shape[1] * 2
        # Repacked a block of rows at a time (ATen packs blocks of 64 rows independently): the int32 values it takes
        # are 8 times the packed bytes. Freed temporaries stay in glibc's heap (whole matrices repacked: a 1.1B held
        # 1 GB more private memory than its 0.76 GB checkpoint): its free pages are handed back after each matrix.
        packed = torch.empty(rows, columns // 8, dtype=torch.int32)
        self.checkpoint.read_into(stored, packed)
        # eight 4-bit values a little-endian word, element i at bits 4i: byte j holds elements 2j (low) and 2j+1
        nibbles = packed.view(torch.uint8)
        with torch.no_grad():
            for start in range(0, rows, _REPACK_ROWS):
                block = nibbles[start:start + _REPACK_ROWS]
                values = torch.stack((block & 0xF, block >> 4), dim=-1).reshape(block.shape[0], columns)
                qdata[start:start + block.shape[0]] = torch.ops.aten._convert_weight_to_int4pack_for_cpu(
                    values.to(torch.int32), 1)
        del packed, nibbles, block, values
        release_free_memory()

    def _used(self, key: str) -> list[str]:
        """The checkpoint's tensor names the layer of `key` is read from."""
        path = key.rpartition(".")[0]
        names = ("weight_packed", "weight_scale", "weight_shape") if self.kinds[key] == "int4" else \
            ("weight", "weight_scale")
        return [f"{path}.{name}" for name in names]

    def _stored(self, path: str, name: str, dtype: torch.dtype, shape: tuple) -> StoredTensor:
        stored = self.checkpoint.tensors.get(f"{path}.{name}")
        if stored is None:
            raise PortError(f"load_pretrained: compressed-tensors layer '{path}' of {self.folder} lacks "
                            f"'{path}.{name}'")
        if stored.dtype != dtype or stored.shape != tuple(shape):
            raise PortError(f"load_pretrained: {stored.describe()} of {self.folder} is not the "
                            f"{str(dtype).removeprefix('torch.')}{list(shape)} the layer needs")
        return stored

    def _small(self, path: str, name: str, shape: tuple) -> torch.Tensor:
        """A small stored tensor (scales, a shape) read as stored."""
        stored = self.checkpoint.tensors.get(f"{path}.{name}")
        if stored is None or stored.shape != tuple(shape):
            found = "missing" if stored is None else f"of shape {list(stored.shape)}"
            raise PortError(f"load_pretrained: compressed-tensors layer '{path}' of {self.folder}: '{path}.{name}' "
                            f"is {found}, not of shape {list(shape)}")
        value = torch.empty(stored.shape, dtype=stored.dtype)
        self.checkpoint.read_into(stored, value)
        return value


def _targeted(path: str, module: torch.nn.Module, targets: list[str], ignore: list[str], group_name: str,
              folder) -> bool:
    """compressed-tensors' matching: a target or ignore entry is a module class name, a module name, or a
    regular expression over module names after 're:'."""
    def matches(entry: str) -> bool:
        if entry.startswith("re:"):
            return re.match(entry[3:], path) is not None
        return entry in (type(module).__name__, path)

    if not targets:
        raise PortError(f"load_pretrained: compressed-tensors group '{group_name}' of {folder} targets nothing")
    return any(matches(t) for t in targets) and not any(matches(i) for i in ignore)


def _arguments(arguments: dict | None) -> str:
    if not arguments:
        return "none"
    shown = ("num_bits", "type", "symmetric", "strategy", "group_size", "dynamic")
    return "{" + ", ".join(f"{k}={arguments[k]!r}" for k in shown if k in arguments) + "}"
