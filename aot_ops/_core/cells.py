"""Cells running one operator: how a single bridged call is compiled as a GRAPH_MODE graph.

Defined once, at module level: MindSpore's graph parser caches by source location, and a Cell class defined anew
for every call gets another call's compiled graph.
"""
from mindspore import nn


class OpCell(nn.Cell):
    """A Cell whose construct calls one operator (compiled as a graph in GRAPH_MODE)."""

    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, *inputs):
        return self.op(*inputs)


class ListCall(nn.Cell):
    """A Cell calling one operator with all its inputs as one tuple (a tensor list given at call time)."""

    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, *inputs):
        return self.op(inputs)


class OptionalInputs(nn.Cell):
    """An operator whose trailing optional tensor inputs may be left out, as in torch: they are passed as None.

    A Cell rather than the primitive itself because MindSpore calls a primitive's bprop with exactly the arguments
    it was given, so the primitive must always get all of them; `construct` pads in both modes. In PyNative the
    call goes straight to the primitive, which pads the same way.
    """

    def __init__(self, op):
        super().__init__()
        self.op = op
        self.num_inputs = op.arity.inputs

    def construct(self, *inputs):
        return self.op(*(inputs + (None,) * (self.num_inputs - len(inputs))))

    def __call__(self, *inputs):
        from mindspore import PYNATIVE_MODE, get_context

        if get_context("mode") == PYNATIVE_MODE:
            return self.op(*inputs)
        return super().__call__(*inputs)
