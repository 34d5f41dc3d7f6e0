"""A causal language model ported with its key/value cache: aot_ops.from_torch_lm.

    lm = aot_ops.from_torch_lm(model, batch_size=1, max_length=256, fuse=True)
    tokens = aot_ops.generate(lm, input_ids, attention_mask=mask, max_new_tokens=64)

transformers' cache objects are not tensors torch.export can carry, but its StaticCache keeps every layer's keys
and values in tensors of a fixed size (batch, key/value heads, max_length, head size), written in place at the
positions given by `cache_position`. Held as buffers of a wrapper module, they are exported as buffers the graph
updates, which from_torch ports as non-trainable Parameters; the port is for evaluation only, so a fused program
writes them where they live (buffer_writes.py), and per node the cell assigns them after each call. The wrapper
takes the prompt or one new token (a dynamic sequence length), the attention mask over the positions written so
far, this call's included (one column per position: 1 where a token was written and is attended, 0 for padding;
its width a second dynamic size, which each layer's attention reads as the part of the cache to attend to: a
token's attention costs the length so far, not the whole cache; fuse="compile" compiles the one-token step with
that width as a dynamic size) and the positions, and returns the logits of the last position only: decoding
needs no more.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any

import torch

from ..._core.silenced_logs import silenced
from ..errors import PortError, raised_by_aot_ops
from ..trace import layer_stack
from ..trace.layer_copies import SHALLOW
from ..trace.module_copy import structural_copy

_log = logging.getLogger(__name__)


def _written_part_layer(max_length: int):
    """A StaticLayer whose attention reads the positions written so far: the first `attended` (the attention
    mask's width, a size of the graph's inputs), not all `max_length`. It writes the new keys and values as the
    StaticLayer does (in place, at the positions given) and returns that part of the cache; the causal mask is built
    for that many positions. A token's attention then costs what the length so far costs, not the whole cache."""
    from transformers.cache_utils import StaticLayer

    class WrittenPartLayer(StaticLayer):
        attended: Any = None  # set by StaticCacheLM.forward for each call

        def update(self, key_states, value_states, *args, **kwargs):
            keys, values = super().update(key_states, value_states, *args, **kwargs)
            return keys[:, :, :self.attended], values[:, :, :self.attended]

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return self.attended, 0

    return WrittenPartLayer(max_length)


class StaticCacheLM(torch.nn.Module):
    """`model` (a transformers causal LM) with a StaticCache of `batch_size` x `max_length` as buffers.
    `written_part`: attention reads the positions written so far, as many as the attention mask's width (which then
    varies from call to call); otherwise all `max_length` positions, masked (the mask as wide as the cache).
    `plan_key`: the key of the port's plan (plan_cache.py), beside which the cache's shapes are kept."""

    def __init__(self, model: torch.nn.Module, batch_size: int, max_length: int, written_part: bool = False,
                 plan_key: str | None = None, export_two_layers: bool = False):
        super().__init__()
        import inspect

        from transformers import StaticCache
        from transformers.cache_utils import StaticLayer, StaticSlidingWindowLayer

        config = model.config.get_text_config()
        self.model = model
        parameters = inspect.signature(model.forward).parameters
        self.takes_positions = "position_ids" in parameters  # not Bloom (ALiBi)
        # Only the last position's logits are used: a model that can computes no others (its LM head then multiplies
        # one position, not the prompt's every one; a split model gathers one position's vocabulary)
        self.last_logits = {"logits_to_keep": 1} if "logits_to_keep" in parameters else {}
        self.written_part = written_part
        # With written_part, one position more than ever written: the part attended is then never the whole cache
        # (torch.export guards a slice that covers its whole tensor apart from a shorter one)
        cache_length = max_length + written_part
        self.cache = StaticCache(config=config, max_cache_len=cache_length)
        for k, layer in enumerate(self.cache.layers):
            if isinstance(layer, StaticSlidingWindowLayer):
                # A window at least as long as the cache never slides: a plain static layer computes the same.
                window = getattr(config, "sliding_window", None)
                if window is not None and window < max_length:
                    raise PortError(f"from_torch_lm: {type(model).__name__} attends within a sliding window of "
                                    f"{window} tokens, which a static cache of max_length={max_length} cannot "
                                    f"hold; port it with max_length <= {window}")
                self.cache.layers[k] = StaticLayer(cache_length)
            if written_part and type(self.cache.layers[k]) is StaticLayer:
                self.cache.layers[k] = _written_part_layer(cache_length)
        from .. import plan_cache

        heads, head_size = plan_cache.remembered(plan_key, "cache-shapes",
                                                 lambda: _cache_shapes(model, config, export_two_layers))
        # Allocated now: StaticCache otherwise allocates on the first forward, which export cannot carry.
        self.cache.early_initialization(batch_size, heads, head_size, model.dtype, torch.device("cpu"))
        for k, layer in enumerate(self.cache.layers):
            self.register_buffer(f"key_cache_{k}", layer.keys, persistent=False)
            self.register_buffer(f"value_cache_{k}", layer.values, persistent=False)

    tokens_per_call = 1  # greedy steps a call decodes (set by _port_block while the block is exported)

    def forward(self, input_ids, attention_mask, position_ids, cache_position):
        if self.tokens_per_call == 1:
            return self._step(input_ids, attention_mask, position_ids, cache_position)
        # A block of greedy steps (written_part: the mask covers the positions written): each step's most likely
        # token is the next step's input, attended one column further and written after the last one.
        tokens = []
        for j in range(self.tokens_per_call):
            if j:
                position_ids, cache_position = position_ids + 1, cache_position + 1
                attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], 1)
            input_ids = self._step(input_ids, attention_mask, position_ids, cache_position).argmax(-1, keepdim=True)
            tokens.append(input_ids)
        return torch.cat(tokens, 1)

    def _step(self, input_ids, attention_mask, position_ids, cache_position):
        for k, layer in enumerate(self.cache.layers):
            # The cache reads and writes the buffers as this module holds them: torch.export swaps a module's
            # buffers for its own tensors while tracing, and tensors reached only through the cache object would be
            # taken for constants (whose in-place update cannot be made functional).
            layer.keys = getattr(self, f"key_cache_{k}")
            layer.values = getattr(self, f"value_cache_{k}")
            # Where this call writes: the cache's own counter, made from the input rather than kept as state
            # (the cache would add the sequence length to it, a size the ported graph need not compute).
            layer.cumulative_length = cache_position[0].clone()
            if self.written_part:
                layer.attended = attention_mask.shape[-1]
        positions = {"position_ids": position_ids} if self.takes_positions else {}
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, cache=self.cache, use_cache=True,
                         **positions, **self.last_logits)
        return out.logits[:, -1, :]


def _cache_shapes(model: torch.nn.Module, config, export_two_layers: bool = False
                  ) -> tuple[list[int] | int, list[int] | int]:
    """Each layer's key/value heads and head size, as the model's attention writes them: read off the cache of a
    call on fake tensors (no arithmetic), since the config does not always say (Falcon's multi-query attention
    keeps one key/value head whatever num_kv_heads says). transformers' reading of the config if that call fails.
    `export_two_layers`: the call runs a copy of the model with two of its alike layers (layer_stack.py), the last
    standing for the rest."""
    from transformers import DynamicCache

    from ..._core.torch_private import FakeTensorMode

    stack = layer_stack.search(model)[0] if export_two_layers else None
    called = model
    if stack is not None:
        called, counting_two = stack.shallow(model)  # (the user's model and configuration are left as they are)
        config = counting_two or config
    try:
        cache = DynamicCache(config=config)
        # a failing meta kernel is logged there, for this thread: the fallback below answers it
        with silenced("torch._subclasses.fake_tensor", below=logging.CRITICAL), torch.no_grad(), \
                FakeTensorMode(allow_non_fake_inputs=True):
            called(input_ids=torch.ones((1, 2), dtype=torch.long), cache=cache, use_cache=True)
        keys = [getattr(layer, "keys", None) for layer in cache.layers]  # (a recurrent layer holds none)
        if stack and len(keys) == SHALLOW:
            keys += keys[-1:] * (stack.count - len(keys))
        if all(isinstance(k, torch.Tensor) and k.dim() == 4 for k in keys):
            return [int(k.shape[1]) for k in keys], [int(k.shape[-1]) for k in keys]
    except Exception as exc:  # whatever of torch's or transformers' stops the probe: the config's numbers answer
        if raised_by_aot_ops(exc):
            raise  # a bug of ours is not a model the probe cannot run
        _log.debug("from_torch_lm: the cache's shapes from the config, as a fake call of %s failed: %s",
                   type(model).__name__, exc)
    from transformers.integrations.executorch import get_head_shapes

    return get_head_shapes(config)


@dataclasses.dataclass
class PortedLM:
    """A causal LM ported with its key/value cache (from_torch_lm): the ported cell, and what decoding needs."""

    cell: Any                      # the PortedCell of StaticCacheLM: (input_ids, mask, positions, cache positions)
    batch_size: int
    max_length: int                # the cache's length: prompt and new tokens together
    vocab_size: int
    generation_config: Any         # the model's, for the end and padding tokens
    module_name: str
    block: Any = None              # a PortedCell decoding `tokens_per_call` greedy tokens a call, or None
    tokens_per_call: int = 1

    def __repr__(self):
        return (f"PortedLM({self.module_name}, batch_size={self.batch_size}, max_length={self.max_length}, "
                f"cell={type(self.cell).__name__}, tokens_per_call={self.tokens_per_call})")


def from_torch_lm(model: torch.nn.Module, *, batch_size: int = 1, max_length: int, fuse: bool | str = False,
                  jit: bool = True, share_weights: bool = True, tokens_per_call: int = 1) -> PortedLM:
    """Ports a transformers causal language model (`...ForCausalLM`) with a key/value cache for `batch_size`
    sequences of up to `max_length` tokens (prompt and new tokens together), for aot_ops.generate.

    The cache is transformers' StaticCache, held by the ported cell as Parameters updated in place (with fuse, by
    the program itself: no cache output, no Assign). One cell takes the prompt (prefill) and each new token
    (decode), with a dynamic sequence length, attending to the positions written so far: per node and `fuse=True`
    compile one graph for both. `fuse="compile"` compiles the one-token step with AOTInductor (the positions
    attended a dynamic size) and runs the prompt interpreted. `jit`, as from_torch's. `share_weights` (default True
    here: a generation port does not train), as from_torch's: the model's weights become views of the cell's, held
    once; False copies them. `tokens_per_call` > 1 also ports a block of that many greedy decoding steps as one call
    (one program, its cache writes in place): greedy generation then pays MindSpore's cost of a call once per block,
    where a small model's step is cheaper than that cost (sampling and repetition penalties still decode a token a
    call; the export takes `tokens_per_call` times longer). Raises PortError naming what cannot be ported."""
    return port_lm(model, batch_size=batch_size, max_length=max_length, fuse=fuse, jit=jit,
                   share_weights=share_weights, tokens_per_call=tokens_per_call)


def port_lm(model: torch.nn.Module, *, batch_size: int, max_length: int, fuse: bool | str, jit: bool,
            share_weights: bool, plan_key: str | None = None, tokens_per_call: int = 1,
            export_two_layers: bool = False) -> PortedLM:
    """from_torch_lm, with the key of its plan where the caller knows what determines the model's graph
    (from_pretrained: plan_cache.py), and `export_two_layers` where its layers are transformers' own (port's)."""
    from .. import port

    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise TypeError("from_torch_lm: expected a transformers causal language model (a ...ForCausalLM instance), "
                        f"got {type(model).__name__}")
    for name, value in (("batch_size", batch_size), ("max_length", max_length), ("tokens_per_call", tokens_per_call)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"from_torch_lm: {name} must be a positive int, got {value!r}")
    if not isinstance(share_weights, bool):
        raise TypeError(f"from_torch_lm: share_weights={share_weights!r}; give True or False")
    if max_length < 2:
        raise ValueError("from_torch_lm: max_length must be at least 2 (a prompt token and a new one)")
    if tokens_per_call > 1 and max_length < tokens_per_call + 2:
        raise ValueError(f"from_torch_lm: tokens_per_call={tokens_per_call} needs max_length >= {tokens_per_call + 2} "
                         f"(a prompt token, a token decoded from it, and a block), got {max_length}")
    try:
        # The port's own structural copy of the model in evaluation mode (the user's keeps its mode), attending to
        # the positions written (the whole-cache mask of StaticCacheLM serves references in torch)
        wrapper = StaticCacheLM(structural_copy(model).eval(), batch_size, max_length, written_part=True,
                                plan_key=plan_key, export_two_layers=export_two_layers).eval()
    except Exception as exc:  # noqa: BLE001 - transformers' own error, or a cache layer holding no keys, named
        raise PortError(f"from_torch_lm: {type(model).__name__} cannot hold transformers' StaticCache: "
                        f"{type(exc).__name__}: {exc}") from exc
    example = example_inputs(batch_size, max_length)
    seq = torch.export.Dim("seq", min=1, max=max_length)
    attended = torch.export.Dim("attended", min=1, max=max_length)
    dynamic = {"input_ids": {1: seq}, "attention_mask": {1: attended},
               "position_ids": {1: seq}, "cache_position": {0: seq}}
    cell = port(wrapper, (), example, dynamic_shapes=dynamic, fuse=fuse, jit=jit,
                no_training=f"{type(model).__name__} was ported for generation (from_torch_lm): the cell "
                                "has no training graph; port the model with from_torch to train it",
                compile_inputs=_one_token(batch_size) if fuse == "compile" else None, share_weights=share_weights,
                plan_key=plan_key, export_two_layers=export_two_layers)
    block = None if tokens_per_call == 1 else _port_block(wrapper, cell, tokens_per_call, batch_size, max_length,
                                                          fuse=fuse, jit=jit, plan_key=plan_key)
    vocab = model.config.get_text_config().vocab_size
    return PortedLM(cell, batch_size, max_length, vocab, getattr(model, "generation_config", None),
                    type(model).__name__, block, tokens_per_call)


def _port_block(wrapper: StaticCacheLM, step_cell, tokens: int, batch_size: int, max_length: int, *,
                fuse: bool | str, jit: bool, plan_key: str | None):
    """The cell decoding `tokens` greedy steps a call (StaticCacheLM.forward's block): input the last token chosen,
    output the next `tokens` (int64, [batch, tokens]). It holds the step cell's Parameters, not copies: both read
    and write one cache. The mask is as wide as the positions written, this call's first included (the wrapper
    attends to the written part)."""
    from .. import port

    # a prompt token, and the token the block starts from
    example = {"input_ids": torch.zeros(batch_size, 1, dtype=torch.long),
               "attention_mask": torch.ones(batch_size, 2, dtype=torch.long),
               "position_ids": torch.ones(batch_size, 1, dtype=torch.long),
               "cache_position": torch.ones(1, dtype=torch.long)}
    # the block's last step attends to `tokens` - 1 positions more than its mask covers
    attended = torch.export.Dim("attended", min=2, max=max_length - tokens + 1)
    dynamic = {"input_ids": None, "attention_mask": {1: attended}, "position_ids": None, "cache_position": None}
    block = _held_by(wrapper, step_cell)
    block.tokens_per_call = tokens
    return port(block, (), example, dynamic_shapes=dynamic, fuse=fuse, jit=jit,
                no_training=f"{type(wrapper.model).__name__} was ported for generation (from_torch_lm): "
                            "the cell has no training graph",
                compile_inputs=_one_token(batch_size) if fuse == "compile" else None,
                share_weights=True, plan_key=plan_key and f"{plan_key}-block{tokens}")


def _held_by(module: torch.nn.Module, cell) -> torch.nn.Module:
    """A structural copy of `module` whose parameters and buffers are the memory of the Parameters of the same keys
    in `cell` (a port with share_weights then takes those Parameters rather than copying:
    convert.owning_parameter). `module` and its tensors are left as they are."""
    from ..._core.convert import owned_view

    parameters = cell.parameters_dict()
    views: dict[int, torch.Tensor] = {}
    for key, tensor in [*module.state_dict(keep_vars=True).items(), *module.named_buffers(remove_duplicate=False)]:
        if id(tensor) in views:
            continue
        if key not in parameters:
            raise PortError(f"from_torch_lm: the ported cell has no Parameter {key}")
        trains = tensor.requires_grad if isinstance(tensor, torch.nn.Parameter) else None
        views[id(tensor)] = owned_view(parameters[key], requires_grad=trains)
    return structural_copy(module, views)


def _one_token(batch_size: int) -> dict[str, tuple[int | None, ...]]:
    """What fuse="compile" compiles: a token a call, attending to any number of positions (a dynamic size in the
    package); the prompt's sizes run interpreted."""
    return {"input_ids": (batch_size, 1), "attention_mask": (batch_size, None), "position_ids": (batch_size, 1),
            "cache_position": (1,)}


def example_inputs(batch_size: int, max_length: int) -> dict[str, torch.Tensor]:
    """Inputs of a prefill of two tokens (a size of 1 would be taken for a constant by torch.export), the mask
    as wide as the positions written."""
    length = min(2, max_length)
    return {"input_ids": torch.zeros(batch_size, length, dtype=torch.long),
            "attention_mask": torch.ones(batch_size, length, dtype=torch.long),
            "position_ids": torch.arange(length).expand(batch_size, length).contiguous(),
            "cache_position": torch.arange(length)}
