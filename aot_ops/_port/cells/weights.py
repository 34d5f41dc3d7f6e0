"""A ported cell's weights: MindSpore Parameters made from the torch module's tensors (copied, or shared with the
module), and torch state_dicts both ways (PortedCell.torch_state_dict / load_torch_state_dict)."""
from __future__ import annotations

import collections
from typing import Mapping, NamedTuple

import mindspore as ms
import torch
from mindspore import nn

from ..._core import dtypes as _dtypes
from ..._core.convert import owning_parameter, to_torch, torch_view
from ..._core.mindspore_private import wait_for_queued_work
from ..errors import PortError
from .module_tree import add_parameter


class IncompatibleKeys(NamedTuple):
    """Like torch's load_state_dict result."""

    missing_keys: list[str]
    unexpected_keys: list[str]


def make_parameters(cells: dict[str, nn.Cell], state: list, initial_state: Mapping[str, torch.Tensor],
                    share_weights: bool) -> dict[str, ms.Parameter]:
    """A Parameter per state entry (cell.StateEntry), set on the cell of its module (`cells`: by module path), by
    key; a tied entry gets its first key's Parameter. `share_weights`: each module tensor becomes a view of its
    Parameter's memory (its own memory freed at once, so the weights are held once even while the cell is built)."""
    parameters: dict[str, ms.Parameter] = {}
    for entry in state:
        if entry.alias_of is None:
            tensor = initial_state[entry.key]
            # weights loaded into MindSpore's memory (load_pretrained) are that memory already: taken, not copied
            owner = owning_parameter(tensor) if share_weights else None
            parameters[entry.key] = parameter = add_parameter(cells, entry, tensor if owner is None else owner)
            if share_weights and owner is None:
                with torch.no_grad():
                    tensor.data = torch_view(parameter)
                    # a quantized weight's inner tensor, of which the port's tensor is a new object
                    # (trace/tensor_subclasses.py): the user's module shares the Parameter too
                    same_memory = getattr(tensor, "_aot_ops_same_memory", None)
                    if same_memory is not None:
                        same_memory.data = torch_view(parameter)
    for entry in state:
        if entry.alias_of is not None:
            parameters[entry.key] = parameters[entry.alias_of]
    return parameters


def torch_state_dict(parameters: Mapping[str, ms.Parameter],
                     state: list) -> "collections.OrderedDict[str, torch.Tensor]":
    return collections.OrderedDict((e.key, to_torch(parameters[e.key].value())) for e in state if e.persistent)


def load_torch_state_dict(module_name: str, parameters: Mapping[str, ms.Parameter], state: list,
                          state_dict: Mapping[str, torch.Tensor], strict: bool) -> IncompatibleKeys:
    expected = [e.key for e in state if e.persistent]
    missing = [k for k in expected if k not in state_dict]
    unexpected = [k for k in state_dict if k not in parameters or k not in expected]
    if strict and (missing or unexpected):
        raise PortError(f"{module_name}: state_dict does not match (missing keys: {missing}; unexpected "
                        f"keys: {unexpected})")
    # Every shape is checked before any Parameter is written: a refused state_dict leaves the cell as it was.
    loaded = {key: (parameters[key], torch.as_tensor(value)) for key, value in state_dict.items()
              if key not in unexpected}
    for key, (parameter, value) in loaded.items():
        if tuple(value.shape) != tuple(parameter.shape):
            raise PortError(f"{module_name}: '{key}' has shape {tuple(value.shape)}, the cell's parameter "
                            f"has {tuple(parameter.shape)}")
    wait_for_queued_work()  # no queued MindSpore work still reads the old values
    # Into the Parameter's own memory (not set_data, which replaces it): a torch module sharing its weights with the
    # cell keeps sharing them
    with torch.no_grad():
        for parameter, value in loaded.values():
            torch_view(parameter).copy_(value.to(_dtypes.to_torch(parameter.dtype)))
    return IncompatibleKeys(missing, unexpected)
