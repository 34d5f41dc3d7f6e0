"""Text generation with a ported causal language model, in MindSpore: what transformers'
`model.generate(input_ids, attention_mask=..., max_new_tokens=n, ...)` computes.

    lm = aot_ops.from_torch_lm(model, batch_size=2, max_length=256, fuse=True)    # with its key/value cache
    tokens = aot_ops.generate(lm, ids, attention_mask=mask, max_new_tokens=64, do_sample=True, top_p=0.9, seed=0,
                              generation_config=model.generation_config, streamer=TextStreamer(tokenizer))

With a PortedLM (kv_cache.py) the prompt runs once (prefill), then one token per step: each step's cost does not
grow with the length so far. A ported cell without a cache (from_torch with use_cache=False and a dynamic sequence
length) works too: each step then runs the whole sequence. Either way the inputs are passed as generate passes them
to the model's forward (the attention mask covers the tokens so far; the positions count the attended tokens, so a
left-padded batch decodes as in torch), the next token is chosen by transformers' rules (sampling.py), and
decoding stops as generate stops: every sequence has produced an end token, or `max_new_tokens`.
"""
from __future__ import annotations

from typing import Any, Callable

import mindspore as ms
import numpy as np
import torch

from ..errors import PortError
from .kv_cache import PortedLM
from .sampling import Sampling, TokenChooser

# transformers' values for settings neither the model's generation config nor the call sets
# (GenerationMixin._get_default_generation_params)
_DEFAULTS = {"do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.0}
# Settings whose value must be the one given here (transformers' default): anything else is refused.
_FIXED = {"num_beams": 1, "num_beam_groups": 1, "penalty_alpha": None, "no_repeat_ngram_size": 0,
          "num_return_sequences": 1, "bad_words_ids": None, "force_words_ids": None, "constraints": None,
          "suppress_tokens": None, "begin_suppress_tokens": None, "forced_bos_token_id": None,
          "forced_eos_token_id": None, "min_new_tokens": None, "min_length": 0, "assistant_model": None,
          "prompt_lookup_num_tokens": None, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0,
          "min_p": None, "top_h": None, "encoder_repetition_penalty": 1.0, "exponential_decay_length_penalty": None,
          "renormalize_logits": False, "remove_invalid_values": False, "watermarking_config": None,
          "output_scores": False, "output_logits": False, "return_dict_in_generate": False}
# Settings read, or meaningless here.
_TAKEN = {*_DEFAULTS, "max_new_tokens", "max_length", "eos_token_id", "pad_token_id", "bos_token_id",
          "decoder_start_token_id", "use_cache", "cache_implementation", "seed"}
_ADVICE = {
    "num_beams": "beam search is not implemented; decode with num_beams=1 (greedy or sampling)",
    "use_cache": ("the cell was ported without a key/value cache: port the model with aot_ops.from_torch_lm(model, "
                  "batch_size=..., max_length=...) to decode with the cache, or leave use_cache unset (this cell "
                  "runs the whole sequence each step, which gives the same tokens)"),
}


def generate(model, input_ids, attention_mask=None, *, max_new_tokens: int | None = None,
             generation_config: Any = None, streamer: Any = None, seed: int | None = None,
             **options: Any) -> ms.Tensor:
    """The input ids followed by the new tokens (int64, [batch, length]), as transformers' `generate` returns them.

    - `model`: a PortedLM (aot_ops.from_torch_lm: with its key/value cache), or a ported causal LM cell
      (from_torch, use_cache=False, a dynamic sequence length) taking input_ids and optionally attention_mask and
      position_ids, returning `logits`.
    - Greedy decoding (the default) or sampling (`do_sample=True`) with `temperature`, `top_k` (50 unless set, as
      transformers), `top_p` and `repetition_penalty`, processed as transformers' logits processors do; `seed`
      makes sampling reproducible (NumPy's generator: the same seed gives the same tokens, not torch's).
    - `eos_token_id` (one or several) and `pad_token_id`: a sequence that produced an end token continues with
      padding; decoding stops when every sequence has ended, or after `max_new_tokens` (or `max_length` in all).
    - `streamer`: an object with put() and end(), as transformers' TextStreamer and TextIteratorStreamer (put gets
      the prompt, then each step's new tokens, as torch tensors), or a callable called with each step's new tokens
      (a NumPy array, one per sequence).
    - `generation_config` (the model's) and keyword options as generate takes them; a setting that is not
      supported (beam search, constraints, ...) raises PortError naming it and what to do.
    """
    settings = _settings(generation_config, options, cached=isinstance(model, PortedLM))
    if seed is not None:
        settings["seed"] = seed
    ids = _int64(input_ids)
    if ids.ndim != 2:
        raise PortError(f"aot_ops.generate: input_ids must be [batch, length], got shape {ids.shape}")
    mask = _int64(attention_mask) if attention_mask is not None else np.ones_like(ids)
    if mask.shape != ids.shape:
        raise PortError(f"aot_ops.generate: attention_mask has shape {mask.shape}, input_ids {ids.shape}")
    max_new = max_new_tokens if max_new_tokens is not None else settings.get("max_new_tokens")
    if max_new is None and settings.get("max_length") is not None:
        max_new = settings["max_length"] - ids.shape[1]
    if max_new is None:
        raise PortError("aot_ops.generate: give max_new_tokens (how many tokens to decode)")
    eos = settings.get("eos_token_id")
    eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    pad = settings.get("pad_token_id")
    if pad is None and eos:
        pad = eos[0]  # as transformers does (with a warning)
    chooser = TokenChooser(Sampling(**{k: settings[k] for k in (*_DEFAULTS, "seed") if k in settings}))
    emit = _emitter(streamer)
    emit(ids, prompt=True)
    steps = (_CachedSteps(model, ids, mask, max_new, blocks=chooser.takes_most_likely)
             if isinstance(model, PortedLM) else _WholeSequenceSteps(model, ids, mask))
    padding = (mask != 0).argmax(1)  # left padding: the repetition penalty skips it, as generate's does
    sequences, unfinished = ids, np.ones(ids.shape[0], dtype=bool)
    try:
        for step in range(max_new):
            tokens = steps.decoded_ahead()
            if tokens is None:
                tokens = chooser.choose(steps.logits(), sequences, padding)
            if eos:
                tokens = np.where(unfinished, tokens, pad)
                unfinished &= ~np.isin(tokens, eos)
            sequences = np.concatenate([sequences, tokens[:, None]], axis=1)
            emit(tokens)
            if eos and not unfinished.any():
                break
            if step + 1 < max_new:
                steps.advance(tokens, max_new - step - 1)
    finally:
        emit(None)
    return ms.Tensor(sequences, ms.int64)


class _CachedSteps:
    """Decoding with the ported key/value cache: the prompt once, then one token per step, or, with `blocks` (the
    next token is the most likely one) and a PortedLM with a block cell, `tokens_per_call` tokens per call while as
    many remain to be decoded.

    A block call takes the last token chosen and returns the next `tokens_per_call`, having fed all but the last of
    them to the model: those are handed out one per step (decoded_ahead), and the steps that would feed them skip
    it. A sequence that ended inside a block went on decoding there, where transformers feeds it padding: its cache
    and tokens are its own (rows do not mix), and the tokens it shows are padding either way."""

    def __init__(self, lm: PortedLM, ids: np.ndarray, mask: np.ndarray, max_new: int, blocks: bool = False):
        batch, length = ids.shape
        if batch != lm.batch_size:
            raise PortError(f"aot_ops.generate: {lm.module_name} was ported with a cache for batch_size="
                            f"{lm.batch_size}; got {batch} sequences (port it again with from_torch_lm(..., "
                            f"batch_size={batch}))")
        if length + max_new > lm.max_length:
            raise PortError(f"aot_ops.generate: a prompt of {length} tokens and max_new_tokens={max_new} need "
                            f"{length + max_new} positions, but the key/value cache of {lm.module_name} holds "
                            f"max_length={lm.max_length}; decode fewer tokens or port it with from_torch_lm(..., "
                            f"max_length={length + max_new})")
        self.cell, self.length = lm.cell, length
        self.block, self.block_size = (lm.block if blocks else None), lm.tokens_per_call
        self.ahead: list[np.ndarray] = []  # tokens a block decoded, not yet handed out
        self.mask = np.zeros((batch, lm.max_length), np.int64)  # every cache position: 1 where attended
        self.mask[:, :length] = mask
        positions = np.where(mask == 0, 0, mask.cumsum(-1) - 1)
        self.next_position = positions[:, -1] + 1
        self._logits = self._run(ids, positions, np.arange(length))

    def _run(self, ids, positions, cache_positions, cell=None):
        # the mask over the positions written, this call's included (the cell attends to those alone)
        mask = self.mask[:, :cache_positions[-1] + 1]
        return (cell or self.cell)(ms.Tensor(ids, ms.int64), ms.Tensor(np.ascontiguousarray(mask), ms.int64),
                                   ms.Tensor(positions, ms.int64), ms.Tensor(cache_positions, ms.int64))

    def logits(self) -> np.ndarray:
        return _host(self._logits)

    def decoded_ahead(self) -> np.ndarray | None:
        """The next tokens if a block decoded them, else None (choose them from logits())."""
        return self.ahead.pop(0) if self.ahead else None

    def advance(self, tokens: np.ndarray, remaining: int) -> None:
        """Feeds `tokens` (one per sequence), `remaining` more tokens to decode after them."""
        if self.ahead:  # the block that decoded them fed them
            return
        # (a block fits: generate checked that the prompt and every token fed fit in the cache)
        fed = self.block_size if self.block is not None and remaining >= self.block_size else 1
        self.mask[:, self.length] = 1
        positions = self.next_position[:, None].copy()
        if fed == 1:
            self._logits = self._run(tokens[:, None], positions, np.array([self.length]))
        else:
            decoded = self._run(tokens[:, None], positions, np.array([self.length]), self.block).asnumpy()
            self.ahead = list(decoded.T)
            self.mask[:, self.length:self.length + fed] = 1
        self.next_position += fed
        self.length += fed


class _WholeSequenceSteps:
    """Decoding with a cell that has no cache: every step runs the whole sequence so far."""

    def __init__(self, cell, ids: np.ndarray, mask: np.ndarray):
        names = list(cell.input_names)
        unknown = [n for n in names if n not in ("input_ids", "attention_mask", "position_ids")]
        if "input_ids" not in names or unknown:
            raise PortError(f"aot_ops.generate: the cell takes {', '.join(names)}; a causal LM ported with input_ids "
                            "(and optionally attention_mask, position_ids) is needed, or a PortedLM "
                            "(aot_ops.from_torch_lm)")
        self.cell, self.names, self.ids, self.mask = cell, names, ids, mask

    def logits(self) -> np.ndarray:
        inputs = {"input_ids": self.ids, "attention_mask": self.mask,
                  "position_ids": np.where(self.mask == 0, 0, self.mask.cumsum(-1) - 1)}
        out = self.cell(*[ms.Tensor(inputs[n], ms.int64) for n in self.names])
        logits = out["logits"] if not isinstance(out, ms.Tensor) else out
        return _host(logits[:, -1, :])

    def decoded_ahead(self) -> None:
        return None

    def advance(self, tokens: np.ndarray, remaining: int) -> None:
        self.ids = np.concatenate([self.ids, tokens[:, None]], axis=1)
        self.mask = np.concatenate([self.mask, np.ones_like(self.mask[:, :1])], axis=1)


def _emitter(streamer: Any) -> Callable:
    """emit(tokens, prompt=False), emit(None) at the end: the streamer's protocol."""
    if streamer is None:
        return lambda tokens, prompt=False: None
    if hasattr(streamer, "put") and hasattr(streamer, "end"):
        def emit(tokens, prompt=False):
            if tokens is None:
                streamer.end()
            else:
                streamer.put(torch.from_numpy(np.array(tokens)))
        return emit
    if callable(streamer):
        return lambda tokens, prompt=False: None if tokens is None or prompt else streamer(np.array(tokens))
    raise TypeError(f"aot_ops.generate: streamer must have put() and end() (transformers' streamers) or be callable, "
                    f"got {type(streamer).__name__}")


def _settings(generation_config: Any, options: dict[str, Any], cached: bool) -> dict[str, Any]:
    """The generation settings (the config's, overridden by options, then transformers' defaults), refusing what
    is not supported."""
    settings: dict[str, Any] = {}
    if generation_config is not None:
        values = generation_config.to_dict() if hasattr(generation_config, "to_dict") else dict(generation_config)
        # None is transformers' "not set"
        settings.update({k: v for k, v in values.items() if (k in _FIXED or k in _TAKEN) and v is not None})
        settings.pop("use_cache", None)  # the config's default, not a request
    for key, value in options.items():
        if key not in _FIXED and key not in _TAKEN:
            raise PortError(f"aot_ops.generate: option {key}={value!r} is not supported; generate takes "
                            f"max_new_tokens, do_sample, temperature, top_k, top_p, repetition_penalty, seed, "
                            f"eos_token_id, pad_token_id, streamer and generation_config")
        if value is not None:
            settings[key] = value
    for key, default in _FIXED.items():
        value = settings.get(key, default)
        if value != default and not (default is None and value in ((), [])):
            advice = _ADVICE.get(key, f"leave it at {default!r}")
            raise PortError(f"aot_ops.generate: {key}={value!r} is not supported: {advice}")
    if settings.get("use_cache") and not cached:
        raise PortError(f"aot_ops.generate: use_cache=True is not supported here: {_ADVICE['use_cache']}")
    for key, default in _DEFAULTS.items():
        settings.setdefault(key, default)
    return settings


def _int64(value) -> np.ndarray:
    if isinstance(value, ms.Tensor):
        return value.asnumpy().astype(np.int64)
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy().astype(np.int64)
    return np.asarray(value, dtype=np.int64)


def _host(logits) -> np.ndarray:
    """A step's logits as float32 on the host (half-precision logits are widened)."""
    if logits.dtype != ms.float32:
        logits = logits.astype(ms.float32)
    return logits.asnumpy()
