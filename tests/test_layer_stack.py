"""Alike layers exported as two and copied into the others' places (aot_ops/_port/trace/layer_stack.py and
layer_copies.py): the expanded graph computes what the whole export computes, for several decoder families; layers
that differ are exported whole; the user's module and configuration are never changed.
(Checked the same way once, beyond the suite: Mistral, Qwen3, Gemma, Phi-3, GPT-NeoX, StableLM, OLMo, OLMo 2,
Cohere, Starcoder2, GPT-J, CodeGen, Falcon's new architecture, Granite equal; GPT-Neo's local/global layers,
Qwen2's sliding-window layers and Mixtral's routed experts exported whole.)"""
from __future__ import annotations

import pytest
import torch
import transformers

import aot_ops
from aot_ops._port.lm.kv_cache import StaticCacheLM, example_inputs
from aot_ops._port.trace import layer_stack
from aot_ops._port.trace.export import Inputs, export
from aot_ops._port.trace.layer_copies import SHALLOW, indexed_name
from aot_ops._port.trace.layers import layer_of
from aot_ops.tools.random_checkpoint import write_random_checkpoint

LENGTH = 16
FAMILIES = {  # 4 layers: two exported, two copied
    "llama": (transformers.LlamaConfig, dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                                             num_key_value_heads=2, intermediate_size=128, vocab_size=100)),
    "gpt2": (transformers.GPT2Config, dict(n_embd=64, n_layer=4, n_head=4, vocab_size=100, bos_token_id=1,
                                           eos_token_id=2)),
    "opt": (transformers.OPTConfig, dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, ffn_dim=128,
                                         vocab_size=100, word_embed_proj_dim=64)),
    "bloom": (transformers.BloomConfig, dict(hidden_size=64, n_layer=4, n_head=4, vocab_size=100)),  # ALiBi
}


def lm(kind, settings, **changes):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(kind(**settings, **changes)).eval()
    return StaticCacheLM(model, 1, LENGTH, written_part=True).eval()


def exporting(wrapper):
    """export.py's export of a module with the inputs and dynamic sizes of from_torch_lm's wrapper."""
    seq = torch.export.Dim("seq", min=1, max=LENGTH)
    attended = torch.export.Dim("attended", min=1, max=LENGTH)
    dynamic = {"input_ids": {1: seq}, "attention_mask": {1: attended}, "position_ids": {1: seq},
               "cache_position": {0: seq}}
    return lambda module: export(module, Inputs((), example_inputs(1, LENGTH)), dynamic, training=False,
                                 backward=False, rewrite_in_place=True)


def whole(wrapper):
    return exporting(wrapper)(wrapper).program


def fingerprint(wrapper):
    """What the port must leave as it was: the module tree, the stack's length, the configuration's count."""
    config = wrapper.model.config
    return ([(name, type(m)) for name, m in wrapper.named_modules()], config.num_hidden_layers,
            {k: id(v) for k, v in wrapper.state_dict(keep_vars=True).items()})


def prefill_then_step(program, vocab):
    """Logits of a 5-token prompt, then of one token reading the cache every layer wrote, and the caches."""
    module = program.module()
    ids = torch.randint(0, vocab, (1, 6), generator=torch.Generator().manual_seed(1))
    outputs = [module(input_ids=ids[:, :5], attention_mask=torch.ones(1, 5, dtype=torch.long),
                      position_ids=torch.arange(5)[None], cache_position=torch.arange(5)),
               module(input_ids=ids[:, 5:], attention_mask=torch.ones(1, 6, dtype=torch.long),
                      position_ids=torch.tensor([[5]]), cache_position=torch.tensor([5]))]
    return outputs, {name: buffer.clone() for name, buffer in module.named_buffers() if "_cache_" in name}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_expanded_graph_computes_what_the_whole_export_does(family, monkeypatch):
    kind, settings = FAMILIES[family]
    wrapper = lm(kind, settings)
    stack, why_none = layer_stack.search(wrapper)
    assert stack is not None and stack.count == 4, why_none
    reference = whole(wrapper)
    before = fingerprint(wrapper)
    traced = []
    real_export = torch.export.export

    def spy(module, *args, **kwargs):
        traced.append((len(module.get_submodule(stack.path)), module.model.config.num_hidden_layers,
                       fingerprint(wrapper)))
        return real_export(module, *args, **kwargs)

    monkeypatch.setattr(torch.export, "export", spy)
    outcome = layer_stack.export_as_two(wrapper, stack, exporting(wrapper))
    assert outcome.expanded and outcome.why_whole is None
    expanded = outcome.exported.program
    # traced once, a copy with two layers counted as two, while the user's module stayed as it was
    assert traced == [(SHALLOW, SHALLOW, before)]
    assert fingerprint(wrapper) == before
    # the same inputs and outputs, in the same order: every layer's weights, every layer's cache writes
    assert [(s.kind, s.target) for s in expanded.graph_signature.input_specs] == \
        [(s.kind, s.target) for s in reference.graph_signature.input_specs]
    assert [(s.kind, s.target) for s in expanded.graph_signature.output_specs] == \
        [(s.kind, s.target) for s in reference.graph_signature.output_specs]
    ours, our_caches = prefill_then_step(expanded, 100)
    theirs, their_caches = prefill_then_step(reference, 100)
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)
    assert our_caches.keys() == their_caches.keys() and len(our_caches) == 8
    for name in their_caches:
        assert their_caches[name].abs().sum() > 0, name  # written
        assert torch.equal(our_caches[name], their_caches[name]), name
    copied = [n for n in expanded.graph.nodes if layer_of(n) == f"{stack.path}.3"]
    assert copied and all(dict(n.meta["nn_module_stack"]) for n in copied)  # errors name the copy's layer


def test_layers_that_differ_are_exported_whole():
    kind, settings = FAMILIES["llama"]
    wrapper = lm(kind, settings)
    wrapper.model.model.layers[2].self_attn.scaling *= 2  # one layer computing otherwise
    stack, why_none = layer_stack.search(wrapper)
    assert stack is None and "layer 2 differs from layer 1 in self_attn:scaling" in why_none
    # alternating sliding-window and full attention (Gemma 2): layers told apart by their type
    gemma = transformers.Gemma2ForCausalLM(transformers.Gemma2Config(
        hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
        vocab_size=100, head_dim=16, sliding_window=32))
    stack, why_none = layer_stack.search(gemma)
    assert stack is None and "layer_type" in why_none  # each layer's attention type, from the configuration


def test_layers_the_graph_cannot_copy_are_exported_whole():
    """Falcon's layers hold constants torch.export lifts per layer: found alike, refused on the graph: the outcome
    says so, and the port exports the module whole (the same graph as without the stack)."""
    wrapper = lm(transformers.FalconConfig, dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                                                  vocab_size=100, new_decoder_architecture=False, multi_query=True))
    stack, _ = layer_stack.search(wrapper)
    assert stack is not None
    before = fingerprint(wrapper)
    outcome = layer_stack.export_as_two(wrapper, stack, exporting(wrapper))
    assert not outcome.expanded and "cannot be copied: layer 1 reads" in outcome.why_whole
    assert fingerprint(wrapper) == before
    # the port then exports it whole: the cell computes the wrapper's logits
    from support import to_ms, to_torch

    from aot_ops._port import port

    example = example_inputs(1, LENGTH)
    ported = port(wrapper, (), example, no_training="generation only", export_two_layers=True, jit=False)
    logits = to_torch(ported(**{k: to_ms(v) for k, v in example.items()}))
    with torch.no_grad():
        torch.testing.assert_close(logits, wrapper(**example), rtol=1e-5, atol=1e-5)
    assert fingerprint(wrapper) == before


def test_a_layer_tensor_is_named_by_its_index():
    naming = indexed_name("model.layers.0.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight")
    assert naming(7) == "model.layers.7.mlp.up_proj.weight"
    assert indexed_name("key_cache_0", "key_cache_1")(12) == "key_cache_12"
    assert indexed_name("h.0.b.0", "h.1.b.1") is None  # two numbers change: not one index
    assert indexed_name("h.0.w", "h.2.w") is None
    assert indexed_name("h.0.w", "g.1.w") is None


def test_from_pretrained_exports_two_layers_and_generates_as_torch(tmp_path, monkeypatch):
    monkeypatch.setenv("AOT_OPS_PORT_CACHE", "0")
    config = transformers.LlamaConfig(hidden_size=64, num_hidden_layers=5, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=128, vocab_size=300,
                                      initializer_range=0.3)
    folder = write_random_checkpoint(tmp_path / "llama", config, dtype=torch.float32)
    traced = []
    real_export = torch.export.export

    def spy(module, *args, **kwargs):
        traced.append(len(module.model.model.layers))
        return real_export(module, *args, **kwargs)

    monkeypatch.setattr(torch.export, "export", spy)
    ported = aot_ops.from_pretrained(folder, max_length=20)
    assert traced == [SHALLOW]
    ids = torch.randint(2, 300, (1, 6), generator=torch.Generator().manual_seed(0))
    from support import to_ms, to_torch

    tokens = to_torch(aot_ops.generate(ported, to_ms(ids), max_new_tokens=8))
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        expected = reference.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False,
                                      pad_token_id=0)
    assert tokens.tolist() == expected.tolist()
    assert len(set(tokens[0, 6:].tolist())) > 2


def test_a_failure_of_the_copying_itself_is_raised_as_it_is(monkeypatch):
    """An error the copying does not expect (a bug, or a graph it was not written for) is raised with its own type
    and traceback: only NotExpandable means "export the module whole"."""
    import aot_ops._port.trace.layer_stack as stage

    kind, settings = FAMILIES["llama"]
    wrapper = lm(kind, settings)
    stack, _ = layer_stack.search(wrapper)
    before = fingerprint(wrapper)

    def broken(*args):
        raise KeyError("unexpected")

    monkeypatch.setattr(stage, "expand", broken)
    with pytest.raises(KeyError, match="unexpected"):
        layer_stack.export_as_two(wrapper, stack, exporting(wrapper))
    assert fingerprint(wrapper) == before
