"""A user's torch.autograd.Function, ported with its own backward: each application becomes an operator.

torch.export records what a Function's forward computes, not its backward: MindSpore would differentiate the
forward's operators instead, silently (a straight-through round would get zero gradients). So while a module is
exported, `Function.apply` of a Function defined outside torch records one call of an operator registered for
that application with torch.library (namespace `aot_ops_fn`), whose

- kernel runs the Function's forward (through a stand-in ctx that records what it saves, below autograd),
- autograd formula runs the Function's forward again on the saved inputs, then the user's backward with that
  ctx: saved tensors, attributes set on ctx, `needs_input_grad`, several outputs, `once_differentiable` and
  `set_materialize_grads` behave as in torch.

From then on the application is an operator like any other: bridged one aot call per node through torch's
dispatcher (its gradient through torch's autograd, which calls the formula above), and traced by AOTAutograd for
fuse=True, whose backward graph then holds the ATen operators of the user's backward (the forward it needs is
replayed by a twin operator, `<name>_replay`). Non-tensor arguments (a scale, a dim) are fixed per application,
as torch.export fixes them; the operator takes the tensors.

Each operator pair (the application and its replay) is defined in a torch.library.Library of its own, a
`FunctionOperator` that the ports calling it hold (an export collects the ones it recorded, the cell keeps them):
one per Function and set of fixed arguments, shared by the ports that apply it the same way, and removed from
torch's dispatcher (the Library's finalizer) when the last of them is freed. Its name is numbered per process,
never reused.
"""
from __future__ import annotations

import contextlib
import gc
import inspect
import itertools
import re
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..._core.torch_private import OpOverload, TorchDispatchMode, collective_name, detect_fake_mode, is_alias_of
from ..._core.while_used import WhileUsed

NAMESPACE = "aot_ops_fn"
_lock = threading.Lock()
_counter = itertools.count()
# (Function class, fixed arguments) -> its operator, while a port holds it
_by_key: weakref.WeakValueDictionary[tuple, "FunctionOperator"] = weakref.WeakValueDictionary()


@dataclass(frozen=True)
class Application:
    """One way a Function is applied: its class and the arguments with the tensors left out (None marks a slot)."""

    function: type
    template: tuple           # the positional arguments, a tensor's place holding _TENSOR
    label: str = field(init=False, compare=False)  # the Function and where it is defined, for errors

    def __post_init__(self):
        # Found once, by the exporting thread: inspect parses the Function's source file, and the kernels run on
        # MindSpore's threads while other threads may parse too, which CPython 3.11 cannot do at once (its AST
        # builder's recursion counter is shared: "SystemError: AST constructor recursion depth mismatch").
        object.__setattr__(self, "label", f"{self.function.__qualname__}{where(self.function)}")

    def arguments(self, tensors) -> list:
        values = iter(tensors)
        return [next(values) if a is _TENSOR else a for a in self.template]


class _Slot:
    def __repr__(self):
        return "<tensor>"


_TENSOR = _Slot()


def where(function: type) -> str:
    """' (file.py:line)' of a Function's class, or '' when Python cannot tell."""
    try:
        return f" ({inspect.getsourcefile(function)}:{inspect.getsourcelines(function)[1]})"
    except (OSError, TypeError):
        return ""


def is_users(function: type) -> bool:
    """A Function defined outside torch (torch's own, such as reentrant checkpointing, compute the derivative of
    their forward and are traced through)."""
    return not function.__module__.startswith("torch.")


class _Context:
    """What a Function's forward and backward see as `ctx`: save_for_backward / saved_tensors, attributes,
    needs_input_grad, mark_non_differentiable, set_materialize_grads (mark_dirty is refused: an in-place forward
    cannot be an operator of a functional graph)."""

    def __init__(self, needs_input_grad: tuple[bool, ...], label: str = "the Function"):
        self.needs_input_grad = needs_input_grad
        self._label = label
        self.saved_tensors: tuple = ()
        self.materialize_grads = True
        self.non_differentiable: list = []

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors

    def save_for_forward(self, *tensors):
        pass  # forward-mode derivatives are not ported

    def mark_non_differentiable(self, *tensors):
        self.non_differentiable.extend(tensors)

    def set_materialize_grads(self, value: bool):
        self.materialize_grads = value

    def mark_dirty(self, *tensors):
        from ..errors import PortError
        raise PortError(f"{self._label} modifies its input in place (ctx.mark_dirty): it cannot be ported; "
                        "return a new tensor instead")

    @property
    def saved_variables(self):
        return self.saved_tensors


def _uses_setup_context(function: type) -> bool:
    return function.setup_context is not torch.autograd.Function.setup_context


def _forward(app: Application, tensors, needs_input_grad, traced: bool = False) -> tuple[_Context, Any]:
    ctx = _Context(needs_input_grad, app.label)
    args = app.arguments(tensors)
    # traced (the fake kernel, while exporting), a collective in the forward is refused; run, nothing is watched
    watch = _NoCollectives(app) if traced else contextlib.nullcontext()
    with torch.no_grad(), watch:
        if _uses_setup_context(app.function):
            output = app.function.forward(*args)
            app.function.setup_context(ctx, tuple(args), output)
        else:
            output = app.function.forward(ctx, *args)
    return ctx, output


class _NoCollectives(TorchDispatchMode):
    """A Function's forward runs in torch, one aot call: a collective of torch's there would run on torch's process
    group, which only traces (distributed.torch_process_group), and communicate nothing. Refused by name."""

    def __init__(self, app: Application):
        super().__init__()
        self.app = app

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = collective_name(func)
        if name is not None and name != "wait_tensor":
            from ..errors import PortError
            raise PortError(f"{self.app.label} calls torch's {name} in its forward: a torch.autograd.Function runs "
                            "in torch, whose process group only traces here, so the collective would not "
                            "communicate; call the functional collective outside the Function (torch gives it its "
                            "gradient, and the port runs it as MindSpore's), or split the model with "
                            "aot_ops.tensor_parallel")
        return func(*args, **(kwargs or {}))


def _flat_outputs(app: Application, output, inputs) -> list[torch.Tensor]:
    """The forward's tensors as the operator's outputs: a tensor or a tuple of tensors. An output that is an input
    or a view of one, or of an earlier output, is copied (an operator's outputs may not alias its inputs or each
    other)."""
    outputs = list(output) if isinstance(output, (tuple, list)) else [output]
    if not all(isinstance(o, torch.Tensor) for o in outputs):
        from ..errors import PortError
        kinds = ", ".join(type(o).__name__ for o in outputs)
        raise PortError(f"{app.label} returns {kinds}: only tensors can be ported as a Function's outputs")
    flat: list[torch.Tensor] = []
    for o in outputs:  # nor may they alias each other (a saved output returned by the replay)
        others = [t for t in inputs if isinstance(t, torch.Tensor)] + flat
        flat.append(o.clone() if any(is_alias_of(o, t) for t in others) else o)
    return flat


def _tensor_needs(app: Application, tensor_needs) -> tuple[bool, ...]:
    """needs_input_grad over all the forward's arguments (non-tensor ones False), from the operator's."""
    needs = iter(tensor_needs)
    return tuple(next(needs) if a is _TENSOR else False for a in app.template)


_collection = threading.Lock()
_collection_paused = 0  # kernels running now off the main thread with the collector paused
_collection_was_enabled = False


@contextlib.contextmanager
def _no_collection_off_the_main_thread():
    """No garbage collection while a Function's Python runs on a MindSpore runtime thread (the bridged operator
    calls it there; used as a decorator of the kernels and the backward): a MindSpore Cell collected there deletes its compiled graph, which waits for the runtime's
    actors to stop, including the one running this code, for ever. The collector resumes when the last such
    kernel returns; on the main thread (tracing, PyNative) nothing changes."""
    global _collection_paused, _collection_was_enabled
    if threading.current_thread() is threading.main_thread():
        yield
        return
    with _collection:
        if _collection_paused == 0:
            _collection_was_enabled = gc.isenabled()
            gc.disable()
        _collection_paused += 1
    try:
        yield
    finally:
        with _collection:
            _collection_paused -= 1
            if _collection_paused == 0 and _collection_was_enabled:
                gc.enable()


class _Outcome:
    """What an operator's kernel learnt when it ran: whether the Function's forward returned a tuple (apply then
    returns one). Kept apart from FunctionOperator: the kernels torch's dispatcher holds must not reach the
    Library that holds them, a cycle through C++ the collector cannot see."""

    returns_tuple = False


def _kernel(app: Application, outcome: _Outcome, traced: bool = False) -> Callable:
    @_no_collection_off_the_main_thread()
    def kernel(*tensors):
        _ctx, output = _forward(app, tensors, (False,) * len(app.template), traced)
        outcome.returns_tuple = isinstance(output, (tuple, list))
        return _flat_outputs(app, output, tensors)
    return kernel


def _replay_kernel(app: Application) -> Callable:
    """The forward run again for a traced backward: its outputs, then the tensors it saved (a None saved is left
    out; the layout is kept with the ctx). Being an operator, its fake implementation runs the forward under fake
    tensors alone, as torch.export did, not under AOTAutograd's tracing modes (where a constant the forward makes,
    torch.tensor(finfo.min), cannot be traced)."""
    @_no_collection_off_the_main_thread()
    def replay(*tensors):
        ctx, output = _forward(app, tensors, (True,) * len(app.template))
        outputs = list(output) if isinstance(output, (tuple, list)) else [output]
        saved = [t for t in ctx.saved_tensors if t is not None]
        _replayed.context = (ctx, len(outputs))
        return _flat_outputs(app, outputs + saved, tensors)
    return replay


_replayed = threading.local()  # the ctx of the last replay's run, read by the traced backward that asked for it


def _traced_forward(app: Application, name: str, tensors, needs_input_grad) -> tuple[_Context, list]:
    """For a backward being traced (fuse=True): the forward's ctx and outputs through the replay operator."""
    values = getattr(getattr(torch.ops, NAMESPACE), f"{name}_replay").default(*tensors)
    ran, num_outputs = _replayed.context
    ctx = _Context(needs_input_grad)
    ctx.__dict__.update({k: v for k, v in ran.__dict__.items() if k not in ("needs_input_grad", "saved_tensors")})
    saved = iter(values[num_outputs:])
    ctx.saved_tensors = tuple(None if t is None else next(saved) for t in ran.saved_tensors)
    return ctx, list(values[:num_outputs])


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(app: Application, name: str) -> Callable:
    @_no_collection_off_the_main_thread()
    def backward(ctx, grads):
        tensors = ctx.saved_tensors
        needs = _tensor_needs(app, ctx.needs_input_grad)
        if detect_fake_mode(list(tensors) + list(grads)) is not None:
            user_ctx, outputs = _traced_forward(app, name, tensors, needs)
        else:
            user_ctx, output = _forward(app, tensors, needs)
            outputs = list(output) if isinstance(output, (tuple, list)) else [output]
        grads = list(grads)
        for k, g in enumerate(grads):
            if g is None and user_ctx.materialize_grads:
                grads[k] = torch.zeros_like(outputs[k])
        try:
            results = app.function.backward(user_ctx, *grads)
        except Exception as exc:
            if detect_fake_mode(grads) is None:
                raise  # a run on real values: the user's own error
            from ..errors import PortError
            raise PortError(f"{app.label}: its backward cannot be traced into ATen operators for fuse=True "
                            f"({type(exc).__name__}: {exc}). Port with fuse=False (the backward then runs as "
                            "Python on real values), or write the backward without Python control flow on "
                            "tensor values") from exc
        results = list(results) if isinstance(results, (tuple, list)) else [results]
        if len(results) < len(app.template):
            raise RuntimeError(f"{app.label}: backward returned {len(results)} gradients for "
                               f"{len(app.template)} forward arguments")
        tensor_grads = [g for g, a in zip(results, app.template) if a is _TENSOR]
        return tuple(g if g is None or not isinstance(g, torch.Tensor) else g.to(t.dtype)
                     for g, t in zip(tensor_grads, tensors))
    return backward


def _fixed(value) -> Any:
    """A non-tensor argument as a hashable key part (lists become tuples), or TypeError for what cannot be fixed."""
    if isinstance(value, (bool, int, float, str, type(None), torch.dtype, torch.device)):
        return value
    if isinstance(value, (tuple, list)):
        return tuple(_fixed(v) for v in value)
    raise TypeError(type(value).__name__)


class FunctionOperator:
    """The operator standing for one application of a Function, and its replay, defined in a Library of its own:
    their registrations last as long as this object (the ports calling them hold it)."""

    def __init__(self, app: Application, num_tensors: int):
        self.name = f"{re.sub(r'[^A-Za-z0-9_]', '_', app.function.__qualname__)}_{next(_counter)}"
        self.outcome = _Outcome()
        self._library = torch.library.Library(NAMESPACE, "FRAGMENT")
        _register(self._library, self.name, app, num_tensors, self.outcome)

    @property
    def overload(self) -> OpOverload:
        return getattr(getattr(torch.ops, NAMESPACE), self.name).default


def operator_for(function: type, args: tuple) -> tuple[FunctionOperator, list[torch.Tensor]]:
    """The operator standing for `function.apply(*args)`, and the tensors to call it with."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    template = tuple(_TENSOR if isinstance(a, torch.Tensor) else a for a in args)
    try:
        key = (function, tuple(None if a is _TENSOR else (type(a), _fixed(a)) for a in template))
    except TypeError as exc:
        from ..errors import PortError
        raise PortError(f"{function.__qualname__}{where(function)} is a torch.autograd.Function given a "
                        f"{exc} argument; only tensors and plain values (numbers, strings, lists, dtypes) can be "
                        "ported") from None
    with _lock:
        operator = _by_key.get(key)
        if operator is None:
            operator = _by_key[key] = FunctionOperator(Application(function, template), len(tensors))
    return operator, tensors


def live_operators() -> list[str]:
    """The names of the Function operators that ports hold now (torch.ops.aot_ops_fn.<name>)."""
    with _lock:
        return sorted(operator.name for operator in _by_key.values())


def _register(library: torch.library.Library, name: str, app: Application, num_tensors: int,
              outcome: _Outcome) -> None:
    params = ", ".join(f"Tensor t{k}" for k in range(num_tensors))
    qualified = f"{NAMESPACE}::{name}"
    library.define(f"{name}({params}) -> Tensor[]")
    library.impl(name, _kernel(app, outcome), "CompositeExplicitAutograd")
    torch.library.register_fake(qualified, _kernel(app, outcome, traced=True), lib=library)
    library.define(f"{name}_replay({params}) -> Tensor[]")
    library.impl(f"{name}_replay", _replay_kernel(app), "CompositeExplicitAutograd")
    torch.library.register_fake(f"{qualified}_replay", _replay_kernel(app), lib=library)
    torch.library.register_autograd(qualified, _backward(app, name), setup_context=_setup_context, lib=library)


_recording = threading.local()  # per thread: the operators each export under way in it recorded (innermost last)


def _install_recording():
    original = torch.autograd.Function.__dict__["apply"]
    torch.autograd.Function.apply = classmethod(_apply_recording(original))
    return original


def _restore_apply(original) -> None:
    torch.autograd.Function.apply = original


# torch has no scoped way to see a Function's application: Function.apply (a C classmethod since torch 2.14) does
# not go through __torch_function__ (a TorchFunctionMode sees the operators of its forward, not the application),
# functorch's custom_function_call is reached under its transforms alone, which an export does not run, and
# torch._export.wrappers.allow_in_pre_dispatch_graph must decorate each Function's own apply. So Function.apply is
# replaced on the class while any thread exports, and put back after the last: the replacement records in the
# threads exporting and runs torch's own apply in all others (tests/test_scoped_switches.py).
_recording_apply = WhileUsed(_install_recording, _restore_apply)


@contextlib.contextmanager
def recorded_as_operators():
    """For the duration of an export: each application of a user's Function in this thread records a call of its
    operator; yields the list of the operators recorded, which the port keeps (they exist while it holds them).
    Function.apply is patched while any thread exports; other threads' applications run torch's own."""
    recorded: list[FunctionOperator] = []
    with _recording_apply.used():
        exports = _recording.__dict__.setdefault("exports", [])
        exports.append(recorded)
        try:
            yield recorded
        finally:
            exports.pop()


def _apply_recording(original):
    def apply(cls, *args, **kwargs):
        exports = getattr(_recording, "exports", None)
        if not exports or not is_users(cls):
            # bound as torch binds it: a classmethod, or (torch 2.14) a C classmethod_descriptor
            return original.__get__(None, cls)(*args, **kwargs)
        if kwargs:
            from ..errors import PortError
            raise PortError(f"{cls.__qualname__}{where(cls)}: a torch.autograd.Function applied with keyword "
                            "arguments cannot be ported; pass them positionally")
        operator, tensors = operator_for(cls, args)
        if operator not in exports[-1]:
            exports[-1].append(operator)
        outputs = operator.overload(*tensors)
        return tuple(outputs) if operator.outcome.returns_tuple else outputs[0]

    return apply

