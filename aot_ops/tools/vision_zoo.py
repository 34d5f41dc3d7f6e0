"""The vision zoo: torchvision, timm and diffusers networks as people bring them, checked with the zoo's stages.

    python -m aot_ops zoo --zoo vision [--families unet2d_condition,...] [--write docs/zoo.md]

Each family is built from code with random weights (seed 0, no download) at a small size, and wrapped the way a
training script uses it: the network's output and the loss computed from it (cross-entropy for a classifier and a
segmenter, the noise-prediction error for a diffusion U-Net, the reconstruction error for an autoencoder), so the
zoo's eight stages (aot_ops/tools/zoo.py: evaluation and three SGD steps, PyNative and GRAPH_MODE, per node and
fused) apply unchanged. The diffusion sampling loop (a diffusers scheduler stepping the ported U-Net) is
`sample_with_scheduler` below.
"""
from __future__ import annotations

import time
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .zoo import BATCH, Family

IMAGE = 32      # pixels per side of a classifier's or segmenter's image
LATENT = 8      # pixels per side of a diffusion latent
CLASSES = 3


class Classifier(nn.Module):
    """{"logits", "loss"}: the network's logits and their cross-entropy with `labels`."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, pixel_values, labels):
        logits = self.net(pixel_values)
        return {"logits": logits, "loss": F.cross_entropy(logits, labels)}


class Segmenter(nn.Module):
    """{"logits", "loss"}: torchvision's segmentation output `out` (per-pixel logits at the image's size) and its
    cross-entropy with a label map."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, pixel_values, labels):
        logits = self.net(pixel_values)["out"]
        return {"logits": logits, "loss": F.cross_entropy(logits, labels)}


class NoisePredictor(nn.Module):
    """{"sample", "loss"}: a diffusers UNet2DConditionModel's noise prediction and its squared error against the
    noise that was added (the loss a diffusion model trains with)."""

    def __init__(self, unet: nn.Module):
        super().__init__()
        self.unet = unet

    def forward(self, sample, timestep, encoder_hidden_states, noise):
        predicted = self.unet(sample, timestep, encoder_hidden_states).sample
        return {"sample": predicted, "loss": F.mse_loss(predicted, noise)}


class Autoencoder(nn.Module):
    """{"latent", "sample", "loss"}: a diffusers AutoencoderKL's latent (the posterior's mean: sampling it is
    random), the decoded image, and the reconstruction error plus a small KL term."""

    def __init__(self, vae: nn.Module):
        super().__init__()
        self.vae = vae

    def forward(self, pixel_values):
        posterior = self.vae.encode(pixel_values).latent_dist
        latent = posterior.mean
        sample = self.vae.decode(latent).sample
        loss = F.mse_loss(sample, pixel_values) + 1e-3 * posterior.kl().mean()
        return {"latent": latent, "sample": sample, "loss": loss}


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _image_batch(size: int = IMAGE) -> dict:
    return {"pixel_values": torch.randn(BATCH, 3, size, size, generator=_generator()),
            "labels": torch.tensor([1, 2])}


def _segmentation_batch(size: int = IMAGE) -> dict:
    gen = _generator()
    return {"pixel_values": torch.randn(BATCH, 3, size, size, generator=gen),
            "labels": torch.randint(0, CLASSES, (BATCH, size, size), generator=gen)}


def _seeded(build: Callable[[], nn.Module]) -> nn.Module:
    """The network built with seed 0, in evaluation mode, its dropout off: random numbers cannot match torch, so a
    ported network trains with dropout probability 0 (docs/porting.md), and the zoo compares training."""
    torch.manual_seed(0)
    model = build().eval()
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    return model


# ---- the networks, small ------------------------------------------------------------------------------------------

def unet2d_condition() -> nn.Module:
    """diffusers' text-conditioned U-Net (Stable Diffusion's), two resolutions, cross-attention in one."""
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel(sample_size=LATENT, in_channels=4, out_channels=4, layers_per_block=1,
                                block_out_channels=(8, 16), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=16,
                                attention_head_dim=4, norm_num_groups=4)


def autoencoder_kl() -> nn.Module:
    """diffusers' VAE (Stable Diffusion's latent autoencoder), two resolutions."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                         up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16), latent_channels=4,
                         norm_num_groups=4, sample_size=16)


def _diffusion_batch() -> dict:
    gen = _generator()
    return {"sample": torch.randn(BATCH, 4, LATENT, LATENT, generator=gen), "timestep": torch.tensor([10, 500]),
            "encoder_hidden_states": torch.randn(BATCH, 3, 16, generator=gen),
            "noise": torch.randn(BATCH, 4, LATENT, LATENT, generator=gen)}


def _torchvision(name: str, **kwargs) -> Callable[[], nn.Module]:
    def build():
        import torchvision

        return torchvision.models.get_model(name, weights=None, **kwargs)
    return build


def _shufflenet_v2_small() -> nn.Module:
    import torchvision

    return torchvision.models.ShuffleNetV2([1, 2, 1], [24, 48, 96, 192, 1024], num_classes=CLASSES)


# MobileNetV3 with about half of its blocks, every kind kept: without expansion, ReLU and hard-swish, with and
# without squeeze-excitation, strided and residual, and (for the segmenters, as torchvision builds them) the dilated
# last stage. Its compile time, per block, is most of these families' time. (input, kernel, expanded, output,
# squeeze-excitation, activation, stride, dilation), as torchvision's InvertedResidualConfig takes them.
def _mobilenet_v3_blocks(large: bool, dilation: int = 1) -> list[tuple]:
    if large:  # 8 of mobilenet_v3_large's 15
        return [(16, 3, 16, 16, False, "RE", 1, 1), (16, 3, 64, 24, False, "RE", 2, 1),
                (24, 5, 72, 40, True, "RE", 2, 1), (40, 5, 120, 40, True, "RE", 1, 1),
                (40, 3, 240, 80, False, "HS", 2, 1), (80, 3, 184, 80, False, "HS", 1, 1),
                (80, 5, 672, 160, True, "HS", 2, dilation), (160, 5, 960, 160, True, "HS", 1, dilation)]
    return [(16, 3, 16, 16, True, "RE", 2, 1), (16, 3, 72, 24, False, "RE", 2, 1),  # 6 of mobilenet_v3_small's 11
            (24, 3, 88, 24, False, "RE", 1, 1), (24, 5, 96, 40, True, "HS", 2, 1),
            (40, 5, 240, 40, True, "HS", 1, 1), (40, 5, 288, 96, True, "HS", 2, 1)]


def _mobilenet_v3(large: bool, dilation: int = 1) -> tuple[nn.Module, list]:
    """The network and its blocks' configurations (torchvision's InvertedResidualConfig)."""
    from torchvision.models.mobilenetv3 import InvertedResidualConfig, MobileNetV3

    blocks = [InvertedResidualConfig(*block, width_mult=1.0) for block in _mobilenet_v3_blocks(large, dilation)]
    return MobileNetV3(blocks, last_channel=1280 if large else 1024, num_classes=CLASSES), blocks


class _Stages(nn.Module):
    """A MobileNetV3's features giving torchvision's segmentation heads what its builders take from them (through
    IntermediateLayerGetter): the output of the layers in `taps`, by name."""

    def __init__(self, features: nn.Sequential, taps: dict[int, str]):
        super().__init__()
        self.features, self.taps = features, taps

    def forward(self, x):
        found = {}
        for index, layer in enumerate(self.features):
            x = layer(x)
            if index in self.taps:
                found[self.taps[index]] = x
        return found


def _segmenter_on_mobilenet_v3(head: str) -> nn.Module:
    """torchvision's deeplabv3_mobilenet_v3_large / lraspp_mobilenet_v3_large, made as their builders make them
    (the dilated backbone; its stages start at the strided blocks), on the smaller MobileNetV3-Large above."""
    from torchvision.models.segmentation.deeplabv3 import DeepLabHead, DeepLabV3
    from torchvision.models.segmentation.lraspp import LRASPP

    network, blocks = _mobilenet_v3(large=True, dilation=2)
    features = network.features
    # the builders' stages: the stem, each block whose configuration strides (features[0] is the stem, so block i is
    # features[i + 1]), the last convolution
    stages = [0, *(i + 1 for i, block in enumerate(blocks) if block.stride > 1), len(features) - 1]
    high, low = stages[-1], stages[-4]
    if head == "deeplabv3":
        return DeepLabV3(_Stages(features, {high: "out"}), DeepLabHead(features[high].out_channels, CLASSES))
    return LRASPP(_Stages(features, {low: "low", high: "high"}), features[low].out_channels,
                  features[high].out_channels, CLASSES)


def _timm(name: str, **kwargs) -> Callable[[], nn.Module]:
    def build():
        import timm

        return timm.create_model(name, pretrained=False, num_classes=CLASSES, **kwargs)
    return build


def _families() -> list[Family]:
    return [
        Family("unet2d_condition", "diffusion", lambda: (_seeded(lambda: NoisePredictor(unet2d_condition())),
                                                         _diffusion_batch()),
               note="diffusers; upsamples with F.interpolate(scale_factor=2.0)"),
        Family("autoencoder_kl", "diffusion", lambda: (_seeded(lambda: Autoencoder(autoencoder_kl())),
                                                       {"pixel_values": torch.randn(BATCH, 3, 16, 16,
                                                                                    generator=_generator())}),
               note="diffusers; the posterior's mean, not a sample"),
        Family("tv_resnet18", "vision", lambda: (_seeded(lambda: Classifier(
            _torchvision("resnet18", num_classes=CLASSES)())), _image_batch()), chaotic=True,
            note="torchvision; chaotic (torch's float32 and float64 losses part at step 3)"),
        Family("tv_mobilenet_v3", "vision", lambda: (_seeded(lambda: Classifier(_mobilenet_v3(large=False)[0])),
                                                     _image_batch(IMAGE * 2)),
            note="torchvision; hard-swish, squeeze-excitation; MobileNetV3-Small with 6 of its 11 blocks; 64 x 64"),
        # x0.5's widths with 1, 2, 1 units a stage (it has 4, 8, 4): both kinds of unit, strided and not, in each
        Family("tv_shufflenet_v2", "vision", lambda: (_seeded(lambda: Classifier(_shufflenet_v2_small())),
                                                      _image_batch()), chaotic=True,
            note="torchvision; channel shuffle; x0.5 with 1, 2, 1 units; chaotic (judged on its first step)"),
        Family("tv_lraspp", "segmentation", lambda: (_seeded(lambda: Segmenter(
            _segmenter_on_mobilenet_v3("lraspp"))), _segmentation_batch(IMAGE * 2)),
            note="torchvision; upsampled to the image's size; MobileNetV3-Large with 8 of its 15 blocks"),
        Family("tv_deeplabv3", "segmentation", lambda: (_seeded(lambda: Segmenter(
            _segmenter_on_mobilenet_v3("deeplabv3"))), _segmentation_batch()), chaotic=True,
            note="torchvision; atrous pyramid pooling; MobileNetV3-Large with 8 of its 15 blocks; chaotic (float32 "
                 "and float64 part at the second loss)"),
        # S0's widths with 1, 1, 2, 2 blocks (S0 has 2, 2, 6, 4): each kind of block once at least (convolutional
        # MLP blocks, attention blocks with and without stride, the attention downsample) at half the compile time
        Family("timm_efficientformerv2", "vision", lambda: (_seeded(lambda: Classifier(
            _timm("efficientformerv2_s0", img_size=IMAGE * 2, depths=(1, 1, 2, 2), num_vit=1,
                  mlp_ratios=(4, 4, (4, 3), (4, 3)))())), _image_batch(IMAGE * 2)),
            note="timm; attention with learned biases, upsampling by scale factor; S0 with 1, 1, 2, 2 blocks"),
        # ConvNeXt-Atto with 1, 1, 2, 1 blocks (it has 2, 2, 6, 2; every stage, its downsample and blocks kept) and
        # ViT-Tiny with 3 of its 12 blocks (all alike): the same kinds of node in half the compile time
        Family("timm_convnext", "vision", lambda: (_seeded(lambda: Classifier(
            _timm("convnext_atto", depths=(1, 1, 2, 1))())), _image_batch()),
            note="timm; Atto with 1, 1, 2, 1 blocks"),
        Family("timm_vit", "vision", lambda: (_seeded(lambda: Classifier(
            _timm("vit_tiny_patch16_224", img_size=IMAGE, patch_size=8, depth=3)())), _image_batch()),
            note="timm; Tiny with 3 of its 12 blocks"),
    ]


FAMILIES: dict[str, Family] = {f.name: f for f in _families()}


# ---- a diffusion sampling loop --------------------------------------------------------------------------------

def sample_images(predict_noise: Callable, decode: Callable, scheduler, latents: torch.Tensor,
                  encoder_hidden_states: torch.Tensor, steps: int) -> torch.Tensor:
    """A text-to-image pipeline's loop: the scheduler (diffusers, in torch) steps the latents with the U-Net's
    noise predictions, then the VAE decodes them. `predict_noise(latents, timesteps, encoder_hidden_states)` and
    `decode(latents)` take and return torch tensors: torch's own modules, or ported cells behind
    `torch_callable`, so one loop runs both and their images can be compared."""
    scheduler.set_timesteps(steps)
    latents = latents * scheduler.init_noise_sigma
    for t in scheduler.timesteps:
        timesteps = t.expand(latents.shape[0]).to(torch.int64)
        noise = predict_noise(scheduler.scale_model_input(latents, t), timesteps, encoder_hidden_states)
        latents = scheduler.step(noise, t, latents).prev_sample
    return decode(latents)


def torch_callable(cell, output: str | None = None) -> Callable:
    """A ported cell called with torch tensors and answering a torch tensor (zero-copy both ways): its output
    named `output` when the cell answers a mapping."""
    from .._core.convert import to_ms, to_torch

    def call(*tensors):
        out = cell(*(to_ms(t.contiguous()) for t in tensors))
        return to_torch(out[output] if output else out)
    return call


class Decoder(nn.Module):
    """The VAE's decoder as a module of its own (a pipeline decodes without encoding)."""

    def __init__(self, vae: nn.Module):
        super().__init__()
        self.vae = vae

    def forward(self, latents):
        return self.vae.decode(latents).sample


# ---- detection: sizes that depend on values (aot_ops.from_torch_split) -----------------------------------------

DETECTION_IMAGE = (64, 80)  # height, width of the test image (SSD resizes to its own 320 x 320)


def _resnet18_fpn(p6p7: bool = False):
    """torchvision's ResNet-FPN backbone on a ResNet-18 (the detectors' builders take a ResNet-50): small enough
    for a test, the same code."""
    from torchvision.models.detection.backbone_utils import resnet_fpn_backbone
    from torchvision.ops.feature_pyramid_network import LastLevelP6P7

    if p6p7:  # RetinaNet's and FCOS's pyramid: C3-C5 and two more levels
        return resnet_fpn_backbone(backbone_name="resnet18", weights=None, trainable_layers=5,
                                   returned_layers=[2, 3, 4], extra_blocks=LastLevelP6P7(256, 256))
    return resnet_fpn_backbone(backbone_name="resnet18", weights=None, trainable_layers=5)


def _detectors() -> dict[str, Callable[[], nn.Module]]:
    """The six detector families of torchvision, small, in evaluation mode (seed 0). Score thresholds are lowered
    where random weights would keep no box (the classifiers start at a prior of 0.01), so that every model
    detects something to compare."""
    from torchvision.models import detection as D

    size = dict(min_size=DETECTION_IMAGE[0], max_size=DETECTION_IMAGE[1])
    return {
        "fasterrcnn": lambda: D.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None,
                                                                     num_classes=CLASSES, **size),
        "maskrcnn": lambda: D.MaskRCNN(_resnet18_fpn(), num_classes=CLASSES, **size),
        "keypointrcnn": lambda: D.KeypointRCNN(_resnet18_fpn(), num_classes=2, num_keypoints=5, **size),
        "retinanet": lambda: D.RetinaNet(_resnet18_fpn(True), num_classes=CLASSES, score_thresh=0.001, **size),
        "fcos": lambda: D.FCOS(_resnet18_fpn(True), num_classes=CLASSES, score_thresh=0.05, **size),
        "ssdlite": lambda: D.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=CLASSES,
                                                           score_thresh=0.001),
    }


DETECTORS = ("fasterrcnn", "maskrcnn", "keypointrcnn", "retinanet", "fcos", "ssdlite")


def detector(name: str) -> nn.Module:
    return _seeded(_detectors()[name])


def detection_images(count: int = 1) -> list[torch.Tensor]:
    gen = _generator(5)
    return [torch.rand(3, *DETECTION_IMAGE, generator=gen) for _ in range(count)]


def check_detector(name: str, calls: int = 0) -> dict:
    """One detector split-ported (aot_ops.from_torch_split) and run in PyNative then GRAPH_MODE on the test image:
    per mode whether every output equals torch's (count and values, in order), the first call's seconds (the port
    is made then), and with `calls` > 0 the median call against torch eager's (`zoo._alternating_ms`)."""
    import mindspore as ms

    from .. import from_torch_split
    from .._core.convert import to_ms, to_torch
    from .zoo import _alternating_ms

    model = detector(name)
    images = detection_images()
    ms_images = [to_ms(image) for image in images]
    with torch.no_grad():
        expected = model(images)
    port = from_torch_split(model)
    row: dict = {"detector": name, "detections": int(expected[0]["boxes"].shape[0])}
    previous = ms.get_context("mode")
    try:
        for mode in ("pynative", "graph"):
            ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
            start = time.perf_counter()
            found = port(ms_images)
            row[f"first_call_s_{mode}"] = time.perf_counter() - start
            row[f"equal_{mode}"] = all(
                set(f) == set(e) and all(torch.equal(to_torch(f[k]), e[k]) for k in e) for f, e in zip(found, expected))
            if calls:
                ours, eager = _alternating_ms(lambda: port(ms_images), lambda: _eval(model, images), calls)
                row[f"ratio_{mode}"], row["torch_ms"] = ours / eager, eager
    finally:
        ms.set_context(mode=previous)
    row["cells"] = len([p for p in port.parts if p.cell is not None])
    row["graphs"] = len(port.parts)
    row["in_torch"] = port.in_torch
    return row


def _eval(model, images):
    with torch.no_grad():
        return model(images)


def detection_table(rows: list[dict]) -> str:
    lines = ["| detector | detections | graphs (in MindSpore) | equal to torch (PyNative / GRAPH) | first call s "
             "(PyNative / GRAPH) | call vs torch (PyNative / GRAPH) | torch ms | run by torch past the size limit |",
             "|---|---:|---|---|---|---|---:|---|"]
    for r in rows:
        ratio = " / ".join(f"{r[k]:.2f}x" if k in r else "-" for k in ("ratio_pynative", "ratio_graph"))
        lines.append(f"| {r['detector']} | {r['detections']} | {r['graphs']} ({r['cells']}) | "
                     f"{'yes' if r['equal_pynative'] else 'NO'} / {'yes' if r['equal_graph'] else 'NO'} | "
                     f"{r['first_call_s_pynative']:.1f} / {r['first_call_s_graph']:.1f} | {ratio} | "
                     f"{r.get('torch_ms', 0):.1f} | {', '.join(c.split(' (')[0] for c in r['in_torch']) or '-'} |")
    return "\n".join(lines)
