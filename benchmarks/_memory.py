"""Resident memory read from Linux's /proc, and a measurement run in a fresh process, shared by the memory
benchmarks."""

import json
import os
import subprocess
import sys


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
    """The process's private (anonymous) memory in bytes (/proc/self/smaps_rollup)."""
    with open("/proc/self/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Anonymous:"):
                return int(line.split()[1]) * 1024
    raise KeyError("/proc/self/smaps_rollup has no Anonymous")


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
