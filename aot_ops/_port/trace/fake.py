"""The fake tensor mode a graph's values live in: passes that add nodes compute each new node's value in it."""
from __future__ import annotations

import contextlib
from typing import Any, ContextManager

from ..._core.torch_private import detect_fake_mode, tree_leaves


def mode_of(values: Any) -> ContextManager:
    """The fake mode that made `values` (tensors, possibly nested in lists and dicts): torch.export's or
    AOTAutograd's, whose shape environment their symbolic sizes belong to; a no-op context for real tensors."""
    return detect_fake_mode(tree_leaves(values)) or contextlib.nullcontext()
