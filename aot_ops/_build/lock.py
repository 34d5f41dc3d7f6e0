"""A build lock that a dead builder cannot leave behind.

`torch.utils.cpp_extension` locks with a plain file: a build killed mid-way leaves it, and every later build waits
for it forever. `fcntl.flock` locks belong to the open file description, so the kernel releases them when the
holder exits, however it exits (SIGKILL, OOM killer, a crashed interpreter). The lock file itself stays and is
harmless; it only carries the holder's pid so a waiting process can say who it waits for.
"""
from __future__ import annotations

import fcntl
import logging
import os
import time
from pathlib import Path

log = logging.getLogger("aot_ops.build")

# After this long without the lock, say why we are waiting (a silent hang is what users cannot diagnose).
NOTICE_AFTER_S = 3.0
_POLL_S = 0.1


class BuildLock:
    """Exclusive lock on `path` for the duration of a `with` block (one builder per cache entry at a time)."""

    def __init__(self, path: Path, what: str):
        self.path = Path(path)
        self.what = what
        self._fd: int | None = None

    def __enter__(self) -> "BuildLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: a link planted at the lock's name must not make us open (and truncate) another file.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        start = time.monotonic()
        noticed = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - start
                if not noticed and waited >= NOTICE_AFTER_S:
                    log.warning("waiting for %s: another process (pid %s) holds %s", self.what,
                                self._holder(fd) or "unknown", self.path)
                    noticed = True
                time.sleep(_POLL_S)
        if noticed:
            log.warning("got the lock for %s after %.1fs", self.what, time.monotonic() - start)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @staticmethod
    def _holder(fd: int) -> str:
        try:
            return os.pread(fd, 32, 0).decode().strip()
        except OSError:
            return ""
