"""The identity of an operator: the one place it is computed.

A Custom primitive with the same `func` and the same prim attributes as an earlier one reuses MindSpore's cached
inference (its own out_shape is never called), so every AotOp carries an identity attribute, and two operators
may share one only when they infer alike. The policies:
- STABLE (the default of OpDef): from (library, symbol, attributes), for an operator whose behaviour (shapes,
  dtypes, values) is fully given by its kernel and its attributes: equal definitions share MindSpore's cache;
- FRESH (the default of a bare AotOp): one no other operator has, for operators described by more than their
  attributes (a bprop of their own, user shape rules, attributes too long to spell out such as a whole program);
- a string: the caller's own key, for a definition it describes itself (an ATen call's cache key).
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Mapping


class _Policy:
    def __init__(self, name: str):
        self._name = name

    def __repr__(self):
        return self._name


STABLE = _Policy("STABLE")
FRESH = _Policy("FRESH")
_fresh_ids = itertools.count()


def identity_of(policy: str | _Policy | None, library: str | Path, symbol: str,
                attrs: Mapping[str, object] | None) -> str:
    """The identity attribute an operator gets under `policy` (None: STABLE)."""
    if policy is STABLE or policy is None:
        described = ",".join(f"{k}={attrs[k]!r}" for k in sorted(attrs or {}))
        return f"{Path(library).name}:{symbol}({described})"
    if policy is FRESH:
        return f"{symbol}#{next(_fresh_ids)}"
    if not isinstance(policy, str) or not policy:
        raise TypeError(f"{symbol}: an identity is STABLE, FRESH or a non-empty string, got {policy!r}")
    return policy


def backward_identity(policy: str | _Policy | None, forward: str, library: str | Path, symbol: str,
                      attrs: Mapping[str, object] | None) -> str:
    """The backward kernel's: stable on its own terms when the forward's is stable, else derived from the
    forward's (a backward shares what made the forward's identity fresh or keyed)."""
    return identity_of(STABLE, library, symbol, attrs) if policy in (STABLE, None) else f"{forward}.backward"
