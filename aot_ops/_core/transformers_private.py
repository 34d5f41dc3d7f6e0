"""The transformers internals aot_ops relies on, in one place. Each is private API (a leading underscore), checked on
transformers 5.24; a transformers upgrade that renames one breaks this module, and the tests named beside it say
so. It does not import transformers (an optional dependency, slow to import): each function takes the object it
reads.
"""
from __future__ import annotations

from typing import Any, Callable


def model_from_config(model_class: Any, config: Any, **kwargs) -> Any:
    """A model of the concrete class `model_class` (LlamaForCausalLM, ...) built from `config` alone, its weights
    neither read nor initialised from a checkpoint: what the Auto classes' public from_config calls. A concrete class
    has no public from_config. Without it load_pretrained(model_class=<a concrete class>) cannot build the model
    (_port/lm/pretrained.py; tests/test_pretrained.py)."""
    return model_class._from_config(config, **kwargs)


def weight_initialiser(model: Any) -> Callable[[Any], None] | None:
    """The model's initialisation of one of its submodules (`PreTrainedModel._init_weights(module)`), which
    transformers' own loading runs for the tensors a checkpoint lacks; None for a model without one. Without it the
    non-persistent buffers (rotary frequencies, embedding scales), which no checkpoint holds, could not be computed,
    and load_pretrained would refuse every model that has them (_port/lm/pretrained.py; tests/test_pretrained.py)."""
    return getattr(model, "_init_weights", None)


def attention_implementation(config: Any) -> Any:
    """The attention the model runs ("sdpa", "eager", ...; a dict for composite models): set when the model is
    built, and left out of config.to_dict(). Without it a port plan kept for one attention would be taken for a
    model running another (_port/plan_cache.py; tests/test_pretrained.py)."""
    return config._attn_implementation


def tensor_parallel_plan(model: Any) -> dict[str, str]:
    """The model's whole tensor-parallel plan, module path patterns from the model's root to styles ("colwise",
    "rowwise", "embedding_rowwise", "colwise_gather_output"): transformers builds it when the model is built, from
    the base model's `config.base_model_tp_plan` under its prefix and the head's class plan. {} for a model with
    none. Without it aot_ops.tensor_parallel would rebuild that merge itself (_port/tensor_parallel.py;
    tests/test_collectives.py)."""
    return dict(getattr(model, "_tp_plan", None) or {})


def no_split_classes(model: Any) -> list[str]:
    """The class names of a model's layers that transformers never splits across devices (`_no_split_modules`: its
    decoder layers), of the model or of a module inside it (the model peft wraps); [] for none. What
    aot_ops.shard takes as its units (_port/sharded.py; tests/test_sharded.py)."""
    for module in model.modules():
        names = getattr(module, "_no_split_modules", None)
        if names:
            return list(names)
    return []
