"""The modes of a ported cell's graphs, named and worded in one place.

A module is exported twice, for training and for evaluation; when both graphs are the same, one graph serves both
(Mode.BOTH). A Mode is a str (its value keys the port's tables and appears in the generated source), so tables keyed
by Mode are read with the same keys everywhere.
"""
from __future__ import annotations

import enum


class Mode(str, enum.Enum):
    TRAIN = "train"
    EVAL = "eval"
    BOTH = "both"    # the training and evaluation graphs are one graph

    @property
    def label(self) -> str:
        """How errors, print(cell) and program names say it."""
        return _LABELS[self]

    @property
    def attribute(self) -> str:
        """The generated cell's attribute holding this mode's operators ("eval" is not a valid name there: it
        would shadow the builtin in the generated source)."""
        return _ATTRIBUTES[self]

    @classmethod
    def running(cls, training: bool, available) -> "Mode":
        """The mode a cell runs in `training` (True/False), given the modes it has graphs for."""
        mode = cls.TRAIN if training else cls.EVAL
        return mode if mode in available else cls.BOTH

    def __str__(self) -> str:
        return self.value


_LABELS = {Mode.TRAIN: "training", Mode.EVAL: "evaluation", Mode.BOTH: "training and evaluation"}
_ATTRIBUTES = {Mode.TRAIN: "train", Mode.EVAL: "eval_", Mode.BOTH: "both"}


# The names the generated source and PortedCell share: the generated methods read these attributes, which the cell
# sets (codegen.py writes `self.<name>`, cell.py sets and reads it); both build them here.

def constant_attribute(mode: str, name: str) -> str:
    """The cell's attribute holding the constant `name` of `mode`'s graph or programs."""
    return f"const_{Mode(mode).value}_{name}"


def operators_attribute(mode: str) -> str:
    """The cell's attribute holding `mode`'s operators (an OperatorSet)."""
    return f"ops_{Mode(mode).value}"


def flat_twin_class(class_name: str) -> str:
    """The generated module's class returning a cell's dict outputs as a flat tuple, beside `class_name`."""
    return f"Flat{class_name}"
