"""Data-parallel training of a ported network under MindSpore's msrun launcher (2 CPU workers)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from support import REPO

pytestmark = pytest.mark.slow  # two workers under msrun

EXAMPLE = REPO / "examples" / "data_parallel.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_workers_match_each_other_and_single_process_training(tmp_path):
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")  # msrun runs `python`
    launched = subprocess.run(
        [str(bin_dir / "msrun"), "--worker_num=2", "--local_worker_num=2", f"--master_port={free_port()}",
         f"--log_dir={tmp_path / 'logs'}", "--join=True", str(EXAMPLE), "--out", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=600)
    logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted((tmp_path / "logs").glob("worker_*.log")))
    assert launched.returncode == 0, logs
    single = subprocess.run([sys.executable, str(EXAMPLE), "--single", "--out", str(tmp_path)], env=env,
                            capture_output=True, text=True, timeout=600)
    assert single.returncode == 0, single.stderr[-3000:]
    rank0, rank1, whole = (torch.load(tmp_path / f"{name}.pt") for name in ("rank0", "rank1", "single"))
    assert list(rank0) == list(whole) and len(rank0) > 0
    for key in rank0:
        assert torch.equal(rank0[key], rank1[key]), key  # the averaged gradients keep the ranks identical
        torch.testing.assert_close(rank0[key], whole[key], rtol=0, atol=1e-6, msg=key)
    sys.path.insert(0, str(EXAMPLE.parent))
    try:
        from data_parallel import Classifier
    finally:
        sys.path.remove(str(EXAMPLE.parent))
    torch.manual_seed(42)
    initial = Classifier().state_dict()
    assert all(not torch.equal(rank0[key], initial[key]) for key in rank0 if key.endswith("weight"))  # it trained
    for rank in (0, 1):
        assert f"rank {rank}/2 step 4: loss" in logs
