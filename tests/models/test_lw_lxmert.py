"""LW-LXMERT (LW-Transformer's "Bert-style Model"): LXMERT with G-MHA and G-FFN at every site. Its layers against
the group-wise equations written out (the G-MHA reference of test_groupwise.py, G-FFN group by group, LXMERT's
post-norm residuals and GeLU); k = 1 equal to LXMERT with copied weights; backbone parameters against the closed
form for k, expansion and WS, and the presets' full-size counts (the paper's 181M / 100M / 117M are their weight
matrices, truncated: benchmarks/params_lw_lxmert.py); BERT's initialisation reaches the grouped projections."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
import torch.nn.functional as F
from test_groupwise import grouped_reference, reference_gmha

from vlattn.config import ModelConfig, Spec, load_config
from vlattn.layers import GroupedLinear
from vlattn.models import build_vqa_model, without_initialisation
from vlattn.models.lxmert import StreamMasks
from vlattn.models.profile import backbone_parameters
from vlattn.training.schedules import lr_scale

SITES = ("encoder_self_attention", "decoder_self_attention", "decoder_cross_attention")
D, HEADS, D_FF, FEATURES, VOCAB = 24, 4, 40, 6, 30


def lw_config(groups: int = 2, expansion: int = 1, share: bool = True, **fields: object) -> ModelConfig:
    attention = Spec("gmha", {"groups": groups, "expansion": expansion, "share_weights": share})
    sizes = {"d_model": D, "num_heads": HEADS, "d_ff": D_FF, **fields}
    return ModelConfig(kind="lxmert", feature_dim=FEATURES, encoder_layers=2, decoder_layers=2, max_positions=16,
                       dropout=0.0, options={"object_layers": 2},
                       feed_forward=Spec("gffn", {"groups": groups, "share_weights": share}),
                       **{site: attention for site in SITES}, **sizes)


def build(seed: int = 0, **options: object) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = build_vqa_model(lw_config(**options), VOCAB, 3).eval()
    with torch.no_grad():  # every tensor at a scale where mistakes show
        for name, tensor in model.named_parameters():
            tensor.copy_(torch.randn_like(tensor) * 0.3 + (1.0 if name.endswith("norm.weight") else 0.0))
    return model


def gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.erf(x / 2**0.5))


def reference_layer(layer: torch.nn.Module, q: torch.Tensor, kv: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
    """LN2(a + G-FFN(a)), a = LN1(q + G-MHA(q, kv, kv)); G-FFN(a) = [H_1 W2 + b2, ..., H_k W2 + b2] with
    H = GeLU(a W1 + b1)."""
    attended = reference_gmha(layer.self_attn, q, kv, kv, key_mask[:, None, None, :])
    a = F.layer_norm(q + attended, (D,), layer.attn_norm.norm.weight, layer.attn_norm.norm.bias, eps=1e-12)
    ffn = grouped_reference(layer.ffn.fc2, gelu(layer.ffn.fc1(a)))
    return F.layer_norm(a + ffn, (D,), layer.ffn_norm.norm.weight, layer.ffn_norm.norm.bias, eps=1e-12)


@pytest.mark.parametrize(("groups", "expansion", "share"), [(2, 1, True), (2, 3, True), (4, 3, False)])
def test_layers_match_the_group_wise_equations(groups: int, expansion: int, share: bool) -> None:
    model = build(groups=groups, expansion=expansion, share=share)
    encoder = model.encoder
    torch.manual_seed(1)
    words, regions = torch.randn(2, 5, D), torch.randn(2, 4, D)
    word_mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    region_mask = torch.tensor([[True] * 4, [True] * 2 + [False] * 2])
    m = StreamMasks.of(word_mask, region_mask, torch.rand(2, 4, 4))
    with torch.no_grad():
        language = encoder.language_layers[0]
        assert isinstance(language.ffn.fc2, GroupedLinear) and language.self_attn.groups == groups
        torch.testing.assert_close(language(words, m.word_keys, m.words),
                                   reference_layer(language, words, words, word_mask))
        obj = encoder.object_layers[1]
        torch.testing.assert_close(obj(regions, m.region_keys, m.regions),
                                   reference_layer(obj, regions, regions, region_mask))
        cross = encoder.cross_layers[0]
        norm = cross.cross_norm.norm

        def crossed(q: torch.Tensor, kv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            out = reference_gmha(cross.cross_attn, q, kv, kv, mask[:, None, None, :])
            return F.layer_norm(q + out, (D,), norm.weight, norm.bias, eps=1e-12)

        cw, cr = crossed(words, regions, region_mask), crossed(regions, words, word_mask)
        new_words, new_regions = cross(words, regions, m)
        torch.testing.assert_close(new_words, reference_layer(cross.language, cw, cw, word_mask))
        torch.testing.assert_close(new_regions, reference_layer(cross.vision, cr, cr, region_mask))


def test_one_group_is_lxmert_with_copied_weights() -> None:
    plain_cfg = dataclasses.replace(lw_config(), feed_forward=Spec("plain"), **{site: Spec("mha") for site in SITES})
    torch.manual_seed(0)
    plain = build_vqa_model(plain_cfg, VOCAB, 3).eval()
    light = build(groups=1)
    x = {"questions": torch.randint(1, VOCAB, (2, 5)), "question_mask": torch.ones(2, 5, dtype=torch.bool),
         "features": torch.randn(2, 4, FEATURES), "boxes": torch.rand(2, 4, 4),
         "region_mask": torch.ones(2, 4, dtype=torch.bool)}
    assert not torch.allclose(light(x), plain(x))
    light.load_state_dict(plain.state_dict())  # the same names and shapes
    torch.testing.assert_close(light(x), plain(x), rtol=0, atol=0)


def closed_form(d: int, d_ff: int, groups: int, expansion: int, share: bool, language: int, objects: int,
                cross: int) -> int:
    """The 9 + 5 + 5-style backbone with G-MHA (dense merge) and G-FFN (dense expansion) everywhere."""
    copies = 1 if share or groups == 1 else groups
    block = d // groups

    def grouped(out: int) -> int:  # a GroupedLinear(d -> out) with biases
        return copies * (out // groups * block + out // groups)

    attention = 2 * grouped(expansion * d) + grouped(d) + d * d + d
    ffn = d * d_ff + d_ff + copies * (d_ff // groups * block + block)
    layer = attention + ffn + 2 * 2 * d  # two LayerNorms
    return (language + objects) * layer + cross * (attention + 2 * d + 2 * layer)


@pytest.mark.parametrize(("groups", "expansion", "share"), list(itertools.product([1, 2, 4], [1, 3], [True, False])))
def test_backbone_parameters_in_closed_form(groups: int, expansion: int, share: bool) -> None:
    with without_initialisation():
        model = build_vqa_model(lw_config(groups, expansion, share), VOCAB, 3)
    assert backbone_parameters(model) == closed_form(D, D_FF, groups, expansion, share, 2, 2, 2)


@pytest.mark.parametrize(("preset", "groups", "expansion", "paper"),
                         [("vqa-lxmert", 1, 1, 181), ("vqa-lw-lxmert", 2, 1, 100), ("vqa-lw-lxmert-3x", 2, 3, 117)])
def test_presets_are_the_papers_models(preset: str, groups: int, expansion: int, paper: int) -> None:
    cfg = load_config(preset)
    with without_initialisation():
        model = build_vqa_model(cfg.model, 30522, 3129)
    assert backbone_parameters(model) == closed_form(768, 3072, groups, expansion, True, 9, 5, 5)
    weights = sum(p.numel() for layer in model.backbone_layers() for p in layer.parameters() if p.dim() >= 2)
    assert weights // 10**6 == paper  # Table XI's figure: the weight matrices, truncated to the million
    if groups > 1:
        assert cfg.train.schedule.options["lr"] * lr_scale(cfg.train.lr_scaling, model) == pytest.approx(2**0.5 * 1e-5)


def test_bert_initialisation_reaches_the_grouped_projections() -> None:
    torch.manual_seed(0)
    model = build_vqa_model(lw_config(groups=2, d_model=96, num_heads=4), VOCAB, 3)
    grouped = [module for module in model.modules() if isinstance(module, GroupedLinear)]
    assert grouped
    weights = torch.cat([module.weight.flatten() for module in grouped])
    assert abs(weights.std().item() - 0.02) < 0.002 and all(not module.bias.any() for module in grouped)
