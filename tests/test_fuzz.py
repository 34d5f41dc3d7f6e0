"""Generated hostile calls (aot_ops.tools.fuzz) in both modes, each in a worker process: no process death, no wrong
result, no hang, no error of aot_ops' own that fails to name the operator. `python -m aot_ops fuzz --cases N`
runs a longer campaign."""
from __future__ import annotations

import pytest
import torch

from aot_ops.tools import fuzz as _fuzz
from aot_ops.tools.fuzz.campaign import Worker
from aot_ops.tools.fuzz.cases import Generator


@pytest.mark.slow  # 240 hostile calls in worker processes
def test_campaign_has_no_death_wrong_result_hang_or_unnamed_error():
    report = _fuzz.run(240, seed=2026, jobs=2, timeout=60)
    print(report.summary())
    assert not report.failures, report.summary()
    by_mode = report.counts("mode")
    for mode in (0, 1):  # both modes ran, with valid calls and refused ones
        assert by_mode[mode].get("correct", 0) >= 20 and by_mode[mode].get("error", 0) >= 20, by_mode
    assert set(report.counts("kind")) == {"ready", "aten", "custom", "aten_raw"}


def test_cases_are_reproducible_from_the_seed():
    assert Generator(7).case(123) == Generator(7).case(123)
    assert Generator(7).case(123) != Generator(8).case(123)


def test_a_dead_worker_is_counted_as_a_death():
    worker = Worker()
    assert worker.wait_ready(timeout=300)
    worker.proc.kill()
    answer = worker.run(Generator(0).case(0), timeout=60)
    worker.stop()
    assert answer["outcome"] == "death"


def test_the_judge_sees_a_wrong_value_dtype_or_shape():
    from aot_ops.tools.fuzz.worker import same

    expected = (torch.tensor([1.0, 2.0]),)
    assert same((torch.tensor([1.0, 2.0]),), expected) is None
    assert "output 0" in same((torch.tensor([1.0, 2.5]),), expected)
    assert "float64" in same((torch.tensor([1.0, 2.0], dtype=torch.float64),), expected)
    assert "(1, 2)" in same((torch.tensor([[1.0, 2.0]]),), expected)
    assert "2 outputs" in same((expected[0], expected[0]), expected)
