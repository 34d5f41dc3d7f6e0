"""Resident memory read from Linux's /proc, and a measurement run in a fresh process, shared by the memory
benchmarks."""

import json
import os
import subprocess
import sys
import threading


def status_bytes(field: str) -> int:
    """A field of /proc/self/status in bytes: "VmRSS" (resident now), "VmHWM" (the peak since the last reset)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(f"/proc/self/status has no {field}")


def reset_peak() -> None:
    """Starts VmHWM again from the resident memory now."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def anonymous_bytes() -> int:
    """The process's private (anonymous) memory in bytes, from the kernel's counters (/proc/self/statm: resident
    pages less the file-backed and shared ones; smaps_rollup's "Anonymous" gives the same, walking every mapping):
    cheap enough to sample."""
    with open("/proc/self/statm") as statm:
        fields = statm.read().split()
    return (int(fields[1]) - int(fields[2])) * os.sysconf("SC_PAGE_SIZE")


class PrivatePeak:
    """The peak of the process's private memory while in the `with` block (`.peak`, bytes), sampled every
    `interval` seconds by a thread: Linux keeps a resident peak (VmHWM), which counts the pages of the libraries a
    first call maps in, but no private one. A rise and fall within one interval can pass unseen."""

    def __init__(self, interval: float = 0.005):
        self.interval, self.peak = interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, anonymous_bytes())
            self._stop.wait(self.interval)

    def __enter__(self) -> "PrivatePeak":
        self.peak = anonymous_bytes()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, anonymous_bytes())


def child_result(script: str, arguments: list[str], label: str, **environment: str) -> dict | None:
    """Runs `script` with `arguments` in a fresh Python process (`environment` added to this one's) and returns the
    JSON object it printed after "RESULT "; None, with its last error lines printed under `label`, when it failed."""
    done = subprocess.run([sys.executable, script, *arguments], capture_output=True, text=True,
                          env={**os.environ, **environment})
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        print(f"{label}: failed ({done.returncode}): {done.stderr.strip().splitlines()[-3:]}", flush=True)
        return None
    return json.loads(lines[0][len("RESULT "):])
