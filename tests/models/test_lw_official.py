"""Kind ``transformer``'s official options against an independent re-implementation of the released
LW-Transformer captioning code (``tests/lw_released.py``): a model loaded with a random released state dict
(non-zero biases and LayerNorm parameters) gives the released teacher-forced and step-by-step (cached)
log-probabilities to 1e-5, pad tokens inside captions included — the LW model at 1x and 3x, with and without the
group-wise feed-forward, and the dense Transformer that ``train.py --model transformer`` builds — and the released
beam search's outputs (M2's search: words, per-word log-probs and scores to 1e-5); the doubled norm's
parameters counted in closed form and the preset's count equal to the released layout's; the preset's settings."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from tests.models.conftest import BOS, EOS, PAD, model_inputs, tiny_inputs
from lw_released import ReleasedStateful, released_log_probs, released_shapes, released_steps, random_state
from m2_released import beam_search_over
from test_m2_official import PADDED, DropoutCalls, region_inputs

from vlattn.config import ModelConfig, Spec, config_to_dict
from vlattn.decoding import beam_search
from vlattn.errors import ConfigError
from vlattn.layers import DoublePostNorm, PostNorm
from vlattn.models import build_captioner
from vlattn.models.profile import backbone_parameters, count_parameters
from vlattn.validation import load_valid_config

WORDS, D, HEADS, D_FF, D_IN, LAYERS, MAX_LEN = 30, 32, 4, 64, 12, (2, 3), 20
OFFICIAL = {"residual": "official", "positions": "table", "padding": "official", "padded_regions": PADDED,
            "init": "official"}
SITES = ("encoder_self_attention", "decoder_self_attention", "decoder_cross_attention")


@dataclass(frozen=True)
class Case:
    """A released model: ``groups`` of its attention (1 = ``transformer_official``), ``--d_k`` as a multiple of
    d / h, and whether ``--LFFN`` is on."""

    groups: int
    expansion: int = 1
    lffn: bool = True

    def config(self, **options: object) -> ModelConfig:
        """Kind ``transformer`` with the official options (``options`` changes some) and this case's sites."""
        if self.groups == 1:
            attention, ffn = Spec("mha"), Spec("plain")
        else:
            attention = Spec("gmha", {"groups": self.groups, "expansion": self.expansion, "share_weights": True,
                                      "group_merge": True})
            ffn = Spec("gffn", {"groups": self.groups, "share_weights": True}) if self.lffn else Spec("plain")
        return ModelConfig(
            kind="transformer", feature_dim=D_IN, d_model=D, num_heads=HEADS, d_ff=D_FF, encoder_layers=LAYERS[0],
            decoder_layers=LAYERS[1], dropout=0.1, attention_dropout=0.1, embedding_dropout=0.0, max_positions=MAX_LEN,
            output_bias=False, feed_forward=ffn, options={**OFFICIAL, **options}, **{site: attention for site in SITES},
        )

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return released_shapes(vocab=WORDS, d_model=D, heads=HEADS, d_k=self.expansion * D // HEADS, d_ff=D_FF,
                               d_in=D_IN, groups=self.groups, layers=LAYERS, max_len=MAX_LEN,
                               lffn=self.lffn and self.groups > 1)


CASES = {"lw-1x": Case(2), "lw-3x": Case(2, expansion=3), "lw-1x-dense-ffn": Case(2, lffn=False),
         "transformer": Case(1)}

# vlattn name -> released name (the first pattern that matches)
NAMES = [
    (r"encoder\.input_proj\.0\.", "encoder.fc."),
    (r"encoder\.input_proj\.3\.", "encoder.layer_norm."),
    (r"decoder\.embed\.", "decoder.word_emb."),
    (r"decoder\.positions\.table", "decoder.pos_emb.weight"),
    (r"decoder\.output\.", "decoder.fc."),
    (r"(encoder\.layers\.\d+)\.self_attn\.", r"\1.mhatt.attention."),
    (r"(encoder\.layers\.\d+)\.attn_norm\.inner\.norm\.", r"\1.mhatt.layer_norm."),
    (r"(encoder\.layers\.\d+)\.attn_norm\.outer\.norm\.", r"\1.lnorm."),
    (r"(decoder\.layers\.\d+)\.self_attn\.", r"\1.self_att.attention."),
    (r"(decoder\.layers\.\d+)\.self_norm\.inner\.norm\.", r"\1.self_att.layer_norm."),
    (r"(decoder\.layers\.\d+)\.self_norm\.outer\.norm\.", r"\1.lnorm1."),
    (r"(decoder\.layers\.\d+)\.cross\.attention\.", r"\1.enc_att.attention."),
    (r"(decoder\.layers\.\d+)\.cross\.norm\.inner\.norm\.", r"\1.enc_att.layer_norm."),
    (r"(decoder\.layers\.\d+)\.cross\.norm\.outer\.norm\.", r"\1.lnorm2."),
    (r"(\w+\.layers\.\d+)\.ffn\.", r"\1.pwff."),
    (r"(\w+\.layers\.\d+)\.ffn_norm\.norm\.", r"\1.pwff.layer_norm."),
]
PROJECTIONS = {"q_proj": "fc_q", "k_proj": "fc_k", "v_proj": "fc_v", "out_proj": "fc_o"}


def released_name(name: str) -> str:
    for pattern, replacement in NAMES:
        renamed, found = re.subn(f"^{pattern}", replacement, name)
        if found:
            parts = renamed.split(".")
            return ".".join(PROJECTIONS.get(part, part) for part in parts)
    raise KeyError(name)


def loaded(case: Case, seed: int) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """The vlattn model (eval mode) holding a random released state dict, and that state dict."""
    state = random_state(case.shapes(), seed)
    return holding(case, state, seed), state


def holding(case: Case, state: dict[str, torch.Tensor], seed: int) -> torch.nn.Module:
    """The vlattn model (eval mode) of ``case`` holding the released state dict ``state``."""
    torch.manual_seed(seed)
    model = build_captioner(case.config(), WORDS, pad_id=PAD).eval()
    model.load_state_dict({name: state[released_name(name)] for name in model.state_dict()})
    assert {released_name(name) for name in model.state_dict()} == set(state)  # every released tensor used
    return model


def captions(batch: int, length: int, seed: int) -> torch.Tensor:
    tokens = torch.randint(0, WORDS, (batch, length), generator=torch.Generator().manual_seed(seed))
    tokens[:, 0] = BOS
    tokens[1, length - 3 :] = PAD  # trailing padding
    tokens[2, 4] = PAD  # a pad token inside a caption: invisible to later positions, uniform itself
    return tokens


def compared(label: str, seed: int, batch: int, length: int, reference):
    """The vlattn model of a random released state (seed ``seed``), its inputs, captions (B, T) and what the
    released ``reference`` (:func:`released_log_probs` or :func:`released_steps`) gives for them (B, T, V)."""
    case = CASES[label]
    model, state = loaded(case, seed)
    inputs, padded = region_inputs(batch, seed=seed + 2)
    tokens = captions(batch, length, seed=seed + 3)
    return model, inputs, tokens, reference(state, padded, tokens, pad=PAD, heads=HEADS, groups=case.groups)


@pytest.mark.parametrize("label", CASES)
def test_teacher_forced_log_probs_match_the_released_forward_pass(label: str) -> None:
    model, inputs, tokens, expected = compared(label, 3, batch=4, length=11, reference=released_log_probs)
    with torch.no_grad():
        ours = model(inputs, tokens).log_softmax(-1)
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=0)
    # the cases the comparison covers: the pad position's distribution uniform, the real positions' far from it
    torch.testing.assert_close(expected[2, 4], torch.full((WORDS,), -math.log(WORDS)), atol=1e-5, rtol=0)
    assert expected[0].std(-1).min() > 0.01


@pytest.mark.parametrize("label", ["lw-1x", "lw-3x"])
def test_cached_steps_match_the_released_stateful_decoder(label: str) -> None:
    model, inputs, tokens, expected = compared(label, 4, batch=3, length=9, reference=released_steps)
    cache = model.encode(inputs)
    for t in range(1, tokens.shape[1] + 1):
        with torch.no_grad():
            ours, cache = model.step(tokens[:, :t], cache)
        torch.testing.assert_close(ours, expected[:, t - 1], atol=1e-5, rtol=0)


@pytest.mark.parametrize(("label", "seed"), [("lw-1x", 2), ("lw-3x", 2), ("transformer", 3)])
def test_beam_search_matches_the_released_beam_search(label: str, seed: int) -> None:
    """The released code base's beam search (M2's) over the released model against vlattn's beam search over the
    loaded model: beam 5, 20 steps, the EOS output row steered toward the word the model prefers (that word's row
    plus noise) so that beams end at different steps and some never; no exact score ties (see test_m2_official)."""
    case = CASES[label]
    state = random_state(case.shapes(), seed)
    inputs, padded = region_inputs(6, seed=seed)

    def released(out_size: int = 5):
        stateful = ReleasedStateful(state, padded, pad=PAD, heads=HEADS, groups=case.groups)
        return beam_search_over(stateful, 6, bos=BOS, eos=EOS, beam_size=5, max_len=MAX_LEN, out_size=out_size)

    favourite = int(torch.bincount(released().words.flatten(), minlength=WORDS).argmax())
    output = state["decoder.fc.weight"]
    output[EOS] = output[favourite] + 0.1 * torch.randn(output.shape[1], generator=torch.Generator().manual_seed(seed))
    words, log_probs, ties = released()  # (B, 5, 20) each
    model = holding(case, state, seed)
    with torch.no_grad():
        beams = beam_search(model, inputs, bos=BOS, eos=EOS, beam_size=5, max_len=MAX_LEN, pad=PAD)
    ended = words == EOS
    length = torch.where(ended.any(-1), ended.float().argmax(-1) + 1, torch.full_like(words[..., 0], MAX_LEN))
    # the cases the comparison must cover
    assert (length < MAX_LEN).any() and (length == MAX_LEN).any() and ((length > 1) & (length < MAX_LEN)).any()
    assert ties == 0
    for b in range(6):
        for k in range(5):
            n = int(length[b, k])
            assert beams.tokens[b, k, :n].tolist() == words[b, k, :n].tolist(), (label, b, k)
    ours = F.pad(beams.log_probs, (0, MAX_LEN - beams.log_probs.shape[-1]))  # 0 after EOS, as the released code
    torch.testing.assert_close(ours, log_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(beams.scores, log_probs.sum(-1), atol=1e-5, rtol=0)


def test_official_residual_wraps_each_attention_twice_and_the_feed_forward_once() -> None:
    torch.manual_seed(0)
    model = build_captioner(CASES["lw-1x"].config(), WORDS, pad_id=PAD).eval()
    encoder, decoder = model.encoder.layers[0], model.decoder.layers[0]
    for norm in (encoder.attn_norm, decoder.self_norm, decoder.cross.norm):
        assert isinstance(norm, DoublePostNorm)
        with torch.no_grad():  # not the identity LayerNorms of a fresh model
            for p in norm.parameters():
                p.add_(0.1 * torch.randn(p.shape))
        x, y = torch.randn(2, 5, D), torch.randn(2, 5, D)
        inner = torch.nn.functional.layer_norm(x + y, (D,), norm.inner.norm.weight, norm.inner.norm.bias)
        expected = torch.nn.functional.layer_norm(x + inner, (D,), norm.outer.norm.weight, norm.outer.norm.bias)
        torch.testing.assert_close(norm(x, y), expected)
    assert type(encoder.ffn_norm) is PostNorm and type(decoder.ffn_norm) is PostNorm
    paper = build_captioner(CASES["lw-1x"].config(residual="paper"), WORDS, pad_id=PAD)
    assert type(paper.encoder.layers[0].attn_norm) is PostNorm and type(paper.decoder.layers[0].cross.norm) is PostNorm


def test_the_doubled_norm_adds_one_layer_norm_per_attention_sub_layer() -> None:
    config = CASES["lw-1x"].config()
    official = count_parameters(build_captioner(config, WORDS, pad_id=PAD))["total"]
    paper = count_parameters(build_captioner(CASES["lw-1x"].config(residual="paper"), WORDS, pad_id=PAD))["total"]
    attention_sub_layers = LAYERS[0] + 2 * LAYERS[1]
    assert official - paper == attention_sub_layers * 2 * D
    # the whole model's trainable count is the released layout's (its frozen position table aside)
    shapes = CASES["lw-1x"].shapes()
    released = sum(torch.Size(shape).numel() for name, shape in shapes.items() if name != "decoder.pos_emb.weight")
    assert official == released


def test_preset_counts_the_released_models_parameters() -> None:
    preset, paper = load_valid_config("lw-transformer-official"), load_valid_config("lw-transformer")
    with torch.device("meta"):
        model = build_captioner(preset.model, 10201, pad_id=PAD)
        merged = {site: Spec("gmha", {**getattr(paper.model, site).options, "group_merge": True}) for site in SITES}
        paper_merged = build_captioner(dataclasses.replace(paper.model, **merged), 10201, pad_id=PAD)
    shapes = released_shapes(vocab=10201, d_model=512, heads=8, d_k=64, d_ff=2048, d_in=2048, groups=2,
                             layers=(6, 6), max_len=54)  # train.py --model lwtransformer --LFFN, its defaults
    frozen = torch.Size(shapes.pop("decoder.pos_emb.weight")).numel()
    assert count_parameters(model)["total"] == sum(torch.Size(shape).numel() for shape in shapes.values())
    assert model.decoder.positions.table.shape == (55, 512) and frozen == 28_160  # saved, not trained
    assert backbone_parameters(model) - backbone_parameters(paper_merged) == 18 * 2 * 512 == 18_432


def test_preset_sets_every_official_option() -> None:
    preset = load_valid_config("lw-transformer-official")
    model = preset.model
    assert model.kind == "transformer" and model.options == {**OFFICIAL, "padded_regions": 50}
    assert (model.attention_dropout, model.embedding_dropout, model.max_positions) == (0.1, 0.0, 54)
    for site in SITES:
        assert getattr(model, site).options == {"groups": 2, "expansion": 1, "share_weights": True,
                                                "group_merge": True}
    assert model.feed_forward == Spec("gffn", {"groups": 2, "share_weights": True, "group_intermediate": False})

    official, paper = (config_to_dict(config)["model"] for config in (preset, load_valid_config("lw-transformer")))
    differing = {key for key in official.keys() | paper.keys() if official.get(key) != paper.get(key)}
    assert differing == {"options", "attention_dropout", "embedding_dropout", "max_positions", *SITES}
    for site in SITES:  # the released attention merges group-wise
        assert official[site]["options"] == {**paper[site]["options"], "group_merge": True}


def test_dropout_calls_per_forward_are_the_released_modules() -> None:
    """Released modules per layer: encoder 5 (attention weights, LMultiHeadAttention's and the layer's dropout,
    the two in the feed-forward), decoder 8 (twice the first three, then the feed-forward's two), plus the input
    projection's; none on the embeddings."""
    model, inputs = build_captioner(CASES["lw-1x"].config(), WORDS, pad_id=PAD).train(), tiny_inputs()
    args = {**model_inputs(inputs), "features": torch.randn(3, 6, D_IN)}
    with DropoutCalls() as counter:
        model(args, inputs["tokens"])
    assert counter.calls == 1 + 5 * LAYERS[0] + 8 * LAYERS[1]


def test_official_init_draws_every_saved_matrix_from_xavier() -> None:
    torch.manual_seed(0)
    model = build_captioner(CASES["lw-3x"].config(), 500, pad_id=PAD)
    for name, tensor in model.state_dict().items():
        if tensor.dim() == 2:
            bound = (6 / sum(tensor.shape)) ** 0.5
            assert tensor.abs().max() <= bound and tensor.std() > 0.4 * bound, name
    attention = model.encoder.layers[0].self_attn
    assert all((p.bias == 0).all() for p in (attention.q_proj, attention.out_proj))  # as LScaledDotProductAttention
    table = model.decoder.positions.table
    assert table[0].abs().max() > 0  # the padding row too: the released pass overwrites the whole table


@pytest.mark.parametrize("key, value", [("residual", "twice"), ("positions", "learned"), ("padded_regions", 0)])
def test_a_bad_option_value_is_a_one_line_error_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError) as raised:
        load_valid_config("lw-transformer-official", [f"model.options.{key}={value}"])
    message = str(raised.value)
    assert "\n" not in message and f"model.options.{key}" in message
