"""Checkpoint folders to ported models (aot_ops.load_pretrained / from_pretrained): the weights read once, straight
into the cell's Parameters, equal to what transformers' own from_pretrained loads, tokens and logits equal to
torch's, and every way a folder can fail to match its model named."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import transformers

import aot_ops
from aot_ops._core.convert import torch_view
from aot_ops.testing import LanguageModellingLoss
from aot_ops.tools.random_checkpoint import write_random_checkpoint
from support import REPO, to_ms, to_torch

# initializer_range 0.3: tiny models with the default 0.02 repeat one token, which would not tell decodings apart
LLAMA = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
             vocab_size=500, max_position_embeddings=128, initializer_range=0.3)
QWEN_TIED = dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=96, vocab_size=400, tie_word_embeddings=True, initializer_range=0.3)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Sharded bfloat16 Llama (several files and an index) and a single-file float32 Qwen2 with tied embeddings."""
    root = tmp_path_factory.mktemp("checkpoints")
    return {"llama": write_random_checkpoint(root / "llama", transformers.LlamaConfig(**LLAMA), dtype=torch.bfloat16,
                                             shard_bytes=60_000),
            "qwen": write_random_checkpoint(root / "qwen", transformers.Qwen2Config(**QWEN_TIED), dtype=torch.float32,
                                            shard_bytes=1 << 30)}


def reference(folder, dtype=None):
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()


def prompt(batch=1, length=7, vocab=400):
    return torch.randint(2, vocab, (batch, length), generator=torch.Generator().manual_seed(0))


def _torch_tokens(folder, ids, new_tokens: int) -> torch.Tensor:
    """The greedy tokens transformers' own model of `folder` generates after `ids`."""
    with torch.no_grad():
        return reference(folder).generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                          do_sample=False, pad_token_id=0)


@pytest.mark.parametrize("name, dtype", [("llama", None), ("qwen", None), ("qwen", torch.bfloat16)])
def test_loaded_weights_equal_transformers_own_loading(folders, name, dtype):
    if name == "llama":
        assert len(list(folders[name].glob("*.safetensors"))) > 2  # the sharded layout, with its index
    model = aot_ops.load_pretrained(folders[name], dtype=dtype)
    expected = reference(folders[name], dtype)
    ours, theirs = model.state_dict(), expected.state_dict()
    assert list(ours) == list(theirs)
    for key in theirs:
        assert ours[key].dtype == theirs[key].dtype, key
        assert torch.equal(ours[key], theirs[key]), key
    for (key, buffer), (_, expected_buffer) in zip(model.named_buffers(), expected.named_buffers()):
        assert torch.equal(buffer, expected_buffer), key  # the rotary frequencies, made as transformers makes them
    if name == "qwen":  # tied embeddings stay one tensor
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert not model.training


def test_generation_from_the_folder_equals_torch(folders):
    """With a block of 3 greedy steps a call (tokens_per_call): its cell and the step's hold the weights read."""
    lm = aot_ops.from_pretrained(folders["llama"], max_length=24, tokens_per_call=3)
    block = lm.block.parameters_dict()
    assert all(block[key] is parameter for key, parameter in lm.cell.parameters_dict().items())
    ids = prompt(vocab=LLAMA["vocab_size"])
    tokens = to_torch(aot_ops.generate(lm, to_ms(ids), max_new_tokens=10))
    expected = _torch_tokens(folders["llama"], ids, 10)
    assert tokens.tolist() == expected.tolist()
    assert len(set(tokens[0, 7:].tolist())) > 2  # a decoding that could tell a wrong weight


def test_a_cell_for_the_whole_sequence_equals_torch(folders, aot_cache, monkeypatch):
    monkeypatch.delenv("AOT_OPS_PORT_CACHE", raising=False)
    exports = Exports(monkeypatch)
    model = reference(folders["qwen"])
    for _ in range(2):  # exported, then made from the plan the first port kept
        cell = aot_ops.from_pretrained(folders["qwen"])
        for length in (3, 9):  # one port, any length
            ids = prompt(2, length, QWEN_TIED["vocab_size"])
            mask = torch.ones_like(ids)
            out = cell(to_ms(ids), to_ms(mask))
            with torch.no_grad():
                expected = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
            torch.testing.assert_close(to_torch(out["logits"]), expected, rtol=1e-5, atol=1e-5)
        with pytest.raises(Exception, match="evaluation"):
            cell.set_train(True)
    assert exports.count == 1


def test_a_port_of_the_loaded_model_takes_its_parameters_without_a_copy(folders):
    model = aot_ops.load_pretrained(folders["qwen"])
    lm = aot_ops.from_torch_lm(model, max_length=16)
    parameters = {p.name: p for p in lm.cell.get_parameters()}
    for key, tensor in model.state_dict().items():
        if key in parameters:
            assert torch_view(parameters[key]).data_ptr() == tensor.data_ptr(), key
    copied = aot_ops.from_torch(model, (prompt(1, 4, 400),), {"use_cache": False}, evaluation_only=True)
    weight = dict((p.name, p) for p in copied.get_parameters())["model.embed_tokens.weight"]
    assert torch_view(weight).data_ptr() != model.model.embed_tokens.weight.data_ptr()  # share_weights=False copies


@pytest.mark.parametrize("direct", [True, False], ids=["past the page cache", "through the page cache"])
def test_both_ways_of_reading_give_the_stored_bytes(folders, direct):
    """Direct reads (O_DIRECT into an aligned buffer: whole blocks around each tensor) and reads through the page
    cache give every tensor's exact bytes, whatever its offset in the file."""
    from safetensors.torch import load_file

    from aot_ops._port.lm.checkpoint import Checkpoint

    checkpoint = Checkpoint(folders["llama"])
    expected = {}
    for file in sorted(folders["llama"].glob("*.safetensors")):
        expected.update(load_file(file))
    destinations = [(stored, torch.empty(stored.shape, dtype=stored.dtype))
                    for stored in checkpoint.tensors.values()]
    assert any(stored.start % 4096 for stored, _ in destinations)  # offsets within a block
    checkpoint.read(destinations, direct=direct)
    for stored, destination in destinations:
        assert torch.equal(destination, expected[stored.name]), stored.name


# ---- the port kept: a later port of the same model exports nothing ------------------------------------------------

class Exports:
    """Counts torch.export runs of ports (the tracing stage's calls of export.py's export)."""

    def __init__(self, monkeypatch):
        import aot_ops._port.read.stage as port_module

        self.count, export = 0, port_module.export

        def counted(*args, **kwargs):
            self.count += 1
            return export(*args, **kwargs)

        monkeypatch.setattr(port_module, "export", counted)


def _kept_plans(aot_cache) -> int:
    return len(list((aot_cache / "plans").glob("*[0-9a-f].pkl")))


def test_a_second_port_of_the_same_model_exports_nothing(folders, aot_cache, monkeypatch):
    monkeypatch.delenv("AOT_OPS_PORT_CACHE", raising=False)
    exports = Exports(monkeypatch)
    ids = prompt(vocab=LLAMA["vocab_size"])
    expected = _torch_tokens(folders["llama"], ids, 6)
    for _ in range(2):
        lm = aot_ops.from_pretrained(folders["llama"], max_length=20)
        assert to_torch(aot_ops.generate(lm, to_ms(ids), max_new_tokens=6)).tolist() == expected.tolist()
    assert (exports.count, _kept_plans(aot_cache)) == (1, 1)
    # What changes the graph makes another entry: the options, the weights' dtype, the configuration
    aot_ops.from_pretrained(folders["llama"], max_length=16)
    aot_ops.from_pretrained(folders["llama"], max_length=20, dtype=torch.float32)
    assert (exports.count, _kept_plans(aot_cache)) == (3, 3)
    folder = _copy_folder(folders["llama"], aot_cache.parent / "llama")
    config = json.loads((folder / "config.json").read_text())
    config["rms_norm_eps"] = 1e-3  # a number inside the graph
    (folder / "config.json").write_text(json.dumps(config))
    lm = aot_ops.from_pretrained(folder, max_length=20)
    assert (exports.count, _kept_plans(aot_cache)) == (4, 4)
    expected = _torch_tokens(folder, ids, 6)
    assert to_torch(aot_ops.generate(lm, to_ms(ids), max_new_tokens=6)).tolist() == expected.tolist()


def test_a_per_node_port_from_its_kept_plan_generates_torchs_tokens(folders, aot_cache, monkeypatch):
    """fuse=False: the plan holds the operators' arguments, tensor lists among them (the causal mask's index), whose
    open places must come back from the pickle as aten's own placeholders."""
    monkeypatch.delenv("AOT_OPS_PORT_CACHE", raising=False)
    exports = Exports(monkeypatch)
    ids = prompt(vocab=LLAMA["vocab_size"])
    expected = _torch_tokens(folders["llama"], ids, 4)
    for _ in range(2):
        lm = aot_ops.from_pretrained(folders["llama"], max_length=16, fuse=False)
        assert to_torch(aot_ops.generate(lm, to_ms(ids), max_new_tokens=4)).tolist() == expected.tolist()
    assert exports.count == 1


def test_a_model_class_of_the_user_or_a_switched_off_cache_keeps_nothing(folders, aot_cache, monkeypatch):
    class MyLlama(transformers.LlamaForCausalLM):  # code of the user's: not described by the configuration
        pass

    exports = Exports(monkeypatch)
    monkeypatch.delenv("AOT_OPS_PORT_CACHE", raising=False)
    for _ in range(2):
        aot_ops.from_pretrained(folders["llama"], max_length=20, model_class=MyLlama)
    monkeypatch.setenv("AOT_OPS_PORT_CACHE", "0")
    for _ in range(2):
        aot_ops.from_pretrained(folders["llama"], max_length=20)
    assert (exports.count, _kept_plans(aot_cache)) == (4, 0)


# ---- what does not match is named ---------------------------------------------------------------------------------

def _copy_folder(source, target):
    target.mkdir()
    for file in source.iterdir():
        (target / file.name).write_bytes(file.read_bytes())
    return target


def test_a_missing_tensor_is_named(folders, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = _copy_folder(folders["qwen"], tmp_path / "qwen")
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(aot_ops.PortError, match=r"missing from the checkpoint: 'model\.layers\.1\.mlp\.up_proj"):
        aot_ops.from_pretrained(folder)


def test_a_tensor_of_another_shape_is_named(folders, tmp_path):
    folder = _copy_folder(folders["qwen"], tmp_path / "qwen")
    config = json.loads((folder / "config.json").read_text())
    config["intermediate_size"] = 80
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(aot_ops.PortError, match=r"'model\.layers\.0\.mlp\.down_proj\.weight' \(float32\[64, 96\].*"
                                                r"of shape \[64, 80\]"):
        aot_ops.load_pretrained(folder)


def test_a_truncated_file_is_named_and_the_next_load_works(folders, tmp_path):
    folder = _copy_folder(folders["qwen"], tmp_path / "qwen")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[:len(data) - 1000])
    with pytest.raises(aot_ops.PortError, match="truncated"):
        aot_ops.load_pretrained(folder)
    (folder / "model.safetensors").write_bytes(data)
    assert torch.equal(aot_ops.load_pretrained(folder).lm_head.weight, reference(folder).lm_head.weight)


def test_a_folder_without_safetensors_says_what_to_do(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(aot_ops.PortError, match=r"pytorch_model\.bin.*save_pretrained"):
        aot_ops.load_pretrained(tmp_path)
    with pytest.raises(aot_ops.PortError, match="is not a folder"):
        aot_ops.load_pretrained(tmp_path / "absent")


# ---- memory: the weights once --------------------------------------------------------------------------------------

MEMORY_PROBE = """
import gc, json, sys, torch, transformers, aot_ops
from aot_ops.tools.random_checkpoint import write_random_checkpoint
folder = sys.argv[1]
config = transformers.LlamaConfig(hidden_size=1024, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=2,
                                  intermediate_size=2816, vocab_size=32000)
write_random_checkpoint(folder, config, dtype=torch.bfloat16, shard_bytes=64 << 20)
import aot_ops._port, aot_ops._port.lm.pretrained, aot_ops._port.lm.kv_cache  # imported before the baseline
import transformers.models.llama.modeling_llama
def field(name):
    for line in open("/proc/self/status"):
        if line.startswith(name + ":"):
            return int(line.split()[1]) * 1024
gc.collect()
open("/proc/self/clear_refs", "w").write("5")  # resets the peak
baseline = field("VmRSS")
lm = aot_ops.from_pretrained(folder, max_length=16)
weights = sum(p.nbytes for p in lm.cell.get_parameters() if "cache" not in p.name)
print(json.dumps({"weights": weights, "peak": (field("VmHWM") - baseline) / weights,
                  "after": (field("VmRSS") - baseline) / weights}))
"""


@pytest.mark.slow  # writes and ports a 320 MB checkpoint in a fresh process
def test_the_port_holds_the_weights_once(tmp_path):
    """Nothing of the checkpoint is mapped (it is read into the Parameters), so the resident peak above the process
    before the port is the private memory the port takes."""
    done = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(tmp_path / "ckpt")], capture_output=True,
                          text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["weights"] > 300e6
    # A copy of the weights would be 2x; what is above 1x is the port's own (its graph, programs, MindSpore's
    # kernels): 15-60 MB whatever the model's size, 0.05-0.2x of this 311 MB checkpoint when the port exports (a
    # bimodal 1.05x or 1.20x in runs alone, 1.24x once in a full-suite worker; 1.12-1.20x before the commit that
    # found it), so the bound leaves that room; the big checkpoints' ratios are the benchmark's (1.01-1.04x).
    assert figures["peak"] < 1.3, figures
    assert figures["after"] < 1.3, figures


# ---- LoRA fine-tuning -------------------------------------------------------------------------------------------

def with_lora(model):
    import peft

    torch.manual_seed(0)  # the adapter's initialisation
    adapted = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                         lora_dropout=0.0))
    # B starts at zero (so the first step's A gradients would be zero): random B tells a wrong gradient
    with torch.no_grad():
        for name, p in adapted.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.1)
    return LanguageModellingLoss(adapted).train()


@pytest.mark.slow  # a training port (AOTAutograd), three steps on each side
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bfloat16", "float32"])
def test_lora_fine_tuning_of_a_loaded_decoder_equals_torch(folders, dtype):
    import mindspore as ms

    from aot_ops._port.programs.program_inputs import SavedFrom

    ids = prompt(2, 12, LLAMA["vocab_size"])
    loss_cell = aot_ops.from_torch(with_lora(aot_ops.load_pretrained(folders["llama"], dtype=dtype)), (ids,),
                                   fuse=True, input_grads=False, share_weights=True)
    trainable = loss_cell.trainable_params()
    assert trainable and all("lora_" in p.name for p in trainable)  # the base is frozen, in its dtype
    frozen = [p for p in loss_cell.get_parameters() if "lora_" not in p.name and p.name.endswith("weight")]
    assert {p.dtype for p in frozen} == {ms.bfloat16 if dtype == torch.bfloat16 else ms.float32}
    # The frozen weights the backward multiplies by are passed to it as they are, not copied out by the forward
    fused = loss_cell.mode_programs["train" if "train" in loss_cell.mode_programs else "both"].fused
    saved_inputs = {fused.inputs[s.index].name for s in fused.saved if s.source is SavedFrom.INPUT}
    assert {k for k in saved_inputs if k.endswith(("o_proj.weight", "down_proj.weight"))} == {
        f"lm.base_model.model.model.layers.{i}.{m}.weight" for i in range(LLAMA["num_hidden_layers"])
        for m in ("self_attn.o_proj", "mlp.down_proj")}

    torch_loss = with_lora(reference(folders["llama"], dtype))
    gradients = ms.grad(loss_cell, grad_position=None, weights=trainable)(to_ms(ids))
    torch_loss(ids).backward()
    expected = dict(torch_loss.named_parameters())
    exact = {}
    if dtype == torch.bfloat16:  # the same weights' gradients in float32: how far bfloat16 takes each of them
        in_float32 = with_lora(reference(folders["llama"], torch.float32))
        in_float32(ids).backward()
        exact = {n: p.grad for n, p in in_float32.named_parameters() if p.requires_grad}
    for parameter, gradient in zip(trainable, gradients):
        ours, theirs = to_torch(gradient).float(), expected[parameter.name].grad.float()
        if dtype == torch.float32:
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)
            continue
        # Through bfloat16 activations AOTAutograd's backward rounds in another order than torch's eager autograd:
        # the two differ by about bfloat16's epsilon, and are as far from the float32 gradient as each other
        assert float((ours - theirs).norm() / theirs.norm()) < 1.6e-2, parameter.name
        distance = lambda g: float((g - exact[parameter.name]).norm() / exact[parameter.name].norm())  # noqa: E731
        assert distance(ours) <= 1.1 * distance(theirs) + 1e-3, parameter.name

    step = aot_ops.train_step(loss_cell, ms.nn.SGD(trainable, learning_rate=0.01))
    models = [torch_loss, in_float32] if dtype == torch.bfloat16 else [torch_loss]
    optimizers = [torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.01) for m in models]
    for step_number in range(3):
        expected = []
        for model, optimizer in zip(models, optimizers):
            optimizer.zero_grad()
            expected.append(model(ids))
            expected[-1].backward()
            optimizer.step()
        loss, torch_value = float(step(to_ms(ids)).asnumpy()), float(expected[0])
        if dtype == torch.float32:
            assert abs(loss - torch_value) <= 1e-5 * abs(torch_value), (loss, torch_value)
            continue
        # bfloat16: the first loss is the forward's, the same as torch's; after it the two trainings part by the
        # gradients' roundings above (a loss 0.16% apart after two steps on one CPU), each as far from the float32
        # training's losses as the other
        float32_value = float(expected[1])
        assert abs(loss - float32_value) <= 1.1 * abs(torch_value - float32_value) + 1e-3 * abs(float32_value), \
            (loss, torch_value, float32_value)
        if step_number == 0:
            assert abs(loss - torch_value) <= 1e-3 * abs(torch_value), (loss, torch_value)


def test_a_port_that_fails_raises_its_own_error_and_stops_the_reading(folders):
    with pytest.raises(ValueError, match="max_length must be at least 2"):
        aot_ops.from_pretrained(folders["llama"], max_length=1)
    import threading

    assert not [t for t in threading.enumerate() if t.name.startswith("aot_ops checkpoint")]
    assert aot_ops.from_pretrained(folders["llama"], max_length=8).max_length == 8  # the next call works
