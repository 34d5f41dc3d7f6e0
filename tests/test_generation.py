"""aot_ops.from_torch_lm + aot_ops.generate: causal language models decoding with their key/value cache, against
transformers' generate: greedy tokens for the zoo's decoder families and more (per node and fused, both modes),
sampling (the processed scores equal transformers' logits processors; a seed makes it reproducible), end tokens,
streaming, and the refusals."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
import torch
import transformers

import aot_ops
from aot_ops._core.convert import torch_view
from aot_ops._port.lm.sampling import Sampling, TokenChooser
from aot_ops.tools.zoo import FAMILIES as ZOO, _SMALL_DECODER, build_model
from support import QUICK, to_ms, to_torch
from test_transformers_use import decoder, left_padded_prompt

NEW_TOKENS = 12
MAX_LENGTH = 24

# Decoder families beyond the zoo's four, built the zoo's way (small config, random weights).
EXTRA = {
    "mistral": ("MistralForCausalLM", "MistralConfig", dict(num_key_value_heads=2)),
    "phi3": ("Phi3ForCausalLM", "Phi3Config", dict(num_key_value_heads=2)),
    # the zoo's Bloom (ALiBi, no positions) with untied embeddings: tied, this tiny one repeats one token
    "bloom": ("BloomForCausalLM", "BloomConfig", dict(tie_word_embeddings=False)),
    # multi-query attention: one key/value head, whatever the config's num_kv_heads says
    "falcon": ("FalconForCausalLM", "FalconConfig", dict(new_decoder_architecture=False, multi_query=True)),
}
FAMILIES = ["llama", "gpt2", "qwen2", "gpt_neox", "bloom", "mixtral", "mistral", "phi3", "falcon"]


def language_model(name: str) -> torch.nn.Module:
    if name not in EXTRA:
        return decoder(name)
    cls, config, extra = EXTRA[name]
    model = build_model(cls, config, use_cache=False, **{**_SMALL_DECODER, **extra})
    torch.manual_seed(0)
    with torch.no_grad():  # larger weights than the default initialisation: decodings that tell models apart
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(std=0.3)
    return model


class PortedLMs(dict):
    """Each (family, fuse) ported once per module, on first use."""

    def __missing__(self, key):
        name, fuse = key
        model = self[name, not fuse][0] if (name, not fuse) in self else language_model(name)
        self[key] = model, aot_ops.from_torch_lm(model, batch_size=2, max_length=MAX_LENGTH, fuse=fuse)
        return self[key]


@pytest.fixture(scope="module")
def ported():
    return PortedLMs()


def assert_torchs_greedy_tokens(model, lm, modes=(ms.PYNATIVE_MODE, ms.GRAPH_MODE), times: int = 1,
                                varied: bool = False, **options) -> None:
    """`lm` decodes the left-padded prompt greedily into torch's generate tokens in each of `modes`, `times` in a
    row (a second generation reuses the cache: what the first left there must not matter); `varied`: torch's own
    decoding must not repeat one token (a decoding that could tell a wrong model). `options` go to generate."""
    ids, mask = left_padded_prompt()
    expected = model.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False).tolist()
    if varied:
        assert len(set(expected[0][6:])) > 3, "the decoding should not repeat one token"
    try:
        for mode in modes:
            ms.set_context(mode=mode)
            for _ in range(times):
                tokens = aot_ops.generate(lm, to_ms(ids), attention_mask=to_ms(mask), max_new_tokens=NEW_TOKENS,
                                          **options)
                assert to_torch(tokens).tolist() == expected, f"mode {mode}"
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


CASES = [(name, fuse) for name in FAMILIES for fuse in (False, True)]


@pytest.mark.parametrize("name,fuse", [pytest.param(n, f, marks=() if (n, f) == ("llama", True) else pytest.mark.slow)
                                       for n, f in CASES], ids=[f"{n}-{'fused' if f else 'per_node'}" for n, f in CASES])
def test_greedy_tokens_equal_torchs_generate_with_the_cache(name, fuse, ported):
    model, lm = ported[name, fuse]
    modes = (ms.PYNATIVE_MODE,) if QUICK else (ms.PYNATIVE_MODE, ms.GRAPH_MODE)
    assert_torchs_greedy_tokens(model, lm, modes, times=2, varied=True, generation_config=model.generation_config)


def test_the_program_writes_the_cache_where_it_lives(ported):
    """The fused step returns the logits alone and writes every layer's keys and values into the cache Parameters
    itself (in place: transformers' index_copy_), in both modes: after a prompt and a step they hold what torch's
    StaticCache holds."""
    from aot_ops._port.lm.kv_cache import StaticCacheLM

    model, lm = ported["llama", True]
    fused = lm.cell.mode_programs["eval"].fused
    caches = [key for key, _ in lm.cell.parameters_and_names() if "_cache_" in key]
    assert sorted(fused.inference_writes) == sorted(caches) and len(caches) == 2 * model.config.num_hidden_layers
    assert fused.inference.num_outputs == 1 and fused.inference.attrs["program_nodes"].count("writes_input") == \
        len(caches)
    ids, mask = left_padded_prompt()
    # other tokens than the other tests' prompt, whose keys and values earlier generations left in the cache
    ids = torch.randint(2, model.config.vocab_size, ids.shape, generator=torch.Generator().manual_seed(3))
    length = ids.shape[1]
    full_mask = torch.zeros(2, MAX_LENGTH, dtype=torch.long)
    full_mask[:, :length] = mask
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    calls = [(ids, full_mask.clone(), positions, torch.arange(length))]
    full_mask[:, length] = 1
    calls.append((torch.tensor([[5], [9]]), full_mask, positions[:, -1:] + 1, torch.tensor([length])))
    reference = StaticCacheLM(model, 2, MAX_LENGTH).eval()
    with torch.no_grad():
        for call in calls:
            reference(*call)
    try:
        for mode in (ms.PYNATIVE_MODE, ms.GRAPH_MODE):
            ms.set_context(mode=mode)
            for call in calls:
                lm.cell(*(to_ms(t) for t in call))
            for key in caches:  # the positions written (the others hold what earlier generations left)
                torch.testing.assert_close(to_torch(getattr(lm.cell, key))[:, :, :length + 1],
                                           getattr(reference, key)[:, :, :length + 1], rtol=1e-5, atol=1e-5,
                                           msg=f"{key}, mode {mode}")
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_half_precision_model_generates_torchs_tokens_in_both_modes(dtype):
    """The cache in bfloat16 (MindSpore's CPU Assign has no bfloat16 kernel: the cell copies in place instead) and
    in float16; the logits are widened on the host to choose the next token."""
    model = language_model("llama").to(dtype)
    lm = aot_ops.from_torch_lm(model, batch_size=2, max_length=MAX_LENGTH, fuse=True)
    assert_torchs_greedy_tokens(model, lm, varied=True, generation_config=model.generation_config)
    assert lm.cell.key_cache_0.dtype == {torch.bfloat16: ms.bfloat16, torch.float16: ms.float16}[dtype]


def test_end_tokens_stop_each_sequence_and_pad_it(ported):
    model, lm = ported["llama", True]
    ids, mask = left_padded_prompt()
    free = model.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False)
    eos = [int(free[0, 9]), int(free[1, 11])]  # tokens each sequence produces early on
    expected = model.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=eos,
                              pad_token_id=0)
    tokens = aot_ops.generate(lm, to_ms(ids), attention_mask=to_ms(mask), max_new_tokens=NEW_TOKENS, eos_token_id=eos,
                              pad_token_id=0)
    assert to_torch(tokens).tolist() == expected.tolist()
    assert tokens.shape[1] < ids.shape[1] + NEW_TOKENS  # stopped when both had ended


SETTINGS = [dict(temperature=0.7), dict(top_k=5), dict(top_p=0.8), dict(repetition_penalty=1.3),
            dict(temperature=1.5, top_k=20, top_p=0.9, repetition_penalty=0.8), dict()]


@pytest.mark.parametrize("settings", SETTINGS, ids=[",".join(f"{k}={v}" for k, v in s.items()) or "defaults"
                                                    for s in SETTINGS])
def test_processed_scores_equal_transformers_logits_processors(settings):
    model = language_model("llama")
    ids, mask = left_padded_prompt()
    ids = torch.cat([ids, torch.tensor([[7, 7], [9, 3]])], dim=1)  # repeated tokens after the prompt
    mask = torch.cat([mask, torch.ones(2, 2, dtype=mask.dtype)], dim=1)
    # generate's own preparation: the model's config, the call's settings, transformers' defaults
    config, _ = model._prepare_generation_config(model.generation_config, do_sample=True, **settings)
    processors = model._get_logits_processor(config, input_ids_seq_length=ids.shape[1], encoder_input_ids=ids,
                                              logits_processor=transformers.LogitsProcessorList(), device="cpu",
                                              model_kwargs={"attention_mask": mask})
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 99, generator=gen) * 3
    expected = processors(ids, logits.clone())
    defaults = {"temperature": 1.0, "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.0}
    chooser = TokenChooser(Sampling(do_sample=True, **{**defaults, **settings}))
    ours = chooser.process(logits.numpy(), ids.numpy(), padding=(mask != 0).int().argmax(1).numpy())
    assert np.array_equal(np.isinf(ours), torch.isinf(expected).numpy())
    kept = ~np.isinf(ours)
    np.testing.assert_allclose(ours[kept], expected.numpy()[kept], rtol=1e-6, atol=1e-6)


def test_sampling_is_reproducible_with_a_seed(ported):
    model, lm = ported["llama", True]
    ids, mask = left_padded_prompt()
    options = dict(attention_mask=to_ms(mask), max_new_tokens=NEW_TOKENS, do_sample=True, temperature=1.2, top_p=0.95,
                   generation_config=model.generation_config)
    first = to_torch(aot_ops.generate(lm, to_ms(ids), seed=3, **options))
    again = to_torch(aot_ops.generate(lm, to_ms(ids), seed=3, **options))
    other = to_torch(aot_ops.generate(lm, to_ms(ids), seed=4, **options))
    greedy = to_torch(aot_ops.generate(lm, to_ms(ids), attention_mask=to_ms(mask), max_new_tokens=NEW_TOKENS))
    assert torch.equal(first, again)
    assert not torch.equal(first, other) and not torch.equal(first, greedy)
    assert torch.equal(first[:, :ids.shape[1]], ids) and int(first.max()) < 99


def test_the_streamer_yields_the_tokens_as_they_come(ported):
    _model, lm = ported["llama", True]
    ids, mask = left_padded_prompt()

    class Recorder:  # transformers' streamer protocol (TextStreamer, TextIteratorStreamer)
        def __init__(self):
            self.puts, self.ended = [], 0

        def put(self, value):
            self.puts.append(value.clone())

        def end(self):
            self.ended += 1

    recorder, called = Recorder(), []
    tokens = to_torch(aot_ops.generate(lm, to_ms(ids), attention_mask=to_ms(mask), max_new_tokens=5,
                                       streamer=recorder))
    assert recorder.ended == 1 and torch.equal(recorder.puts[0], ids)  # the prompt first, as generate puts it
    assert torch.equal(torch.stack(recorder.puts[1:], 1), tokens[:, ids.shape[1]:])
    aot_ops.generate(lm, to_ms(ids), attention_mask=to_ms(mask), max_new_tokens=5, streamer=called.append)
    assert np.array_equal(np.stack(called, 1), tokens[:, ids.shape[1]:].numpy())


def test_what_the_cache_cannot_hold_is_refused_with_what_to_do(ported):
    _model, lm = ported["llama", True]
    ids, mask = left_padded_prompt()
    with pytest.raises(aot_ops.PortError, match=r"need 25 positions, but the key/value cache .* max_length=24; .*"
                                                r"from_torch_lm\(\.\.\., max_length=25\)"):
        aot_ops.generate(lm, to_ms(ids), attention_mask=to_ms(mask), max_new_tokens=19)
    with pytest.raises(aot_ops.PortError, match=r"batch_size=2; got 1 sequences"):
        aot_ops.generate(lm, to_ms(ids[:1]), max_new_tokens=2)
    with pytest.raises(aot_ops.PortError, match=r"num_beams=2 is not supported: beam search"):
        aot_ops.generate(lm, to_ms(ids), attention_mask=to_ms(mask), max_new_tokens=2, num_beams=2)
    with pytest.raises(aot_ops.PortError, match=r"no training graph"):
        lm.cell.set_train(True)
    tokens = aot_ops.generate(lm, to_ms(ids), attention_mask=to_ms(mask), max_new_tokens=2)  # still works
    assert tokens.shape == (2, 8)


def test_a_recurrent_cache_is_refused_with_its_reason():
    """RecurrentGemma keeps recurrent states (transformers' LinearAttentionLayer), written by different Python for
    the prompt and for each new token: not a static key/value cache one graph can carry."""
    model, _ = ZOO["recurrent_gemma"].build()
    with pytest.raises(aot_ops.PortError, match=r"RecurrentGemmaForCausalLM cannot hold transformers' StaticCache: "
                                                r".*LinearAttentionLayer"):
        aot_ops.from_torch_lm(model, batch_size=1, max_length=8)


@pytest.mark.slow  # AOTInductor compiles the one-token step (seconds to a minute, then from the build cache)
def test_compiled_one_token_step_decodes_like_torch():
    from aot_ops._port.programs.compiled import is_compiled

    model = language_model("qwen2")
    lm = aot_ops.from_torch_lm(model, batch_size=2, max_length=MAX_LENGTH, fuse="compile")
    assert_torchs_greedy_tokens(model, lm)
    program = lm.cell.mode_programs["eval"].program("inference")
    # compiled for the one-token step; the interpreted nodes are kept for the prompt's sizes
    assert is_compiled(program) and "program_nodes" in program.attrs
    # the package writes the cache itself (the token's keys and values), the prompt's nodes write it in place
    assert program.attrs["program_package_writes"] and program.num_outputs == 1 and program.attrs["program_writes"]
    flat, shapes = list(program.attrs["program_input_shapes"]), []
    while flat:
        rank = flat.pop(0)
        shapes.append(tuple(flat[:rank]))
        del flat[:rank]
    # the step (a token a call), attending to any number of positions: the mask's width a dynamic size of the package
    mask_input, dim, low, high = program.attrs["program_input_ranges"]
    assert (2, 1) in shapes and shapes[mask_input][0] == 2 and dim == 1 and low <= 2 and high == MAX_LENGTH, shapes


BLOCK = 4  # greedy tokens a call of the block ports below


class BlockLMs(dict):
    """The llama decoder ported with a block of BLOCK greedy steps a call, by fuse: on first use, once per module."""

    def __missing__(self, fuse):
        model = language_model("llama")
        self[fuse] = model, aot_ops.from_torch_lm(model, batch_size=2, max_length=MAX_LENGTH, fuse=fuse,
                                                  tokens_per_call=BLOCK, share_weights=False)
        return self[fuse]


@pytest.fixture(scope="module")
def blocks():
    return BlockLMs()


class CountedCalls:
    """Stands for lm.block while inside, counting its calls."""

    def __init__(self, lm):
        self.lm, self.block, self.calls = lm, lm.block, 0

    def __call__(self, *args):
        self.calls += 1
        return self.block(*args)

    def __enter__(self):
        self.lm.block = self
        return self

    def __exit__(self, *exc):
        self.lm.block = self.block


def test_a_block_of_greedy_steps_a_call_gives_torchs_tokens(blocks):
    """tokens_per_call=4: after the prompt's token, blocks of 4 while 4 remain, then single steps (12 new tokens:
    the prompt's, two blocks, 3 steps), in both modes, twice (what a generation left in the cache must not matter);
    the block cell holds the step cell's Parameters (one cache, one set of weights), and the torch module keeps its
    own tensors (share_weights=False)."""
    model, lm = blocks[True]
    modes = (ms.PYNATIVE_MODE,) if QUICK else (ms.PYNATIVE_MODE, ms.GRAPH_MODE)
    with CountedCalls(lm) as counted:
        assert_torchs_greedy_tokens(model, lm, modes, times=2, varied=True, generation_config=model.generation_config)
    assert counted.calls == 2 * 2 * len(modes)
    for key, parameter in lm.cell.parameters_dict().items():
        assert lm.block.parameters_dict()[key] is parameter, key
    weight = model.model.layers[0].self_attn.q_proj.weight
    cell_weight = lm.cell.parameters_dict()["model.model.layers.0.self_attn.q_proj.weight"]
    assert weight.data_ptr() != torch_view(cell_weight).data_ptr() and not hasattr(weight, "_aot_ops_owner")


def test_the_block_writes_each_step_into_the_cache_in_place(blocks):
    """Each of the block's steps writes every layer's keys and values where the cache lives: the chain of writes of
    one buffer made in place as a whole (buffer_writes.py), the program returning the tokens alone."""
    model, lm = blocks[True]
    fused = lm.block.mode_programs["eval"].fused
    caches = [key for key, _ in lm.block.parameters_and_names() if "_cache_" in key]
    assert len(caches) == 2 * model.config.num_hidden_layers
    assert fused.inference.num_outputs == 1
    assert fused.inference.attrs["program_nodes"].count("writes_input") == BLOCK * len(caches)


def test_end_tokens_inside_a_block_stop_and_pad_as_torch(blocks):
    model, lm = blocks[True]
    ids, mask = left_padded_prompt()
    free = model.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False)
    eos = [int(free[0, 8]), int(free[1, 10])]  # the 3rd and 5th new tokens: inside the first block
    expected = model.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=eos,
                              pad_token_id=0)
    tokens = aot_ops.generate(lm, to_ms(ids), attention_mask=to_ms(mask), max_new_tokens=NEW_TOKENS, eos_token_id=eos,
                              pad_token_id=0)
    assert to_torch(tokens).tolist() == expected.tolist()


def test_sampling_with_a_block_port_decodes_a_token_a_call(blocks, ported):
    """Sampling and the repetition penalty choose from processed logits: the block is not used, and the tokens are
    those of the port without a block, with the same seed."""
    model, lm = blocks[True]
    _, single = ported["llama", True]
    ids, mask = left_padded_prompt()
    with CountedCalls(lm) as counted:
        for options in (dict(do_sample=True, temperature=1.2, seed=3), dict(repetition_penalty=1.3)):
            ours = aot_ops.generate(lm, to_ms(ids), attention_mask=to_ms(mask), max_new_tokens=NEW_TOKENS, **options)
            theirs = aot_ops.generate(single, to_ms(ids), attention_mask=to_ms(mask), max_new_tokens=NEW_TOKENS,
                                      **options)
            assert to_torch(ours).tolist() == to_torch(theirs).tolist(), options
    assert counted.calls == 0


def test_a_block_that_cannot_fit_is_refused():
    model = language_model("llama")
    with pytest.raises(ValueError, match=r"tokens_per_call must be a positive int, got 0"):
        aot_ops.from_torch_lm(model, max_length=8, tokens_per_call=0)
    with pytest.raises(ValueError, match=r"tokens_per_call=8 needs max_length >= 10 .* got 9"):
        aot_ops.from_torch_lm(model, max_length=9, tokens_per_call=8)


@pytest.mark.slow  # AOTInductor compiles the block (seconds to a minute, then from the build cache)
def test_a_compiled_block_gives_torchs_tokens(blocks):
    from aot_ops._port.programs.compiled import is_compiled

    model, lm = blocks["compile"]
    with CountedCalls(lm) as counted:
        assert_torchs_greedy_tokens(model, lm)
    assert counted.calls == 4
    # the package alone runs the block (no nodes to fall back on), the mask's width a dynamic size: the blocks above
    # attended to 7-11 positions
    program = lm.block.mode_programs["eval"].program("inference")
    assert is_compiled(program) and "program_nodes" not in program.attrs
    assert program.attrs["program_input_ranges"][1:] == [1, 2, MAX_LENGTH - BLOCK + 1]
    # a width beyond that range is refused before the package reads it, naming what it was compiled for
    tokens, positions = torch.zeros(2, 1, dtype=torch.long), torch.tensor([MAX_LENGTH - 1])
    too_wide = (tokens, torch.ones(2, MAX_LENGTH, dtype=torch.long), tokens, positions)
    with pytest.raises(RuntimeError, match=rf"compiled for Long of shape \[2, 2\.\.{MAX_LENGTH - BLOCK + 1}\]"):
        lm.block(*(to_ms(t) for t in too_wide))
