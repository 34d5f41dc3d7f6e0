"""A copy of a torch module's structure that shares its tensors: what the port changes while it traces a module
(the training flag, forward's fixed keywords, a stack of layers cut to two, torch.export's own swap of parameters
for fake tensors) is changed on the copy, never on the user's module, which another thread may use meanwhile."""
from __future__ import annotations

from typing import Any

import torch

from ..._core.torch_private import give_own_tables


def structural_copy(module: torch.nn.Module, replaced: dict[int, Any] | None = None) -> torch.nn.Module:
    """A copy of every module of the tree (a new object each, with its own attributes and tables) holding the same
    parameter and buffer tensors, in the same places: its state_dict and named_parameters name the same tensors.
    `replaced`: by id, a module to copy in place of that one (its submodules copied in turn), a parameter or buffer
    to hold in place of that one, or a plain attribute value (a configuration) the copies hold in place of that one.
    A module found twice is copied once."""
    replaced = replaced or {}
    copies: dict[int, torch.nn.Module] = {}

    def copied(original: torch.nn.Module) -> torch.nn.Module:
        if id(original) in copies:
            return copies[id(original)]
        source = replaced.get(id(original), original)
        # A new object of the class holding the same attributes, as copy.copy makes one, without the class's pickle
        # hooks: a parametrized module's __getstate__ refuses (torch.nn.utils.parametrize)
        clone = type(source).__new__(type(source))
        vars(clone).update(vars(source))
        copies[id(original)] = clone
        give_own_tables(clone, copied, lambda tensor: replaced.get(id(tensor), tensor))
        for name, value in list(vars(clone).items()):
            if not isinstance(value, torch.nn.Module) and id(value) in replaced:
                setattr(clone, name, replaced[id(value)])
        return clone

    return copied(module)
