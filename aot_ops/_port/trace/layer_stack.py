"""A model's stack of alike layers exported as two (a stage of the port, for the models from_pretrained builds): the
later layers are written into the graph as copies of the second one (layer_copies.py), instead of torch.export
tracing each (about 0.2 s a decoder layer of a dynamic sequence: most of a checkpoint's first port,
docs/performance.md).

- `search(module)`: the module's one ModuleList of three or more modules of one class whose layers 1 to N - 1 hold
  the same attributes (every plain value of every submodule, apart from one that is each layer's own index, such
  as `layer_idx`), the same parameters and buffers (names, shapes, dtypes) and no hooks, with the configuration's
  per-layer lists (`layer_types`, ...) saying the same of each; or why there is none.
- `export_as_two(module, stack, export)`: a copy of the module holding the first two layers (and a configuration
  counting two) is exported, never the user's module or configuration; the copies are written into its graph. The
  outcome says whether they were (`StackExport.expanded`) and, where they could not be, why: the module is then to
  be exported whole. Only NotExpandable is taken for that answer; any other error is raised as it is.
tests/test_layer_stack.py checks, for several model families, that the expanded graph has the whole export's inputs
and outputs in order and computes its logits and cache writes bit for bit.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..._core.torch_private import is_persistent_buffer
from .layer_copies import SHALLOW, NotExpandable, expand
from .module_copy import structural_copy


@dataclass(frozen=True)
class LayerStack:
    """The ModuleList of alike layers at `path` in the exported module, and the configuration counting them."""

    path: str
    layers: torch.nn.ModuleList
    config: Any = None  # the transformers configuration whose num_hidden_layers counts them, if any

    @property
    def count(self) -> int:
        return len(self.layers)

    def shallow(self, module: torch.nn.Module) -> tuple[torch.nn.Module, Any]:
        """A structural copy of `module` (module_copy.py) whose stack holds its first SHALLOW layers, and the copy of
        the configuration the copies hold, counting SHALLOW layers (None where no configuration counts them)."""
        replaced: dict[int, Any] = {id(self.layers): self.layers[:SHALLOW]}
        config = None
        if self.config is not None:
            config = copy.copy(self.config)
            config.num_hidden_layers = SHALLOW
            replaced[id(self.config)] = config
        return structural_copy(module, replaced), config


@dataclass(frozen=True)
class StackExport:
    """The layer stack stage's outcome: the export with every layer (`exported`; None where the module is to be
    exported whole) and why it could not be made."""

    exported: Any = None  # export.Exported
    why_whole: str | None = None

    @property
    def expanded(self) -> bool:
        return self.exported is not None


def search(module: torch.nn.Module) -> tuple[LayerStack | None, str | None]:
    """The module's one stack of alike layers (see the module's docstring), or None and why."""
    stacks = [(path, child) for path, child in module.named_modules()
              if isinstance(child, torch.nn.ModuleList) and len(child) > SHALLOW
              and len({type(layer) for layer in child}) == 1]
    if len(stacks) != 1:
        return None, f"{len(stacks)} lists of more than {SHALLOW} modules of one class"
    path, layers = stacks[0]
    config = _counting_config(module, len(layers))
    why = _unlike(layers) or (_config_unlike(config, len(layers)) if config is not None else None)
    if why:
        return None, f"the layers of {path} are not alike: {why}"
    return LayerStack(path, layers, config), None


def export_as_two(module: torch.nn.Module, stack: LayerStack, export: Callable[[torch.nn.Module], Any]) -> StackExport:
    """`export(a module)` (export.py's, with the port's inputs and settings) of the module with two of the stack's
    layers, the others copied into its graph; or, where the copies would not be what a whole export gives, the
    reason (the module is then exported whole by the caller)."""
    shallow, _config = stack.shallow(module)
    exported = export(shallow)
    state = dict([*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)])
    try:
        expand(exported.program, stack.path, stack.count, state)
    except NotExpandable as exc:
        return StackExport(None, f"its {stack.count} layers at {stack.path} cannot be copied: {exc}")
    return StackExport(exported)


def _counting_config(module: torch.nn.Module, count: int):
    """The transformers configuration among the module's that counts `count` hidden layers, or None."""
    for child in module.modules():
        config = getattr(child, "config", None)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        if getattr(text, "num_hidden_layers", None) == count:
            return text
    return None


def _unlike(layers: torch.nn.ModuleList) -> str | None:
    """Why layers 1..N-1 may compute differently (None: they hold the same attributes, state and no hooks). An
    attribute holding each layer's own index (layer_idx) is set apart; layer 0 is compared on its graph."""
    described = [_attributes(layer) for layer in layers]
    indices = {key for key in described[0]
               if all(d.get(key) == ("int", str(k)) for k, d in enumerate(described))}
    reference = {key: value for key, value in described[1].items() if key not in indices}
    for k, layer_attributes in enumerate(described[2:], start=2):
        mine = {key: value for key, value in layer_attributes.items() if key not in indices}
        if mine != reference:
            differing = sorted(set(mine.items()) ^ set(reference.items()))
            return f"layer {k} differs from layer 1 in {differing[0][0]}"
    return None


_TABLES = ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set")  # described below, not as values


def _attributes(layer: torch.nn.Module) -> dict[str, tuple]:
    """Every submodule's class, plain attributes, parameters, buffers and hooks, by dotted name."""
    described: dict[str, tuple] = {}
    for path, module in layer.named_modules():
        described[f"{path}:class"] = ("class", f"{type(module).__module__}.{type(module).__qualname__}")
        for name, value in vars(module).items():
            if name in _TABLES:
                continue
            if isinstance(value, dict) and name.startswith("_") and "hook" in name:
                described[f"{path}:{name}"] = ("hooks", str(len(value)))
            elif isinstance(value, (bool, int, float, str, type(None))):
                described[f"{path}:{name}"] = (type(value).__name__, str(value))
            elif isinstance(value, (tuple, list)) and all(isinstance(v, (bool, int, float, str)) for v in value):
                described[f"{path}:{name}"] = ("sequence", repr(value))
        for name, tensor in module.named_parameters(recurse=False, remove_duplicate=False):
            described[f"{path}:{name}"] = ("tensor", str(tuple(tensor.shape)), str(tensor.dtype), "False")
        for name, tensor in module.named_buffers(recurse=False, remove_duplicate=False):
            described[f"{path}:{name}"] = ("tensor", str(tuple(tensor.shape)), str(tensor.dtype),
                                           str(not is_persistent_buffer(module, name)))
    return described


def _config_unlike(config, count: int) -> str | None:
    """A configuration list with an entry per layer that tells layers 1..N-1 apart (layer_types, ...)."""
    for name, value in vars(config).items():
        if isinstance(value, (list, tuple)) and len(value) == count and len({repr(v) for v in value[1:]}) > 1:
            return f"the configuration's {name} differs between layers"
    return None
