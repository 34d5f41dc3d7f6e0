"""Runs fuzz cases in worker processes and counts what happened, including what a worker cannot report itself:
a process death (the worker is restarted for the next case) and a hang (no answer within the time limit; the
worker is killed).
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

RESULT = "FUZZ-RESULT "  # prefix of a worker's answer lines (anything else on stdout is ignored)

# Outcomes that fail a campaign (worker.py describes them all).
FAILURES = ("death", "wrong", "hang", "broken", "error_unnamed", "fuzzer_error")


@dataclasses.dataclass
class Report:
    seed: int
    results: list[dict]  # one per case: the case, its outcome and detail
    seconds: float

    def counts(self, key: str = "outcome") -> dict:
        table: dict = collections.defaultdict(collections.Counter)
        for r in self.results:
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
        lines.append(f"  {'all':<10} " + _format(self.counts()["all"]))
        for r in self.failures[:20]:
            lines.append(f"FAILED {r['outcome']}: {json.dumps(r['case'])}\n    {r['detail'][:600]}")
        return "\n".join(lines)


def _format(counts: dict) -> str:
    order = ["correct", "error", "refused", "ambiguous", *FAILURES]
    return ", ".join(f"{k} {counts.get(k, 0)}" for k in order if counts.get(k, 0) or k in ("correct", "error"))


class Worker:
    """One `python -m aot_ops.tools.fuzz.worker` process; answers are read on a thread so a hang can time out."""

    def __init__(self):
        self.log = tempfile.TemporaryFile(mode="w+")
        env = dict(os.environ, GLOG_v="3", PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "aot_ops.tools.fuzz.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, env=env)
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
        progress=None) -> Report:
    """Runs cases start..start+cases-1 of the seed's sequence on `jobs` worker processes."""
    generator = Generator(seed)
    todo: queue.Queue = queue.Queue()
    for index in range(start, start + cases):
        todo.put(generator.case(index))
    results: list[dict] = []
    lock = threading.Lock()
    began = time.monotonic()

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
                worker = Worker()
                if not worker.wait_ready(timeout=300):
                    raise RuntimeError(f"a fuzz worker did not start: {worker.stderr_tail()}")
            answer = worker.run(case, timeout)
            answer.pop("id", None)
            with lock:
                results.append({"case": case, **answer})
                if progress:
                    progress(len(results), cases)
        if worker is not None:
            worker.stop()

    threads = [threading.Thread(target=drive) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.sort(key=lambda r: r["case"]["id"])
    return Report(seed=seed, results=results, seconds=time.monotonic() - began)
