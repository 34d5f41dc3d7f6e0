"""Quantized weights of a checkpoint folder, each a torchao tensor subclass over MindSpore Parameters that hold its
packed integers and scales as stored (never a dequantized copy).

Two ways a folder gives them (docs/porting.md#quantized-checkpoints):
- stored quantized: a model quantized with torchao and saved by transformers' save_pretrained (its TorchAoConfig)
  keeps each quantized weight as its inner tensors (`q_proj._weight_qdata`, `q_proj._weight_scale`, ...) and
  describes the subclass in the safetensors header (`__metadata__`: its class and attributes, as JSON). The inner
  tensors are read from the file into their Parameters like any weight, and the subclass is rebuilt over views of
  them by torchao's own reader (unflatten_tensor_state_dict).
- quantized on load: a full-precision folder and a torchao configuration (transformers' TorchAoConfig or its
  `quant_type`): each linear weight is read, quantized by torchao's `quantize_` as transformers would, and its inner
  tensors copied into Parameters; one full-precision matrix exists at a time.

Either way the module is given the subclass as its weight, and the port (trace/tensor_subclasses.py) takes the
Parameters themselves as the cell's, without a copy (share_weights).
"""
from __future__ import annotations

import json
from typing import Any, Callable, NamedTuple

import torch

from ..._core.heap import release_free_memory
from ..errors import PortError
from .checkpoint import Checkpoint, StoredTensor

# makes a Parameter of (name, shape, dtype) and returns the torch view of it the module is given (convert.owned_view)
NewWeight = Callable[[str, tuple, torch.dtype], torch.Tensor]


class Installed(NamedTuple):
    """A quantized weight given to the model: what is still to be read into its Parameters, and the checkpoint's
    tensors it is made of; `then`, what makes its Parameters from stored tensors of another layout (int4
    repacking), done by the reader after the plain reads (beside the port, as they are)."""

    reads: list[tuple[StoredTensor, torch.Tensor]]
    names: list[str]
    then: tuple[Callable[[], None], ...] = ()


class StoredTorchao:
    """The weights a checkpoint stores quantized by torchao (as transformers saves them)."""

    def __init__(self, checkpoint: Checkpoint):
        self.checkpoint = checkpoint
        # every file's own list (transformers writes the whole list into each shard; a shard listing only its own
        # tensors is read as well)
        described = {}
        try:
            for metadata in checkpoint.metadata:
                names = json.loads(metadata.get("tensor_names", "[]"))
                described.update({name: json.loads(metadata[name]) for name in names if name in metadata})
        except (ValueError, TypeError) as exc:
            raise PortError(f"load_pretrained: the quantized tensors' description in {checkpoint.folder}'s "
                            f"safetensors header is not torchao's ({exc})") from None
        # torchao's description of each weight stored quantized, by the model's key ('...q_proj.weight')
        self.descriptions = {name: d for name, d in described.items()
                             if isinstance(d, dict) and d.get("_type") != "Tensor"}

    def install(self, model: torch.nn.Module, key: str, stored: StoredTensor | None,
                new_weight: NewWeight) -> Installed | None:
        """The model's weight `key` made the quantized tensor the checkpoint stores for it, over new Parameters (not
        yet read: the reading is returned); None for a weight not stored so."""
        description = self.descriptions.get(key)
        if description is None:
            return None
        checkpoint = self.checkpoint
        unflatten = _torchao_reader(checkpoint, key)
        module_path, _, weight_name = key.rpartition(".")
        prefix = f"{module_path}._{weight_name}_"
        data_names = description.get("_tensor_data_names") or []
        missing = [prefix + name for name in data_names if prefix + name not in checkpoint.tensors]
        if not data_names or missing:
            raise PortError(f"load_pretrained: the quantized weight '{key}' ({description.get('_type')}) of "
                            f"{checkpoint.folder} lacks its tensors {missing or '(none listed)'}")
        views, reads = {}, []
        for name in data_names:
            inner = checkpoint.tensors[prefix + name]
            views[prefix + name] = view = new_weight(prefix + name, inner.shape, inner.dtype)
            reads.append((inner, view.detach()))
        try:
            rebuilt, _ = unflatten(views, {key: json.dumps(description), "tensor_names": json.dumps([key])})
        except Exception as exc:  # noqa: BLE001 - torchao's own error, named with the weight
            raise PortError(f"load_pretrained: torchao cannot rebuild the quantized weight '{key}' "
                            f"({description.get('_type')}) of {checkpoint.folder}: {type(exc).__name__}: "
                            f"{exc}") from None
        if key not in rebuilt:
            raise PortError(f"load_pretrained: torchao does not rebuild '{key}' ({description.get('_type')}) of "
                            f"{checkpoint.folder}")
        set_weight(model, key, rebuilt[key])
        return Installed(reads, list(views))


class OnLoad:
    """Quantizing on load: which linear weights torchao's configuration applies to (as transformers' TorchAoConfig
    chooses them: every nn.Linear but the output embedding and `modules_to_not_convert`), and the quantizing."""

    def __init__(self, quantization: Any, model: torch.nn.Module, checkpoint: Checkpoint):
        self.checkpoint = checkpoint
        self.config, skipped = _torchao_config(quantization)
        output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        self.keys = {f"{path}.weight" for path, module in model.named_modules()
                     if isinstance(module, torch.nn.Linear) and module is not output
                     and not any(s == path or path.startswith(s + ".") or path.endswith("." + s) for s in skipped)}

    def install(self, model: torch.nn.Module, key: str, stored: StoredTensor | None,
                new_weight: NewWeight) -> Installed | None:
        """Reads the weight `key` (`stored`), quantizes it and gives the model the quantized tensor over new
        Parameters; None for a weight the configuration leaves as it is (or one the checkpoint lacks or holds in
        another shape: an error of the plain reading)."""
        from torchao.quantization import quantize_

        if key not in self.keys or stored is None:
            return None
        current = model.get_parameter(key)
        if stored.shape != tuple(current.shape):
            return None
        whole = torch.empty(stored.shape, dtype=current.dtype)
        self.checkpoint.read_into(stored, whole)
        linear = torch.nn.Linear(whole.shape[1], whole.shape[0], bias=False, device="meta")
        linear.weight = torch.nn.Parameter(whole, requires_grad=False)
        try:
            quantize_(linear, self.config)
        except Exception as exc:  # noqa: BLE001 - torchao's own error, named with the weight
            raise PortError(f"load_pretrained: torchao's {type(self.config).__name__} cannot quantize '{key}' "
                            f"({stored.describe()}) on this machine: {type(exc).__name__}: {exc}") from None
        quantized = linear.weight
        del linear, whole
        names, attributes = quantized.__tensor_flatten__()
        views = {}
        with torch.no_grad():
            for name in names:
                inner = getattr(quantized, name)
                views[name] = new_weight(f"{key}:{name}", tuple(inner.shape), inner.dtype)
                views[name].copy_(inner)
        rebuilt = type(quantized).__tensor_unflatten__(views, attributes, quantized.shape, quantized.stride())
        set_weight(model, key, rebuilt)
        del quantized
        release_free_memory()  # the full-precision matrix and torchao's temporaries, freed into glibc's heap
        return Installed([], [stored.name])


def _torchao_config(quantization: Any) -> tuple[Any, list[str]]:
    """(torchao configuration, module names left unquantized) of what the caller gave: transformers' TorchAoConfig
    or a torchao configuration (Int8WeightOnlyConfig(), ...)."""
    try:
        from torchao.core.config import AOBaseConfig
    except ImportError:
        raise PortError("load_pretrained: quantization_config needs torchao (requirements.txt pins the release "
                        "built for this torch)") from None
    if isinstance(quantization, AOBaseConfig):
        return quantization, []
    quant_type = getattr(quantization, "quant_type", None)
    if isinstance(quant_type, dict):  # transformers' form per module kind: {"default": config}
        quant_type = quant_type.get("default") if len(quant_type) == 1 else None
    if not isinstance(quant_type, AOBaseConfig):
        raise PortError(f"load_pretrained: quantization_config={quantization!r}: give a torchao configuration "
                        "(e.g. torchao.quantization.Int8WeightOnlyConfig()) or transformers' TorchAoConfig of one")
    if getattr(quantization, "include_input_output_embeddings", False) or \
            getattr(quantization, "untie_embedding_weights", False):
        raise PortError("load_pretrained: a TorchAoConfig quantizing the embeddings "
                        "(include_input_output_embeddings, untie_embedding_weights) is not supported: the linear "
                        "layers are")
    return quant_type, list(getattr(quantization, "modules_to_not_convert", None) or [])


def _torchao_reader(checkpoint: Checkpoint, key: str):
    try:
        from torchao.prototype.safetensors.safetensors_support import unflatten_tensor_state_dict
    except ImportError:
        raise PortError(f"load_pretrained: '{key}' of {checkpoint.folder} is stored quantized by torchao, which is "
                        "not installed (requirements.txt pins the release built for this torch)") from None
    return unflatten_tensor_state_dict


def set_weight(model: torch.nn.Module, key: str, quantized: torch.Tensor) -> None:
    """The model's weight `key` made `quantized` (an nn.Parameter of it), whose inner tensors stay marked as their
    MindSpore Parameters' memory (nn.Parameter detaches them: new tensor objects over the same memory)."""
    owners = {name: getattr(getattr(quantized, name), "_aot_ops_owner", None)
              for name in quantized.__tensor_flatten__()[0]}
    weight = torch.nn.Parameter(quantized, requires_grad=False)
    for name, owner in owners.items():
        if owner is not None:
            getattr(weight, name)._aot_ops_owner = owner
    path, _, attribute = key.rpartition(".")
    setattr(model.get_submodule(path), attribute, weight)
