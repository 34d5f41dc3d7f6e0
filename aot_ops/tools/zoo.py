"""The model zoo: Hugging Face `transformers` models as people bring them, ported and checked against torch.

    python -m aot_ops zoo [--families bert,gpt2] [--write docs/zoo.md]

Each family is a real `transformers` model class built from a small config with random weights (no download), with
HF's own default masks and, for text and audio, a padded batch (the second example's last positions are padding).
Its stages, each against torch:
- eval_<mode>_<how>: the evaluation forward, every output (logits, loss), in PyNative and GRAPH_MODE, one aot call
  per node ("node") and fused (one call per graph, "fused");
- train_<mode>_<how>: three SGD steps through MindSpore's autodiff and optimizer from the same weights as torch:
  the first step's gradients, the losses and every parameter and buffer after training. A chaotic model (torch in
  float32 and float64 part ways within three steps) is judged on the first step's gradients only, each within
  twice the distance between torch's own float32 and float64 gradients where that is larger than the tolerance.

The table (`python -m aot_ops zoo`) also gives the port time, the first call's time, and the evaluation forward's
time against torch eager, per node and fused, in both modes. The tests (tests/test_zoo.py) run the same stages.
"""
from __future__ import annotations

import copy
import statistics
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .._core.lazy import lazy_names

# LossOf (a MindSpore Cell) loads MindSpore: it comes from its own module on first use.
__getattr__, __dir__ = lazy_names(__package__, {"LossOf": (".zoo_loss", "LossOf")}, globals())

SEQ = 10        # tokens per text example
BATCH = 2
LR = 0.05
STEPS = 3
EVAL_TOLERANCE = dict(rtol=1e-4, atol=1e-5)
STATE_TOLERANCE = dict(rtol=1e-4, atol=1e-5)
LOSS_TOLERANCE = 1e-4   # relative
GRAD_TOLERANCE = 1e-3  # relative, and absolute against the gradient's largest element (float reassociation: the
                       # fused backward is AOTAutograd's graph, whose batch norm backward sums in another order)


@dataclass
class Family:
    """One model family: how to build the model and an example batch (keyword arguments, labels included)."""

    name: str
    kind: str                                   # "text", "decoder", "seq2seq", "vision", "audio"
    build: Callable[[], tuple[torch.nn.Module, dict[str, torch.Tensor]]]
    chaotic: bool = False                       # judged on first-step gradients, not on losses after training
    note: str = ""


def _text_batch(vocab: int = 99, seq: int = SEQ, pad: int = 3, labels: Any = "class", pad_id: int = 0) -> dict:
    """input_ids and a padded attention_mask (the second example's last `pad` tokens are padding), and labels:
    "class" (one class per example), "tokens" (the ids, -100 on padding), or None."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (BATCH, seq), generator=gen)
    mask = torch.ones(BATCH, seq, dtype=torch.long)
    mask[1, seq - pad:] = 0
    ids[1, seq - pad:] = pad_id
    batch = {"input_ids": ids, "attention_mask": mask}
    if labels == "class":
        batch["labels"] = torch.tensor([1, 2])
    elif labels == "tokens":
        batch["labels"] = ids.masked_fill(mask == 0, -100)
    return batch


def _image_batch(size: int = 32) -> dict:
    gen = torch.Generator().manual_seed(0)
    return {"pixel_values": torch.randn(BATCH, 3, size, size, generator=gen), "labels": torch.tensor([1, 2])}


def _audio_batch(samples: int = 400, pad: int = 80) -> dict:
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(BATCH, samples, generator=gen)
    mask = torch.ones(BATCH, samples, dtype=torch.long)
    mask[1, samples - pad:] = 0
    values[1, samples - pad:] = 0
    return {"input_values": values, "attention_mask": mask, "labels": torch.tensor([1, 2])}


def _seq2seq_batch(vocab: int = 99, target: int = 6, pad_id: int = 0) -> dict:
    batch = _text_batch(vocab, labels=None, pad_id=pad_id)
    gen = torch.Generator().manual_seed(1)
    labels = torch.randint(3, vocab, (BATCH, target), generator=gen)
    labels[1, target - 2:] = -100
    batch["labels"] = labels
    return batch


def build_model(cls_name: str, config_name: str, **config) -> torch.nn.Module:
    """transformers.<cls_name>(transformers.<config_name>(**config)) with random weights (seed 0), in eval mode."""
    import transformers

    torch.manual_seed(0)
    config = getattr(transformers, config_name)(**config)
    return getattr(transformers, cls_name)(config).eval()


_NO_DROPOUT_BERT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
SMALL_TEXT = dict(vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=37,
                   max_position_embeddings=64)
_SMALL_DECODER = dict(vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=37,
                      max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
_SMALL_AUDIO = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=37,
                    conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 8), num_conv_pos_embeddings=16,
                    num_conv_pos_embedding_groups=2, feat_extract_norm="layer", hidden_dropout=0.0,
                    attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0, final_dropout=0.0,
                    layerdrop=0.0, mask_time_prob=0.0, mask_feature_prob=0.0, num_labels=3, classifier_proj_size=16)


def _families() -> list[Family]:
    return [
        Family("bert", "text", lambda: (build_model("BertForSequenceClassification", "BertConfig", num_labels=3,
                                               **SMALL_TEXT, **_NO_DROPOUT_BERT), _text_batch())),
        Family("distilbert", "text", lambda: (
            build_model("DistilBertForSequenceClassification", "DistilBertConfig", vocab_size=99, dim=32, n_layers=1,
                   n_heads=4, hidden_dim=37, dropout=0.0, attention_dropout=0.0, seq_classif_dropout=0.0,
                   max_position_embeddings=64, num_labels=3), _text_batch())),
        Family("roberta", "text", lambda: (
            build_model("RobertaForSequenceClassification", "RobertaConfig", num_labels=3, pad_token_id=1,
                   **SMALL_TEXT, **_NO_DROPOUT_BERT), _text_batch(pad_id=1))),
        Family("gpt2", "decoder", lambda: (
            build_model("GPT2LMHeadModel", "GPT2Config", vocab_size=99, n_embd=32, n_layer=1, n_head=4, n_positions=64,
                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=1, eos_token_id=2,
                   use_cache=False), _text_batch(labels="tokens"))),
        Family("llama", "decoder", lambda: (
            build_model("LlamaForCausalLM", "LlamaConfig", num_key_value_heads=2, use_cache=False, **_SMALL_DECODER),
            _text_batch(labels="tokens")), note="GQA: 4 query heads, 2 key/value heads"),
        Family("qwen2", "decoder", lambda: (
            build_model("Qwen2ForCausalLM", "Qwen2Config", num_key_value_heads=2, use_cache=False, **_SMALL_DECODER),
            _text_batch(labels="tokens"))),
        Family("gpt_neox", "decoder", lambda: (
            build_model("GPTNeoXForCausalLM", "GPTNeoXConfig", rotary_pct=0.25, hidden_dropout=0.0, attention_dropout=0.0,
                   use_cache=False, **_SMALL_DECODER), _text_batch(labels="tokens"))),
        Family("t5", "seq2seq", lambda: (
            build_model("T5ForConditionalGeneration", "T5Config", vocab_size=99, d_model=32, d_kv=8, d_ff=37, num_layers=1,
                   num_decoder_layers=1, num_heads=4, dropout_rate=0.0, relative_attention_num_buckets=8,
                   decoder_start_token_id=0, pad_token_id=0, use_cache=False), _seq2seq_batch())),
        Family("bart", "seq2seq", lambda: (
            build_model("BartForConditionalGeneration", "BartConfig", vocab_size=99, d_model=32, encoder_layers=1,
                   decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=37,
                   decoder_ffn_dim=37, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
                   activation_dropout=0.0, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                   use_cache=False), _seq2seq_batch(pad_id=1))),
        Family("whisper", "seq2seq", lambda: (
            build_model("WhisperForConditionalGeneration", "WhisperConfig", vocab_size=99, num_mel_bins=8,
                   encoder_layers=1, decoder_layers=1, d_model=32, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_source_positions=16,
                   max_target_positions=32, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                   pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, use_cache=False),
            _whisper_batch())),
        Family("vit", "vision", lambda: (
            build_model("ViTForImageClassification", "ViTConfig", image_size=16, patch_size=4, num_channels=3,
                   hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=37, num_labels=3,
                   **_NO_DROPOUT_BERT), _image_batch(16))),
        Family("swin", "vision", lambda: (
            build_model("SwinForImageClassification", "SwinConfig", image_size=32, patch_size=4, num_channels=3,
                   embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4, mlp_ratio=2.0,
                   drop_path_rate=0.0, num_labels=3, **_NO_DROPOUT_BERT), _image_batch(32))),
        Family("convnext", "vision", lambda: (
            build_model("ConvNextForImageClassification", "ConvNextConfig", num_channels=3, hidden_sizes=[8, 16],
                   depths=[1, 1], num_stages=2, drop_path_rate=0.0, num_labels=3), _image_batch(32))),
        Family("resnet", "vision", lambda: (
            build_model("ResNetForImageClassification", "ResNetConfig", num_channels=3, embedding_size=8,
                   hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic", num_labels=3), _image_batch(32)),
            note="BatchNorm: running statistics compared after training"),
        Family("mobilenet_v2", "vision", lambda: (
            build_model("MobileNetV2ForImageClassification", "MobileNetV2Config", num_channels=3, image_size=32,
                   depth_multiplier=0.25, min_depth=4, classifier_dropout_prob=0.0, num_labels=3),
            _image_batch(32)), chaotic=True,
            note="chaotic under SGD in float32 (torch alone): judged on first-step gradients"),
        Family("efficientnet", "vision", lambda: (
            build_model("EfficientNetForImageClassification", "EfficientNetConfig", num_channels=3, image_size=32,
                   width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320, dropout_rate=0.0,
                   kernel_sizes=[3, 3, 5], in_channels=[32, 16, 24], out_channels=[16, 24, 40], strides=[1, 2, 2],
                   num_block_repeats=[1, 1, 1], expand_ratios=[1, 6, 6],
                   drop_connect_rate=0.0, num_labels=3), _image_batch(32))),
        Family("dinov2", "vision", lambda: (
            build_model("Dinov2ForImageClassification", "Dinov2Config", image_size=16, patch_size=4, num_channels=3,
                   hidden_size=32, num_hidden_layers=1, num_attention_heads=4, mlp_ratio=2, drop_path_rate=0.0,
                   layerscale_value=0.5, num_labels=3, **_NO_DROPOUT_BERT), _image_batch(24)),
            note="position embeddings interpolated to a larger image (bicubic)"),
        Family("bloom", "decoder", lambda: (
            build_model("BloomForCausalLM", "BloomConfig", vocab_size=99, hidden_size=32, n_layer=1, n_head=4,
                        hidden_dropout=0.0, attention_dropout=0.0, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                        use_cache=False), _text_batch(labels="tokens")),
            note="GeLU as a torch.autograd.Function with a hand-written backward"),
        Family("recurrent_gemma", "decoder", lambda: (
            build_model("RecurrentGemmaForCausalLM", "RecurrentGemmaConfig", vocab_size=99, hidden_size=32,
                        intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        lru_width=32, attention_window_size=8, conv1d_width=4, block_types=["recurrent", "attention"],
                        pad_token_id=0, bos_token_id=1, eos_token_id=2, use_cache=False),
            _text_batch(labels="tokens")),
            note="a gated linear recurrence; a torch.autograd.Function clips the square root's derivative"),
        Family("mixtral", "decoder", lambda: (
            build_model("MixtralForCausalLM", "MixtralConfig", num_local_experts=4, num_experts_per_tok=2,
                        num_key_value_heads=2, router_jitter_noise=0.0, use_cache=False,
                        **dict(_SMALL_DECODER, intermediate_size=40)),
            _text_batch(labels="tokens")),
            note="mixture of experts: transformers' grouped matrix product, a torch.library operator looping over "
                 "token groups sized by the routing (intermediate size 40: torch's own grouped product needs strides "
                 "of 16 bytes)"),
        Family("sew_d", "audio", lambda: (
            build_model("SEWDForSequenceClassification", "SEWDConfig", squeeze_factor=2, max_position_embeddings=32,
                        position_buckets=16, activation_dropout=0.0, hidden_dropout=0.0, attention_dropout=0.0,
                        feat_proj_dropout=0.0, final_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0,
                        mask_feature_prob=0.0, num_labels=3, classifier_proj_size=16,
                        **{k: v for k, v in _SMALL_AUDIO.items() if k not in ("hidden_dropout", "attention_dropout",
                                                                               "activation_dropout", "feat_proj_dropout",
                                                                               "final_dropout", "layerdrop",
                                                                               "mask_time_prob", "mask_feature_prob",
                                                                               "num_labels", "classifier_proj_size")}),
            _audio_batch()),
            note="DeBERTa-style attention whose softmax is a torch.autograd.Function (XSoftmax) with its own backward"),
        Family("wav2vec2", "audio", lambda: (
            build_model("Wav2Vec2ForSequenceClassification", "Wav2Vec2Config", **_SMALL_AUDIO), _audio_batch())),
        Family("hubert", "audio", lambda: (
            build_model("HubertForSequenceClassification", "HubertConfig", **_SMALL_AUDIO), _audio_batch())),
    ]


def _whisper_batch() -> dict:
    gen = torch.Generator().manual_seed(0)
    batch = {"input_features": torch.randn(BATCH, 8, 32, generator=gen)}
    labels = torch.randint(3, 99, (BATCH, 6), generator=gen)
    labels[1, 4:] = -100
    batch["labels"] = labels
    return batch


FAMILIES: dict[str, Family] = {f.name: f for f in _families()}


# ---- running a family's stages ------------------------------------------------------------------------------------

HOWS = ("node", "fused")
MODES = ("pynative", "graph")
STAGES = tuple(f"{kind}_{mode}_{how}" for how in HOWS for kind in ("eval", "train") for mode in MODES)


@dataclass
class Report:
    """What one family did: each stage "ok" or its first error line, and times."""

    family: str
    stages: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)          # stage -> the whole error (traceback)
    port_seconds: dict[str, float] = field(default_factory=dict)  # how -> seconds
    first_call_seconds: dict[str, float] = field(default_factory=dict)  # "<how>_<mode>" -> seconds
    eval_ratio: dict[str, float] = field(default_factory=dict)    # "<how>_<mode>" -> ported / torch eager
    torch_eval_ms: float | None = None

    @property
    def passed(self) -> int:
        return sum(v == "ok" for v in self.stages.values())

    def first_failure(self) -> str:
        return next((f"{stage}: {text}" for stage, text in self.stages.items() if text != "ok"), "")


@dataclass
class TorchReference:
    eval_outputs: dict[str, torch.Tensor]
    first_grads: dict[str, torch.Tensor]
    losses: list[float]
    final_state: dict[str, torch.Tensor]
    # chaotic families: per parameter, how far torch's own float32 first-step gradient is from its float64 one
    rounding: dict[str, float] = field(default_factory=dict)


def torch_reference(model: torch.nn.Module, batch: dict, steps: int = STEPS,
                    chaotic: bool = False) -> TorchReference:
    """The evaluation outputs, then `steps` SGD steps in training mode on a copy: the first step's gradients, the
    losses and the state after training. `chaotic`: also how far torch's float32 first-step gradients are from
    its float64 ones (the rounding the network amplifies, which a port cannot be closer to torch than)."""
    with torch.no_grad():
        outputs = model(**batch)
    eval_outputs = {k: v.detach().clone() for k, v in outputs.items() if isinstance(v, torch.Tensor)}
    trained = copy.deepcopy(model).train()
    optimizer = torch.optim.SGD(trained.parameters(), lr=LR)
    losses, first_grads = [], {}
    for step in range(steps):
        optimizer.zero_grad()
        loss = trained(**batch)["loss"]
        loss.backward()
        if step == 0:
            first_grads = {k: p.grad.detach().clone() for k, p in trained.named_parameters() if p.grad is not None}
        optimizer.step()
        losses.append(loss.item())
    final_state = {k: v.detach().clone() for k, v in trained.state_dict().items()}
    rounding = _float64_distance(model, batch, first_grads) if chaotic else {}
    return TorchReference(eval_outputs, first_grads, losses, final_state, rounding)


def _float64_distance(model: torch.nn.Module, batch: dict, first_grads: dict) -> dict[str, float]:
    wide = copy.deepcopy(model).double().train()
    loss = wide(**{k: v.double() if v.is_floating_point() else v for k, v in batch.items()})["loss"]
    loss.backward()
    return {k: float((p.grad.float() - first_grads[k]).abs().max()) for k, p in wide.named_parameters()
            if p.grad is not None and k in first_grads}


def run(family: Family, *, hows=HOWS, modes=MODES, timing_calls: int = 0, steps: int = STEPS) -> Report:
    """Every stage of `family` (a failure is recorded against its stage, and the next stage runs).
    `timing_calls` > 0: also time the evaluation forward (median of that many calls, after warm-up) against
    torch eager, in the same run."""
    import mindspore as ms

    import aot_ops

    report = Report(family.name)
    model, batch = family.build()
    initial = copy.deepcopy(model.state_dict())
    reference = torch_reference(model, batch, steps, family.chaotic)
    ms_batch = {k: _to_ms(v) for k, v in batch.items()}
    previous_mode = ms.get_context("mode")
    try:
        for how in hows:
            start = time.perf_counter()
            try:
                cell = aot_ops.from_torch(model, (), batch, fuse=how == "fused")
            except Exception as exc:  # noqa: BLE001 - a port failure fails every stage of this way
                for mode in modes:
                    for kind in ("eval", "train"):
                        _record(report, f"{kind}_{mode}_{how}", exc)
                continue
            report.port_seconds[how] = time.perf_counter() - start
            for mode in modes:
                ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
                with _stage(report, f"eval_{mode}_{how}"):
                    _eval_stage(report, cell, ms_batch, reference, initial, f"{how}_{mode}")
                if timing_calls and report.stages[f"eval_{mode}_{how}"] == "ok":
                    ported, eager = _alternating_ms(lambda: _ms_eval(cell, ms_batch),
                                                    lambda: _torch_eval(model, batch), timing_calls)
                    report.eval_ratio[f"{how}_{mode}"] = ported / eager
                    report.torch_eval_ms = report.torch_eval_ms or eager
                with _stage(report, f"train_{mode}_{how}"):
                    _train_stage(cell, ms_batch, reference, initial, family.chaotic, steps)
    finally:
        ms.set_context(mode=previous_mode)
    return report


def _eval_stage(report: Report, cell, ms_batch: dict, reference: TorchReference, initial: dict, key: str) -> None:
    cell.load_torch_state_dict(initial)
    cell.set_train(False)
    start = time.perf_counter()
    outputs = cell(**ms_batch)
    report.first_call_seconds[key] = time.perf_counter() - start
    for name, expected in reference.eval_outputs.items():
        torch.testing.assert_close(_to_torch(outputs[name]), expected, **EVAL_TOLERANCE, msg=lambda m: f"{name}: {m}")


def _train_stage(cell, ms_batch: dict, reference: TorchReference, initial: dict, chaotic: bool, steps: int) -> None:
    import mindspore as ms

    from .zoo_loss import LossOf

    cell.load_torch_state_dict(initial)
    cell.set_train(True)
    loss_cell = LossOf(cell)
    optimizer = ms.nn.SGD(cell.trainable_params(), learning_rate=LR)
    grad_fn = ms.value_and_grad(loss_cell, None, optimizer.parameters)
    inputs = [ms_batch[name] for name in cell.input_names]
    losses = []
    for step in range(1 if chaotic else steps):
        loss, grads = grad_fn(*inputs)
        if step == 0:
            # A gradient that is zero in exact arithmetic (a convolution's bias before a batch norm) is rounding
            # noise on both sides: its floor is the noise of the model's largest gradient, not of its own.
            noise = 1e-6 * max((float(g.abs().max()) for g in reference.first_grads.values() if g.numel()),
                               default=0.0)
            for param, grad in zip(optimizer.parameters, grads):
                expected = reference.first_grads.get(param.name)
                if expected is None:
                    expected = torch.zeros(tuple(param.shape))  # torch gave it no gradient: unused
                scale = float(expected.abs().max()) if expected.numel() else 0.0
                # a chaotic network: within twice the distance of torch's own float32 gradient from float64's
                rounding = 2 * reference.rounding.get(param.name, 0.0)
                torch.testing.assert_close(_to_torch(grad), expected, rtol=GRAD_TOLERANCE,
                                           atol=max(GRAD_TOLERANCE * scale, noise, rounding, 1e-7),
                                           msg=lambda m, n=param.name: f"first-step gradient of {n}: {m}")
        optimizer(grads)
        losses.append(float(loss.asnumpy()))
    for ours, theirs in zip(losses, reference.losses):
        if abs(ours - theirs) > LOSS_TOLERANCE * max(abs(theirs), 1e-3):
            raise AssertionError(f"losses differ: {losses} against torch's {reference.losses[:len(losses)]}")
    if chaotic:
        return
    state = cell.torch_state_dict()
    for key, expected in reference.final_state.items():
        if expected.is_floating_point():
            torch.testing.assert_close(state[key], expected, **STATE_TOLERANCE, msg=lambda m, k=key: f"{k}: {m}")
        elif not torch.equal(state[key], expected):
            raise AssertionError(f"{key}: {state[key]} against torch's {expected}")


class _stage:
    """Records the block's outcome against a stage: "ok", or the failure's first line (and its traceback)."""

    def __init__(self, report: Report, stage: str):
        self.report, self.stage = report, stage

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None:
            self.report.stages[self.stage] = "ok"
        elif isinstance(exc, Exception):
            _record(self.report, self.stage, exc)
        else:
            return False
        return True


def _record(report: Report, stage: str, exc: BaseException) -> None:
    text = f"{type(exc).__name__}: {exc}".strip()
    report.stages[stage] = text.splitlines()[0][:300]
    report.errors[stage] = "".join(traceback.format_exception(exc))


def _to_ms(t: torch.Tensor):
    from .._core.convert import to_ms

    return to_ms(t)


def _to_torch(t) -> torch.Tensor:
    from .._core.convert import to_torch

    return to_torch(t)


def _torch_eval(model, batch):
    with torch.no_grad():
        return model(**batch)


def _ms_eval(cell, ms_batch):
    out = cell(**ms_batch)
    next(iter(out.values())).asnumpy()  # wait for the result


def _alternating_ms(first: Callable[[], Any], second: Callable[[], Any], calls: int,
                    rounds: int = 4) -> tuple[float, float]:
    """Median milliseconds of each over `calls` calls, in `rounds` alternating blocks after warm-up: a machine's
    drift touches both alike. Blocks, not single calls: calling torch right after MindSpore (or the reverse)
    slowed both about 2x on the 2-core machine (MindSpore's threads still spinning, caches taken)."""
    for _ in range(3):
        first()
        second()
    times: tuple[list, list] = ([], [])
    per_block = max(1, calls // rounds)
    for _ in range(rounds):
        for fn, out in ((first, times[0]), (second, times[1])):
            fn()  # the block's first call pays for the switch
            for _ in range(per_block):
                start = time.perf_counter()
                fn()
                out.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[0]), statistics.median(times[1])


# ---- the table ----------------------------------------------------------------------------------------------------

def table(reports: list[Report]) -> str:
    """A Markdown table: per family the stages passed (or the first failure), port and first-call times, and the
    evaluation forward's time as a ratio to torch eager, per node and fused, in both modes."""
    rows = ["| family | stages | port s (node / fused) | first call s (node / fused, PyNative / GRAPH) | "
            "eval vs torch: node PyNative | node GRAPH | fused PyNative | fused GRAPH | torch ms | first failure |",
            "|---|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in reports:
        ports = " / ".join(_seconds(r.port_seconds.get(h)) for h in HOWS)
        first = " / ".join(_seconds(r.first_call_seconds.get(f"{h}_{m}")) for h in HOWS for m in MODES)
        ratios = [_ratio(r.eval_ratio.get(f"{h}_{m}")) for h in HOWS for m in MODES]
        torch_ms = f"{r.torch_eval_ms:.2f}" if r.torch_eval_ms else "-"
        failure = r.first_failure().replace("|", "\\|")
        rows.append(f"| {r.family} | {r.passed}/{len(r.stages)} | {ports} | {first} | {' | '.join(ratios)} | "
                    f"{torch_ms} | {failure or '-'} |")
    medians = []
    for h in HOWS:
        for m in MODES:
            values = [r.eval_ratio[f"{h}_{m}"] for r in reports if f"{h}_{m}" in r.eval_ratio]
            medians.append(_ratio(statistics.median(values)) if values else "-")
    passed = sum(r.passed for r in reports)
    total = sum(len(r.stages) for r in reports)
    rows.append(f"| **median** | {passed}/{total} | | | {' | '.join(medians)} | | |")
    return "\n".join(rows)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"
