"""A change to the whole process, made for the first user and undone after the last: `WhileUsed`.

Some of what aot_ops changes in torch or in logging can only be changed for the whole process (a method of a
class, an attribute of a shared object, a filter on a logging handler), while ports run in several threads at
once. Each change then stays as long as any thread needs it: installed when the first user enters, removed when
the last one leaves, both under one lock, so that no user enters while the change is half made or half undone,
and no user's exit undoes it under another's feet. What the change does in threads that do not need it is the
installed code's business (it looks at its own thread's state and otherwise behaves as torch's own).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class WhileUsed(Generic[T]):
    """`install()` when the first user enters `used()`, `remove(what install returned)` when the last one leaves.

    `used()` yields what `install()` returned (what was there before, say, for the installed code to fall back
    on). An install that raises leaves no user counted and nothing to remove."""

    def __init__(self, install: Callable[[], T], remove: Callable[[T], None]):
        self._install, self._remove = install, remove
        self._lock = threading.Lock()
        self._users = 0
        self._installed: T | None = None

    @property
    def users(self) -> int:
        """How many users are inside `used()` now, in all threads."""
        return self._users

    @contextlib.contextmanager
    def used(self) -> Iterator[T]:
        with self._lock:
            if self._users == 0:
                self._installed = self._install()
            self._users += 1
            installed = self._installed
        try:
            yield installed
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    installed, self._installed = self._installed, None
                    self._remove(installed)
