"""Counts the `assert` statements each test executed, to check that merging or sharing tests loses none.

Off by default. On with

    AOT_OPS_COUNT_ASSERTS=/tmp/asserts.tsv ./run.sh test -o enable_assertion_pass_hook=true

pytest's rewriting then adds a call of `pytest_assertion_pass` after every assert that held, and each process,
the xdist workers included, appends `<test id>\t<count>` lines to the file. Asserts in test files and in the
support modules registered below are counted; asserts inside a subprocess a test starts are not (the test's own
checks of its output are). `python tests/assertion_count.py /tmp/asserts.tsv` sums them per file.

The rewritten modules of a counting run go to their own bytecode folder: pytest keys its cached pycs by file, not
by that option, so an ordinary run would otherwise read a counting run's modules or the other way round.
"""
from __future__ import annotations

import collections
import os
import sys

import pytest

from scheduling import without_group

ENV = "AOT_OPS_COUNT_ASSERTS"
# Helpers whose asserts are the tests' own checks: rewritten like the test files so their asserts count too.
SUPPORT_MODULES = ("support", "port_support", "loader_support", "ascendc_support", "npu_support")

_counts: collections.Counter[str] = collections.Counter()
_current = ["<collection>"]


def enabled() -> bool:
    return bool(os.environ.get(ENV))


def pytest_configure(config):
    if enabled() and not config.getini("enable_assertion_pass_hook"):
        raise pytest.UsageError(f"{ENV} counts asserts only with -o enable_assertion_pass_hook=true")


def pytest_runtest_setup(item):
    _current[0] = without_group(item.nodeid)  # xdist's group suffix is not part of the test's id


def pytest_assertion_pass(item, lineno, orig, expl):
    _counts[_current[0]] += 1


def pytest_sessionfinish(session):
    if enabled() and _counts:
        with open(os.environ[ENV], "a") as out:
            out.writelines(f"{test}\t{count}\n" for test, count in sorted(_counts.items()))


def summarize(path: str) -> None:
    per_test: collections.Counter[str] = collections.Counter()
    with open(path) as lines:
        for line in lines:
            test, count = line.rstrip("\n").rsplit("\t", 1)
            per_test[test] += int(count)
    per_file = collections.Counter()
    for test, count in per_test.items():
        per_file[test.split("::", 1)[0]] += count
    for name, count in sorted(per_file.items()):
        print(f"{count:8d}  {name}")
    print(f"{sum(per_test.values()):8d}  asserts held in {len(per_test)} tests")


if __name__ == "__main__":
    summarize(sys.argv[1])
else:
    # Imported by conftest.py before the support modules: both lines must run before those are imported.
    pytest.register_assert_rewrite(*SUPPORT_MODULES)
    if enabled():
        sys.pycache_prefix = os.path.join(os.path.dirname(os.path.abspath(os.environ[ENV])), ".assert-count-pyc")
