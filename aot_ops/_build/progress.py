"""A sign of life for builds that take a while (a torch translation unit takes ~10 s on a small machine)."""
from __future__ import annotations

import contextlib
import sys
import threading
import time

# Quiet for quick builds; then a line every few seconds, so a slow build is never mistaken for a hang.
SHOW_AFTER_S = 2.0
EVERY_S = 5.0


@contextlib.contextmanager
def progress(what: str, show_after: float | None = None, every: float | None = None):
    """While the block runs, print "aot_ops: building <what>... Ns" to stderr after `show_after` seconds and then
    every `every` seconds, and how long it took at the end if anything was printed."""
    show_after = SHOW_AFTER_S if show_after is None else show_after
    every = EVERY_S if every is None else every
    stream = sys.stderr  # looked up now, so redirected stderr (pytest's capture, a notebook) receives it
    start = time.monotonic()
    stop = threading.Event()
    shown = threading.Event()

    def report():
        if stop.wait(show_after):
            return
        while True:
            shown.set()
            stream.write(f"aot_ops: building {what}... {time.monotonic() - start:.0f}s\n")
            stream.flush()
            if stop.wait(every):
                return

    thread = threading.Thread(target=report, name=f"aot_ops progress {what}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        if shown.is_set():
            stream.write(f"aot_ops: {what} finished after {time.monotonic() - start:.1f}s\n")
            stream.flush()
