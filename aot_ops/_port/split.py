"""Networks whose sizes depend on their values (detection: the boxes kept by non-maximum suppression), ported part by
part: `aot_ops.from_torch_split`.

torch.export needs every size to follow from the input shapes, and MindSpore's aot operators need their output
shapes before they run, so a graph cannot hold an operator whose output size is known only after it ran. torch's
own compiler front end, TorchDynamo, already splits a network where that happens (a graph break at nonzero, a
boolean index, torchvision's nms): it hands each piece of straight-line tensor code to a backend as an FX graph and
runs what lies between (the data-dependent operator and the Python around it) in torch. This backend ports each
graph with from_torch (one MindSpore cell per graph, run in PyNative or GRAPH_MODE as the context says) and gives
Dynamo a callable that runs the cell on MindSpore views of torch's tensors and answers torch copies of the cell's
outputs.

What runs where, for a torchvision detector: the transform, backbone, feature pyramid, region proposal head, box
decoding, RoI pooling and box/mask/keypoint heads run in MindSpore (the large graphs); the data-dependent steps
between them (removing small boxes, score thresholds, non-maximum suppression, keeping the top detections) run in
torch. Limits:
- evaluation only (the split network is not differentiated through MindSpore's autodiff);
- the graphs are specialised to the sizes they met (dynamic=False): a new image size or a new number of kept boxes
  ports the graphs after it again, once per size. Code whose sizes change on nearly every call (Mask R-CNN pastes
  each mask at its own box's size) is ported for its first `recompiles` sizes, then run by torch, as torch.compile
  does past its limit: `in_torch` names such code, and a warning is logged;
- a graph with no tensor input (constants, such as anchor templates) is run as torch made it, and is named in
  `parts` as such.
"""
from __future__ import annotations

import contextlib
import copy
import logging
import re
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .._core.torch_private import dynamo_config, tree_map
from .errors import PortError


@dataclass
class Part:
    """One graph Dynamo handed over: ported (`cell`), or run by torch (`why`)."""

    nodes: int                 # the graph's operator calls
    input_shapes: list[tuple]  # the shapes of its inputs (not the weights it holds), which it is specialised to
    cell: Any = None           # the ported MindSpore cell
    why: str = ""              # why torch runs it (no cell)


class SplitPort:
    """A network ported graph by graph, with torch running the data-dependent steps between the graphs.

    `port(*inputs, **kwargs)`: MindSpore tensors (nested in lists, tuples and dicts as the module takes them) in,
    the module's outputs as MindSpore tensors, in the module's structure, out. `parts` lists every graph: the
    ported ones with their cells, the others with why torch runs them. The module stays referenced (torch runs its
    Python), and each cell holds a copy of the weights its graph uses: a graph Dynamo runs for several instances of
    a submodule's class (two heads alike) has a cell, and a part, per instance."""

    def __init__(self, module: torch.nn.Module, *, fuse: bool = False, recompiles: int = 8):
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"from_torch_split: expected a torch.nn.Module, got {type(module).__name__}")
        if module.training:
            raise PortError(f"from_torch_split: {type(module).__name__} is in training mode; a split port evaluates "
                            "only: call module.eval() first (sizes that depend on values cannot be differentiated "
                            "through MindSpore's autodiff here)")
        if fuse not in (False, True):
            raise ValueError(f"from_torch_split: fuse={fuse!r}; give False (one aot call per node) or True (one per "
                             "graph)")
        self.module, self.fuse, self.recompiles = module, fuse, recompiles
        self.parts: list[Part] = []
        self.in_torch: list[str] = []  # code run by torch past `recompiles` sizes: "'name' (file:line)"
        self._lock = threading.Lock()
        self._compiled = torch.compile(module, backend=self._backend, dynamic=False)

    def _backend(self, graph: torch.fx.GraphModule, example_inputs: list) -> Callable:
        tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
        calls = sum(n.op in ("call_function", "call_method", "call_module") for n in graph.graph.nodes)
        part = Part(calls, [])
        self.parts.append(part)
        if len(tensors) != len(example_inputs):
            raise PortError("from_torch_split: a graph takes a Python number as input; only static sizes are split "
                            f"(got {[type(x).__name__ for x in example_inputs]})")
        if not tensors:
            part.why = "no tensor input: constants computed by torch"
            return graph.forward
        inputs = self._ported(graph, example_inputs, part)
        weights = [k for k in range(len(example_inputs)) if k not in inputs]
        # Dynamo guards a module's graph on the module's class and passes the instance's weights to it as inputs,
        # so another instance of a submodule's class (a second head alike, with its own data-dependent step) runs
        # the same graph with its own weights: ported again for them, a cell per set of weights.
        cells = [_WeightsCell(example_inputs, weights, part.cell, inputs)]

        def run(*tensors):
            found = next((c for c in cells if c.holds(tensors)), None)
            if found is None:  # called under the port's lock, as the backend is
                cells[:] = [c for c in cells if c.alive()]
                other = Part(calls, [])
                self.parts.append(other)
                kept = self._ported(graph, list(tensors), other)
                found = _WeightsCell(tensors, weights, other.cell, kept)
                cells.append(found)
            return _on_mindspore(found.cell, found.inputs, tensors)
        return run

    def _ported(self, graph: torch.fx.GraphModule, values: list, part: Part) -> list[int]:
        """Ports `graph` (left as it is) into `part`, its cell holding the weights among `values` (the graph's
        inputs). Returns the positions of the inputs that reach the cell."""
        from . import port

        # A copy: Dynamo calls the backend's answer with the inputs of the graph it handed over, as it was
        graph = torch.fx.GraphModule(graph, copy.deepcopy(graph.graph))
        graph.eval()  # Dynamo's graphs start in training mode; this one was traced from the evaluating module
        inputs = self._weights_as_attributes(graph, values)
        part.input_shapes = [tuple(values[i].shape) for i in inputs]
        part.cell = port(graph, tuple(values[i] for i in inputs), fuse=self.fuse, input_grads=False,
                         no_training="a split port evaluates only")
        return inputs

    def _weights_as_attributes(self, graph: torch.fx.GraphModule, example_inputs: list) -> list[int]:
        """Dynamo passes the parameters and buffers of the modules it traces to a graph as inputs (it inlines the
        modules' forward: torch's default, and since torch 2.13 the only way, inline_inbuilt_nn_modules=False being
        deprecated and without effect); here they become the graph's own (get_attr), so that the cell holds them as
        Parameters instead of taking hundreds of inputs per call (MindSpore's compiler refused a graph of 250
        inputs: its checks nest past the call-depth limit). Returns the positions of the inputs that stay
        inputs."""
        owners = {id(t): name for name, t in [*self.module.named_parameters(remove_duplicate=False),
                                                *self.module.named_buffers(remove_duplicate=False)]}
        placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
        kept = []
        for k, (node, value) in enumerate(zip(placeholders, example_inputs)):
            if id(value) not in owners:
                kept.append(k)
                continue
            attribute = f"weight_{k}_" + re.sub(r"[^A-Za-z0-9_]", "_", owners[id(value)])
            if isinstance(value, torch.nn.Parameter):
                graph.register_parameter(attribute, value)
            else:
                graph.register_buffer(attribute, value)
            with graph.graph.inserting_before(node):
                node.replace_all_uses_with(graph.graph.get_attr(attribute))
            graph.graph.erase_node(node)
        graph.recompile()
        return kept

    def __call__(self, *args, **kwargs):
        import mindspore as ms

        from .._core.convert import to_ms, torch_view

        leaf = lambda v: torch_view(v) if isinstance(v, ms.Tensor) else v  # noqa: E731  (the caller's, alive)
        torch_args, torch_kwargs = tree_map(leaf, (args, kwargs))
        with self._lock, _recompile_limit(self.recompiles, self.in_torch), torch.no_grad():
            outputs = self._compiled(*torch_args, **torch_kwargs)
        return tree_map(lambda v: to_ms(v) if isinstance(v, torch.Tensor) else v, outputs)


class _WeightsCell:
    """A graph's cell for one set of weights: the weights at positions `weights` of the graph's inputs (weakly: a
    freed tensor's id may be another's later), the cell holding them, the positions of the inputs reaching it."""

    def __init__(self, values, weights: list[int], cell, inputs: list[int]):
        self.positions, self.weights = weights, [weakref.ref(values[k]) for k in weights]
        self.cell, self.inputs = cell, inputs

    def holds(self, tensors) -> bool:
        return all(ref() is tensors[k] for ref, k in zip(self.weights, self.positions))

    def alive(self) -> bool:
        return not self.weights or any(ref() is not None for ref in self.weights)


def _on_mindspore(cell, inputs: list[int], tensors: tuple) -> tuple:
    """A graph's call, run by its cell: torch tensors in (those at positions `inputs` reach the cell; the others
    are the weights it holds), torch tensors out."""
    from .._core.convert import ms_view, to_torch

    # Inputs: views of torch's memory, alive for the call. Outputs: copies, as MindSpore may give an output's
    # memory to a later call once its Tensor is gone (views of two calls' outputs were seen to overlap).
    outputs = cell(*(ms_view(tensors[i].detach().contiguous()) for i in inputs))
    flat = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    return tuple(to_torch(o) for o in flat)


class _LimitsHit(logging.Handler):
    """Collects the code Dynamo leaves to torch once it met more sizes than its limit (its own warning says so:
    "torch._dynamo hit config.recompile_limit ... function: 'name' (file:line)"), in the thread that made it:
    Dynamo compiles in the thread calling the compiled module, and another thread's warnings are about its own
    code (another split port, or the user's torch.compile)."""

    def __init__(self, into: list[str]):
        super().__init__(logging.WARNING)
        self.into = into
        self.thread = threading.get_ident()

    def emit(self, record: logging.LogRecord) -> None:
        if threading.get_ident() != self.thread:  # logging calls handlers in the thread making the record
            return
        if str(record.msg).startswith("torch._dynamo hit config.") and len(record.args or ()) > 2:
            function = str(record.args[2])
            if function not in self.into:
                self.into.append(function)


@contextlib.contextmanager
def _recompile_limit(limit: int, in_torch: list[str]):
    """Dynamo's limit of sizes per piece of this network's code, and the code past it recorded in `in_torch`, for
    the calling thread: torch's config patch is the thread's own (torch 2.12 and later keep config values per
    thread; before, they were the process's, as every torch.compile setting was), and so are the warnings
    collected."""
    logger = logging.getLogger("torch._dynamo.convert_frame")
    handler = _LimitsHit(in_torch)
    logger.addHandler(handler)
    try:
        with dynamo_config().patch(recompile_limit=limit, fail_on_recompile_limit_hit=False):
            yield
    finally:
        logger.removeHandler(handler)


def from_torch_split(module: torch.nn.Module, *, fuse: bool = False, recompiles: int = 8) -> SplitPort:
    """Ports an evaluating network whose sizes depend on values (detection models: torchvision's Faster, Mask and
    Keypoint R-CNN, RetinaNet, FCOS, SSD), graph by graph: TorchDynamo splits the network where a size becomes
    data-dependent, each graph becomes a from_torch cell (`fuse` as from_torch's), and torch runs the steps
    between them. The port is made as calls meet new sizes: the first call with an image size
    (and number of kept boxes) ports its graphs. See aot_ops/_port/split.py for what runs where and the limits."""
    return SplitPort(module, fuse=fuse, recompiles=recompiles)
