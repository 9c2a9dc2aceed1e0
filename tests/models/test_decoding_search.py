"""Greedy, beam search and sampling over the encode/step/reorder protocol: cached = uncached, beam 1 =
greedy, beam beats greedy where it should, returned log-probs match the model's, finished beams padded."""

from __future__ import annotations

import math

import pytest
import torch
from registry_cases import MarkovModel
from tests.models.conftest import BOS, EOS, PAD, model_inputs, tiny_captioner, tiny_inputs

from vlattn.decoding import beam_search, greedy_decode, sample

A, B = 3, 4


args = model_inputs


def teacher_log_probs(model, inputs, tokens):
    """Per-token log-probs (R, L) of ``tokens`` (R, L) under teacher forcing, 0 after the first EOS."""
    rows = tokens.shape[0] // inputs["features"].shape[0]
    repeated = {k: t.repeat_interleave(rows, 0) for k, t in args(inputs).items()}
    prefix = torch.cat([torch.full_like(tokens[:, :1], BOS), tokens[:, :-1]], dim=1)
    log_probs = model(repeated, prefix).log_softmax(-1).gather(2, tokens[..., None]).squeeze(2)
    after_eos = (tokens == EOS).long().cumsum(1) - (tokens == EOS).long() > 0
    return log_probs.masked_fill(after_eos, 0.0)


def test_beam_one_equals_greedy() -> None:
    model, inputs = tiny_captioner(), tiny_inputs()
    greedy = greedy_decode(model, args(inputs), bos=BOS, eos=EOS, max_len=10)
    beams = beam_search(model, args(inputs), bos=BOS, eos=EOS, beam_size=1, max_len=10)
    assert torch.equal(beams.tokens[:, 0], greedy)


def test_beam_finds_a_better_sequence_than_greedy() -> None:
    # greedy takes A (0.6) and then wanders; B (0.4) followed by EOS (0.9) is the better caption
    model = MarkovModel({BOS: {A: 0.6, B: 0.4}, A: {A: 0.4, B: 0.3, EOS: 0.3}, B: {EOS: 0.9, A: 0.1}})
    inputs = tiny_inputs(batch=2)
    greedy = greedy_decode(model, args(inputs), bos=BOS, eos=EOS, max_len=6)
    assert greedy[0].tolist() == [A] * 6
    beams = beam_search(model, args(inputs), bos=BOS, eos=EOS, beam_size=2, max_len=6)
    assert beams.tokens[:, 0, :2].tolist() == [[B, EOS]] * 2
    assert beams.tokens[:, 0, 2:].eq(PAD).all()
    greedy_score = math.log(0.6) + 5 * math.log(0.4)
    assert beams.scores[0, 0] == pytest.approx(math.log(0.36), abs=1e-4) and beams.scores[0, 0] > greedy_score


def test_beam_can_prune_the_greedy_caption_for_a_less_probable_one() -> None:
    """Beam search keeps the K most probable *prefixes*, so it is no upper bound of greedy: a first word whose
    mass goes to one continuation (B -> D or E, 0.55/0.45) fills both beams at step 2 (0.1925, 0.1575) ahead of
    greedy's prefix A C (0.4 x 0.3 = 0.12), whose cost is paid early, and then pays later (D -> A 0.6). The
    benchmark "Beam search vs greedy (Up-Down)" measures this on trained captioners."""
    C, D, E = 5, 6, 7
    model = MarkovModel({
        BOS: {A: 0.4, B: 0.35, C: 0.25},
        A: {C: 0.3, D: 0.25, E: 0.25, EOS: 0.2},
        B: {D: 0.55, E: 0.45},
        C: {EOS: 1.0},
        D: {A: 0.6, EOS: 0.4},
        E: {A: 0.6, EOS: 0.4},
    }, vocab=8)
    inputs = tiny_inputs(batch=1)
    assert greedy_decode(model, args(inputs), bos=BOS, eos=EOS, max_len=3)[0].tolist() == [A, C, EOS]  # p = 0.12
    beams = beam_search(model, args(inputs), bos=BOS, eos=EOS, beam_size=2, max_len=3)
    assert beams.tokens[0].tolist() == [[B, D, A], [B, E, A]]  # the max_len reached before EOS
    assert beams.scores[0].tolist() == pytest.approx([math.log(0.35 * 0.55 * 0.6), math.log(0.35 * 0.45 * 0.6)], abs=1e-4)
    assert beams.scores[0, 0] < math.log(0.12)
    three = beam_search(model, args(inputs), bos=BOS, eos=EOS, beam_size=3, max_len=3)  # C EOS (0.25) survives
    assert three.tokens[0, 0, :2].tolist() == [C, EOS] and three.scores[0, 0] == pytest.approx(math.log(0.25), abs=1e-4)


def textbook_beam_search(model, inputs, beam_size: int, max_len: int) -> list[tuple[list[int], float]]:
    """Beam search written out for one image: hypotheses in a list, each step scored by teacher forcing over the
    whole prefix (no cache, no state reordering); a finished hypothesis competes with its score unchanged.
    Returns the final (tokens with EOS, sum of log-probs), best first."""
    hypotheses: list[tuple[list[int], float, bool]] = [([], 0.0, False)]
    for _ in range(max_len):
        live = [h for h in hypotheses if not h[2]]
        if not live:
            break
        prefixes = torch.tensor([[BOS, *tokens] for tokens, _, _ in live])
        log_probs = model({k: t.expand(len(live), *t.shape[1:]) for k, t in inputs.items()}, prefixes)
        log_probs = log_probs[:, -1].log_softmax(-1)  # (live, V)
        candidates = [h for h in hypotheses if h[2]]
        for (tokens, score, _), row in zip(live, log_probs.tolist()):
            candidates += [(tokens + [word], score + value, word == EOS) for word, value in enumerate(row)]
        hypotheses = sorted(candidates, key=lambda h: -h[1])[:beam_size]
    return [(tokens, score) for tokens, score, _ in hypotheses]


@pytest.mark.parametrize("kind, eos_bias", [("transformer", 1.5), ("updown", 0.3)])
def test_beam_search_equals_a_textbook_search(kind: str, eos_bias: float) -> None:
    """The batched search (one topk over an image's K x V candidates, reordered LSTM or key/value states) returns
    the beams of the textbook search, image by image, for the Transformer and the Up-Down captioner."""
    model = tiny_captioner(seed=1, kind=kind)
    with torch.no_grad():  # EOS made likely enough that beams end at several steps and finished beams compete
        (model.output if kind == "updown" else model.decoder.output).bias[EOS] += eos_bias
    inputs = args(tiny_inputs())
    beams = beam_search(model, inputs, bos=BOS, eos=EOS, beam_size=3, max_len=6)
    lengths = set()
    for image in range(3):
        expected = textbook_beam_search(model, {k: t[image : image + 1] for k, t in inputs.items()}, 3, 6)
        lengths |= {len(tokens) for tokens, _ in expected}
        for beam, (tokens, score) in enumerate(expected):
            assert beams.tokens[image, beam, : len(tokens)].tolist() == tokens
            assert beams.tokens[image, beam, len(tokens):].eq(PAD).all()
            assert beams.scores[image, beam].item() == pytest.approx(score, abs=1e-4)
    assert len(lengths) >= 3  # beams ended at several steps


def test_length_normalisation_prefers_longer_mean() -> None:
    # "EOS" alone: log 0.55 = -0.60; "A EOS": log 0.405 = -0.90 in sum but -0.45 per word
    model = MarkovModel({BOS: {EOS: 0.55, A: 0.45}, A: {EOS: 0.9, A: 0.1}})
    inputs = tiny_inputs(batch=1)
    plain = beam_search(model, args(inputs), bos=BOS, eos=EOS, beam_size=2, max_len=5)
    normalised = beam_search(model, args(inputs), bos=BOS, eos=EOS, beam_size=2, max_len=5, length_penalty=1.0)
    assert plain.tokens[0, 0, 0].item() == EOS
    assert normalised.tokens[0, 0, :2].tolist() == [A, EOS]
    assert normalised.scores[0, 0] == pytest.approx(math.log(0.405) / 2, abs=1e-4)


def test_beams_are_sorted_padded_and_consistent() -> None:
    model, inputs = tiny_captioner(), tiny_inputs()
    beams = beam_search(model, args(inputs), bos=BOS, eos=EOS, beam_size=4, max_len=9)
    assert beams.tokens.shape[:2] == (3, 4) and beams.tokens.shape[2] <= 9
    assert (beams.scores[:, :-1] >= beams.scores[:, 1:]).all()
    torch.testing.assert_close(beams.log_probs.sum(-1), beams.scores)
    tokens = beams.tokens.flatten(0, 1)
    torch.testing.assert_close(beams.log_probs.flatten(0, 1), teacher_log_probs(model, inputs, tokens))
    ended = (tokens == EOS).long().cumsum(1) - (tokens == EOS).long() > 0
    assert tokens[ended].eq(PAD).all()


def test_batched_beams_equal_one_image_at_a_time() -> None:
    model, inputs = tiny_captioner(), tiny_inputs()
    batched = beam_search(model, args(inputs), bos=BOS, eos=EOS, beam_size=3, max_len=6)
    for i in range(3):
        single = beam_search(model, {k: t[i : i + 1] for k, t in args(inputs).items()}, bos=BOS, eos=EOS, beam_size=3, max_len=6)
        length = single.tokens.shape[2]
        assert torch.equal(batched.tokens[i, :, :length], single.tokens[0])
        torch.testing.assert_close(batched.scores[i], single.scores[0])


def test_differentiable_beams() -> None:
    model, inputs = tiny_captioner(), tiny_inputs()
    assert not beam_search(model, args(inputs), bos=BOS, eos=EOS, beam_size=3, max_len=5).log_probs.requires_grad
    beams = beam_search(model, args(inputs), bos=BOS, eos=EOS, beam_size=3, max_len=5, grad=True)
    beams.log_probs.sum().backward()
    assert model.decoder.output.weight.grad.abs().sum() > 0
    assert model.encoder.input_proj[0].weight.grad.abs().sum() > 0


def test_sampling_returns_model_log_probs_with_gradients() -> None:
    model, inputs = tiny_captioner(), tiny_inputs()
    generator = torch.Generator().manual_seed(0)
    samples = sample(model, args(inputs), bos=BOS, eos=EOS, num_samples=4, max_len=7, generator=generator)
    assert samples.tokens.shape[:2] == (3, 4) and samples.tokens.shape[2] <= 7
    tokens = samples.tokens.flatten(0, 1)
    torch.testing.assert_close(samples.log_probs.flatten(0, 1), teacher_log_probs(model, inputs, tokens))
    assert len({tuple(row) for row in tokens.tolist()}) > 3  # samples differ
    samples.log_probs.sum().backward()
    assert model.decoder.output.weight.grad.abs().sum() > 0


def test_sampling_stops_and_pads_after_eos() -> None:
    model = MarkovModel({BOS: {A: 0.5, EOS: 0.5}, A: {EOS: 1.0}})
    inputs = tiny_inputs(batch=2)
    samples = sample(model, args(inputs), bos=BOS, eos=EOS, num_samples=8, max_len=10)
    assert samples.tokens.shape == (2, 8, 2)
    for row in samples.tokens.flatten(0, 1).tolist():
        assert row in ([A, EOS], [EOS, PAD])


def full_matrix_select(log_probs, finished, total, grown, length_penalty):
    """The selection written over every candidate (the search before session 5): finished rows' log-probs replaced
    by EOS at no cost, (total + log p) / grown^alpha over the whole (R, V) matrix, one top-K over each image's
    K V candidates. Returns source, word and chosen log-prob (R,) each."""
    rows, vocab = log_probs.shape
    beam = rows // 3
    frozen = torch.full((vocab,), float("-inf"))
    frozen[EOS] = 0.0
    masked = torch.where(finished[:, None], frozen, log_probs)
    rank = masked + total[:, None]
    rank = rank if length_penalty == 0 else rank / grown[:, None] ** length_penalty
    _, flat = rank.reshape(3, beam * vocab).topk(beam, dim=-1)
    source = (torch.arange(3)[:, None] * beam + flat // vocab).reshape(-1)
    word = (flat % vocab).reshape(-1)
    return source, word, masked[source, word]


@pytest.mark.parametrize("length_penalty", [0.0, 0.7, 1.0])
def test_per_row_candidates_select_as_the_full_candidate_matrix(length_penalty: float) -> None:
    """Ranking each row's K best continuations selects the same beams, words and log-probs (bit for bit) as a
    top-K over all K V candidates of an image, with finished rows (one image entirely finished), and the chosen
    log-probs carry the gradient of the chosen entries."""
    from vlattn.decoding.beam import frozen_candidates, select

    generator = torch.Generator().manual_seed(3)
    beam, vocab = 4, 40
    for _ in range(20):
        logits = torch.randn(3 * beam, vocab, generator=generator) * 3
        log_probs = logits.log_softmax(-1).requires_grad_()
        finished = torch.rand(3 * beam, generator=generator) < 0.4
        finished[beam : 2 * beam] = True  # the second image has finished all its beams
        total = -torch.rand(3 * beam, generator=generator) * 10
        grown = torch.randint(1, 6, (3 * beam,), generator=generator).float()
        frozen = frozen_candidates(torch.zeros(beam), EOS)
        source, word, chosen = select(log_probs, finished, total, grown, length_penalty, frozen)
        expected = full_matrix_select(log_probs.detach(), finished, total, grown, length_penalty)
        assert torch.equal(source, expected[0]) and torch.equal(word, expected[1])
        assert torch.equal(chosen.detach(), expected[2])
        assert chosen[finished[source]].eq(0).all()
        (gradient,) = torch.autograd.grad(chosen.sum(), log_probs)
        one_hot = torch.zeros_like(gradient)
        live = ~finished[source]
        one_hot.index_put_((source[live], word[live]), torch.ones(int(live.sum())), accumulate=True)
        assert torch.equal(gradient, one_hot)
