"""Data-dependent initialisation: ``prepare`` hooks run once before the first epoch of a fresh run, are
deterministic for a seed, never re-run on resume or from ``--init`` weights, read the training data only,
and leave the rest of training untouched."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from torch import nn

import vlattn.tasks.captioning as captioning
from vlattn.data.features import open_store
from vlattn.data.regions import RegionSampler
from vlattn.data.resources import PrepareResources
from vlattn.training.prepare import module_seed, prepare_model
from vlattn.training.stage import run_stage
from tests.training.conftest import DIM, Crash, crash_at_step, tiny_config

K = 5


class RegionSeeds(nn.Module):
    """A dictionary of K region features initialised from the data (as k-means seeding would); the mean word
    embedding and the training word counts as buffers."""

    calls = 0

    def __init__(self, dim: int, d_model: int, vocab_size: int) -> None:
        super().__init__()
        self.entries = nn.Parameter(torch.zeros(K, dim))
        self.register_buffer("word_mean", torch.zeros(d_model))
        self.register_buffer("word_counts", torch.zeros(vocab_size, dtype=torch.long))

    def prepare(self, resources: PrepareResources) -> None:
        type(self).calls += 1
        self.entries.copy_(resources.regions.sample(K, resources.generator))
        self.word_mean.copy_(resources.word_embeddings.mean(dim=0))
        self.word_counts.copy_(resources.word_counts)


def with_seeds(cfg, data) -> nn.Module:
    model = captioning.stage_model(cfg, data)
    model.seeds = RegionSeeds(DIM, cfg.model.d_model, len(data.vocab))
    return model


STAGE = dataclasses.replace(captioning.XE, build_model=with_seeds)


def weights(run: Path, name: str = "last") -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / name / "model.safetensors"))


def train_regions(root: Path, ids: range) -> np.ndarray:
    store = open_store(root / "features")
    return np.concatenate([store.get(i).features for i in ids])


@pytest.fixture(autouse=True)
def count_from_zero() -> None:
    RegionSeeds.calls = 0


def test_fresh_runs_prepare_once_deterministically_from_training_regions(tiny_data: Path, tmp_path: Path) -> None:
    cfg = tiny_config(tiny_data, "train.epochs=1", "train.max_steps=2")
    run_stage(STAGE, cfg, tmp_path / "a", device="cpu")
    run_stage(STAGE, cfg, tmp_path / "b", device="cpu")
    run_stage(STAGE, tiny_config(tiny_data, "train.epochs=1", "train.max_steps=2", "train.seed=7"), tmp_path / "c",
              device="cpu")
    assert RegionSeeds.calls == 3
    a, b, c = (weights(tmp_path / run)["seeds.entries"] for run in "abc")
    assert torch.equal(a, b) and not torch.equal(a, c)
    # every entry is a region of a training image (ids 100-123); the image-specific noise regions (the one-hot
    # regions repeat across images) show that none comes from val/test (124-135) and none is drawn twice
    train, held_out = train_regions(tiny_data, range(100, 124)), train_regions(tiny_data, range(124, 136))
    assert all((train == row).all(axis=1).any() for row in a.numpy())
    noise = [row for row in a.numpy() if not np.isin(row, (0.0, 1.0)).all()]
    assert len(noise) >= 2 and not any((held_out == row).all(axis=1).any() for row in noise)
    assert len({tuple(row) for row in noise}) == len(noise)
    record = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()][0]
    assert record["kind"] == "prepare" and record["modules"] == "seeds"


def test_prepare_leaves_the_rest_of_training_untouched(tiny_data: Path, tmp_path: Path) -> None:
    cfg = tiny_config(tiny_data, "train.epochs=1")
    run_stage(STAGE, cfg, tmp_path / "seeded", device="cpu")
    run_stage(captioning.XE, cfg, tmp_path / "plain", device="cpu")
    seeded, plain = weights(tmp_path / "seeded"), weights(tmp_path / "plain")
    word_mean, counts = seeded.pop("seeds.word_mean"), seeded.pop("seeds.word_counts")
    assert seeded.pop("seeds.entries").abs().sum() > 0
    assert seeded.keys() == plain.keys() and all(torch.equal(seeded[k], plain[k]) for k in plain)
    # the buffers hold the embedding table the model started with (it is trained afterwards) and the word
    # counts of the 24 training images' captions "a C S", "there is a C S", "one C S in the picture"
    torch.manual_seed(cfg.train.seed)
    data = captioning.stage_data(cfg, None)
    torch.testing.assert_close(word_mean, captioning.stage_model(cfg, data).word_embeddings.weight.mean(dim=0))
    expected = {"a": 48, "picture": 24, "there": 24, "red": 3 * 6, "circle": 3 * 8, "<unk>": 0, "<eos>": 0}
    assert {word: int(counts[data.vocab.stoi[word]]) for word in expected} == expected
    assert int(counts.sum()) == 24 * (3 + 5 + 6)


def test_resume_and_init_do_not_prepare_again(tiny_data: Path, tmp_path: Path) -> None:
    cfg = tiny_config(tiny_data, "train.checkpoint_every=3", "train.epochs=2")
    run_stage(STAGE, cfg, tmp_path / "straight", device="cpu")
    with crash_at_step(5), pytest.raises(Crash):
        run_stage(STAGE, cfg, tmp_path / "crashed", device="cpu")
    assert RegionSeeds.calls == 2
    run_stage(STAGE, cfg, tmp_path / "crashed", resume=True, device="cpu")
    assert RegionSeeds.calls == 2
    straight, resumed = weights(tmp_path / "straight"), weights(tmp_path / "crashed")
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)
    # warm start from a run's weights: the prepared entries come from the weights, not from a new draw
    other = tiny_config(tiny_data, "train.epochs=1", "train.max_steps=1", "train.seed=99")
    run_stage(STAGE, other, tmp_path / "warm", init=tmp_path / "straight", device="cpu")
    assert RegionSeeds.calls == 2
    assert torch.equal(weights(tmp_path / "warm")["seeds.entries"], straight["seeds.entries"])


def test_region_sampler_draws_whole_images_in_seeded_order(tiny_data: Path) -> None:
    store = open_store(tiny_data / "features")
    sampler = RegionSampler(store, [100, 101, 102], max_regions=1)
    draw = sampler.sample(2, torch.Generator().manual_seed(3))
    assert torch.equal(draw, sampler.sample(2, torch.Generator().manual_seed(3)))
    # max_regions=1: the first region of two of the three images
    firsts = {tuple(store.get(i).features[0].tolist()) for i in (100, 101, 102)}
    assert draw.shape == (2, DIM) and {tuple(r) for r in draw.tolist()} < firsts
    everything = RegionSampler(store, [100, 101, 102], max_regions=4).sample(100, torch.Generator())
    assert everything.shape == (6, DIM)  # all regions of the three images (two each)


def test_hooks_get_their_own_generators_and_resources_are_built_only_when_needed() -> None:
    class Hook(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("draw", torch.zeros(3))

        def prepare(self, resources: PrepareResources) -> None:
            self.draw.copy_(torch.rand(3, generator=resources.generator))

    model = nn.Sequential(Hook(), nn.Sequential(nn.Linear(2, 2), Hook()))
    before = torch.get_rng_state()
    assert prepare_model(model, lambda: PrepareResources(seed=5)) == ["0", "1.1"]
    assert torch.equal(torch.get_rng_state(), before)  # the global RNG is untouched
    for name in ("0", "1.1"):
        expected = torch.rand(3, generator=torch.Generator().manual_seed(module_seed(5, name)))
        assert torch.equal(model.get_buffer(f"{name}.draw"), expected)
    assert not torch.equal(model[0].draw, model[1][1].draw)

    def no_data() -> PrepareResources:
        raise AssertionError("resources built for a model without hooks")

    assert prepare_model(nn.Linear(2, 2), no_data) == []
