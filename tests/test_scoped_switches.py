"""What aot_ops changes in torch and in logging while a port runs acts in the porting thread alone: log records
silenced for the calling context (not a logger's level), process-wide hooks installed for the first user and
removed after the last, a user's Function recorded by the exporting thread while another thread applies its own."""
from __future__ import annotations

import logging
import threading

import pytest
import torch

import aot_ops
from aot_ops._core.silenced_logs import silenced
from aot_ops._core.while_used import WhileUsed

WAIT_S = 60  # the longest a test thread waits for the other before the test fails


class _Kept(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[tuple[str, str, int]] = []

    def emit(self, record):
        self.records.append((threading.current_thread().name, record.name, record.levelno))


@pytest.fixture
def logs():
    """A logger tree of the test's own, every level on, its records kept (thread, logger, level)."""
    top = logging.getLogger("aot_ops_test_silenced")
    kept = _Kept()
    top.setLevel(logging.DEBUG)
    top.propagate = False
    top.addHandler(kept)
    yield top, kept
    top.removeHandler(kept)


def test_silenced_records_are_dropped_in_the_calling_thread_alone(logs):
    """Inside `silenced`, the calling thread's records of the logger and of its descendants below the level are
    dropped (a descendant first made inside too); another thread's records of the same loggers, made meanwhile,
    pass; a descendant with a level of its own keeps it, as under a raised logger level; afterwards nothing is
    left on the handler and every record passes again."""
    top, kept = logs
    inside, other_done = threading.Event(), threading.Event()
    own_level = logging.getLogger("aot_ops_test_silenced.own")
    own_level.setLevel(logging.DEBUG)

    def other():
        assert inside.wait(WAIT_S)
        logging.getLogger("aot_ops_test_silenced.child").info("")
        top.debug("")
        other_done.set()

    thread = threading.Thread(target=other, name="other")
    thread.start()
    with silenced("aot_ops_test_silenced", below=logging.WARNING):
        logging.getLogger("aot_ops_test_silenced.made_inside.child").info("")  # dropped
        top.warning("")                                                          # kept: at the level
        own_level.debug("")                                                      # kept: its own level
        inside.set()
        assert other_done.wait(WAIT_S)
    thread.join()
    logging.getLogger("aot_ops_test_silenced.made_inside.child").info("")       # kept: outside
    assert kept.records == [("MainThread", "aot_ops_test_silenced", logging.WARNING),
                            ("MainThread", "aot_ops_test_silenced.own", logging.DEBUG),
                            ("other", "aot_ops_test_silenced.child", logging.INFO),
                            ("other", "aot_ops_test_silenced", logging.DEBUG),
                            ("MainThread", "aot_ops_test_silenced.made_inside.child", logging.INFO)]
    assert kept.filters == [] and top.filters == []
    assert top.level == logging.DEBUG


def test_silenced_contexts_overlapping_in_two_threads_leave_each_other_alone(logs):
    """Two threads silencing the same logger, entering and leaving in crossed order: while the second is still
    inside, its records stay dropped after the first left (with a logger level, the first's restore would have
    let them through)."""
    top, kept = logs
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def second():
        assert first_in.wait(WAIT_S)
        with silenced("aot_ops_test_silenced", below=logging.ERROR):
            second_in.set()
            assert first_out.wait(WAIT_S)
            top.warning("")  # dropped: this thread still silences it
        top.warning("")      # kept

    thread = threading.Thread(target=second, name="second")
    thread.start()
    with silenced("aot_ops_test_silenced", below=logging.ERROR):
        first_in.set()
        assert second_in.wait(WAIT_S)
        top.info("")  # dropped
    first_out.set()
    thread.join()
    assert kept.records == [("second", "aot_ops_test_silenced", logging.WARNING)]
    assert kept.filters == []


def test_while_used_installs_for_the_first_user_and_removes_after_the_last():
    events = []
    hook = WhileUsed(lambda: events.append("install") or "before", lambda was: events.append(f"remove {was}"))
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    yielded = []

    def second():
        assert first_in.wait(WAIT_S)
        with hook.used() as was:
            yielded.append(was)
            second_in.set()
            assert first_out.wait(WAIT_S)
            events.append("second still inside")

    thread = threading.Thread(target=second)
    thread.start()
    with hook.used() as was:
        yielded.append(was)
        first_in.set()
        assert second_in.wait(WAIT_S)
        assert hook.users == 2
    first_out.set()
    thread.join()
    assert events == ["install", "second still inside", "remove before"]
    assert yielded == ["before", "before"] and hook.users == 0

    def failing():
        raise RuntimeError("no install")

    broken = WhileUsed(failing, lambda was: events.append("removed what was never installed"))
    with pytest.raises(RuntimeError, match="no install"):
        with broken.used():
            pass
    assert broken.users == 0 and events[-1] == "remove before"


def test_each_thread_tracing_with_regions_gets_its_own_joint_pass():
    """Two threads inside repeated_regions_traced_once at once each see their own joint pass in functorch's
    setting (torch keeps it per thread: installed by the first thread alone, the second would trace without its
    pass), and afterwards torch's own setting and invoke_subgraph's method are back."""
    from aot_ops._core import torch_private

    config = torch_private.functorch_config()
    hop = torch.ops.higher_order.invoke_subgraph
    before = config.joint_custom_pass
    first_in, second_done = threading.Event(), threading.Event()
    answers = {}

    def trace(name, wait_for=None, then=None):
        with torch_private.repeated_regions_traced_once(torch_private.FakeTensorMode(),
                                                        lambda graph, inputs: f"{name}'s pass"):
            if then is first_in:
                then.set()
            if wait_for is not None:
                assert wait_for.wait(WAIT_S)
            answers[name] = (config.joint_custom_pass("graph", []), "gen_schema" in hop.__dict__)
        if then is second_done:
            then.set()

    threads = [threading.Thread(target=trace, args=("first", second_done, first_in)),
               threading.Thread(target=trace, args=("second", first_in, second_done))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert answers == {"first": ("first's pass", True), "second": ("second's pass", True)}
    assert config.joint_custom_pass is before and "gen_schema" not in hop.__dict__


class _Exported(torch.autograd.Function):
    """Applied by the module the main thread ports: its forward holds the export until the other thread has
    applied its own Function."""
    exporting = threading.Event()
    other_done = threading.Event()

    @staticmethod
    def forward(ctx, x):
        _Exported.exporting.set()
        assert _Exported.other_done.wait(WAIT_S)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 5


class _Eager(torch.autograd.Function):
    """Applied eagerly by another thread while the main thread exports."""

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad * 7


class _UsesExported(torch.nn.Module):
    def forward(self, x):
        return _Exported.apply(x) + 1


def test_a_function_applied_by_another_thread_during_an_export_runs_torch_s_apply():
    """While the main thread exports a module applying one Function (Function.apply replaced on the class, as
    torch offers no scoped hook), another thread applies another Function eagerly: its outputs and gradients are
    torch's, it is not recorded as an operator, and Function.apply is torch's again once the port is made."""
    from aot_ops._port.trace import functions

    torch_apply = torch.autograd.Function.__dict__["apply"]
    _Exported.exporting.clear()
    _Exported.other_done.clear()
    seen = {}

    def apply_eagerly():
        assert _Exported.exporting.wait(WAIT_S)
        seen["replaced meanwhile"] = torch.autograd.Function.__dict__["apply"] is not torch_apply
        x = torch.arange(4.0, requires_grad=True)
        y = _Eager.apply(x)
        y.sum().backward()
        seen["value"], seen["grad"] = y.detach(), x.grad
        _Exported.other_done.set()

    thread = threading.Thread(target=apply_eagerly)
    thread.start()
    try:
        cell = aot_ops.from_torch(_UsesExported().eval(), (torch.randn(4),))
    finally:
        _Exported.other_done.set()
        thread.join()
    assert seen["replaced meanwhile"]
    torch.testing.assert_close(seen["value"], torch.arange(4.0) * 3)
    torch.testing.assert_close(seen["grad"], torch.full((4,), 7.0))
    assert {key[0] for key in functions._by_key} >= {_Exported} and _Eager not in {k[0] for k in functions._by_key}
    assert torch.autograd.Function.__dict__["apply"] is torch_apply
    del cell
