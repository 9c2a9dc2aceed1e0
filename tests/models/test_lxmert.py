"""LXMERT against Hugging Face transformers' ``LxmertModel`` (an independent implementation of the released
code), built randomly initialised from ``LxmertConfig`` and copied into vlattn's model through the released
parameter names: language, vision and pooled outputs to 1e-5, with padded questions and padded regions, at a small
size and at the full size (768-d, 12 heads, 9 + 5 + 5 layers, 30,522 words, 2048-d regions); the VQA head of
``LxmertForQuestionAnswering`` too. Plus the kind's own checks: the parameter count of the full size, the
unshared cross-attention variant, the pair head, the refused options."""

from __future__ import annotations

import pytest
import torch
from transformers import LxmertConfig, LxmertForQuestionAnswering, LxmertModel

from vlattn.config import ModelConfig
from vlattn.errors import ConfigError
from vlattn.importers.lxmert_names import head_names, parameter_names
from vlattn.models import build_vqa_model, check_vqa_model_config
from vlattn.models.lxmert import Lxmert, build_lxmert

SMALL = dict(vocab=50, d=32, heads=4, d_ff=48, language=3, objects=2, cross=2, features=12, positions=40)
FULL = dict(vocab=30522, d=768, heads=12, d_ff=3072, language=9, objects=5, cross=5, features=2048, positions=512)


def hf_config(size: dict, answers: int = 7) -> LxmertConfig:
    return LxmertConfig(
        vocab_size=size["vocab"], hidden_size=size["d"], num_attention_heads=size["heads"],
        intermediate_size=size["d_ff"], l_layers=size["language"], r_layers=size["objects"], x_layers=size["cross"],
        visual_feat_dim=size["features"], max_position_embeddings=size["positions"], num_qa_labels=answers,
    )


def vlattn_config(size: dict, **options: object) -> ModelConfig:
    return ModelConfig(
        kind="lxmert", feature_dim=size["features"], d_model=size["d"], num_heads=size["heads"], d_ff=size["d_ff"],
        encoder_layers=size["language"], decoder_layers=size["cross"], max_positions=size["positions"],
        options={"object_layers": size["objects"], **options},
    )


def copied(reference: torch.nn.Module, size: dict, answers: int = 7) -> Lxmert:
    """vlattn's LXMERT with the weights of ``reference`` (an ``LxmertModel`` or ``LxmertForQuestionAnswering``)."""
    names = parameter_names(size["language"], size["objects"], size["cross"])
    state = reference.state_dict()
    prefix = "lxmert." if isinstance(reference, LxmertForQuestionAnswering) else ""
    mapped = {new: state[prefix + old] for old, new in names.items()}
    if prefix:
        mapped.update({new: state["answer_head.logit_fc." + old] for old, new in head_names().items()})
    assert len(mapped) == len(state)  # every reference tensor has a place
    model = build_lxmert(vlattn_config(size), size["vocab"], answers)
    missing, unexpected = model.load_state_dict(mapped, strict=not not prefix)
    assert not unexpected and all(name.startswith("head.") for name in missing)
    return model.eval()


def padded_inputs(size: dict, batch: int = 3, words: int = 8, regions: int = 6, seed: int = 0) -> dict[str, torch.Tensor]:
    """Row b has b padded words (after [CLS] ... [SEP]) and b padded regions; padding carries junk."""
    g = torch.Generator().manual_seed(seed)
    question_mask = torch.ones(batch, words, dtype=torch.bool)
    region_mask = torch.ones(batch, regions, dtype=torch.bool)
    for row in range(1, batch):
        question_mask[row, words - row:] = False
        region_mask[row, regions - 2 * row:] = False
    questions = torch.randint(1, size["vocab"], (batch, words), generator=g).masked_fill(~question_mask, 0)
    corner = torch.rand(batch, regions, 2, generator=g) * 0.6
    boxes = torch.cat([corner, corner + 0.05 + torch.rand(batch, regions, 2, generator=g) * 0.35], -1)
    features = torch.randn(batch, regions, size["features"], generator=g).relu()
    return {"questions": questions, "question_mask": question_mask, "features": features, "boxes": boxes,
            "region_mask": region_mask}


def reference_call(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return dict(input_ids=inputs["questions"], attention_mask=inputs["question_mask"].float(),
                visual_feats=inputs["features"], visual_pos=inputs["boxes"],
                visual_attention_mask=inputs["region_mask"].float())


def assert_outputs_equal(reference: LxmertModel, model: Lxmert, inputs: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        expected = reference(**reference_call(inputs))
        ours = model.encode(inputs)
    for theirs, mine in ((expected.language_output, ours.language), (expected.vision_output, ours.vision),
                         (expected.pooled_output, ours.pooled)):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)


def test_small_equals_transformers_lxmert_with_padding() -> None:
    torch.manual_seed(0)
    reference = LxmertModel(hf_config(SMALL)).eval()
    model = copied(reference, SMALL)
    inputs = padded_inputs(SMALL)
    assert_outputs_equal(reference, model, inputs)
    # the padding is real: junk in the padded regions changes nothing, and the reference ignores it too
    junk = {**inputs, "features": inputs["features"] + 9.0 * ~inputs["region_mask"][..., None]}
    assert_outputs_equal(reference, model, junk)
    torch.testing.assert_close(model.encode(junk).pooled, model.encode(inputs).pooled, atol=1e-6, rtol=0)
    unmasked = {**junk, "region_mask": torch.ones_like(inputs["region_mask"])}
    assert not torch.allclose(model.encode(unmasked).pooled, model.encode(inputs).pooled, atol=1e-3)


def test_small_answer_head_equals_transformers_question_answering() -> None:
    torch.manual_seed(1)
    reference = LxmertForQuestionAnswering(hf_config(SMALL, answers=7)).eval()
    model = copied(reference, SMALL, answers=7)
    inputs = padded_inputs(SMALL, seed=3)
    with torch.no_grad():
        expected = reference(**reference_call(inputs)).question_answering_score
        torch.testing.assert_close(model(inputs), expected, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_full_size_equals_transformers_lxmert() -> None:
    torch.manual_seed(2)
    reference = LxmertModel(hf_config(FULL)).eval()
    model = copied(reference, FULL)
    assert_outputs_equal(reference, model, padded_inputs(FULL, batch=2, words=9, regions=10))


def test_full_size_parameters() -> None:
    """The encoder of the released size: 9 language, 5 relationship and 5 cross-modality layers of 7,087,872
    parameters per BERT layer (4 x 590,592 attention, 2 x 1,536 norms, 2,362,368 + 2,360,064 feed-forward) and
    a shared cross-attention sub-layer per cross layer (2,363,904); embeddings 23,837,184 + 393,216 + 1,536 +
    1,536; visual embedding 1,573,632 + 3,840; pooler 590,592."""
    layer = 4 * 590_592 + 2 * 1_536 + 2_362_368 + 2_360_064
    cross = layer * 2 + 4 * 590_592 + 1_536
    embeddings = 30522 * 768 + 512 * 768 + 2 * 768 + 2 * 768
    visual = 2048 * 768 + 768 + 2 * 768 + 4 * 768 + 768 + 2 * 768
    expected = 14 * layer + 5 * cross + embeddings + visual + 590_592
    model = check_vqa_model_config(vlattn_config(FULL), size=30522)
    encoder = sum(p.numel() for p in model.encoder.parameters())
    assert encoder == expected == sum(p.numel() for p in LxmertModel(hf_config(FULL)).parameters())
    # the layers alone: the LW-Transformer paper's "BERT-style model" of 181M parameters
    assert sum(p.numel() for layer in model.backbone_layers() for p in layer.parameters()) == 14 * layer + 5 * cross == 181_928_448


def test_unshared_cross_attention_has_one_sub_layer_per_direction() -> None:
    shared = build_lxmert(vlattn_config(SMALL), SMALL["vocab"], 4)
    separate = build_lxmert(vlattn_config(SMALL, share_cross_attention=False), SMALL["vocab"], 4)
    extra = sum(p.numel() for p in separate.parameters()) - sum(p.numel() for p in shared.parameters())
    d = SMALL["d"]
    assert extra == SMALL["cross"] * (4 * (d * d + d) + 2 * d)
    inputs = padded_inputs(SMALL)
    assert separate(inputs).shape == (3, 4)


def test_pair_head_reads_the_statement_with_each_image() -> None:
    """images: 2 (NLVR2): logits of (statement, left, right) = head([pooled(statement, left); pooled(statement,
    right)])."""
    torch.manual_seed(0)
    model = build_lxmert(vlattn_config(SMALL, images=2), SMALL["vocab"], 2).eval()
    single = padded_inputs(SMALL, batch=4, seed=5)
    pairs = {"questions": single["questions"][:2], "question_mask": single["question_mask"][:2]}
    order = torch.tensor([0, 2, 1, 3])  # statement 0 with images 0 and 2, statement 1 with images 1 and 3
    for key in ("features", "boxes", "region_mask"):
        pairs[key] = single[key][order].unflatten(0, (2, 2))
    with torch.no_grad():
        logits = model(pairs)
        pooled = torch.stack([
            torch.cat([model.encoder(single["questions"][[s]], single["question_mask"][[s]], single["features"][[i]],
                                     single["boxes"][[i]], single["region_mask"][[i]]).pooled[0] for i in images])
            for s, images in ((0, (0, 2)), (1, (1, 3)))
        ])
        torch.testing.assert_close(logits, model.head(pooled), atol=1e-6, rtol=0)
    assert logits.shape == (2, 2)


@pytest.mark.parametrize("change, key", [
    ({"box_input": True}, "model.box_input"),
    ({"box_encoding": "sinusoidal"}, "model.box_input/model.box_encoding"),
    ({"options": {"images": 3}}, "model.options.images"),
    ({"decoder_cross_attention": {"name": "gsa"}}, "model.decoder_cross_attention"),
])
def test_refused_settings_name_their_key(change: dict, key: str) -> None:
    from vlattn.config import config_to_dict
    from vlattn.validation import valid_config

    data = config_to_dict(valid_config({"task": "vqa", "model": {"kind": "lxmert"},
                                            "data": {"question_tokens": "wordpiece"}}))
    data["model"].update(change)
    with pytest.raises(ConfigError, match=key.split("/")[0]):
        check_vqa_model_config(valid_config(data).model)


def test_vqa_builder_dispatches_to_lxmert() -> None:
    model = build_vqa_model(vlattn_config(SMALL), SMALL["vocab"], 5, pad_id=0)
    assert isinstance(model, Lxmert)
    with pytest.raises(ConfigError, match="PAD"):
        build_vqa_model(vlattn_config(SMALL), SMALL["vocab"], 5, pad_id=3)
