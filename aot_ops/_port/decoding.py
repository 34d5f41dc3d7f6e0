"""Greedy decoding with a ported causal language model, in MindSpore: what Hugging Face's
`model.generate(input_ids, attention_mask=..., max_new_tokens=n, do_sample=False)` computes.

    cell = aot_ops.from_torch(model, (), {"input_ids": ids, "attention_mask": mask, "position_ids": pos,
                                         "use_cache": False}, dynamic_shapes=...)   # a dynamic sequence length
    tokens = aot_ops.generate(cell, ids, attention_mask=mask, max_new_tokens=16,
                              generation_config=model.generation_config)

Each step runs the whole sequence through the ported model (no key/value cache: Hugging Face's cache objects are
not tensors torch.export can carry), picks the most likely next token, and stops as `generate` stops (every
sequence has produced its end token, or `max_new_tokens`). Inputs the cell takes are passed as `generate` passes them
to the model's forward: the attention mask grows by one column per step, and `position_ids`, when the cell takes
them, count the attended positions (left padding), as Hugging Face computes them.
"""
from __future__ import annotations

from typing import Any

import mindspore as ms
import numpy as np
from mindspore import ops

from .errors import PortError

_GREEDY = {"do_sample": False, "num_beams": 1, "num_beam_groups": 1, "penalty_alpha": None, "use_cache": False,
           "repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "num_return_sequences": 1,
           "bad_words_ids": None, "force_words_ids": None, "constraints": None, "suppress_tokens": None,
           "begin_suppress_tokens": None, "forced_bos_token_id": None, "forced_eos_token_id": None,
           "min_new_tokens": None, "min_length": 0, "assistant_model": None, "prompt_lookup_num_tokens": None}
# Settings that only matter when sampling (do_sample=True is refused anyway), and the limits generate understands.
_IGNORED = {"temperature", "top_k", "top_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "max_length",
            "max_new_tokens", "eos_token_id", "pad_token_id", "bos_token_id", "decoder_start_token_id",
            "cache_implementation", "output_scores", "output_logits", "return_dict_in_generate"}
_ADVICE = {
    "do_sample": "sampling draws random numbers, which cannot match torch's; decode greedily (do_sample=False)",
    "num_beams": "beam search is not implemented; decode greedily (num_beams=1)",
    "use_cache": ("the key/value cache (use_cache=True) cannot be ported: Hugging Face's cache objects are not "
                  "tensors torch.export carries; aot_ops.generate runs the whole sequence each step "
                  "(use_cache=False), which gives the same tokens"),
}


def generate(cell, input_ids, attention_mask=None, *, max_new_tokens: int | None = None,
             generation_config: Any = None, **options: Any) -> ms.Tensor:
    """The input ids followed by up to `max_new_tokens` greedily decoded tokens (int64, shape [batch, length]),
    as torch's `generate(..., do_sample=False)` returns them.

    - `cell`: a ported causal LM (aot_ops.from_torch) returning `logits` (a ModelOutput or a dict), ported with a
      dynamic sequence length (`dynamic_shapes`), so that one compiled GRAPH_MODE graph serves every length;
      its inputs are any of input_ids, attention_mask and position_ids.
    - `generation_config` (the model's `generation_config`) and keyword options as `generate` takes them: the end
      and padding tokens are read from them; options that are not greedy decoding (do_sample=True, num_beams > 1,
      use_cache=True, a repetition penalty...) raise PortError naming the option and what to do.
    """
    settings = _settings(generation_config, options)
    max_new = max_new_tokens if max_new_tokens is not None else settings.get("max_new_tokens")
    if max_new is None:
        raise PortError("aot_ops.generate: give max_new_tokens (how many tokens to decode)")
    eos = settings.get("eos_token_id")
    eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    pad = settings.get("pad_token_id")
    if pad is None and eos:
        pad = eos[0]  # as transformers does (with a warning)
    names = [spec.name for spec in cell._spec.inputs]
    unknown = [n for n in names if n not in ("input_ids", "attention_mask", "position_ids")]
    if "input_ids" not in names or unknown:
        raise PortError(f"aot_ops.generate: the cell takes {', '.join(names)}; a causal LM ported with input_ids "
                        "(and optionally attention_mask, position_ids) is needed")
    ids = _int64(input_ids)
    mask = _int64(attention_mask) if attention_mask is not None else ops.ones_like(ids)
    unfinished = np.ones(ids.shape[0], dtype=bool)
    for _ in range(max_new):
        inputs = {"input_ids": ids, "attention_mask": mask}
        if "position_ids" in names:
            inputs["position_ids"] = _position_ids(mask)
        out = cell(*[inputs[n] for n in names])
        logits = out["logits"] if not isinstance(out, ms.Tensor) else out
        next_tokens = ops.argmax(logits[:, -1, :], dim=-1).astype(ms.int64).asnumpy()
        if eos:
            next_tokens = np.where(unfinished, next_tokens, pad)
            unfinished &= ~np.isin(next_tokens, eos)
        ids = ops.concat([ids, ms.Tensor(next_tokens[:, None], ms.int64)], axis=1)
        mask = ops.concat([mask, ops.ones((mask.shape[0], 1), ms.int64)], axis=1)
        if eos and not unfinished.any():
            break
    return ids


def _settings(generation_config: Any, options: dict[str, Any]) -> dict[str, Any]:
    """The generation settings (the config's, overridden by options), refusing what greedy decoding is not."""
    settings: dict[str, Any] = {}
    if generation_config is not None:
        values = generation_config.to_dict() if hasattr(generation_config, "to_dict") else dict(generation_config)
        # None is transformers' "not set": the default, which for every key here is greedy decoding's
        settings.update({k: v for k, v in values.items() if (k in _GREEDY or k in _IGNORED) and v is not None})
        if settings.get("use_cache"):
            settings["use_cache"] = False  # the config's default; only an explicit use_cache=True is refused
    for key, value in options.items():
        if key not in _GREEDY and key not in _IGNORED:
            raise PortError(f"aot_ops.generate: option {key}={value!r} is not supported; greedy decoding takes "
                            f"max_new_tokens, eos_token_id, pad_token_id and generation_config")
        if value is not None:
            settings[key] = value
    for key, greedy in _GREEDY.items():
        value = settings.get(key, greedy)
        if value != greedy and not (greedy is None and value in ((), [])):
            advice = _ADVICE.get(key, f"greedy decoding leaves it at {greedy!r}")
            raise PortError(f"aot_ops.generate: {key}={value!r} is not supported: {advice}")
    return settings


def _int64(value) -> ms.Tensor:
    if isinstance(value, ms.Tensor):
        return value.astype(ms.int64)
    return ms.Tensor(np.asarray(value), ms.int64)


def _position_ids(mask: ms.Tensor) -> ms.Tensor:
    """Positions counting attended tokens (0 on padding), as transformers' generate computes them."""
    counted = mask.asnumpy().cumsum(-1) - 1
    return ms.Tensor(np.where(mask.asnumpy() == 0, 0, counted), ms.int64)
