"""Every VQA model kind, and MCAN with every mechanism at every site that mechanism allows: answer logits of
the right shape without NaN, padding of regions and of question words changes nothing, region order does not
matter, gradients reach every parameter, state-dict round trip. Plus MCAN's own checks: the 6+6 backbone's
parameter count, the placement errors of its sites, the sites' contexts, the official LayerNorm."""

from __future__ import annotations

import pytest
import torch
from registry_cases import ANSWERS, FEATURE_DIM, PAD, VOCAB, VQAModelCase, tiny_model_config, tiny_vqa_inputs, vqa_model_cases
from torch import nn

from vlattn.attention import AttentionContext, Site
from vlattn.config import ModelConfig
from vlattn.validation import load_valid_config, valid_config
from vlattn.errors import ConfigError
from vlattn.layers import StdLayerNorm
from vlattn.models import build_vqa_model, check_vqa_model_config
from vlattn.models.mcan import MCAN
from vlattn.models.reduction import AttentionalReduction

CASES = vqa_model_cases()


@pytest.fixture(params=CASES, ids=[case.id for case in CASES])
def case(request: pytest.FixtureRequest) -> VQAModelCase:
    return request.param


def test_logits_shape_and_finite(case: VQAModelCase) -> None:
    logits = case.build()(tiny_vqa_inputs())
    assert logits.shape == (3, ANSWERS) and torch.isfinite(logits).all()


def test_padded_regions_change_nothing(case: VQAModelCase) -> None:
    model, inputs = case.build(), tiny_vqa_inputs()
    mask = inputs["region_mask"]
    noisy = inputs["features"] + 50.0 * torch.randn_like(inputs["features"]) * ~mask[..., None]
    odd_boxes = torch.where(mask[..., None], inputs["boxes"], torch.rand_like(inputs["boxes"]))
    torch.testing.assert_close(model({**inputs, "features": noisy, "boxes": odd_boxes}), model(inputs))
    # the mask is real: without it the same noise changes the answers
    everything = {**inputs, "region_mask": torch.ones_like(mask)}
    assert not torch.allclose(model({**everything, "features": noisy}), model(everything))


def test_padded_question_words_change_nothing(case: VQAModelCase) -> None:
    model, inputs = case.build(), tiny_vqa_inputs()
    mask = inputs["question_mask"]
    # other word ids at the padded positions, and two more padded positions
    scrambled = torch.where(mask, inputs["questions"], torch.randint(3, VOCAB, mask.shape))
    longer = torch.cat([inputs["questions"], torch.full((3, 2), PAD)], dim=1)
    longer_mask = torch.cat([mask, torch.zeros(3, 2, dtype=torch.bool)], dim=1)
    expected = model(inputs)
    torch.testing.assert_close(model({**inputs, "questions": scrambled}), expected)
    torch.testing.assert_close(model({**inputs, "questions": longer, "question_mask": longer_mask}), expected)
    assert not torch.allclose(model({**inputs, "questions": scrambled, "question_mask": torch.ones_like(mask)}), expected)


def test_region_order_does_not_matter(case: VQAModelCase) -> None:
    model, inputs = case.build(), tiny_vqa_inputs()
    order = torch.tensor([3, 0, 5, 1, 4, 2])
    permuted = {**inputs, **{key: inputs[key][:, order] for key in ("features", "boxes", "region_mask")}}
    torch.testing.assert_close(model(permuted), model(inputs))


def test_answers_depend_on_image_and_question(case: VQAModelCase) -> None:
    model, inputs = case.build(), tiny_vqa_inputs()
    other_image = {**inputs, "features": inputs["features"].roll(1, 0), "boxes": inputs["boxes"].roll(1, 0),
                   "region_mask": inputs["region_mask"].roll(1, 0)}
    other_question = {**inputs, "questions": inputs["questions"].roll(1, 0), "question_mask": inputs["question_mask"].roll(1, 0)}
    assert not torch.allclose(model(other_image)[1], model(inputs)[1])
    assert not torch.allclose(model(other_question)[1], model(inputs)[1])


def test_gradients_reach_every_parameter(case: VQAModelCase) -> None:
    model, inputs = case.build().train(), tiny_vqa_inputs()
    loss = model(inputs).logsumexp(-1).sum()
    if case.kind.startswith("lxmert"):
        # LXMERT's answer head reads the pooled first word only; the vision output (what its pretraining heads
        # read) is the sole reader of the last layer's region streams and, in LXMERT+CATT, of every other layer's
        # cross-sample stream (docs/catt.md, "LXMERT+CATT")
        vision = model.encode(inputs).vision  # a LayerNorm output: its plain sum would be constant, so weigh it
        loss = loss + (vision * torch.randn(vision.shape, generator=torch.Generator().manual_seed(0))).sum()
    loss.backward()
    reduction_biases = {f"{name}.mlp.3.bias" for name, module in model.named_modules()
                        if isinstance(module, AttentionalReduction)}
    for name, parameter in model.named_parameters():
        grad = parameter.grad
        if name in reduction_biases:
            # the bias of the reduction's last layer shifts every logit of a softmax alike: no gradient (it is
            # in the released model and its parameter count)
            assert grad is not None and grad.abs().max() < 1e-6, name
            continue
        if name == "encoder.words.token_type.weight":
            # LXMERT's questions are all token type 0, the table's padding row (the released BertEmbeddings): none
            assert grad is None or not grad.any(), name
            continue
        if name.endswith("word_embedding.weight"):  # the rows of words absent from the batch get none
            grad = grad[inputs["questions"][inputs["question_mask"]]]
        assert grad is not None and grad.abs().sum() > 0, name


def test_state_dict_round_trip(case: VQAModelCase) -> None:
    model, other, inputs = case.build(seed=0), case.build(seed=9), tiny_vqa_inputs()
    assert not torch.allclose(other(inputs), model(inputs))
    other.load_state_dict(model.state_dict())
    torch.testing.assert_close(other(inputs), model(inputs))


# --- MCAN's own checks ------------------------------------------------------------------------------------------


def test_backbone_parameter_count_is_lw_table_ii() -> None:
    """MCAN-small 6+6, d=512, FFN 2048, 8 heads: 6 SA units (4 x 262,656 attention + 2,099,712 FFN + 2 x 1,024
    norm) and 6 SGA units (8 x 262,656 + 2,099,712 + 3 x 1,024) = 44,138,496 (LW paper Table II, 44.1M)."""
    cfg = load_valid_config("vqa-mcan").model
    with torch.device("meta"):
        model = build_vqa_model(cfg, 20573, 3129)
    attention, ffn, norm = 4 * (512 * 512 + 512), 512 * 2048 + 2048 + 2048 * 512 + 512, 2 * 512
    expected = 6 * (attention + ffn + 2 * norm) + 6 * (2 * attention + ffn + 3 * norm)
    assert expected == 44_138_496
    assert sum(p.numel() for p in model.backbone.parameters()) == expected
    assert sum(p.numel() for p in model.question.parameters()) == 20573 * 300 + 4 * 512 * (300 + 512 + 2)
    assert sum(p.numel() for p in model.classifier.parameters()) == 1024 * 3129 + 3129


def test_large_preset_dimensions() -> None:
    cfg = load_valid_config("vqa-mcan-large").model
    with torch.device("meta"):
        model = build_vqa_model(cfg, 100, 3129)
    layer = model.backbone.decoder[0]
    assert (cfg.d_model, cfg.d_ff, cfg.num_heads) == (1024, 4096, 16)
    assert layer.guided_attn.num_heads == 16 and layer.ffn.fc1.out_features == 4096
    assert model.classifier.in_features == 2048 and len(model.backbone.encoder) == len(model.backbone.decoder) == 6


@pytest.mark.parametrize(
    ("site", "name", "message"),
    [
        ("encoder_self_attention", "additive", r"model\.encoder_self_attention: attention 'additive' is not allowed at encoder_self"),
        ("decoder_self_attention", "additive", r"model\.decoder_self_attention: attention 'additive' is not allowed at encoder_self"),
        ("decoder_cross_attention", "nope", r"model\.decoder_cross_attention: unknown attention mechanism 'nope'"),
    ],
)
def test_site_placement_errors_name_the_key(site: str, name: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        valid_config({"task": "vqa", "model": {"kind": "mcan", "d_model": 16, "num_heads": 2, site: {"name": name}}})


def test_geometry_only_at_the_image_self_attention() -> None:
    """A mechanism that needs boxes is refused at the question site and accepted at the image site."""
    from vlattn.attention import ATTENTION, Capabilities, MultiHeadAttention

    class NeedsBoxes(MultiHeadAttention):
        capabilities = Capabilities(sites=frozenset({Site.ENCODER_SELF}), needs_geometry=True)
        seen: list[AttentionContext] = []

        def logit_bias(self, query, key, context):
            assert context is not None and context.geometry is not None
            self.seen.append(context)
            return None

    ATTENTION["needs-boxes"] = NeedsBoxes
    try:
        with pytest.raises(ConfigError, match=r"model\.encoder_self_attention: attention 'needs-boxes' needs box geometry"):
            check_vqa_model_config(tiny_model_config("mcan", {"encoder_self_attention": "needs-boxes"}))
        model = build_vqa_model(tiny_model_config("mcan", {"decoder_self_attention": "needs-boxes"}), VOCAB, ANSWERS)
        inputs = tiny_vqa_inputs()
        model(inputs)
        assert len(NeedsBoxes.seen) == 2  # one per decoder layer, same geometry object
        context = NeedsBoxes.seen[0]
        assert context.site is Site.ENCODER_SELF and context.geometry is NeedsBoxes.seen[1].geometry
        assert torch.equal(context.geometry.boxes, inputs["boxes"]) and torch.equal(context.query_mask, inputs["region_mask"])
    finally:
        del ATTENTION["needs-boxes"]


def test_options_and_kind_errors() -> None:
    with pytest.raises(ConfigError, match=r"model\.options\.layer_norm: 'x' is not one of: paper, official"):
        valid_config({"task": "vqa", "model": {"kind": "mcan", "options": {"layer_norm": "x"}}})
    with pytest.raises(ConfigError, match=r"model\.options\.flat_glimpses: must be >= 1"):
        valid_config({"task": "vqa", "model": {"kind": "mcan", "options": {"flat_glimpses": 0}}})
    with pytest.raises(ConfigError, match=r"model\.kind: unknown model kind 'nope'; valid names: catt, lxmert, lxmert_catt, m2, mcan, mcan_catt, transformer"):
        valid_config({"task": "vqa", "model": {"kind": "nope"}})


def test_official_layer_norm_matches_the_released_formula() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 7, 16)
    norm = StdLayerNorm(16)
    nn.init.normal_(norm.weight)
    nn.init.normal_(norm.bias)
    mean = x.sum(-1, keepdim=True) / 16
    std = ((x - mean) ** 2).sum(-1, keepdim=True).div(15).sqrt()  # unbiased
    torch.testing.assert_close(norm(x), norm.weight * (x - mean) / (std + 1e-6) + norm.bias)
    model = build_vqa_model(tiny_model_config("mcan", options={"word_dim": 10, "layer_norm": "official"}), VOCAB, ANSWERS)
    norms = [m for m in model.modules() if isinstance(m, (nn.LayerNorm, StdLayerNorm))]
    assert norms and all(isinstance(m, StdLayerNorm) for m in norms)


def test_attentional_reduction_by_hand() -> None:
    reduce = AttentionalReduction(d_model=2, hidden=3, glimpses=2, out_dim=2).eval()
    x = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [5.0, 5.0]]])
    mask = torch.tensor([[True, True, False]])
    logits = reduce.mlp(x)[0, :2]  # (2 real elements, 2 glimpses)
    weights = logits.softmax(dim=0)  # over the real elements only
    pooled = torch.cat([weights[:, g] @ x[0, :2] for g in range(2)])
    torch.testing.assert_close(reduce(x, mask)[0], reduce.merge(pooled))
    torch.testing.assert_close(reduce(x, torch.zeros_like(mask))[0], reduce.merge.bias)  # nothing real


def test_box_input_widens_the_projection() -> None:
    model = build_vqa_model(tiny_model_config("mcan", box_input=True, options={"word_dim": 10}), VOCAB, ANSWERS)
    assert model.image_proj.in_features == FEATURE_DIM + 5
    inputs = tiny_vqa_inputs()
    moved = {**inputs, "boxes": inputs["boxes"] * 0.5}
    assert not torch.allclose(model.eval()(moved), model(inputs))


def test_mcan_is_registered_as_a_vqa_kind_only() -> None:
    with pytest.raises(ConfigError, match=r"model\.kind: 'mcan' is a vqa model, but the config's task is 'captioning'"):
        from vlattn.models import build_captioner

        build_captioner(ModelConfig(kind="mcan"), 10)
    assert isinstance(build_vqa_model(tiny_model_config("mcan", options={"word_dim": 10}), VOCAB, ANSWERS), MCAN)


@pytest.mark.parametrize("preset", ["vqa-mcan", "vqa-mcan-large", "vqa-demo",
                                    "vqa-lw", "vqa-lw-demo", "vqa-mcan-gsa",
                                    "vqa-catt", "vqa-catt-demo"])
def test_vqa_presets_load_and_build(preset: str) -> None:
    cfg = load_valid_config(preset)
    assert cfg.task == "vqa" and cfg.train.schedule.name == "warmup_multistep" and cfg.data.max_question_len == 14
    with torch.device("meta"):
        model = build_vqa_model(cfg.model, 100, 20)
    assert len(model.backbone_layers()) == cfg.model.encoder_layers + cfg.model.decoder_layers


def test_mcan_embedding_dropout_acts_on_the_question_words_only() -> None:
    """model.embedding_dropout: none by default (released MCAN); when set, the question encoder's word dropout has
    that rate, the LSTM receives the embeddings zeroed or scaled by 1/(1-p) in training and unchanged in eval."""
    assert isinstance(build_vqa_model(tiny_model_config("mcan"), VOCAB, ANSWERS).question.word_dropout, nn.Identity)
    model = build_vqa_model(tiny_model_config("mcan", embedding_dropout=0.5), VOCAB, ANSWERS)
    dropout = model.question.word_dropout
    assert isinstance(dropout, nn.Dropout) and dropout.p == 0.5
    words = torch.tensor([[3, 4, 5, 6]])
    embedded = model.question.word_embedding(words)
    seen: list[torch.Tensor] = []
    model.question.lstm.register_forward_hook(lambda module, args, out: seen.append(args[0].detach()))
    torch.manual_seed(0)
    model.train()
    model.question(words)
    model.eval()
    model.question(words)
    ratio = seen[0] / embedded.detach()
    assert torch.all((ratio.abs() < 1e-6) | ((ratio - 2.0).abs() < 1e-5)) and (ratio.abs() < 1e-6).any()
    assert torch.equal(seen[1], embedded.detach())
