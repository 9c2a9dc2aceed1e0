"""M2's official options (issue 15) against an independent re-implementation of the released code
(``tests/m2_released.py``): an imported model gives the released teacher-forced and step-by-step (cached)
log-probabilities to 1e-5, pad tokens inside captions included, and the released beam search's outputs
(beam 5, 20 steps: identical words, per-word log-probs and scores to 1e-5) with beams that end at different
steps and beams that never end; plus each option's own behaviour checked from its definition.

Beam searches are compared where the released selection is well defined: the released code breaks exact
score ties with an unspecified ``torch.sort`` order, and ties occur only after a beam chose the pad token
(its next distribution is uniform); the tests assert that their cases contain no tie."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from tests.models.conftest import BOS, EOS, PAD, VOCAB, model_inputs, tiny_inputs
from m2_released import ReleasedStateful, random_released_state, released_beam_search, released_log_probs
from test_m2 import m2_config

from vlattn.config import Spec
from vlattn.decoding import beam_search
from vlattn.errors import ConfigError
from vlattn.importers.m2_official import map_state_dict
from vlattn.layers import PositionTable, sinusoidal_positions
from vlattn.models import build_captioner
from vlattn.models.profile import trainable

RELEASED_SPECIALS = ["<unk>", "<pad>", "<bos>", "<eos>"]  # torchtext order: unk, pad, then bos, eos
R_UNK, R_PAD, R_BOS, R_EOS = 0, 1, 2, 3
WORDS, HEADS, REGIONS, PADDED = 30, 4, 7, 10  # released vocabulary size, heads, regions, zero-padded rows


def released_words(size: int = WORDS) -> list[str]:
    return RELEASED_SPECIALS + [f"w{i}" for i in range(size - 4)]


def imported(state: dict[str, torch.Tensor], padded: int = PADDED):
    """The vlattn model of a released state dict (eval mode) and the released -> vlattn word-id map."""
    result = map_state_dict(state, released_words(), heads=HEADS)
    result.config.model.options["padded_regions"] = padded
    model = build_captioner(result.config.model, len(result.vocab), pad_id=PAD).eval()
    model.load_state_dict(result.state)
    order = torch.tensor([result.vocab.stoi[w] for w in released_words()])  # released id -> vlattn id
    return model, order


def region_inputs(batch: int, seed: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """vlattn inputs with fewer real regions in some rows (zero features there) and the released model's
    input: the same features zero-padded to PADDED rows (its data loader pads every image to 50)."""
    generator = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, REGIONS, dtype=torch.bool)
    for row in range(1, batch):
        mask[row, REGIONS - row % 4:] = False
    features = torch.randn(batch, REGIONS, 12, generator=generator) * mask[..., None]
    inputs = {"features": features, "boxes": torch.rand(batch, REGIONS, 4, generator=generator), "region_mask": mask}
    return inputs, F.pad(features, (0, 0, 0, PADDED - REGIONS))


def test_teacher_forced_log_probs_match_the_released_forward_pass() -> None:
    state = random_released_state(vocab=WORDS, seed=3)
    model, order = imported(state)
    inputs, padded = region_inputs(4, seed=5)
    generator = torch.Generator().manual_seed(6)
    tokens = torch.randint(0, WORDS, (4, 12), generator=generator)  # released ids, any word (unk included)
    tokens[:, 0] = R_BOS
    tokens[1, 7], tokens[1, 8:] = R_EOS, R_PAD  # a finished caption with trailing padding
    tokens[2, 4] = R_PAD  # and a pad token inside a caption: invisible to later positions, uniform itself
    expected = released_log_probs(state, padded, tokens, pad=R_PAD, heads=HEADS)  # (B, T, V) released ids
    with torch.no_grad():
        ours = model(inputs, order[tokens]).log_softmax(-1)  # (B, T, V) vlattn ids
    torch.testing.assert_close(ours[..., order], expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours[2, 4], torch.full((WORDS,), -math.log(WORDS)), atol=1e-5, rtol=0)


def test_cached_steps_match_the_released_stateful_decoder() -> None:
    """One token at a time, as beam search feeds them: running keys, key padding and positions (the released
    stateful mode counts steps, pad or not) against vlattn's caches."""
    state = random_released_state(vocab=WORDS, seed=2)
    model, order = imported(state)
    inputs, padded = region_inputs(3, seed=2)
    tokens = torch.randint(4, WORDS, (3, 9), generator=torch.Generator().manual_seed(2))
    tokens[:, 0], tokens[0, 3], tokens[1, 5:7] = R_BOS, R_PAD, R_PAD
    released = ReleasedStateful(state, padded, pad=R_PAD, heads=HEADS)
    cache = model.encode(inputs)
    for t in range(1, tokens.shape[1] + 1):
        expected = released.step(tokens[:, t - 1 : t])[:, 0]  # (B, V)
        with torch.no_grad():
            ours, cache = model.step(order[tokens[:, :t]], cache)
        torch.testing.assert_close(ours[:, order], expected, atol=1e-5, rtol=0)


def steered_state(seed: int) -> dict[str, torch.Tensor]:
    """A random released state whose EOS output row competes with the word the model prefers (that word's
    row plus noise), so that beams end at different steps and some never."""
    state = random_released_state(vocab=WORDS, seed=seed)
    _, padded = region_inputs(6, seed)
    words = released_beam_search(state, padded, bos=R_BOS, eos=R_EOS, pad=R_PAD, heads=HEADS, out_size=5).words
    favourite = int(torch.bincount(words.flatten(), minlength=WORDS).argmax())
    output = state["decoder.fc.weight"]
    output[R_EOS] = output[favourite] + 0.1 * torch.randn(output.shape[1], generator=torch.Generator().manual_seed(seed))
    return state


@pytest.mark.parametrize("seed", [1, 11])
def test_beam_search_matches_the_released_beam_search(seed: int) -> None:
    state = steered_state(seed)
    model, order = imported(state)
    inputs, padded = region_inputs(6, seed)
    words, log_probs, ties = released_beam_search(state, padded, bos=R_BOS, eos=R_EOS, pad=R_PAD, heads=HEADS,
                                                  beam_size=5, max_len=20, out_size=5)  # (B, 5, 20) each
    with torch.no_grad():
        beams = beam_search(model, inputs, bos=BOS, eos=EOS, beam_size=5, max_len=20, pad=PAD)
    ended = words == R_EOS
    length = torch.where(ended.any(-1), ended.float().argmax(-1) + 1, torch.full_like(words[..., 0], 20))  # (B, 5)
    # the cases the comparison must cover
    assert (length < 20).any() and (length == 20).any() and ((length > 1) & (length < 20)).any() and ties == 0
    for b in range(6):
        for k in range(5):
            n = int(length[b, k])
            assert beams.tokens[b, k, :n].tolist() == order[words[b, k, :n]].tolist(), (b, k)
    ours = F.pad(beams.log_probs, (0, 20 - beams.log_probs.shape[-1]))  # 0 after EOS, as the released code
    torch.testing.assert_close(ours, log_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(beams.scores, log_probs.sum(-1), atol=1e-5, rtol=0)


# --- each option from its definition ------------------------------------------------------------------------


OFFICIAL = {"residual": "official", "positions": "table", "padding": "official", "padded_regions": 8,
            "init": "official"}


def official_m2(seed: int = 0, **changes):
    torch.manual_seed(seed)
    options = {**OFFICIAL, **changes}
    cfg = dataclasses.replace(m2_config(encoder_layers=3), dropout=0.1,
                              encoder_self_attention=Spec("memory", {"slots": 5, "init": "official"}))
    return build_captioner(dataclasses.replace(cfg, options=options), VOCAB, pad_id=PAD).eval()


def test_official_residual_is_a_norm_per_level_and_no_outer_norm() -> None:
    model, inputs = official_m2(), tiny_inputs()
    memory = model.encoder(inputs["features"], inputs["boxes"], inputs["region_mask"])
    x = torch.randn(3, 4, 16, generator=torch.Generator().manual_seed(2))
    site = model.decoder.layers[1].cross
    norm = site.norm.norm
    total = 0
    for i in range(3):
        c_i = site.attention(x, memory.states[:, i], memory.states[:, i], mask=memory.mask[:, None, None, :]).out
        normed = F.layer_norm(x + c_i, (16,), norm.weight, norm.bias)  # LayerNorm(Y + C(X_i, Y))
        alpha = torch.sigmoid(torch.cat([x, normed], -1) @ site.gate_proj[i].weight.T + site.gate_proj[i].bias)
        total = total + alpha * normed
    torch.testing.assert_close(site(x, {"regions": memory}), total / math.sqrt(3))


class DropoutCalls(TorchDispatchMode):
    """Counts the dropout masks drawn (``bernoulli_``: ``nn.Dropout`` and SDPA's attention-weight dropout)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += func is torch.ops.aten.bernoulli_.float
        return func(*args, **(kwargs or {}))


def dropout_calls(kind: str, options: dict | None = None, **changes) -> int:
    """Dropout masks drawn by one teacher-forced training forward of a 3 + 3-layer model."""
    encoder = Spec("memory", {"slots": 5, "init": "official"}) if kind == "m2" else Spec("mha")
    cfg = dataclasses.replace(m2_config(encoder_layers=3, decoder_layers=3), kind=kind, dropout=0.1,
                              encoder_self_attention=encoder, options=options or {}, **changes)
    model, inputs = build_captioner(cfg, VOCAB, pad_id=PAD).train(), tiny_inputs()
    with DropoutCalls() as counter:
        model(model_inputs(inputs), inputs["tokens"])
    return counter.calls


def test_dropout_calls_per_forward_follow_the_papers_and_the_released_code() -> None:
    # input projection 1 + encoder 3 x (attention output, feed-forward inside, feed-forward output) = 10, then
    # M2 Sec. 4.2 ("after each attention and feed-forward layer"): decoder 3 x (self-attention output, meshed
    # cross-attention output, feed-forward inside and output) = 12
    assert dropout_calls("m2") == 10 + 12
    # the released code (28 dropout modules) drops each level's cross-attention output: here one call over the
    # stacked levels (an independent mask per level), so the same 22 calls
    assert dropout_calls("m2", OFFICIAL) == 22
    # the optional extras: attention weights (3 encoder, 3 decoder self, 3 x 3 levels cross) and embeddings
    assert dropout_calls("m2", attention_dropout=0.1, embedding_dropout=0.1) == 22 + 3 + 3 + 9 + 1 == 38  # the old default
    # Vaswani et al. Sec. 5.4: residual dropout and the embeddings' (not the attention weights')
    assert dropout_calls("transformer") == 10 + 1 + 3 * 4
    assert dropout_calls("transformer", attention_dropout=0.1) == 23 + 3 + 3 + 3
    assert dropout_calls("transformer", embedding_dropout=0.0, attention_dropout=0.0) == 22


def test_position_table_is_frozen_saved_and_starts_at_row_one() -> None:
    table = PositionTable(16, 20)
    assert table.table.shape == (21, 16) and not list(table.parameters())
    assert "table" in table.state_dict() and (table.table[0] == 0).all()
    torch.testing.assert_close(table.table[1:], sinusoidal_positions(21, 16)[1:])
    torch.testing.assert_close(table(3, start=2), table.table[3:6])  # positions 2..4 read rows 3..5
    with pytest.raises(ValueError, match="exceeds max_positions 20"):
        table(1, start=20)
    model = official_m2()
    assert isinstance(model.decoder.positions, PositionTable) and "decoder.positions.table" in model.state_dict()
    assert trainable(model) == trainable(official_m2(positions="sinusoidal"))  # frozen: not a parameter
    tokens = tiny_inputs()["tokens"]
    with torch.no_grad():  # the rows are used: changing row 3 changes position 2 onwards only
        before = model(model_inputs(tiny_inputs()), tokens)
        model.decoder.positions.table[3] += 1.0
        after = model(model_inputs(tiny_inputs()), tokens)
    torch.testing.assert_close(after[:, :2], before[:, :2])
    assert not torch.allclose(after[:, 2:], before[:, 2:])


def test_official_init_is_xavier_on_every_saved_matrix() -> None:
    torch.manual_seed(0)
    cfg = dataclasses.replace(m2_config(encoder_layers=3), d_model=64, num_heads=4, d_ff=256, feature_dim=96,
                              encoder_self_attention=Spec("memory", {"slots": 40, "init": "official"}),
                              options={"init": "official", "positions": "table"})
    model = build_captioner(cfg, 500, pad_id=PAD)
    state = model.state_dict()

    def is_xavier(tensor: torch.Tensor, fan_in: int, fan_out: int) -> bool:
        bound = math.sqrt(6 / (fan_in + fan_out))
        return tensor.abs().max() <= bound and abs(tensor.std().item() - bound / math.sqrt(3)) < 0.1 * bound

    for name, tensor in state.items():
        if "memory" in name or tensor.dim() < 2:
            continue
        assert is_xavier(tensor, tensor.shape[1], tensor.shape[0]), name
    assert is_xavier(model.decoder.embed.weight, 64, 500)  # std ~ sqrt(2 / (V + d)) instead of 1
    for attention in (layer.self_attn for layer in model.encoder.layers):  # the released (1, m, d) layout
        assert is_xavier(attention.memory_keys, 40 * 64, 64) and is_xavier(attention.memory_values, 40 * 64, 64)
    ffn_bias = model.encoder.layers[0].ffn.fc1.bias  # biases keep PyTorch's default (as in the released code)
    assert ffn_bias.abs().max() <= 1 / math.sqrt(64) and ffn_bias.std() > 0
    assert (model.decoder.layers[0].self_norm.norm.weight == 1).all()
    with pytest.raises(ConfigError, match="set model.encoder_self_attention.options.init: official"):
        build_captioner(dataclasses.replace(cfg, encoder_self_attention=Spec("memory", {"slots": 4})), 50)


def test_official_padding_ignores_the_region_mask_and_attends_zero_rows() -> None:
    def trained_like(padded_regions: int):  # a LayerNorm bias away from its initial 0, as after training
        model = official_m2(padded_regions=padded_regions)
        with torch.no_grad():
            model.encoder.input_proj[3].bias.copy_(0.1 + 0.05 * torch.randn(16, generator=torch.Generator().manual_seed(0)))
        return model

    model, inputs = trained_like(9), tiny_inputs()  # 6 regions, rows 1-2 partly zero
    args = model_inputs(inputs)
    logits = model(args, inputs["tokens"])
    all_real = {**args, "region_mask": torch.ones_like(args["region_mask"])}
    torch.testing.assert_close(model(all_real, inputs["tokens"]), logits)  # the mask is not used
    padded = {**args, "features": F.pad(args["features"], (0, 0, 0, 3)), "boxes": F.pad(args["boxes"], (0, 0, 0, 3)),
              "region_mask": F.pad(args["region_mask"], (0, 3))}
    torch.testing.assert_close(model(padded, inputs["tokens"]), logits)  # zero rows up to padded_regions
    assert not torch.allclose(trained_like(6)(args, inputs["tokens"]), logits)  # fewer zero rows: they are attended
    assert model.encoder(args["features"], args["boxes"], args["region_mask"]).mask.all()  # nothing masked
    # the rule itself: a row is padding where the projected features sum to exactly zero — with the
    # LayerNorm bias at its initial 0 every row sums to ~0 and rounding decides (real rows included)
    fresh = official_m2(padded_regions=9)
    projected = fresh.encoder.input_proj(padded["features"])  # (B, 9, d)
    memory = fresh.encoder(args["features"], args["boxes"], args["region_mask"])
    assert torch.equal(memory.mask, projected.sum(-1) != 0) and projected.sum(-1).abs().max() < 1e-5


def test_official_padding_hides_pad_tokens_anywhere() -> None:
    model, inputs = official_m2(), tiny_inputs()
    args, tokens = model_inputs(inputs), inputs["tokens"].clone()
    tokens[:, 3] = PAD  # a pad token inside the captions (e.g. chosen by beam search)
    before = model(args, inputs["tokens"]).log_softmax(-1)
    after = model(args, tokens).log_softmax(-1)
    torch.testing.assert_close(after[:, :3], before[:, :3])  # causal: earlier positions unchanged
    zero_state = model.decoder.output.bias.log_softmax(-1).expand(3, VOCAB)  # uniform without an output bias
    torch.testing.assert_close(after[:, 3], zero_state)
    for rule, hidden in (("official", True), ("regions", False)):
        other = official_m2(padding=rule)
        reference = other(args, tokens)
        with torch.no_grad():
            other.decoder.embed.weight[PAD] += 3.0  # what the pad token looks like...
        changed = other(args, tokens)
        # ...matters to later positions only when pad tokens are attended (the regions rule)
        assert torch.allclose(changed[:, 4:], reference[:, 4:]) is hidden, rule


# --- the preset ------------------------------------------------------------------------------------------------


def test_official_preset_is_the_imported_models_config_and_its_differences_are_listed() -> None:
    from vlattn.config import config_to_dict
    from vlattn.validation import load_valid_config
    from vlattn.importers.m2_official import ReleasedLayout, released_config
    from vlattn.models.profile import count_parameters

    preset = load_valid_config("m2-official")
    layout = ReleasedLayout(encoder_layers=3, decoder_layers=3, gates=3, d_model=512, feature_dim=2048, d_ff=2048,
                            slots=40, vocab_size=10201, max_positions=54)
    assert released_config(layout).model == preset.model  # what import-checkpoint writes for the released file
    with torch.device("meta"):
        model = build_captioner(preset.model, 10201, pad_id=PAD)
    assert count_parameters(model)["total"] == 38_411_264
    assert model.decoder.positions.table.shape == (55, 512)  # the released 28,160 frozen values, saved
    # benchmarks/diff_m2_presets.py lists every key on which the two presets differ, each with the released code's
    def leaves(tree, prefix=""):
        out = {}
        for key, value in tree.items():
            out.update(leaves(value, f"{prefix}{key}.") if isinstance(value, dict) and value else {prefix + key: value})
        return out
    paper, official = leaves(config_to_dict(load_valid_config("m2"))), leaves(config_to_dict(preset))
    differing = {key for key in paper.keys() | official.keys() if paper.get(key) != official.get(key)}
    listed = subprocess.run([sys.executable, "benchmarks/diff_m2_presets.py", "--no-write"], check=True,
                            capture_output=True, text=True, timeout=300).stdout
    rows = {line.split("`")[1] for line in listed.splitlines() if line.startswith("| `")}
    assert differing and rows == differing, rows ^ differing
