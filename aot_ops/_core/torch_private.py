"""The torch internals aot_ops relies on, in one place. Each is private API (an underscore in its path), checked on
torch 2.13 and 2.14 here and 2.11 on the GPU machine; a torch upgrade that moves one breaks this module, and the
tests named beside it say so. Public APIs (torch.library, torch.export, torch.fx, functorch.compile) are used where
they are needed, not through here.

The compiler modules (Inductor, Dynamo, functorch's settings) are reached through functions: importing them costs
seconds, and most processes never compile.
"""
from __future__ import annotations

import contextlib

import torch
import torch._guards
import torch._subclasses.fake_tensor
import torch.utils._pytree
import torch.utils._python_dispatch

from .while_used import WhileUsed

# torch's nested-structure helpers: a module's outputs as torch.export describes them (its out_spec), rebuilt from
# the cell's flat outputs; values nested in a graph node's arguments. Without them: no ported cell returns a tuple
# or dict (tests/test_from_torch.py).
tree_flatten = torch.utils._pytree.tree_flatten
tree_leaves = torch.utils._pytree.tree_leaves
tree_map = torch.utils._pytree.tree_map
tree_unflatten = torch.utils._pytree.tree_unflatten

# The types of torch.ops.<namespace>.<name>.<overload>, of torch.ops.<namespace>.<name>, and of control-flow
# operators (torch.cond, wrap_with_set_grad_enabled): what an exported graph's nodes call. torch.library's public
# functions take and return them, but name no public alias. Without them: no graph node could be told an operator
# (tests/test_from_torch.py, tests/test_aten.py). Their schemas and names: schema_of, qualified_op_name below.
OpOverload = torch._ops.OpOverload
OpOverloadPacket = torch._ops.OpOverloadPacket
HigherOrderOperator = torch._ops.HigherOrderOperator

# The fake tensors an operator's outputs are inferred with (shapes and dtypes without computing). Without it:
# aten.op's Python inference and from_torch_lm's cache shapes (tests/test_aten.py, tests/test_generation.py).
FakeTensorMode = torch._subclasses.fake_tensor.FakeTensorMode

# A mode that sees every ATen call below autograd: the conformance run records what an operator's torch eager run
# calls (tools/conformance.py; tests/test_conformance.py).
TorchDispatchMode = torch.utils._python_dispatch.TorchDispatchMode


def detect_fake_mode(values) -> FakeTensorMode | None:
    """The fake mode the tensors in `values` (a list) belong to, or None for real tensors: passes adding graph
    nodes compute their values in it, and a Function's backward knows it is being traced
    (tests/test_grouped_attention.py, tests/test_custom_autograd.py)."""
    return torch._guards.detect_fake_mode(values)


def is_alias_of(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether `a` shares `b`'s storage (a view of it, or it): an operator's outputs may not alias its inputs
    (tests/test_custom_autograd.py)."""
    return torch._C._is_alias_of(a, b)


def schema_of(operator: OpOverload) -> torch._C.FunctionSchema:
    """An operator overload's schema: its arguments (names, types, which it writes or aliases), returns and
    overload name. torch gives it in `_schema` alone (the attribute its own documentation reads; OpOverload has no
    public accessor). Without it nothing tells what a graph node's operator takes, returns or writes: aten.op's
    binding, the export checks, the functionalization of in-place calls, the programs' encoding
    (tests/test_aten.py, tests/test_from_torch.py, tests/test_conformance.py)."""
    return operator._schema


def qualified_op_name(packet: OpOverloadPacket) -> str:
    """An operator's name with its namespace, "aten::add" for torch.ops.aten.add: how torch's registry names it
    (overload_names) and how errors name it; an OpOverloadPacket keeps it in `_qualified_op_name` alone
    (tests/test_aten.py)."""
    return packet._qualified_op_name


def overload_names(packet: OpOverloadPacket) -> list[str]:
    """The overload names of an operator (aten.add -> ["Tensor", "Scalar", "out", ...]) in the order its schemas
    were registered, which is the order torch's own resolution tries them (tests/test_aten.py)."""
    return [s.overload_name for s in torch._C._jit_get_schemas_for_operator(qualified_op_name(packet))]


def all_schemas() -> list:
    """Every operator schema torch has registered: the conformance report's census of ATen's argument types
    (tools/conformance.py)."""
    return torch._C._jit_get_all_schemas()


def is_view(tensor: torch.Tensor) -> bool:
    """Whether `tensor` is a view of another tensor (its storage another's, through autograd's view tracking).
    Tensor has no public method for it. Without it a fused program could return a view of its input or of a
    parameter, which AOTAutograd then rebuilds outside its graphs, and the backward gets fewer cotangents than it
    takes (_port/programs/fused.py; tests/test_from_torch.py: test_outputs_that_alias_inputs_or_each_other)."""
    return tensor._is_view()


def destroy_library(library: torch.library.Library) -> None:
    """Removes what a torch.library.Library registered (definitions, implementations, fake kernels) now, as
    torch's own scoped libraries do at their end. A Library otherwise deregisters only when it is collected, which
    nothing guarantees while anything holds it. Without it loading an Ascend C library a second time in one process
    (its sources changed) fails: its operators are already defined (ascendc/_torch_library.py: register)."""
    library._destroy()


def op_db() -> list:
    """torch's own operator test samples (OpInfo): the conformance run (tools/conformance.py;
    tests/test_conformance.py)."""
    from torch.testing._internal.common_methods_invocations import op_db as database

    return database


def inductor_config():
    """torch._inductor.config: the settings a compiled program is made with, and kept by (compiled.py;
    tests/test_compiled.py)."""
    from torch._inductor import config

    return config


def inductor_threads() -> int:
    """The thread count Inductor's compiled loops are built for (it keys a compiled package: compiled.py)."""
    from torch._inductor.utils import parallel_num_threads

    return parallel_num_threads()


def aoti_compile_and_package(*args, **kwargs):
    """AOTInductor's compiler of an exported program into a package (documented, though under torch._inductor):
    fuse="compile" (tests/test_compiled.py)."""
    from torch._inductor import aoti_compile_and_package as compile_and_package

    return compile_and_package(*args, **kwargs)


def functorch_config():
    """torch._functorch.config: AOTAutograd's settings, part of a kept trace's key (kept.py;
    tests/test_fused_cache.py)."""
    from torch._functorch import config

    return config


def dynamo_config():
    """torch._dynamo.config: from_torch_split's recompile limit (split.py; tests/test_from_torch.py,
    tests/test_vision_zoo.py)."""
    import torch._dynamo

    return torch._dynamo.config


_regions_contexts: dict[int, tuple] = {}  # id(TracingContext) -> (its joint pass, its schemas by region)


def _ours():
    """The joint pass and schema cache of the aot_ops tracing context this thread is in, or None (tracing contexts
    are per thread)."""
    context = torch._guards.TracingContext.try_get()
    return None if context is None else _regions_contexts.get(id(context))


def _region_schema(subgraph, identifier, *operands):
    """invoke_subgraph's schema of a region, traced once per region in aot_ops' contexts (torch traces the whole
    region again at each call of it); torch's own elsewhere."""
    hop = torch.ops.higher_order.invoke_subgraph
    ours = _ours()
    if ours is None:
        return type(hop).gen_schema(hop, subgraph, identifier, *operands)
    key = (id(subgraph), identifier, tuple(type(o) for o in operands))
    if key not in ours[1]:
        ours[1][key] = type(hop).gen_schema(hop, subgraph, identifier, *operands)
    return ours[1][key]


def _install_region_schema() -> None:
    # an instance attribute of the one operator object: the class's method stays torch's
    torch.ops.higher_order.invoke_subgraph.gen_schema = _region_schema


def _remove_region_schema(_installed: None) -> None:
    del torch.ops.higher_order.invoke_subgraph.gen_schema


_region_schemas = WhileUsed(_install_region_schema, _remove_region_schema)


@contextlib.contextmanager
def repeated_regions_traced_once(fake_mode: FakeTensorMode, joint_pass):
    """The context in which AOTAutograd traces each `invoke_subgraph` region once
    (_port/programs/layers_traced_once.py):
    - a tracing context, which holds torch's cache of the regions' forward, backward and partition;
    - `joint_pass(joint_graph, joint_inputs)` run on the joint graph once the regions are partitioned, before the
      whole graph is (functorch's `joint_custom_pass`): layers_traced_once.py puts the regions' nodes back there, so the
      forward and backward graphs name their saved values alike, as without regions;
    - each region's schema (which torch reads under autograd to refuse a region writing its inputs) traced once:
      torch traces the whole region again at every call to make it, 0.27 s per layer of a Llama, 11.8 of the
      13.7 s the regions were meant to save.
    The schema hook is the operator's method, process-wide: it acts only inside these contexts (tracing contexts are
    per thread), torch's own runs elsewhere, in any thread; it is installed while any thread traces with regions
    and removed after the last. The joint pass is functorch's setting, patched for the tracing thread alone: torch
    keeps config values per thread since 2.12 (on older torch they are the process's, and two threads tracing
    regions at once would race on it, as on every torch.compile setting there). Without this context the trace of
    a graph with regions fails or is as slow as without them (tests/test_repeated_layers.py)."""
    config = functorch_config()
    context = torch._guards.TracingContext(fake_mode)
    ours = (joint_pass, {})
    before = config.joint_custom_pass  # this thread's (a user's, or None)

    def joint(joint_graph, joint_inputs):
        if _ours() is ours:
            return joint_pass(joint_graph, joint_inputs)
        # another tracing context, nested in this one: the thread's own pass
        return joint_graph if before is None else before(joint_graph, joint_inputs)

    with _region_schemas.used():
        _regions_contexts[id(context)] = ours
        try:
            with config.patch(joint_custom_pass=joint), torch._guards.tracing(context):
                yield
        finally:
            del _regions_contexts[id(context)]


def give_own_tables(clone: torch.nn.Module, copy_child, tensor_for) -> None:
    """Gives `clone`, a copy.copy of a module (whose tables of submodules, parameters and buffers are still the
    original's dicts), tables of its own: each submodule replaced by copy_child(submodule), each parameter and buffer
    by tensor_for(tensor) (the tensor itself, or one standing for it). nn.Module keeps these tables in private
    attributes, and its public setters write into the shared dicts, which would change the original. Without it:
    the port would trace the user's module itself, whose training flag, forward and layers it then changes while
    torch.export runs, and torch.export's own swap of parameters for fake tensors would reach the user's module from
    another thread (_port/trace/module_copy.py; tests/test_module_untouched.py)."""
    clone._modules = type(clone._modules)(
        (name, None if child is None else copy_child(child)) for name, child in clone._modules.items())
    clone._parameters = type(clone._parameters)(
        (name, None if t is None else tensor_for(t)) for name, t in clone._parameters.items())
    clone._buffers = type(clone._buffers)(
        (name, None if t is None else tensor_for(t)) for name, t in clone._buffers.items())


def set_program_signature(program, signature) -> None:
    """Replaces an ExportedProgram's graph signature after its graph gained inputs or outputs: torch offers no
    setter (its own passes build a new program through private constructors). Without it: from_pretrained's
    layers copied into a graph exported with two would have no specs (_port/trace/layer_copies.py;
    tests/test_layer_stack.py)."""
    program._graph_signature = signature


def set_program_state(program, target: str, tensor: torch.Tensor, persistent: bool) -> None:
    """Adds a tensor to what an ExportedProgram's module() runs with (its state_dict, or its constants for a
    non-persistent buffer): no public setter either (_port/trace/layer_copies.py; tests/test_layer_stack.py)."""
    if persistent:
        program._state_dict[target] = tensor
    else:
        program._constants[target] = tensor


def is_persistent_buffer(module: torch.nn.Module, name: str) -> bool:
    """Whether a module's own buffer `name` is saved in its state_dict: nn.Module keeps the others in a private set,
    and state_dict would walk the whole subtree to tell (_port/trace/layer_stack.py compares layers by it;
    tests/test_layer_stack.py)."""
    return name not in module._non_persistent_buffers_set


def checkpoint_entries() -> tuple:
    """The two ways torch.utils.checkpoint.checkpoint goes into a checkpoint, module globals it looks up at every
    call: `CheckpointFunction` (use_reentrant=True, its `.apply(function, preserve_rng_state, *args)`) and
    `_checkpoint_without_reentrant_generator_impl` (use_reentrant=False: a generator yielding once before the
    checkpointed call and once after). Both are replaced while aot_ops exports (set_checkpoint_entries), which is
    how a checkpointed region is seen at all: torch.export keeps no trace of it. Without them: a ported checkpointed
    model keeps every activation (_port/trace/checkpoints.py; tests/test_checkpointing.py)."""
    import torch.utils.checkpoint as checkpoint

    return checkpoint.CheckpointFunction, checkpoint._checkpoint_without_reentrant_generator_impl


def set_checkpoint_entries(entries: tuple) -> None:
    """Puts (CheckpointFunction, the non-reentrant generator) in torch.utils.checkpoint (checkpoint_entries)."""
    import torch.utils.checkpoint as checkpoint

    checkpoint.CheckpointFunction, checkpoint._checkpoint_without_reentrant_generator_impl = entries


def process_group_ranks(group_name: str) -> list[int]:
    """The global ranks of the torch process group an exported `_c10d_functional` operator names by its string, in
    the group's order (torch resolves the name through a private registry). Without it: a ported collective cannot
    tell which MindSpore group it runs on (_port/read/collectives.py; tests/test_collectives.py)."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _resolve_process_group

    return dist.get_process_group_ranks(_resolve_process_group(group_name))


def init_fake_process_group(rank: int, world_size: int) -> None:
    """torch.distributed initialised with torch's fake backend (its testing package): collectives are traced with
    their groups and shapes but never communicate, which is all a port needs of torch on a MindSpore rank
    (aot_ops.torch_process_group; tests/test_collectives.py)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)


def functional_collectives():
    """torch.distributed._functional_collectives: the collectives a traced module calls and torch.export keeps as
    `_c10d_functional` operators (all_reduce, all_gather_tensor). Without it aot_ops.tensor_parallel has no way to
    put a collective into a torch module (_port/tensor_parallel.py; tests/test_collectives.py)."""
    import torch.distributed._functional_collectives as funcol

    return funcol


def collective_name(target) -> str | None:
    """The name of the functional collective ("all_reduce", "wait_tensor", ...) a node of an exported graph calls,
    or None: torch.export records torch.distributed._functional_collectives' calls as operators of torch's private
    `_c10d_functional` namespace. Without it a ported module's collectives are not recognised
    (_port/read/collectives.py; tests/test_collectives.py)."""
    if getattr(target, "namespace", None) != "_c10d_functional":
        return None
    return schema_of(target).name.split("::")[-1]


def own_parameters(module: torch.nn.Module) -> dict:
    """A module's own parameter table (`_parameters`: name -> Parameter or None, not its submodules'), which
    aot_ops.shard edits to take a parameter out of a module (_port/sharded.py; tests/test_sharded.py)."""
    return module._parameters


def is_traceable_wrapper_subclass(tensor: torch.Tensor) -> bool:
    """A tensor subclass torch.export can take apart (__tensor_flatten__ / __tensor_unflatten__): torchao's
    quantized weights."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass as traceable

    return traceable(tensor)


def unwrap_tensor_subclass_parameters(module: torch.nn.Module) -> torch.nn.Module:
    """Every traceable-subclass parameter or buffer of the tree replaced, in place, by a parametrization over its
    inner tensors (`<module>.parametrizations.<name>.original<k>`, in __tensor_flatten__'s order): what
    ExportedProgram.run_decompositions does to its own copy of the graph's state."""
    from torch._functorch._aot_autograd.subclass_parametrization import unwrap_tensor_subclass_parameters as unwrap

    return unwrap(module)


def weight_int8pack_mm(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """ATen's int8 weight-only product (x @ weight.T) * scales, one rounding: what a port's int8 weight-only layers
    compute (_port/trace/int8_products.py)."""
    return torch._weight_int8pack_mm(x, weight, scales)
