"""The model zoo (aot_ops/tools/zoo.py): real Hugging Face transformers models, each stage against torch.

For every family: the evaluation forward in PyNative and GRAPH_MODE, one aot call per node and fused, and three
SGD steps of training in the same four ways (first-step gradients, losses, parameters and buffers after training;
chaotic models on first-step gradients only). A family is run once, on its first test, and its stages are reported
as separate tests.
"""
from __future__ import annotations

import pytest

from aot_ops.tools import zoo

pytestmark = pytest.mark.slow  # 23 transformers families, eight stages each (~5 min)

_reports: dict[str, zoo.Report] = {}


def report_of(family: str) -> zoo.Report:
    if family not in _reports:
        _reports[family] = zoo.run(zoo.FAMILIES[family])
    return _reports[family]


CASES = [(family, stage) for family in zoo.FAMILIES for stage in zoo.STAGES]


# A family's stages share its ports: one group each (tests/scheduling.py), so the families spread over the workers.
@pytest.mark.parametrize("family,stage", [pytest.param(f, s, id=f"{f}-{s}", marks=pytest.mark.xdist_group(f))
                                          for f, s in CASES])
def test_stage_matches_torch(family, stage):
    report = report_of(family)
    assert report.stages.get(stage) == "ok", report.errors.get(stage, report.stages.get(stage))


def test_the_zoo_has_the_families_people_port():
    required = {"bert", "distilbert", "gpt2", "llama", "t5", "vit", "swin", "convnext", "resnet", "mobilenet_v2",
                "efficientnet", "whisper", "wav2vec2"}
    assert required <= set(zoo.FAMILIES)
    assert len(set(zoo.FAMILIES) - required) >= 6
    kinds = {f.kind for f in zoo.FAMILIES.values()}
    assert kinds == {"text", "decoder", "seq2seq", "vision", "audio"}
    # each entry builds the transformers class it names, with the batch its kind needs, and what it brings
    # beyond ATen is there: a Function of transformers' own, and a torch.library operator in the export
    for name in ("bloom", "mixtral"):
        model, batch = zoo.FAMILIES[name].build()
        assert type(model).__module__.startswith(f"transformers.models.{name}."), type(model)
        assert not model.training and set(batch) == {"input_ids", "attention_mask", "labels"}
    import torch
    from transformers.models.bloom import modeling_bloom

    assert "BloomGelu" in {type(m).__name__ for m in zoo.FAMILIES["bloom"].build()[0].modules()}
    assert issubclass(modeling_bloom.GeLUFunction, torch.autograd.Function)  # what BloomGelu applies
    mixtral, batch = zoo.FAMILIES["mixtral"].build()
    exported = torch.export.export(mixtral, (), batch)
    assert any(getattr(n.target, "namespace", None) == "transformers" for n in exported.graph.nodes)
