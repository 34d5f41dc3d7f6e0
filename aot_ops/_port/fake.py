"""The fake tensor mode a graph's values live in: passes that add nodes compute each new node's value in it."""
from __future__ import annotations

import contextlib
from typing import Any, ContextManager

import torch
import torch._guards


def mode_of(values: Any) -> ContextManager:
    """The fake mode that made `values` (tensors, possibly nested in lists and dicts): torch.export's or
    AOTAutograd's, whose shape environment their symbolic sizes belong to; a no-op context for real tensors."""
    leaves = torch.utils._pytree.tree_leaves(values)
    return torch._guards.detect_fake_mode(leaves) or contextlib.nullcontext()
