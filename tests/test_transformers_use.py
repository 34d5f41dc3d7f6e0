"""What people do with Hugging Face transformers models through from_torch: keyword inputs and ModelOutputs, a
model saved with save_pretrained and loaded back, greedy decoding with a dynamic sequence length, fine-tuning a
classifier in GRAPH_MODE, and the clear refusals (a random attention in training, the key/value cache, sampling)."""
from __future__ import annotations

import copy

import mindspore as ms
import pytest
import torch
import transformers

import aot_ops
from aot_ops.tools import zoo
from support import to_ms, to_torch


def _batch_ms(batch: dict) -> dict:
    return {k: to_ms(v) for k, v in batch.items()}


def test_keyword_inputs_fixed_values_and_model_outputs(mode):
    model, batch = zoo.FAMILIES["bert"].build()
    cell = aot_ops.from_torch(model, (batch["input_ids"],), {"attention_mask": batch["attention_mask"],
                                                              "labels": batch["labels"], "return_dict": True})
    assert cell.input_names == ("input_ids", "attention_mask", "labels")
    expected = model(**batch)
    for out in (cell(**_batch_ms(batch)),
                cell(to_ms(batch["input_ids"]), to_ms(batch["attention_mask"]), labels=to_ms(batch["labels"]))):
        assert type(out) is type(expected)  # the same ModelOutput class, holding MindSpore tensors
        torch.testing.assert_close(to_torch(out.logits), expected.logits, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(to_torch(out["loss"]), expected.loss, rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError, match=r"BertForSequenceClassification is missing input\(s\): labels"):
        cell(to_ms(batch["input_ids"]), attention_mask=to_ms(batch["attention_mask"]))
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'token_type_ids'"):
        cell(**_batch_ms(batch), token_type_ids=to_ms(batch["input_ids"]))


def test_a_model_saved_with_save_pretrained_ports_equal_to_torch(tmp_path, mode):
    model, batch = zoo.FAMILIES["bert"].build()
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    loaded = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    loaded.eval()
    cell = aot_ops.from_torch(loaded, (), batch)
    out = cell(**_batch_ms(batch))
    expected = model(**batch)
    torch.testing.assert_close(to_torch(out.logits), expected.logits, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(to_torch(out.loss), expected.loss, rtol=1e-5, atol=1e-6)
    assert set(cell.torch_state_dict()) == set(loaded.state_dict())


# ---- greedy decoding --------------------------------------------------------------------------------------------

def decoder(name: str) -> torch.nn.Module:
    """A zoo decoder with larger random weights: tiny models with the default initialisation repeat one token,
    which would not tell decodings apart."""
    model, _ = zoo.FAMILIES[name].build()
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(std=0.3)
    return model


def left_padded_prompt():
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 99, (2, 6), generator=gen)
    mask = torch.ones_like(ids)
    ids[1, :2], mask[1, :2] = 0, 0
    return ids, mask


class PortedDecoders(dict):
    """GPT-2 and Llama, each ported with a dynamic sequence length, per node or fused: on first use, once per
    module (a test that needs one decoder does not pay for the four)."""

    def __missing__(self, key):
        name, fuse = key
        ids, mask = left_padded_prompt()
        position_ids = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
        seq = torch.export.Dim("seq", min=2, max=48)
        dynamic = {"input_ids": {1: seq}, "attention_mask": {1: seq}, "position_ids": {1: seq}}
        model = self[name, not fuse][0] if (name, not fuse) in self else decoder(name)
        self[key] = model, aot_ops.from_torch(
            model, (), {"input_ids": ids, "attention_mask": mask, "position_ids": position_ids, "use_cache": False},
            dynamic_shapes=dynamic, fuse=fuse)
        return self[key]


@pytest.fixture(scope="module")
def ported_decoders():
    return PortedDecoders()


@pytest.mark.slow  # four decoders ported and run 16 times each in each mode: about two minutes
@pytest.mark.parametrize("fuse", [False, True], ids=["per_node", "fused"])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_greedy_decoding_gives_torchs_tokens_with_one_graph_for_every_length(name, fuse, mode, ported_decoders,
                                                                            graph_compiles):
    model, cell = ported_decoders[name, fuse]
    ids, mask = left_padded_prompt()
    mark = graph_compiles.count()
    tokens = aot_ops.generate(cell, to_ms(ids), attention_mask=to_ms(mask), max_new_tokens=16,
                              generation_config=model.generation_config)
    expected = model.generate(ids, attention_mask=mask, max_new_tokens=16, do_sample=False)
    assert to_torch(tokens).tolist() == expected.tolist()
    assert len(set(to_torch(tokens)[0, 6:].tolist())) > 3, "the decoded tokens should not be one token repeated"
    # one call per new token, at lengths 6 to 21, and one compilation (GRAPH_MODE compiles the called Cell, then
    # runs that graph; PyNative, the ported cell's default jit=True, compiles it as an ms.jit graph)
    assert len(graph_compiles.new(since=mark)) == 1, "a graph was compiled again for another sequence length"


def test_unsupported_generate_options_are_refused_with_what_to_do(ported_decoders):
    model, cell = ported_decoders["gpt2", False]
    ids, mask = left_padded_prompt()
    for options, why in [({"num_beams": 4}, r"num_beams=4 is not supported: beam search .* num_beams=1"),
                         ({"use_cache": True}, r"use_cache=True is not supported here: the cell was ported without a "
                                               r"key/value cache: port the model with aot_ops.from_torch_lm"),
                         ({"no_repeat_ngram_size": 2}, r"no_repeat_ngram_size=2 is not supported: leave it at 0"),
                         ({"typo_option": 1}, r"option typo_option=1 is not supported; generate takes")]:
        with pytest.raises(aot_ops.PortError, match=why):
            aot_ops.generate(cell, to_ms(ids), attention_mask=to_ms(mask), max_new_tokens=2, **options)
    with pytest.raises(TypeError, match=r"streamer must have put\(\) and end\(\)"):
        aot_ops.generate(cell, to_ms(ids), attention_mask=to_ms(mask), max_new_tokens=2, streamer=object())
    tokens = aot_ops.generate(cell, to_ms(ids), attention_mask=to_ms(mask), max_new_tokens=2)
    assert tokens.shape == (2, 8)


def test_a_model_returning_its_key_value_cache_is_refused_with_what_to_do():
    model, batch = zoo.FAMILIES["gpt2"].build()
    model.config.use_cache = True
    with pytest.raises(aot_ops.PortError, match=r"use_cache=True .* not a tensor torch.export carries.*"
                                                r"aot_ops.from_torch_lm.*kwargs=\{'use_cache': False\}"):
        aot_ops.from_torch(model, (batch["input_ids"],))
    past = transformers.DynamicCache(config=model.config)
    with pytest.raises(aot_ops.PortError, match=r"keyword argument 'past_key_values': the key/value cache"):
        aot_ops.from_torch(model, (batch["input_ids"],), {"past_key_values": past})


# ---- training ---------------------------------------------------------------------------------------------------

def test_attention_dropout_in_training_is_refused_naming_the_node():
    _, batch = zoo.FAMILIES["bert"].build()
    model = zoo.build_model("BertForSequenceClassification", "BertConfig", num_labels=3, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.1, **zoo.SMALL_TEXT)
    model.train()
    with pytest.raises(aot_ops.PortError, match=r"node 'scaled_dot_product_attention' \(aten::scaled_dot_product_atten"
                                                r"tion\) in bert.encoder.layer.0.attention.self .* cannot be bridged: it "
                                                r"draws random numbers.*Set the attention dropout to 0 for training"):
        aot_ops.from_torch(model, (), batch)
    model.eval()
    cell = aot_ops.from_torch(model, (), batch)  # evaluation draws nothing
    torch.testing.assert_close(to_torch(cell(**_batch_ms(batch)).logits), model(**batch).logits, rtol=1e-5, atol=1e-6)
    with pytest.raises(aot_ops.PortError, match="ported for evaluation only"):
        cell.set_train(True)


def classification_batches(count: int, distinct: int = 5):
    """`count` batches cycling through `distinct` ones, padded; the label follows from two tokens, so a classifier
    can learn it."""
    gen = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(distinct):
        ids = torch.randint(3, 99, (4, 10), generator=gen)
        mask = torch.ones_like(ids)
        mask[2:, 7:] = 0
        labels = (ids[:, 1] > 50).long() + (ids[:, 2] > 50).long()
        batches.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return [batches[k % distinct] for k in range(count)]


def test_fine_tuning_a_classifier_for_20_steps_in_graph_mode_follows_torch():
    """A pretrained encoder (saved and loaded as people do) with a fresh classification head, every parameter
    trained for 20 SGD steps on changing batches: MindSpore's step is one ms.jit graph (forward, backward, optimizer);
    the losses follow torch's step by step."""
    model, _ = zoo.FAMILIES["bert"].build()
    data = classification_batches(20)
    reference = copy.deepcopy(model).train()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    expected = []
    for batch in data:
        optimizer.zero_grad()
        loss = reference(**batch).loss
        loss.backward()
        optimizer.step()
        expected.append(loss.item())

    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        cell = aot_ops.from_torch(model.train(), (), data[0], fuse=True)
        loss_cell = zoo.LossOf(cell)
        ms_optimizer = ms.nn.SGD(cell.trainable_params(), learning_rate=0.1)
        grad_fn = ms.value_and_grad(loss_cell, None, ms_optimizer.parameters)

        @ms.jit
        def train_step(input_ids, attention_mask, labels):
            loss, grads = grad_fn(input_ids, attention_mask, labels)
            ms_optimizer(grads)
            return loss

        losses = [float(train_step(*[to_ms(b[k]) for k in ("input_ids", "attention_mask", "labels")]).asnumpy())
                  for b in data]
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert max(abs(a - b) / abs(b) for a, b in zip(losses, expected)) < 1e-4, (losses, expected)
    assert sum(expected[-5:]) < sum(expected[:5])  # it learns: the comparison is not between two flat lines
    state = cell.torch_state_dict()
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(state[key], value, rtol=1e-4, atol=1e-5, msg=key)
