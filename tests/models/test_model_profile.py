"""Parameter counts, FLOP counts and latency of a tiny captioner."""

from __future__ import annotations

from tests.models.conftest import FEATURE_DIM, VOCAB, tiny_captioner

from vlattn.models.profile import count_parameters, flops_decode_step, flops_train_step, latency

SHAPES = dict(batch=2, regions=5, length=6, feature_dim=FEATURE_DIM, vocab=VOCAB)


def test_count_parameters_per_module() -> None:
    model = tiny_captioner()
    counts = count_parameters(model)
    assert set(counts) == {"total", "encoder", "decoder"}
    assert counts["total"] == counts["encoder"] + counts["decoder"] == sum(p.numel() for p in model.parameters())


def test_flops_of_training_and_decoding_steps() -> None:
    model = tiny_captioner()
    train = flops_train_step(model, **SHAPES)
    cached = flops_decode_step(model, **SHAPES)
    model.use_cache = False
    uncached = flops_decode_step(model, **SHAPES)
    assert 0 < cached < uncached < train
    assert all(p.grad is None for p in model.parameters())
    # the output layer alone: 2 * B * d * V multiply-adds per decoding step
    assert cached > 2 * 2 * 16 * VOCAB


def test_latency_reports_milliseconds() -> None:
    timings = latency(tiny_captioner(), **SHAPES, repeats=2)
    assert set(timings) == {"train_step_ms", "decode_step_ms"} and all(v > 0 for v in timings.values())
