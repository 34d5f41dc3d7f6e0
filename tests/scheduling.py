"""How the suite is spread over the worker processes: groups of tests, the longest started first.

`./run.sh test` runs pytest-xdist with `--dist loadgroup --no-loadscope-reorder`: a worker takes a whole group at
a time, in collection order. Here every test gets its group and the collection is sorted by the groups' measured
durations, longest first (the longest-processing-time rule: the minutes-long groups start at once, the short ones
fill in around them, and the workers finish together).

- A group is a test file, so a file's tests run in order in one process and its module fixtures are made once.
- A long file whose tests share nothing costly at module level is marked `pytestmark = pytest.mark.spread`: one
  group per test function, so its functions run on whichever worker is free. What they share is made in
  session-scoped fixtures (`shared_ports`, for instance), which a worker keeps across groups.
- A test marked `pytest.mark.xdist_group(name)` keeps that group (a parametrised test whose parameters share a
  costly artefact: a zoo family's ports, a network compiled in one mode and loaded in the other).

The durations are measured, not guessed: `tests/durations.json` holds seconds per test (setup, call and
teardown), read from the JUnit report of a whole run:

    ./run.sh test --junitxml=/tmp/suite.xml
    .venv/bin/python tests/scheduling.py /tmp/suite.xml     # rewrites tests/durations.json

A test missing from the file (a new one) counts `UNMEASURED_S`.
"""
from __future__ import annotations

import collections
import json
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
UNMEASURED_S = 1.0


def without_group(nodeid: str) -> str:
    """A node id without the group suffix ("@name") xdist's --dist loadgroup appends to it."""
    if nodeid.rfind("@") > nodeid.rfind("]"):  # as xdist tells a group suffix from an "@" in a parameter
        return nodeid.rsplit("@", 1)[0]
    return nodeid


def test_key(nodeid: str) -> str:
    """"test_x.py::test_name[params]" for a node id, without its folder and its xdist group suffix."""
    path, _, name = without_group(nodeid).partition("::")
    return f"{Path(path).name}::{name}"


def function_key(item: pytest.Item) -> str:
    """"test_x.py::test_name": the test function, whatever its parameters."""
    return test_key(item.nodeid).split("[", 1)[0]


def load_durations() -> dict[str, float]:
    try:
        return json.loads(DURATIONS.read_text())
    except FileNotFoundError:
        return {}


def assign_groups(items: list[pytest.Item]) -> None:
    """Marks each item with its xdist group and sorts `items` by the groups' measured durations, longest first
    (stable: a group's tests keep their order)."""
    durations = load_durations()

    def seconds(item) -> float:
        return durations.get(test_key(item.nodeid), UNMEASURED_S)

    group_seconds = collections.Counter()
    group_of = {}
    for item in items:
        explicit = item.get_closest_marker("xdist_group")
        if explicit is not None:
            group = f"{item.path.name}:{explicit.args[0] if explicit.args else explicit.kwargs['name']}"
        elif item.get_closest_marker("spread") is not None:
            group = function_key(item)
        else:
            group = item.path.name
        if explicit is None:
            item.add_marker(pytest.mark.xdist_group(group))
        group_of[item] = group
        group_seconds[group] += seconds(item)
    items.sort(key=lambda item: -group_seconds[group_of[item]])


def check_groups_applied(config, items: list[pytest.Item]) -> None:
    """In an xdist worker with --dist loadgroup, after xdist's own hook: the groups reached the node ids (xdist
    schedules by a suffix it appends to them). A pytest whose node ids xdist cannot change would otherwise leave
    every test a group of its own, silently: module fixtures made once per test's worker, the wheel built twice."""
    if config.getoption("loadgroup", default=False) and items and without_group(items[0].nodeid) == items[0].nodeid:
        raise pytest.UsageError(f"pytest-xdist's --dist loadgroup did not mark {items[0].nodeid} with its group: "
                                f"pytest {pytest.__version__} is not one this xdist can schedule (requirements.txt)")


def measure(junit_xml: str) -> dict[str, float]:
    """Seconds per test from a JUnit report (its setup, call and teardown)."""
    totals = collections.Counter()
    for case in ElementTree.parse(junit_xml).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        # classname is "tests.test_x" (or "tests.test_x.Class"); name is the test with its parameters
        file = next((part for part in module if part.startswith("test_")), module[-1]) + ".py"
        totals[test_key(f"{file}::{case.get('name')}")] += float(case.get("time", 0))
    return {key: round(value, 2) for key, value in sorted(totals.items())}


if __name__ == "__main__":
    measured = measure(sys.argv[1])
    DURATIONS.write_text(json.dumps(measured, indent=0, sort_keys=True) + "\n")
    print(f"{DURATIONS}: {len(measured)} tests, {sum(measured.values()):.0f} s in all")
