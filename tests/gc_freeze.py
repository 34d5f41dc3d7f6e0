"""The garbage collector kept off the objects that live as long as the test process.

MindSpore's GRAPH_MODE compile starts with a full `gc.collect()` (mindspore/graph/api.py, `compile`), and a full
collection walks every object the collector tracks: in a test worker, the modules of torch, MindSpore,
transformers, torchvision, timm and diffusers, the test files, the session's shared ports and the zoo's reports,
half a million objects and more late in a run, 0.3-0.6 s a collection on the 2-core machine. A GRAPH_MODE test
compiles one graph or more, and the suite has hundreds: minutes of the suite's time went to walking objects that
cannot be garbage.

`gc.freeze()` moves every object alive at that moment to a permanent generation that collections skip (they are
still freed when their reference count drops to zero; only a reference cycle among them is never collected).
So the objects are frozen when nothing a test made is alive:
- once the test files are collected (every module they import, the test items);
- again before the first test of the next scheduling group (a file, a function of a spread file, a zoo family),
  when the collector tracks more than `THRESHOLD` objects again (modules imported since, such as a zoo family's
  transformers model, session fixtures, module-level caches such as the zoo's reports): the last group's function
  fixtures are torn down by then (and its module fixtures, where the group was its file), and what they left in
  reference cycles is collected first. A file split into several groups has no module fixtures (test_zoo,
  test_vision_zoo, test_compiled, test_from_torch); one that gets some should keep its tests one group, or its
  module fixtures are frozen while alive (a reference cycle among them is then kept after the file: memory, not
  results).
Objects a test makes are never frozen before it ends, so a test that drops a cell and collects (test_kernel_state,
test_custom_autograd, test_port_memory) sees it freed as before.

`AOT_OPS_TEST_GC_FREEZE=0` turns this off (to measure it, or to rule it out).
"""
from __future__ import annotations

import gc
import os

THRESHOLD = 100_000  # tracked objects (a full collection of them: about 0.1 s)

_last_group: list[object] = [None]


def enabled() -> bool:
    return os.environ.get("AOT_OPS_TEST_GC_FREEZE", "1") != "0"


def freeze() -> None:
    """Collects what is garbage, then freezes what is left."""
    gc.collect()
    gc.freeze()


def after_collection() -> None:
    if enabled():
        freeze()


def before_test(item) -> None:
    """Before `item`'s set-up: at a new scheduling group (tests/scheduling.py), freezes again if enough objects
    have gathered."""
    marker = item.get_closest_marker("xdist_group")
    group = (getattr(item, "module", None), marker and (marker.args[0] if marker.args else marker.kwargs.get("name")))
    if group == _last_group[0] or not enabled():
        return
    _last_group[0] = group
    if len(gc.get_objects()) > THRESHOLD:
        freeze()
