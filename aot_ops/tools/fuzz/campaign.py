"""Runs fuzz cases in worker processes and counts what happened, including what a worker cannot report itself:
a process death (the worker is restarted for the next case) and a hang (no answer within the time limit; the
worker is killed). Operator cases (cases.py) run in worker.py's processes, raw-argument cases (raw_cases.py) in
raw_worker.py's, which do not load MindSpore.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time

from .cases import Generator
from .raw_cases import RawGenerator, catalogue

WORKERS = {"ops": "aot_ops.tools.fuzz.worker", "raw": "aot_ops.tools.fuzz.raw_worker"}

RESULT = "FUZZ-RESULT "  # prefix of a worker's answer lines (anything else on stdout is ignored)


def serve(run_case) -> None:
    """A worker's side of the protocol: ready, then one answer line per case line read from stdin. A case that
    raises is a bug of the fuzzer itself, answered as such (the worker goes on)."""
    import gc
    import traceback

    # MindSpore's GRAPH_MODE compile starts with a full gc.collect(), which walks every object the imports made
    # (about 0.25 s a graph): they live as long as the worker, so collections skip them from now on.
    gc.collect()
    gc.freeze()
    print(RESULT + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        case = json.loads(line)
        try:
            result = run_case(case)
        except Exception:  # noqa: BLE001 - a bug in the fuzzer itself, reported as such
            result = {"outcome": "fuzzer_error", "detail": traceback.format_exc()[-800:]}
        result["id"] = case["id"]
        print(RESULT + json.dumps(result), flush=True)

# Outcomes that fail a campaign (worker.py describes them all).
FAILURES = ("death", "wrong", "hang", "broken", "error_unnamed", "fuzzer_error")


@dataclasses.dataclass
class Report:
    seed: int
    results: list[dict]  # one per case: the case, its outcome and detail
    seconds: float

    def counts(self, key: str = "outcome") -> dict:
        """Outcomes by the cases' `key` ("all" for "outcome"); cases without that key are left out."""
        table: dict = collections.defaultdict(collections.Counter)
        for r in self.results:
            if key == "outcome" or key in r["case"]:
                table[r["case"][key] if key != "outcome" else "all"][r["outcome"]] += 1
        return {k: dict(v) for k, v in sorted(table.items(), key=lambda kv: str(kv[0]))}

    @property
    def failures(self) -> list[dict]:
        return [r for r in self.results if r["outcome"] in FAILURES]

    def summary(self) -> str:
        modes = {0: "GRAPH_MODE", 1: "PyNative"}
        lines = [f"{len(self.results)} cases (seed {self.seed}) in {self.seconds:.0f} s"]
        for mode, counts in self.counts("mode").items():
            lines.append(f"  {modes[mode]:<10} " + _format(counts))
        for kind, counts in self.counts("kind").items():
            lines.append(f"  {kind:<10} " + _format(counts))
        for entry, counts in self.counts("entry").items():  # the raw-argument cases, by exported function
            lines.append(f"  raw {entry:<14} " + _format(counts))
        lines.append(f"  {'all':<10} " + _format(self.counts()["all"]))
        for r in self.failures[:20]:
            lines.append(f"FAILED {r['outcome']}: {json.dumps(r['case'])}\n    {r['detail'][:600]}")
        return "\n".join(lines)


def _format(counts: dict) -> str:
    order = ["correct", "error", "refused", "ambiguous", *FAILURES]
    return ", ".join(f"{k} {counts.get(k, 0)}" for k in order if counts.get(k, 0) or k in ("correct", "error"))


class Worker:
    """One worker process (`python -m aot_ops.tools.fuzz.worker`, or raw_worker); answers are read on a thread so
    a hang can time out."""

    def __init__(self, module: str = WORKERS["ops"], cwd: str | None = None):
        """`cwd`: the folder the process starts in, where `python -m` looks for `module` first."""
        self.log = tempfile.TemporaryFile(mode="w+")
        env = dict(os.environ, GLOG_v="3", PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, "-m", module], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=env, cwd=cwd)
        self.answers: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            if line.startswith(RESULT):
                self.answers.put(json.loads(line[len(RESULT):]))
        self.answers.put(None)  # the process ended

    def wait_ready(self, timeout: float) -> bool:
        return self._answer(timeout) is not None

    def _answer(self, timeout: float):
        try:
            return self.answers.get(timeout=timeout)
        except queue.Empty:
            return "hang"

    def run(self, case: dict, timeout: float) -> dict:
        try:
            self.proc.stdin.write(json.dumps(case) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return {"outcome": "death", "detail": "the worker was gone before the case started"}
        answer = self._answer(timeout)
        if answer == "hang":
            self.stop()
            return {"outcome": "hang", "detail": f"no answer in {timeout:.0f} s"}
        if answer is None:
            code = self.proc.wait()
            return {"outcome": "death", "detail": f"exit {code}: {self.stderr_tail()}"}
        return answer

    def stderr_tail(self) -> str:
        self.log.seek(0)
        text = self.log.read()
        return " ".join(text[-1500:].split())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self):
        if self.alive():
            self.proc.kill()
        self.proc.wait()
        self.log.close()


def run(cases: int, seed: int = 0, jobs: int = 2, timeout: float = 60.0, start: int = 0,
        progress=None, raw_cases: int = 0, raw_catalogue: bool = False) -> Report:
    """Runs operator cases start..start+cases-1 of the seed's sequence, then raw-argument cases
    start..start+raw_cases-1 of the seed's raw sequence (after every single raw fault once, with
    `raw_catalogue`), on `jobs` worker processes of each kind."""
    generator, raw = Generator(seed), RawGenerator(seed)
    raw_batch = (catalogue() if raw_catalogue else []) + [raw.case(i) for i in range(start, start + raw_cases)]
    batches = [("ops", [generator.case(i) for i in range(start, start + cases)]), ("raw", raw_batch)]
    began = time.monotonic()
    results: list[dict] = []
    for kind, batch in batches:
        results += run_cases(batch, WORKERS[kind], jobs, timeout, progress)
    return Report(seed=seed, results=results, seconds=time.monotonic() - began)


def run_raw(cases: list[dict], jobs: int = 2, timeout: float = 60.0) -> Report:
    """Runs given raw-argument cases (raw_cases.catalogue(), for one) in raw_worker processes."""
    began = time.monotonic()
    results = run_cases(cases, WORKERS["raw"], jobs, timeout)
    return Report(seed=-1, results=results, seconds=time.monotonic() - began)


def run_cases(cases: list[dict], module: str, jobs: int, timeout: float, progress=None) -> list[dict]:
    """Each case's result (sorted by case id), from `jobs` processes of `module`; a dead one is replaced."""
    todo: queue.Queue = queue.Queue()
    for case in cases:
        todo.put(case)
    results: list[dict] = []
    lock = threading.Lock()

    def drive():
        worker = None
        while True:
            try:
                case = todo.get_nowait()
            except queue.Empty:
                break
            if worker is None or not worker.alive():
                if worker is not None:
                    worker.stop()
                worker = Worker(module)
                if not worker.wait_ready(timeout=300):
                    raise RuntimeError(f"a fuzz worker did not start: {worker.stderr_tail()}")
            answer = worker.run(case, timeout)
            answer.pop("id", None)
            with lock:
                results.append({"case": case, **answer})
                if progress:
                    progress(len(results), len(cases))
        if worker is not None:
            worker.stop()

    threads = [threading.Thread(target=drive) for _ in range(max(1, min(jobs, len(cases))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.sort(key=lambda r: r["case"]["id"])
    return results
