"""A Cell running one operator: how a single bridged call is compiled as a GRAPH_MODE graph.

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
