"""The cache of a parsed Karpathy file (vlattn/data/karpathy_cache.py): the same entries as a parse, used only for the
same bytes, written only where no file is or over its own cache, never through a symbolic link."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vlattn.data import karpathy_cache
from vlattn.data.karpathy import ImageEntry, captions_fingerprint, load_karpathy, write_karpathy
from vlattn.data.karpathy_cache import cache_file, load_karpathy_cached

ENTRIES = [
    ImageEntry(9, "train", "a.jpg", [["a", "red", "cube"], ["naïve", "café"]], ["A red cube.", "Naïve café — 東京"],
               "train2014"),
    ImageEntry(42, "val", "b.jpg", [["one"]], ["One"]),
    ImageEntry(7, "test", "", [["x", "y"], ["y"], ["z", "x", "x"]], ["x y", "y", "z x x"], "val2014"),
]


@pytest.fixture()
def split_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    write_karpathy(tmp_path / "dataset.json", ENTRIES)
    monkeypatch.setattr(karpathy_cache, "MIN_BYTES", 0)  # cache this small file too
    return tmp_path / "dataset.json"


def test_a_small_split_file_is_parsed_and_nothing_written(tmp_path: Path) -> None:
    write_karpathy(tmp_path / "dataset.json", ENTRIES)
    assert (tmp_path / "dataset.json").stat().st_size < karpathy_cache.MIN_BYTES
    assert load_karpathy_cached(tmp_path / "dataset.json", tmp_path / "cache" / "k.npz") == ENTRIES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dataset.json"]


def no_parse(*args: object) -> None:
    raise AssertionError("the split file was parsed")


def test_second_load_reads_the_cache_and_equals_a_parse(split_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = cache_file(split_file.parent, split_file.name)
    first = load_karpathy_cached(split_file, cache)
    assert first == load_karpathy(split_file) == ENTRIES and cache.is_file()
    monkeypatch.setattr(karpathy_cache, "load_karpathy", no_parse)
    assert load_karpathy_cached(split_file, cache) == ENTRIES


def test_changed_bytes_are_parsed_again_and_the_cache_rewritten(split_file: Path) -> None:
    cache = split_file.parent / "cache" / "k.npz"
    load_karpathy_cached(split_file, cache)
    edited = [ENTRIES[0], ImageEntry(42, "train", "b.jpg", [["two"]], ["Two"]), ENTRIES[2]]
    write_karpathy(split_file, edited)
    assert load_karpathy_cached(split_file, cache) == edited
    assert karpathy_cache.read_entries(cache)[1].entries == edited


@pytest.mark.parametrize("kind", ["file", "symlink"])
def test_anything_else_at_the_cache_path_is_left_alone(split_file: Path, tmp_path: Path, kind: str) -> None:
    cache = tmp_path / "cache" / "k.npz"
    cache.parent.mkdir()
    target = tmp_path / "mine.npz"
    target.write_bytes(b"a user's file")
    if kind == "file":
        cache.write_bytes(b"a user's file")
    else:
        cache.symlink_to(target)
    for _ in range(2):
        assert load_karpathy_cached(split_file, cache) == ENTRIES
    assert target.read_bytes() == b"a user's file" and cache.read_bytes() == b"a user's file"
    assert cache.is_symlink() == (kind == "symlink")


def test_an_unwritable_cache_directory_costs_only_the_parse(split_file: Path, tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache directory would be")
    assert load_karpathy_cached(split_file, blocked / "k.npz") == ENTRIES
    assert blocked.read_text() == "a file where the cache directory would be"


def test_cache_files_of_two_split_files_differ(tmp_path: Path) -> None:
    assert cache_file(tmp_path, "dataset.json") != cache_file(tmp_path, "other/dataset.json")
    assert cache_file(tmp_path, "dataset.json").parent == tmp_path / "cache"


def test_a_cache_hit_gives_the_data_of_a_cold_start(split_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What training starts from (entries by split, vocabulary, encoded captions, the captions' fingerprint) is the
    same read from the cache as parsed, and the fingerprint is the one of the entries."""
    from vlattn.config import DataConfig
    from vlattn.data.features import write_memmap
    from vlattn.data.features.base import RegionFeatures
    from vlattn.tasks.captioning import load_caption_data

    boxes = np.array([[0, 0, 4, 4], [1, 1, 3, 3]], dtype=np.float32)
    write_memmap(split_file.parent / "features", ((e.image_id, RegionFeatures(np.ones((2, 3), np.float32), boxes, 8, 8))
                                                  for e in ENTRIES))
    cfg = DataConfig(root=str(split_file.parent), karpathy=split_file.name, features="features", vocab_min_count=1,
                     vocab_splits=["train", "val", "test"])
    cold = load_caption_data(cfg)
    assert cache_file(split_file.parent, split_file.name).is_file()
    monkeypatch.setattr(karpathy_cache, "load_karpathy", no_parse)
    monkeypatch.setattr(karpathy_cache, "captions_fingerprint", no_parse)  # the fingerprint comes from the cache
    warm = load_caption_data(cfg)
    assert warm.entries == cold.entries and warm.vocab.itos == cold.vocab.itos
    assert warm.fingerprint() == cold.fingerprint()
    assert warm.fingerprint()["captions"] == captions_fingerprint([ENTRIES[0], ENTRIES[1], ENTRIES[2]])
    assert np.array_equal(warm.train_set().words, cold.train_set().words)
    assert np.array_equal(warm.train_set().offsets, cold.train_set().offsets)


def test_an_edit_changes_the_cached_fingerprint(split_file: Path) -> None:
    cache = split_file.parent / "cache" / "k.npz"
    before = karpathy_cache.read_split_file(split_file, cache).fingerprint()
    edited = [ENTRIES[0], ENTRIES[1], ImageEntry(7, "test", "", [["x", "z"]], ["x z"], "val2014")]
    write_karpathy(split_file, edited)
    after = karpathy_cache.read_split_file(split_file, cache)
    assert after.entries == edited and after.fingerprint() == captions_fingerprint(edited) != before
    assert karpathy_cache.read_entries(cache)[1].known == after.fingerprint()


def test_a_cache_of_an_older_version_is_replaced(split_file: Path) -> None:
    cache = split_file.parent / "cache" / "k.npz"
    load_karpathy_cached(split_file, cache)
    with np.load(cache) as data:
        arrays = dict(data)
    meta = json.loads(str(arrays["meta"]))
    arrays["meta"] = np.array(json.dumps({**meta, "version": 1}))  # what the previous format wrote
    with open(cache, "wb") as handle:
        np.savez(handle, **arrays)
    assert karpathy_cache.read_entries(cache) is None
    assert load_karpathy_cached(split_file, cache) == ENTRIES
    assert karpathy_cache.read_entries(cache)[1].entries == ENTRIES


def test_a_damaged_cache_is_left_as_it_is(split_file: Path) -> None:
    cache = split_file.parent / "cache" / "k.npz"
    load_karpathy_cached(split_file, cache)
    damaged = cache.read_bytes()[: cache.stat().st_size // 2]
    cache.write_bytes(damaged)
    for _ in range(2):
        assert load_karpathy_cached(split_file, cache) == ENTRIES
    assert cache.read_bytes() == damaged  # not provably vlattn's: neither replaced nor removed
