"""The image dictionary's k-means cached in the data root: a run is identical with and without it, any change of its
inputs computes anew, and nothing but vlattn's own entries is read as one or replaced."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vlattn.catt import dictionary
from vlattn.catt.dictionary import FittedEntries, fit_entries
from vlattn.data.cache_dir import owned_cache_entries
from vlattn.data.features import RegionFeatures, open_store, write_m2_hdf5, write_memmap
from vlattn.data.features.identity import store_fingerprint, store_identity
from vlattn.data.regions import RegionSampler
from vlattn.data.resources import PrepareResources

BOXES = np.tile(np.array([[0, 0, 8, 8]], dtype=np.float32), (3, 1))


def regions(seed: int, images: int = 40) -> list[tuple[int, RegionFeatures]]:
    data = np.random.default_rng(seed).normal(size=(images, 3, 4)).astype(np.float32)
    return [(i, RegionFeatures(data[i], BOXES, 10, 10)) for i in range(images)]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_memmap(tmp_path / "features", regions(0))
    return tmp_path


@pytest.fixture
def fits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Caching from one image on; the list grows by one at each k-means actually run."""
    calls: list[int] = []
    real = dictionary.stream_kmeans

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(dictionary, "stream_kmeans", counted)
    monkeypatch.setattr(dictionary, "CACHE_MIN_IMAGES", 1)
    return calls


def fit(root: Path, seed: int = 0, sample: int = 60, ids: range = range(30)) -> tuple[FittedEntries, torch.Tensor]:
    """Entries fitted over ``ids`` and the generator's state after the fit."""
    generator = torch.Generator().manual_seed(seed)
    sampler = RegionSampler(open_store(root / "features"), list(ids), max_regions=3)
    fitted = fit_entries("image", 5, 4, PrepareResources(seed=seed, regions=sampler, data_root=root,
                                                         generator=generator), sample=sample)
    return fitted, generator.get_state()


def entries_on_disk(root: Path) -> list[Path]:
    return sorted((root / "cache").glob("catt-kmeans-*.npz"))


def test_a_cached_fit_is_the_uncached_one_and_leaves_the_generator_where_it_would(root: Path) -> None:
    uncached, state = fit(root)  # 30 images: below the default threshold, nothing written
    assert not (root / "cache").exists()
    dictionary.CACHE_MIN_IMAGES, threshold = 1, dictionary.CACHE_MIN_IMAGES
    try:
        for _ in range(2):  # written, then read
            fitted, after = fit(root)
            np.testing.assert_array_equal(fitted.entries, uncached.entries)
            assert fitted.meta == uncached.meta and torch.equal(after, state)
    finally:
        dictionary.CACHE_MIN_IMAGES = threshold
    assert len(entries_on_disk(root)) == 1


def test_the_second_fit_reads_the_cache(root: Path, fits: list[int]) -> None:
    fit(root)
    fit(root)
    assert len(fits) == 1 and len(entries_on_disk(root)) == 1


@pytest.mark.parametrize("change", ["seed", "sample", "images", "store rewritten"])
def test_any_changed_input_fits_again(root: Path, fits: list[int], change: str) -> None:
    first, _ = fit(root)
    if change == "store rewritten":  # the same ids and width, other features: vlattn's marker gets a new id
        write_memmap(root / "features", regions(1), overwrite=True)
    other, _ = fit(root, seed=int(change == "seed"), sample=50 if change == "sample" else 60,
                   ids=range(31) if change == "images" else range(30))
    assert len(fits) == 2 and len(entries_on_disk(root)) == 2
    assert not np.array_equal(other.entries, first.entries)


def test_a_damaged_entry_or_a_symlink_is_left_alone(root: Path, fits: list[int], tmp_path_factory) -> None:
    fitted, _ = fit(root)
    path = entries_on_disk(root)[0]
    path.write_bytes(b"not an npz")
    again, _ = fit(root)
    assert len(fits) == 2 and path.read_bytes() == b"not an npz"
    np.testing.assert_array_equal(again.entries, fitted.entries)
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "target.npz"
    elsewhere.write_bytes(b"a user's file")
    path.unlink()
    path.symlink_to(elsewhere)
    fit(root)
    assert len(fits) == 3 and path.is_symlink() and elsewhere.read_bytes() == b"a user's file"


def test_an_entry_counts_as_vlattns_cache_and_a_foreign_file_does_not(root: Path, fits: list[int]) -> None:
    fit(root)
    name = entries_on_disk(root)[0].name
    assert owned_cache_entries(root) == ["cache", f"cache/{name}"]
    (root / "cache" / "notes.txt").write_text("mine")
    assert owned_cache_entries(root) == []


def test_the_identity_of_a_store_without_a_marker_follows_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "features.hdf5"
    write_m2_hdf5(path, regions(0))
    before = open_store(path)
    identity, fingerprint = store_identity(before), store_fingerprint(before)
    write_m2_hdf5(path, regions(1, images=40)[:-1] + [(39, RegionFeatures(np.ones((5, 4), np.float32),
                                                                          np.tile(BOXES[:1], (5, 1)), 10, 10))],
                  overwrite=True)
    after = open_store(path)
    assert store_fingerprint(after) == fingerprint  # same ids and width: a run could not tell
    assert store_identity(after) != identity


def test_a_word_dictionary_is_cached_by_its_embeddings_and_counts(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = dictionary.weighted_kmeans
    monkeypatch.setattr(dictionary, "weighted_kmeans", lambda *a, **k: calls.append(1) or real(*a, **k))
    table = torch.randn(30, 4, generator=torch.Generator().manual_seed(0))
    counts = torch.arange(30)  # word 0 never occurs

    def words(embeddings: torch.Tensor) -> tuple[FittedEntries, torch.Tensor]:
        generator = torch.Generator().manual_seed(0)
        fitted = fit_entries("word", 5, 4, PrepareResources(seed=0, word_embeddings=embeddings, word_counts=counts,
                                                            data_root=root, generator=generator), sample=1)
        return fitted, generator.get_state()

    uncached, state = words(table)  # 29 words: below the default threshold
    monkeypatch.setattr(dictionary, "CACHE_MIN_WORDS", 29)
    for _ in range(2):
        fitted, after = words(table)
        np.testing.assert_array_equal(fitted.entries, uncached.entries)
        assert fitted.meta == uncached.meta and torch.equal(after, state)
    assert len(calls) == 2 and len(entries_on_disk(root)) == 1  # the uncached fit, then one fit written and read
    changed = table.clone()
    changed[3, 0] += 1.0
    words(changed)
    assert len(calls) == 3 and len(entries_on_disk(root)) == 2
