"""In-place calls of a training-level graph made functional without retracing the module.

torch.export's training-level graph keeps in-place calls (`buf.index_copy_(...)`, `x.add_(1)`). torch's own
functionalisation (`run_decompositions({})`) retraces the whole module under fake tensors and symbolic shapes: two
thirds of a big model's port. For an inference-only port most graphs need much less: each in-place call becomes its
functional twin, later readers of the tensor read the twin's result, and a buffer written in place becomes an
output of the program (BUFFER_MUTATION, as torch's functionalisation would record it).

That rewrite is exact only when nothing else sees the mutation: the written tensor is a buffer or a tensor the
graph made, and no view of it (and no tensor it is a view of) is read after the write. Anything else (a view
written, a parameter or user input written, out= variants, several written arguments) makes `functionalize`
answer False and the caller falls back to torch's functionalisation.
"""
from __future__ import annotations

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind, OutputSpec, TensorArgument

from ..._core.torch_private import OpOverload, schema_of


def functionalize(program: ExportedProgram) -> bool:
    """Rewrites `program` in place; True when every in-place call was made functional. False: some write cannot
    be rewritten exactly; the program is left unchanged (every check runs before the first rewrite)."""
    graph = program.graph
    nodes = list(graph.nodes)
    order = {node: k for k, node in enumerate(nodes)}
    writes = [n for n in nodes if n.op == "call_function" and isinstance(n.target, OpOverload)
              and schema_of(n.target).is_mutable]
    if not writes:
        return True
    buffers = {spec.arg.name: spec for spec in program.graph_signature.input_specs
               if spec.kind == InputKind.BUFFER}
    plans = []
    for node in writes:
        twin = _functional_twin(node.target)
        written = node.args[0] if node.args else None
        if twin is None or not isinstance(written, torch.fx.Node):
            return False
        root = _root(written)
        if root.op == "placeholder" and (root is not written or root.name not in buffers):
            return False  # a view of a graph input, or a parameter or user input, written in place
        for member in _family(root, excluding=node):
            if member is not written and any(order[user] > order[node] for user in member.users):
                return False  # another view of the storage is read after the write: it would see the old value
        plans.append((node, twin, written.name if written.op == "placeholder" else None))
    mutated: dict[str, torch.fx.Node] = {}  # buffer placeholder -> the node holding its value after the writes
    for node, twin, buffer in plans:
        current = node.args[0]  # the written value as it now stands (earlier rewrites rewired it)
        with graph.inserting_before(node):
            fresh = graph.call_function(twin, (current,) + tuple(node.args[1:]), dict(node.kwargs))
        fresh.meta = dict(node.meta)
        order[fresh] = order[node]
        for user in [u for u in list(current.users) if u is not node and order.get(u, -1) > order[node]]:
            user.replace_input_with(current, fresh)  # later readers read the value after the write
        node.replace_all_uses_with(fresh)
        graph.erase_node(node)
        if buffer is not None:
            mutated[buffer] = fresh
        elif not fresh.users:
            graph.erase_node(fresh)  # a write nothing reads (a counter bumped after its last use)
    if mutated:
        output = next(n for n in reversed(graph.nodes) if n.op == "output")
        output.args = (tuple(mutated.values()) + tuple(output.args[0]),)
        program.graph_signature.output_specs[:0] = [
            OutputSpec(OutputKind.BUFFER_MUTATION, TensorArgument(value.name), buffers[name].target)
            for name, value in mutated.items()]
    program.graph_module.recompile()
    return True


def retarget_devices(program: ExportedProgram) -> None:
    """`x.to(device, dtype)` calls of the training-level graph become `x.to(dtype)`: the graph was traced on the CPU
    and its programs run where their inputs are, and a device is no argument a bridged call can carry (torch's
    functionalisation turns these calls into `_to_copy`, whose device is optional)."""
    changed = False
    for node in program.graph.nodes:
        if node.op == "call_function" and node.target is torch.ops.aten.to.device:
            x, device, dtype, *rest = node.args
            if torch.device(device).type != "cpu":
                continue
            node.target = torch.ops.aten.to.dtype
            node.args = (x, dtype, *rest)
            changed = True
    if changed:
        program.graph_module.recompile()


def _functional_twin(op: OpOverload) -> OpOverload | None:
    """aten.add_.Tensor -> aten.add.Tensor, when `op` writes its first argument alone and the twin exists."""
    schema = schema_of(op)
    name = schema.name.split("::")[-1]
    if not name.endswith("_") or name.startswith("_"):
        return None
    written = [a for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    if len(written) != 1 or written[0] is not schema.arguments[0]:
        return None
    packet = getattr(getattr(torch.ops, op.namespace), name[:-1], None)
    twin = getattr(packet, schema.overload_name or "default", None) if packet is not None else None
    if twin is None or schema_of(twin).is_mutable:
        return None
    return twin


def _root(node: torch.fx.Node) -> torch.fx.Node:
    """The tensor whose storage `node` may share: up through views to the first node that owns its result."""
    while _aliases(node) and node.args and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
    return node


def _family(root: torch.fx.Node, excluding: torch.fx.Node) -> list[torch.fx.Node]:
    """`root` and every view of it, views of views included, except `excluding` (the write itself: its result and
    views of it hold the value after the write, which is what the functional twin's readers get)."""
    family, pending = [], [root]
    while pending:
        node = pending.pop()
        family.append(node)
        pending.extend(u for u in node.users
                       if u is not excluding and _aliases(u) and u.args and u.args[0] is node)
    return family


def _aliases(node: torch.fx.Node) -> bool:
    """The node's result may share storage with one of its inputs (a view, or `to` that may return its input)."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, OpOverload):
        return False
    return any(r.alias_info is not None for r in schema_of(target).returns)
