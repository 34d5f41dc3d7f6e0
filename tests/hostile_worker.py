"""Runs the scripts of tests/test_hostile_calls.py one after another in this process, each in a namespace of its
own, for as long as the process lives: `python -m hostile_worker` (from tests/), through the fuzz workers'
protocol (aot_ops.tools.fuzz.campaign): one JSON line in, {"id", "script"}, one out, {"stdout"}: what the script
printed. A script that kills the process is seen by the test as the worker's death, and the next script gets a new
worker: a crash fails its own test, not the ones after it, and no test pays for starting MindSpore again.
"""
from __future__ import annotations

import contextlib
import io

from aot_ops.tools.fuzz.campaign import serve


def run_script(case: dict) -> dict:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(case["script"], f"<hostile case {case['id']}>", "exec"), {"__name__": "__hostile_case__"})
    return {"outcome": "ran", "stdout": printed.getvalue()}


if __name__ == "__main__":
    serve(run_script)
