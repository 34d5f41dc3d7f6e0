"""The training loss of a ported Hugging Face model, as a MindSpore Cell (its own module: importing the zoo's
families and table does not import MindSpore; aot_ops.tools.zoo.LossOf loads it on first use)."""
from __future__ import annotations

import mindspore as ms


class LossOf(ms.nn.Cell):
    """The `loss` output of a ported Hugging Face model (which computes it from `labels`)."""

    def __init__(self, cell):
        super().__init__(auto_prefix=False)  # the parameters keep the ported cell's names
        self.cell = cell

    def construct(self, *inputs):
        return self.cell(*inputs)["loss"]
