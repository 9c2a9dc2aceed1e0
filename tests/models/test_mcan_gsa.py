"""MCAN + GSA, NG-SAN's VQA model (Table 9 "+GSA", vlattn/presets/vqa-mcan-gsa.yaml): the geometric bias reaches the
answers through the image self-attention only, with Eq. 8's symmetry; the preset's parameters by hand; the sites
and keys that cannot take it are refused. (The registry battery of tests/models/test_vqa_registry.py runs MCAN
with gsa, nsa and ngsa at every site they allow: padding, region order, gradients, state dicts.)"""

from __future__ import annotations

import pytest
import torch
from registry_cases import ANSWERS, VOCAB, tiny_model_config, tiny_vqa_inputs

from vlattn.config import Spec, config_to_dict
from vlattn.validation import load_valid_config, valid_config
from vlattn.errors import ConfigError
from vlattn.models import build_vqa_model


def mcan(image_attention: Spec, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = tiny_model_config("mcan", box_input=False, options={"word_dim": 10}, decoder_self_attention=image_attention)
    return build_vqa_model(cfg, VOCAB, ANSWERS).eval()


def mirrored(boxes: torch.Tensor) -> torch.Tensor:
    """x -> 1 - x for normalised x1y1x2y2 boxes (B, N, 4)."""
    return torch.stack([1 - boxes[..., 2], boxes[..., 1], 1 - boxes[..., 0], boxes[..., 3]], dim=-1)


def test_boxes_reach_the_answers_only_through_gsa() -> None:
    inputs = tiny_vqa_inputs()
    other_boxes = {**inputs, "boxes": tiny_vqa_inputs(seed=7)["boxes"]}
    plain, geometric = mcan(Spec("mha")), mcan(Spec("gsa"))
    torch.testing.assert_close(plain(other_boxes), plain(inputs))  # box_input false: MCAN never sees the boxes
    assert not torch.allclose(geometric(other_boxes), geometric(inputs), atol=1e-4)


@pytest.mark.parametrize(("geometry", "same"), [("paper", True), ("signed", False)])
def test_a_mirrored_layout_gives_the_same_answers_only_with_eq_8(geometry: str, same: bool) -> None:
    """Eq. 8 keeps |x_i - x_j| and the box sizes, which mirroring leaves alone; the signed option keeps the
    direction of the offsets, which it flips."""
    model, inputs = mcan(Spec("gsa", {"geometry": geometry})), tiny_vqa_inputs()
    flipped = model({**inputs, "boxes": mirrored(inputs["boxes"])})
    assert torch.allclose(flipped, model(inputs), atol=1e-5) is same


def test_gsa_is_refused_at_the_question_self_attention() -> None:
    for name in ("gsa", "ngsa"):
        with pytest.raises(ConfigError, match=rf"model\.encoder_self_attention: attention '{name}' needs box geometry"):
            valid_config({"task": "vqa", "model": {"kind": "mcan", "d_model": 16, "num_heads": 2,
                                                       "encoder_self_attention": {"name": name}}})


def test_box_encoding_is_refused_by_mcan() -> None:
    with pytest.raises(ConfigError, match=r"model\.box_encoding: 'sinusoidal' is not supported by MCAN"):
        valid_config({"task": "vqa", "model": {"kind": "mcan", "d_model": 16, "num_heads": 2,
                                                   "box_encoding": "sinusoidal"}})


def test_gsa_preset_is_mcan_small_with_gsa_in_the_image_self_attention() -> None:
    plain, geometric = config_to_dict(load_valid_config("vqa-mcan")), config_to_dict(load_valid_config("vqa-mcan-gsa"))
    attention = geometric["model"].pop("decoder_self_attention")
    plain["model"].pop("decoder_self_attention")
    assert geometric == plain
    assert attention == {"name": "gsa", "options": {"phi": ["query_dependent"], "d_g": None, "geometry": "paper"}}
    cfg = load_valid_config("vqa-mcan-gsa").model
    with torch.device("meta"):
        model = build_vqa_model(cfg, 100, 3129)
    # per image self-attention layer: FC 4 -> d_g=64 with bias (Eq. 9) and W_Q' 512 -> 8 heads x 64 with bias
    per_layer = (4 * 64 + 64) + (512 * 512 + 512)
    assert sum(p.numel() for p in model.backbone.parameters()) == 44_138_496 + 6 * per_layer == 45_716_352
