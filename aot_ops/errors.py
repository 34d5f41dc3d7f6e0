"""The base of every exception class aot_ops defines: `except aot_ops.Error` catches any of them.

Each class also derives from the built-in its callers already expect (BuildError is a RuntimeError, InferenceError a
ValueError, TilingError a TypeError, UnsafeCacheError a PermissionError), so existing `except` clauses keep working.
Wrong arguments to a function are reported with the plain built-ins (TypeError, ValueError), as Python's own
functions do.
"""


class Error(Exception):
    """An error aot_ops raises: a build, a port, a call of a kernel, a check, a cache."""
