"""A library's log records dropped in the calling thread alone: `silenced(logger, below=level)`.

A logger's level belongs to the whole process: setting it to quiet torch during one port quietens every other
thread too, and two threads setting it and putting it back race (the later restore wins, or leaves the level
raised for good). Here a filter drops the records instead, and only those made in a context that asked for it
(contextvars: each thread has its own, a new thread starts with none), so another thread's records of the same
logger reach their handlers as before.

A logger's filters see only the records made by that logger, not those its descendants propagate to it, so the
filter is put on the logger and on every handler a record of the logger or of its descendants reaches
(torch._inductor's records come from torch._inductor.compile_fx and many more, whose loggers are created as
their modules are imported, some during the very call being quietened): the handlers of the logger, of its
descendants and of its ancestors up to where propagation stops, and logging's last resort. It is installed while
any context silences that logger and removed after the last (`WhileUsed`). A handler added while it is
installed does not have it; records made by other threads on the calling thread's behalf (a compiler's worker
threads) are not dropped.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from contextvars import ContextVar
from typing import Iterator

from .while_used import WhileUsed

# The calling context's silenced loggers: (logger name, records below this level dropped), innermost last
_silenced: ContextVar[tuple[tuple[str, int], ...]] = ContextVar("aot_ops_silenced_logs", default=())


class _DropSilenced(logging.Filter):
    """Drops a record of `name`, or of a descendant taking its level from it, when the context making the record
    silences `name` at the record's level: what raising the logger's level would drop, for that context alone (a
    descendant given its own level, such as an artifact log the user switched on, keeps it)."""

    def __init__(self, name: str):
        super().__init__()
        self.logger = name

    def filter(self, record: logging.LogRecord) -> bool:
        rules = _silenced.get()
        if not any(name == self.logger and record.levelno < below for name, below in rules):
            return True
        return not _takes_level_from(record.name, self.logger)


def _takes_level_from(name: str, ancestor: str) -> bool:
    """Whether the logger `name` is `ancestor`, or a descendant of it with no level of its own between them."""
    if name != ancestor and not name.startswith(ancestor + "."):
        return False
    logger = logging.Logger.manager.loggerDict.get(name)  # no lock taken, no logger made, while filtering
    if not isinstance(logger, logging.Logger):
        return True  # a record made by hand under that name: no level of its own
    while logger.name != ancestor:
        if logger.level != logging.NOTSET or logger.parent is None:
            return False
        logger = logger.parent
    return True


def _filtered(name: str) -> list[logging.Filterer]:
    """The logger `name` and every handler its records, and its descendants' records, reach now."""
    logger = logging.getLogger(name)
    loggers = [logger]
    # a copy: another thread may create a logger meanwhile
    for key, other in logging.Logger.manager.loggerDict.copy().items():
        if key.startswith(name + ".") and isinstance(other, logging.Logger):
            loggers.append(other)
    ancestor = logger
    while ancestor.propagate and ancestor.parent is not None:
        ancestor = ancestor.parent
        loggers.append(ancestor)
    handlers = {id(h): h for each in loggers for h in each.handlers}
    if logging.lastResort is not None:  # used where a record finds no handler at all
        handlers[id(logging.lastResort)] = logging.lastResort
    return [logger, *handlers.values()]


def _installer(name: str) -> WhileUsed:
    drop = _DropSilenced(name)

    def install() -> list[logging.Filterer]:
        targets = _filtered(name)
        for target in targets:
            target.addFilter(drop)
        return targets

    def remove(targets: list[logging.Filterer]) -> None:
        for target in targets:
            target.removeFilter(drop)

    return WhileUsed(install, remove)


_installers: dict[str, WhileUsed] = {}
_installers_lock = threading.Lock()


@contextlib.contextmanager
def silenced(logger: str, *, below: int) -> Iterator[None]:
    """While inside, the records of `logger` (a name: "torch._inductor") and of its descendants whose level is
    below `below` are dropped when the calling thread (context) makes them, as `logger.setLevel(below)` would
    drop them; other threads' pass as before. The loggers' levels are left alone."""
    with _installers_lock:
        installer = _installers.get(logger)
        if installer is None:
            installer = _installers[logger] = _installer(logger)
    token = _silenced.set((*_silenced.get(), (logger, below)))
    try:
        with installer.used():
            yield
    finally:
        _silenced.reset(token)
