"""What each tensor a fused program takes is, and where the cell finds its value (fuse=True).

A program (program.py) takes its inputs by position. The generated forward methods and bprops (codegen.py) and the
cell's operator factories (mode_programs.py) must agree on where each comes from: a Parameter of the cell, a
constant fixed at port time, or one of the module's inputs; and, for a constant, which graph's reading made it.
These types say it once, instead of kinds spelled as strings and origins encoded in name prefixes.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass


class Source(enum.Enum):
    """Where the value of a program input comes from when the cell runs."""

    STATE = "state"        # a parameter or buffer: the cell's Parameter of that state_dict key
    CONSTANT = "constant"  # a tensor fixed at port time: the cell attribute modes.constant_attribute names
    USER = "input"         # one of the module's inputs, by the name the forward method gives it


class Origin(enum.Enum):
    """Which reading of which graph made a constant. Constants of the different graphs of one mode live side by side
    in the cell, so the origin is also part of the constant's name (its value: a prefix)."""

    LIFTED = "lifted_"    # a tensor torch.export lifted out of the module (a scalar written into a slice)
    FORWARD = "f_"        # folded while reading AOTAutograd's forward graph: the forward program takes it
    BACKWARD = "b_"       # folded while reading the backward graph: the backward program takes it
    INFERENCE = "i_"      # folded while reading the exported graph: the inference program's own


@dataclass(frozen=True)
class ProgramInput:
    """One input of a program: its source and the name the source knows it by."""

    source: Source
    name: str                     # the state key, the constant's name (unique in its mode) or the input's name
    origin: Origin | None = None  # for a constant

    @classmethod
    def state(cls, key: str) -> "ProgramInput":
        return cls(Source.STATE, key)

    @classmethod
    def user(cls, name: str) -> "ProgramInput":
        return cls(Source.USER, name)

    @classmethod
    def constant(cls, origin: Origin, graph_name: str) -> "ProgramInput":
        """The constant a graph's reading called `graph_name`."""
        return cls(Source.CONSTANT, origin.value + graph_name, origin)


class SavedFrom(enum.Enum):
    """Where a tensor saved for the backward program is taken from when MindSpore calls the bprop."""

    INPUT = "input"    # one of the forward program's inputs (the bprop has it as an argument)
    OUTPUT = "output"  # one of the forward program's outputs (the bprop's `out`)


@dataclass(frozen=True)
class Saved:
    """One tensor the backward program takes before the cotangents."""

    source: SavedFrom
    index: int  # the position among the forward program's inputs or outputs
