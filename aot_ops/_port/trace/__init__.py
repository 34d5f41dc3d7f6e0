"""Stage 1 of a port, tracing: a torch module becomes functional exported graphs, one per mode.

torch.export of a structural copy of the module (export.py, module_copy.py), a user's autograd.Function kept as one
operator with its backward (functions.py), torch.utils.checkpoint regions marked for recompute
(checkpoints.py), in-place calls made functional (functionalize.py), grouped-query
attention per key/value head (grouped_attention.py), bfloat16 gradients fanned out per node (fan_out.py); a
model's stack of alike layers exported as two, the others copied in (layer_stack.py, layer_copies.py), over the
one idea of a layer of an exported graph (layers.py). fake.py: the fake mode a graph's values live in.

May import: torch, the package's lower layers (_core, _aten, errors) and _port's errors.py and modes.py; nothing of
the later stages.
"""
