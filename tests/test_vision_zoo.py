"""The vision zoo (aot_ops/tools/vision_zoo.py): torchvision, timm and diffusers networks, each stage against torch,
and a diffusion sampling loop (a diffusers scheduler stepping the ported U-Net, the ported VAE decoding) whose
images equal torch's."""
from __future__ import annotations

import pytest
import torch

import aot_ops
from aot_ops.tools import vision_zoo, zoo

pytestmark = pytest.mark.slow  # ten networks, eight stages each, and a sampling loop (about 4 min)

_reports: dict[str, zoo.Report] = {}


def report_of(family: str) -> zoo.Report:
    if family not in _reports:
        _reports[family] = zoo.run(vision_zoo.FAMILIES[family])
    return _reports[family]


# A family's stages share its ports: one group each (tests/scheduling.py).
@pytest.mark.parametrize("family,stage", [pytest.param(f, s, id=f"{f}-{s}", marks=pytest.mark.xdist_group(f))
                                          for f in vision_zoo.FAMILIES for s in zoo.STAGES])
def test_stage_matches_torch(family, stage):
    report = report_of(family)
    assert report.stages.get(stage) == "ok", report.errors.get(stage, report.stages.get(stage))


def test_the_vision_zoo_has_each_kind_of_network():
    kinds = {f.kind for f in vision_zoo.FAMILIES.values()}
    assert kinds == {"vision", "segmentation", "diffusion"}
    sources = {name.split("_")[0] for name in vision_zoo.FAMILIES}
    assert {"tv", "timm", "unet2d", "autoencoder"} <= sources


def test_a_ddim_loop_over_the_ported_unet_and_vae_gives_torchs_images(mode, shared_ports):
    from diffusers import DDIMScheduler

    torch.manual_seed(0)
    unet, vae = vision_zoo.unet2d_condition().eval(), vision_zoo.Decoder(vision_zoo.autoencoder_kl()).eval()
    gen = torch.Generator().manual_seed(3)
    latents = torch.randn(2, 4, vision_zoo.LATENT, vision_zoo.LATENT, generator=gen)
    text = torch.randn(2, 3, 16, generator=gen)
    timesteps = torch.tensor([999, 999])
    scheduler = DDIMScheduler(num_train_timesteps=1000)

    with torch.no_grad():
        expected = vision_zoo.sample_images(lambda x, t, c: unet(x, t, c).sample, vae, scheduler, latents, text, 3)
    unet_cell = shared_ports.port("ddim-unet", unet, (latents, timesteps, text))
    vae_cell = shared_ports.port("ddim-vae", vae, (latents,))
    images = vision_zoo.sample_images(vision_zoo.torch_callable(unet_cell, "sample"),
                                      vision_zoo.torch_callable(vae_cell), scheduler, latents, text, 3)
    assert images.shape == (2, 3, 16, 16)
    torch.testing.assert_close(images, expected, rtol=1e-4, atol=1e-5)
    assert not torch.equal(expected, vae(latents).detach())  # the loop moved the latents


_detection_ports: dict[str, object] = {}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xdist_group(f"detector-{n}"))
                                  for n in vision_zoo.DETECTORS])
@pytest.mark.parametrize("mode_name", ["PYNATIVE_MODE", "GRAPH_MODE"])
def test_a_detector_split_at_its_data_dependent_steps_detects_what_torch_detects(name, mode_name):
    """torchvision's detectors (aot_ops.from_torch_split): the same boxes, scores, labels, masks and keypoints, in
    the same order, as torch's, in both modes (one port serves both: its cells run in either)."""
    import mindspore as ms

    from aot_ops._core.convert import to_ms, to_torch

    if name not in _detection_ports:
        model = vision_zoo.detector(name)
        _detection_ports[name] = (model, aot_ops.from_torch_split(model))
    model, port = _detection_ports[name]
    images = vision_zoo.detection_images()
    with torch.no_grad():
        expected = model(images)
    ms.set_context(mode=getattr(ms, mode_name))
    try:
        found = port([to_ms(image) for image in images])
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert len(found) == len(expected) == 1
    ours, theirs = found[0], expected[0]
    assert set(ours) == set(theirs)
    assert theirs["boxes"].shape[0] > 0  # something was detected
    for key, value in theirs.items():
        mine = to_torch(ours[key])
        assert mine.shape == value.shape and mine.dtype == value.dtype, (key, mine.shape, value.shape)
        torch.testing.assert_close(mine, value, rtol=1e-5, atol=1e-5, msg=lambda m, k=key: f"{k}: {m}")
    ported = [p for p in port.parts if p.cell is not None]
    assert max(p.nodes for p in ported) >= 100  # the backbone and heads run in MindSpore, not only the glue
    if name == "maskrcnn":  # each mask pasted at its own box's size: past 8 sizes, torch pastes
        assert any("paste_mask_in_image" in code for code in port.in_torch), port.in_torch
