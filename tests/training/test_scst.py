"""SCST: loss and baseline arithmetic by hand, gradient sign, and the stage end to end on tiny data."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from vlattn.errors import VlattnError
from vlattn import tasks
from vlattn.tasks.captioning import load_caption_data, training_reward
from vlattn.training.scst import (
    greedy_baseline,
    mean_baseline,
    mean_others_baseline,
    scst_loss,
    sequence_mask,
)
from tests.training.conftest import tiny_config

EOS = 2


def test_sequence_mask_keeps_tokens_through_first_eos() -> None:
    samples = torch.tensor([[5, 6, EOS, 0], [5, EOS, 0, 0], [7, 8, 9, 10]])
    expected = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(sequence_mask(samples, EOS), expected)


def test_baselines_by_hand() -> None:
    rewards = torch.tensor([[1.0, 2.0, 6.0], [0.0, 0.0, 3.0]])
    assert torch.allclose(mean_baseline(rewards), torch.tensor([[3.0, 3.0, 3.0], [1.0, 1.0, 1.0]]))
    # leave-one-out: (sum - r_i) / (k - 1)
    assert torch.allclose(mean_others_baseline(rewards), torch.tensor([[4.0, 3.5, 1.5], [1.5, 1.5, 0.0]]))
    assert torch.allclose(greedy_baseline(torch.tensor([0.5, 2.0]), 3), torch.tensor([[0.5] * 3, [2.0] * 3]))
    with pytest.raises(ValueError):
        mean_others_baseline(torch.ones(2, 1))


def test_scst_loss_by_hand() -> None:
    log_probs = torch.tensor([[-1.0, -2.0, -0.5, -9.0], [-0.25, -0.75, -9.0, -9.0]], requires_grad=True)
    samples = torch.tensor([[4, 5, EOS, 0], [4, EOS, 0, 0]])
    rewards, baseline = torch.tensor([2.0, 0.0]), torch.tensor([1.0, 1.0])
    loss = scst_loss(log_probs, samples, rewards, baseline, eos=EOS)
    # -( (+1) * (-1 - 2 - 0.5) + (-1) * (-0.25 - 0.75) ) / 5 valid tokens = -(-3.5 + 1.0) / 5 = 0.5
    assert loss.item() == pytest.approx(0.5)
    loss.backward()
    assert torch.allclose(log_probs.grad, torch.tensor([[-0.2, -0.2, -0.2, 0.0], [0.2, 0.2, 0.0, 0.0]]))


def test_gradient_step_raises_probability_of_sample_above_baseline() -> None:
    torch.manual_seed(0)
    logits = torch.nn.Parameter(torch.randn(3, 6))  # a 3-step "policy" over 6 words, independent per step
    good, bad = torch.tensor([4, 5, EOS]), torch.tensor([3, 3, EOS])

    def seq_log_prob(tokens: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(logits, -1).gather(1, tokens[:, None]).squeeze(1)  # (3,)

    before_good, before_bad = seq_log_prob(good).sum().item(), seq_log_prob(bad).sum().item()
    samples = torch.stack([good, bad])
    rewards = torch.tensor([1.5, 0.2])
    loss = scst_loss(torch.stack([seq_log_prob(good), seq_log_prob(bad)]), samples, rewards, mean_baseline(rewards[None])[0], eos=EOS)
    loss.backward()
    with torch.no_grad():
        logits -= 0.5 * logits.grad
    assert seq_log_prob(good).sum().item() > before_good
    assert seq_log_prob(bad).sum().item() < before_bad


def test_training_reward_prefers_the_right_caption(tiny_data: Path) -> None:
    data = load_caption_data(tiny_config(tiny_data).data)
    entry = data.entries["train"][0]
    words = entry.captions[0]
    ids = data.vocab.encode(words) + [data.vocab.EOS]
    wrong = data.vocab.encode(data.entries["train"][5].captions[0]) + [data.vocab.EOS]
    width = max(len(ids), len(wrong))
    tokens = torch.tensor([ids + [0] * (width - len(ids)), wrong + [0] * (width - len(wrong))])
    reward = training_reward(data, mode="image", include_eos=False)
    scores = reward(tokens, [entry.image_id])
    assert scores.shape == (2,)
    assert scores[0] > scores[1] >= 0.0
    assert (data.root / "cache" / "cider_df_image.npz").is_file()


@pytest.mark.parametrize(("sampling", "baseline"), [("beam", "mean"), ("sample", "greedy"), ("sample", "mean-others")])
def test_scst_stage_runs_from_xe_checkpoint(tiny_data: Path, tmp_path: Path, sampling: str, baseline: str) -> None:
    xe = tmp_path / "xe"
    tasks.train(tiny_config(tiny_data, "train.epochs=1"), xe, device="cpu")
    cfg = tiny_config(tiny_data, "train.scst_epochs=1", "train.scst_batch_size=8", "train.scst_samples=3",
                      f"train.scst_sampling={sampling}", f"train.scst_baseline={baseline}")
    scst = tmp_path / "scst"
    metrics = tasks.train(cfg, scst, stage="scst", init=xe, device="cpu")
    assert math.isfinite(metrics["CIDEr"])
    records = [json.loads(line) for line in (scst / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "train"]
    assert len(steps) == 3  # 24 train images / batch 8
    assert all(r["stage"] == "scst" and r["lr"] == 5e-6 and math.isfinite(r["reward"]) for r in steps)
    # Resuming the SCST run as an XE run is refused.
    with pytest.raises(VlattnError, match="cannot resume stage 'xe' from a checkpoint of stage 'scst'"):
        tasks.train(cfg, scst, stage="xe", resume=True, device="cpu")


def test_scst_stage_with_the_released_recipe_options(tiny_data: Path, tmp_path: Path) -> None:
    """Adam betas of its own, the released loss normalisation and early stopping on validation CIDEr."""
    xe = tmp_path / "xe"
    tasks.train(tiny_config(tiny_data, "train.epochs=1"), xe, device="cpu")
    cfg = tiny_config(tiny_data, "train.scst_epochs=4", "train.scst_batch_size=8", "train.scst_samples=3",
                      "train.scst_adam_betas=[0.9, 0.999]", "train.scst_loss_normalise=steps", "train.scst_patience=1")
    scst = tmp_path / "scst"
    tasks.train(cfg, scst, stage="scst", init=xe, device="cpu")
    state = torch.load(scst / "checkpoints" / "last" / "train_state.pt", weights_only=True)
    assert all(tuple(group["betas"]) == (0.9, 0.999) for group in state["optimizer"]["param_groups"])
    records = [json.loads(line) for line in (scst / "metrics.jsonl").read_text().splitlines()]
    scores = [r["CIDEr"] for r in records if r["kind"] == "val"]
    stale = next((i for i in range(1, len(scores)) if scores[i] <= max(scores[:i])), None)
    assert len(scores) == (4 if stale is None else stale + 1)  # patience 1: the first epoch without gain ends it
    assert [r["kind"] for r in records].count("stop") == (stale is not None)


def test_scst_needs_init(tiny_data: Path, tmp_path: Path) -> None:
    with pytest.raises(VlattnError, match="--init"):
        tasks.train(tiny_config(tiny_data), tmp_path / "x", stage="scst", device="cpu")


def test_scst_loss_normalised_over_steps_is_the_released_formula() -> None:
    """The released train.py: log_probs (B, beam, 20) of the beam search, 0 after EOS; loss =
    mean over beams of -mean(log_probs, -1) * (reward - mean reward of the image's beams)."""
    generator = torch.Generator().manual_seed(0)
    released = -torch.rand(2, 3, 20, generator=generator)  # (B, beam, steps)
    lengths = torch.tensor([[3, 5, 9], [1, 4, 2]])  # words up to and including EOS
    released = released * (torch.arange(20) < lengths[..., None])
    rewards = torch.tensor([[0.5, 1.5, 1.0], [2.0, 0.0, 1.0]])
    expected = (-released.mean(-1) * (rewards - rewards.mean(-1, keepdim=True))).mean()
    # vlattn's beam search stops when every beam has ended: fewer columns, pad after EOS
    width = int(lengths.max())
    samples = torch.full((2, 3, width), 7)
    for b in range(2):
        for k in range(3):
            samples[b, k, lengths[b, k] - 1] = EOS
            samples[b, k, lengths[b, k]:] = 0
    log_probs = released[..., :width].clone().requires_grad_(True)
    loss = scst_loss(log_probs.reshape(6, width), samples.reshape(6, width), rewards.reshape(-1),
                     mean_baseline(rewards).reshape(-1), eos=EOS, normalise="steps", steps=20)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    tokens = scst_loss(log_probs.reshape(6, width), samples.reshape(6, width), rewards.reshape(-1),
                       mean_baseline(rewards).reshape(-1), eos=EOS)
    assert tokens.item() == pytest.approx((expected * 6 * 20 / lengths.sum()).item(), rel=1e-5)
    with pytest.raises(ValueError, match="unknown SCST loss normalisation 'words'"):
        scst_loss(log_probs.reshape(6, width), samples.reshape(6, width), rewards.reshape(-1),
                  rewards.reshape(-1), eos=EOS, normalise="words")
