"""Generated hostile calls (aot_ops.tools.fuzz) in both modes, each in a worker process: no process death, no wrong
result, no hang, no error of aot_ops' own that fails to name the operator. Garbage in the raw C arguments of the
bundled libraries' exported functions, likewise. `python -m aot_ops fuzz --cases N --raw-cases M` runs a longer
campaign."""
from __future__ import annotations

import json
import re

import pytest
import torch

from aot_ops.tools import fuzz as _fuzz
from aot_ops.tools.fuzz import raw_cases
from aot_ops.tools.fuzz.campaign import Worker, run_raw
from aot_ops.tools.fuzz.cases import Generator
from aot_ops.tools.fuzz.raw_cases import INT_MAX, INT_MIN, RawGenerator


@pytest.mark.slow  # 240 hostile calls and 200 raw-argument calls in worker processes
def test_campaign_has_no_death_wrong_result_hang_or_unnamed_error():
    # Four workers on two cores: a GRAPH_MODE call whose kernel fails returns after MindSpore's runtime has idled
    # for 3 s (about 30 such cases, 90 s of waiting), which the other workers' cases fill (67 s -> 45 s alone).
    report = _fuzz.run(240, seed=2026, jobs=4, timeout=60, raw_cases=200)
    print(report.summary())
    assert not report.failures, report.summary()
    by_mode = report.counts("mode")
    for mode in (0, 1):  # both modes ran, with valid calls and refused ones
        assert by_mode[mode].get("correct", 0) >= 20 and by_mode[mode].get("error", 0) >= 20, by_mode
    assert set(report.counts("kind")) == {"ready", "aten", "custom", "aten_raw", "raw"}
    by_entry = report.counts("entry")
    assert set(by_entry) == set(raw_cases.ENTRIES)
    assert all(counts.get("error", 0) >= 10 for counts in by_entry.values()), by_entry


@pytest.fixture(scope="module")
def raw_catalogue():
    """Every single raw-argument fault of every exported function tried, once, in worker processes (seconds)."""
    report = run_raw(raw_cases.catalogue(), jobs=2, timeout=60)
    print(report.summary())
    return report


def test_raw_argument_garbage_kills_no_process_and_is_refused_by_name(raw_catalogue):
    """Each case failed naming the operator and the cause (or, for garbage the function never reads, succeeded with
    torch's result), and the same function called validly afterwards gave torch's result: no death, no wrong
    result, no unnamed error, no broken state."""
    assert not raw_catalogue.failures, raw_catalogue.summary()
    by_entry = raw_catalogue.counts("entry")
    assert set(by_entry) == set(raw_cases.ENTRIES)
    assert all(counts.get("error", 0) >= 20 for counts in by_entry.values()), by_entry


def _outcome(report, entry: str, target: str, fault: dict) -> dict:
    key = (entry, target, json.dumps([fault]))
    return next(r for r in report.results
                if (r["case"]["entry"], r["case"]["target"], json.dumps(r["case"]["faults"])) == key)


# What the C caller passed, and what it gets back now (the last error; "error" also means that a valid call
# of the same function right after it gave torch's result).
RAW_REFUSALS = [
    ("launch", "LeakyRelu", {"arg": "extra", "value": "zeros"},
     r"^LeakyRelu: the extra argument \(0x[0-9a-f]+\) is not MindSpore's AotExtra: its first word, where an AotExtra "
     r"holds its vtable pointer, is 0 \(zeroed memory\?\)$"),
    ("launch", "AtenProgram", {"arg": "extra", "value": "heap_vtable"},
     r"^AtenProgram: the extra argument .* is not a vtable \(its entries do not all point into loaded code\)$"),
    ("infer_shape", "MaxDim", {"arg": "extra", "value": "unmapped"},
     r"^MaxDim: the extra argument \(0x[0-9a-f]+\) is not MindSpore's AotExtra: it points at unmapped memory$"),
    ("init", "Add", {"arg": "extra", "value": "null"},
     r"^Add: Init needs the extra argument \(MindSpore's AotExtra, which keeps the kernel's state\), and it is NULL$"),
    ("init", "AtenOp", {"arg": "extra", "value": "zeros"}, r"^AtenOp: the extra argument .* is 0 \(zeroed memory"),
    ("output_types", "Add", {"arg": "input_dtypes", "value": None}, r"^Add: input_dtypes is NULL$"),
    ("output_types", "MaxDim", {"arg": "output_dtypes", "value": None}, r"^MaxDim: output_dtypes is NULL$"),
    ("output_types", "LeakyRelu", {"arg": "capacity", "value": -1},
     r"^LeakyRelu: capacity is -1, but the kernel has 1 output dtype\(s\) to write$"),
    ("output_types", "Add", {"arg": "num_inputs", "value": INT_MIN}, r"^Add: expected 2 input\(s\), got -2147483648$"),
    ("launch", "AtenOp", {"arg": "rank", "index": 0, "value": INT_MAX},
     r"^aten::neg: input 0 has rank 2147483647, above the 64 ms_ext supports$"),
    ("launch", "Add", {"arg": "rank", "index": 2, "value": -1}, r"^Add: output 0 has a negative rank -1$"),
    ("infer_shape", "LeakyRelu", {"arg": "rank", "index": 0, "value": INT_MAX - 1},
     r"^LeakyRelu: input 0 has rank 2147483646, above the 64 ms_ext supports; the kernel takes 1 input"),
    ("launch", "MaxDim", {"arg": "nparam", "value": INT_MIN},
     r"^MaxDim: MindSpore passed -2147483648 parameters; a launch takes 0 to 65536$"),
    ("launch", "AtenOp", {"arg": "nparam", "value": INT_MAX},
     r"^AtenOp: MindSpore passed 2147483647 parameters; a launch takes 0 to 65536$"),
    ("launch", "LeakyReluCustom", {"arg": "shape_row", "index": 0, "value": None},
     r"^LeakyReluCustom: input 0 has rank 2 but no shape$"),
    ("launch", "Add", {"arg": "dtypes", "value": None}, r"^Add: MindSpore passed NULL dtypes$"),
]


@pytest.mark.parametrize("entry, target, fault, message", RAW_REFUSALS,
                         ids=[f"{e}-{t}-{f['arg']}" for e, t, f, _ in RAW_REFUSALS])
def test_raw_argument_garbage_gets_the_named_cause(raw_catalogue, entry, target, fault, message):
    result = _outcome(raw_catalogue, entry, target, fault)
    assert result["outcome"] == "error", result
    assert re.search(message, result["detail"]), result["detail"]


def test_garbage_a_function_never_reads_leaves_its_result_right(raw_catalogue):
    """A launch without an extra is a call without attributes (the default slope, checked against torch); Init
    reads ranks only to size scratch buffers, so an impossible rank leaves the launch after it right."""
    assert _outcome(raw_catalogue, "launch", "LeakyRelu", {"arg": "extra", "value": "null"})["outcome"] == "correct"
    rank = {"arg": "rank", "index": 0, "value": INT_MAX}
    assert _outcome(raw_catalogue, "init", "LeakyRelu", rank)["outcome"] == "correct"


def test_cases_are_reproducible_from_the_seed():
    assert Generator(7).case(123) == Generator(7).case(123)
    assert Generator(7).case(123) != Generator(8).case(123)
    assert RawGenerator(7).case(123) == RawGenerator(7).case(123)
    assert RawGenerator(7).case(123) != RawGenerator(8).case(123)


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
