"""LW-Transformer in the VQA model (issue 12): MCAN with G-MHA + G-FFN at every site builds, answers and
back-propagates for every k dividing the heads (the authors' released VQA code fails for k > 1), with the
parameter count of the paper's formulas; k = 1 is MCAN itself with copied weights; vlattn/presets/vqa-lw.yaml is
Table II's "LW-Transformer 1x" (backbone 24,067,584 through ``vlattn profile``, MAdds of the complexity formulas)
and trains at the sqrt(k)-scaled rate of Sec. IV-C."""

from __future__ import annotations

import json
import math

import pytest
import torch
from registry_cases import ANSWERS, FEATURE_DIM, VOCAB, tiny_vqa_inputs
from typer.testing import CliRunner

from tests.models.test_groupwise import attention_params
from vlattn.cli import app
from vlattn.config import ModelConfig, Spec
from vlattn.validation import load_valid_config, valid_config
from vlattn.errors import ConfigError
from vlattn.models import build_vqa_model, check_vqa_model_config
from vlattn.models.profile import backbone_parameters
from vlattn.training.answers import answer_loss
from vlattn.training.schedules import build_schedule, lr_scale

SITES = ("encoder_self_attention", "decoder_self_attention", "decoder_cross_attention")
D, HEADS, D_FF = 32, 8, 64


def lw_mcan(groups: int, expansion: int = 1, share: bool = True, **fields) -> ModelConfig:
    """A 2+2-layer MCAN (d=32, 8 heads, FFN 64) with G-MHA at the three sites and G-FFN, ``groups`` each."""
    attention = Spec("gmha", {"groups": groups, "expansion": expansion, "share_weights": share})
    sizes = dict(kind="mcan", feature_dim=FEATURE_DIM, d_model=D, num_heads=HEADS, d_ff=D_FF, encoder_layers=2,
                 decoder_layers=2, dropout=0.0, options={"word_dim": 12}, box_input=True)
    specs = {site: attention for site in SITES}
    specs["feed_forward"] = Spec("gffn", {"groups": groups, "share_weights": share})
    return ModelConfig(**(sizes | specs | fields))


def ffn_params(d: int, d_ff: int, k: int, shared: bool) -> int:
    """G-FFN: dense d -> d_f, then d_f/k -> d/k once (WS) or per group."""
    return d * d_ff + d_ff + (1 if shared else k) * (d_ff // k * d // k + d // k)


@pytest.mark.parametrize("share", [True, False], ids=["ws", "separate"])
@pytest.mark.parametrize("expansion", [1, 3])
@pytest.mark.parametrize("groups", [1, 2, 4, 8])
def test_every_k_dividing_the_heads_answers_and_backpropagates(groups: int, expansion: int, share: bool) -> None:
    torch.manual_seed(0)
    model = build_vqa_model(lw_mcan(groups, expansion, share), VOCAB, ANSWERS).train()
    inputs = tiny_vqa_inputs()
    logits = model(inputs)  # (B, A)
    assert logits.shape == (3, ANSWERS) and torch.isfinite(logits).all()
    answer_loss(logits, torch.rand(3, ANSWERS), "sum").backward()
    for name, parameter in model.backbone.named_parameters():
        grad = parameter.grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, name
    attention = attention_params(D, groups, expansion, share, group_merge=False)
    norms = 2 * D
    expected = 2 * (attention + ffn_params(D, D_FF, groups, share) + 2 * norms)  # SA units
    expected += 2 * (2 * attention + ffn_params(D, D_FF, groups, share) + 3 * norms)  # SGA units
    assert backbone_parameters(model) == expected
    guided = model.backbone.decoder[0].guided_attn
    assert (guided.groups, guided.num_heads) == (groups, HEADS)  # h/k heads in each of the k groups


def test_one_group_is_mcan_with_copied_weights() -> None:
    plain = build_vqa_model(lw_mcan(1, feed_forward=Spec("plain"), **{site: Spec("mha") for site in SITES}),
                            VOCAB, ANSWERS).eval()
    torch.manual_seed(3)
    light = build_vqa_model(lw_mcan(1), VOCAB, ANSWERS).eval()
    inputs = tiny_vqa_inputs()
    assert not torch.allclose(light(inputs), plain(inputs))
    light.load_state_dict(plain.state_dict())  # same names and shapes
    torch.testing.assert_close(light(inputs), plain(inputs))


def test_groups_that_do_not_divide_the_heads_are_refused_naming_the_site() -> None:
    with pytest.raises(ConfigError, match=r"model\.encoder_self_attention: .*num_heads 8 is not divisible by groups 3"):
        check_vqa_model_config(lw_mcan(3, d_model=48, d_ff=48))


def lw_backbone_madds(d: int, d_ff: int, k: int, n: int, words: int, regions: int) -> int:
    """MCAN layout (the question through the SA units, the regions through the SGA units, guided by the words),
    per layer: a Q or K projection n d^2 / k per position, V d^2 / k, merge d^2, FFN d d_f (1 + 1/k); attention
    products N_q N_k d (n + 1)."""
    project = lambda length, width=n: length * d * d * width // k  # noqa: E731
    ffn = lambda length: length * (d * d_ff + d_ff * d // k)  # noqa: E731
    products = lambda nq, nk: nq * nk * d * (n + 1)  # noqa: E731
    question = 2 * project(words) + project(words, 1) + words * d * d + products(words, words) + ffn(words)
    image = 2 * project(regions) + project(regions, 1) + regions * d * d + products(regions, regions)
    guided = project(regions) + project(words) + project(words, 1) + regions * d * d + products(regions, words)
    return 6 * question + 6 * (image + guided + ffn(regions))


def test_vqa_lw_preset_profile_is_table2_lw_1x() -> None:
    """`vlattn profile --config vqa-lw --json`: backbone 24,067,584 parameters (Table II "24.0M", the
    count of the authors' VQA code) and 1.85 G MAdds per question of 100 regions and 14 words (Table II "1.85G")."""
    result = CliRunner().invoke(app, ["--threads", "1", "profile", "--config", "vqa-lw", "--json",
                                      "--batch", "1", "--repeats", "1", "--vocab-size", "50", "--answers", "10"])
    assert result.exit_code == 0, result.output
    backbone = json.loads(result.stdout)["backbone"]
    assert backbone["parameters"] == 24_067_584
    madds = lw_backbone_madds(512, 2048, 2, 1, words=14, regions=100)
    assert backbone["madds_per_sample"] == madds and round(madds / 1e9, 2) == 1.85


def test_vqa_lw_preset_options_and_scaled_rate() -> None:
    cfg = load_valid_config("vqa-lw")
    assert cfg.task == "vqa" and cfg.model.kind == "mcan" and (cfg.model.d_model, cfg.model.num_heads) == (512, 8)
    for site in SITES:
        options = getattr(cfg.model, site).options
        assert options == {"groups": 2, "expansion": 1, "share_weights": True, "group_merge": False}
    assert cfg.model.feed_forward.options == {"groups": 2, "share_weights": True, "group_intermediate": False}
    model = check_vqa_model_config(cfg.model)
    schedule = build_schedule(cfg.train.schedule, cfg.model.d_model)
    rate = lr_scale(cfg.train.lr_scaling, model) * schedule.lr_at(0, epoch=3)  # the first epoch after warm-up
    assert rate == pytest.approx(1e-4 * math.sqrt(2))


def test_vqa_lr_scaling_is_checked_when_a_config_loads() -> None:
    mixed = {"task": "vqa", "model": {"kind": "mcan", "d_model": 16, "num_heads": 4,
                                      "encoder_self_attention": {"name": "gmha", "options": {"groups": 4}},
                                      "feed_forward": {"name": "gffn", "options": {"groups": 2}}}}
    valid_config(mixed)  # mixing group counts is fine without the scaling
    with pytest.raises(ConfigError, match=r"train\.lr_scaling: sqrt_groups needs one group count, .* k = \[2, 4\]"):
        valid_config({**mixed, "train": {"lr_scaling": "sqrt_groups"}})


def test_lw_demo_is_the_vqa_demo_with_group_wise_layers() -> None:
    """The synthetic comparison's "same budget": vlattn/presets/vqa-lw-demo.yaml differs from vlattn/presets/vqa-demo.yaml only
    in the attention sites, the feed-forward and the sqrt(k) rate scaling."""
    from vlattn.config import config_to_dict

    plain, light = (config_to_dict(load_valid_config(name)) for name in ("vqa-demo", "vqa-lw-demo"))
    for key in (*SITES, "feed_forward"):
        assert plain["model"].pop(key)["name"] in ("mha", "plain")
        assert light["model"].pop(key)["options"]["groups"] == 2
    assert (plain["train"].pop("lr_scaling"), light["train"].pop("lr_scaling")) == ("none", "sqrt_groups")
    assert light == plain
