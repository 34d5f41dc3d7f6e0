"""The README's demo runs and shows what it claims (the command `./run.sh demo` runs this script)."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from support import REPO

pytestmark = pytest.mark.slow  # the demo: ResNet-18 ported and trained


def test_demo_ports_resnet18_and_trains_it_like_torch():
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "demo.py")], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(r"bridged operators: \d+ in evaluation, \d+ in training", out)
    rows = re.findall(r"^\s+\d+\s+(PyNative|GRAPH_MODE)\s+([\d.]+)\s+([\d.]+)\s", out, re.M)
    assert {mode for mode, _, _ in rows} == {"PyNative", "GRAPH_MODE"} and len(rows) == 6
    for _, ours, theirs in rows:
        assert abs(float(ours) - float(theirs)) <= 1e-4 * float(theirs)
    assert "logits, largest |difference|" in out
