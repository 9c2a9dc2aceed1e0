"""The cache of a parsed Karpathy file (vlattn/data/karpathy_cache.py): the same entries as a parse, used only for the
same bytes, written only where no file is or over its own cache, never through a symbolic link."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlattn.data import karpathy_cache
from vlattn.data.karpathy import ImageEntry, load_karpathy, write_karpathy
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
    assert karpathy_cache.read_entries(cache)[1] == edited


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
