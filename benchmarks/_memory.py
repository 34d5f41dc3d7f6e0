"""Resident memory read from Linux's /proc, shared by the memory benchmarks."""


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
