"""One mode's fused programs as a ported cell runs them (fuse=True).

A FusedGraph (fused.py) says what the port made of a mode: its forward, backward and inference programs and how
their inputs are wired. A ModePrograms is what one cell does with it: the programs it currently runs (replaced by
compiled ones once, on first use, with fuse="compile") and the operators it makes of them. Each cell has its own:
compiling for one cell changes no other cell's programs.
"""
from __future__ import annotations

from typing import Callable

from ..._build.bundled import library_path
from ..._core.inference import CppInference
from ..._core.opdef import FRESH, OpDef
from ..._core.primitive import AotOp
from .compiled import compiled_or_interpreted
from .fused import FusedGraph
from .program import Program
from .program_inputs import ProgramInput
from .saved_in_library import keeping_forward, taking_backward, wiring

# What each mode runs: a training step the forward program and, for gradients, the backward program; evaluation
# the inference program (the module's outputs, nothing saved).
_RUNS = {True: ("forward", "backward"), False: ("inference",)}


class ModePrograms:
    """The programs of one mode of one cell, compiled at most once each, and the operators calling them."""

    def __init__(self, fused: FusedGraph, compile_on_first_use: bool):
        self.fused = fused
        self._compile = compile_on_first_use
        self._programs: dict[str, Program | None] = {
            "forward": fused.forward, "backward": fused.backward, "inference": fused.inference}
        self._compile_tried: set[str] = set()
        # The keeping variants (saved_in_library.py) of the current forward and backward programs, held here so
        # that the library keeps them parsed while the cell lives (program.py: KeyHold).
        self._keeping: tuple[Program, Program, Program, Program] | None = None

    def program(self, name: str) -> Program | None:
        """The program the cell runs now for "forward", "backward" or "inference" (compiled or interpreted)."""
        return self._programs[name]

    def compile_for(self, training: bool) -> bool:
        """fuse="compile": compiles what the mode runs in `training` (compiled.py), each program tried once, as
        compiling takes seconds; one that does not compile stays interpreted, with a CompileFallbackWarning. True
        if a program was replaced (the operators must then be rebuilt)."""
        if not self._compile:
            return False
        replaced = False
        for name in _RUNS[training]:
            program = self._programs[name]
            if program is None or name in self._compile_tried or name not in self.fused.sources:
                continue
            self._compile_tried.add(name)
            compiled = compiled_or_interpreted(program, self.fused.sources[name], self.fused.compile_sizes)
            self._programs[name] = compiled
            replaced = replaced or compiled is not program
        return replaced

    def forward_operator(self, bprop_factory: Callable | None, constant: Callable[[ProgramInput], object]) -> AotOp:
        """The forward program as one operator, its bprop calling the backward program. `bprop_factory` is the
        generated one (codegen.py); `constant(input)` gives the cell's value of a constant input."""
        return self._forward_with_bprop(self._programs["forward"], self._programs["backward"], bprop_factory,
                                        constant)

    def backward_function(self, bprop_factory: Callable, constant: Callable[[ProgramInput], object]) -> Callable:
        """The forward operator's bprop (a function of its inputs, out and dout) calling the backward program, for a
        cell calling it from a backward of its own (distributed.GatheredPiece)."""
        constants = tuple(constant(i) for i in self.fused.backward_constants)
        return bprop_factory(program_operator(self._programs["backward"], eager_front=False), constants)

    def keeping_operator(self, bprop_factory: Callable,
                         constant: Callable[[ProgramInput], object]) -> AotOp:
        """The forward program keeping its saved tensors in the library (saved_in_library.py), its bprop calling
        the backward program that takes them."""
        return self._forward_with_bprop(*self.keeping_programs(), bprop_factory, constant)

    def _forward_with_bprop(self, forward: Program, backward: Program, bprop_factory: Callable | None,
                            constant: Callable[[ProgramInput], object]) -> AotOp:
        bprop = None
        if bprop_factory is not None:
            constants = tuple(constant(i) for i in self.fused.backward_constants)
            bprop = bprop_factory(program_operator(backward, eager_front=False), constants)
        return program_operator(forward, bprop)

    def keeping_programs(self) -> tuple[Program, Program]:
        """The keeping variants (saved_in_library.py) of the forward and backward programs the cell runs now."""
        forward, backward = self._programs["forward"], self._programs["backward"]
        if self._keeping is None or self._keeping[0] is not forward or self._keeping[1] is not backward:
            wired = wiring(self.fused)
            self._keeping = (forward, backward, keeping_forward(forward, wired), taking_backward(backward, wired))
        return self._keeping[2], self._keeping[3]

    def inference_operator(self, bprop_factory: Callable | None,
                           constant: Callable[[ProgramInput], object]) -> AotOp:
        """The inference program as one operator; its bprop (a gradient asked in evaluation) runs the forward
        program again, then the backward program."""
        bprop = None
        if bprop_factory is not None:
            forward_constants = tuple(constant(i) for i in self.fused.forward_constants)
            constants = tuple(constant(i) for i in self.fused.backward_constants)
            bprop = bprop_factory(program_operator(self._programs["forward"], eager_front=False),
                                  program_operator(self._programs["backward"], eager_front=False),
                                  forward_constants, constants)
        return program_operator(self._programs["inference"], bprop)


def program_operator(program: Program, bprop=None, eager_front: bool = True) -> AotOp:
    """One program (program.py) as an operator of the bundled library's program entry. A backward program runs
    inside MindSpore's bprop, where ops.Custom is faster than the PyNative front (see _core/opdef.py)."""
    dtypes = list(program.out_dtypes)
    # A fresh identity: the attributes hold the whole program, too long to spell out as a stable one.
    return OpDef(library_path(), program.symbol, program.attrs, bprop=bprop, arity=program.arity,
                 infer=CppInference(lambda _dtypes: dtypes), identity=FRESH, eager_front=eager_front).build()
