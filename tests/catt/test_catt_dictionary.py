"""Global dictionaries: k-means (scikit-learn) finds known centres, in memory and streamed; it reproduces for a seed;
word dictionaries weigh words by their counts; dictionary files load with one-line errors; random init is the
released code's U(0, 0.01)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from vlattn.catt.dictionary import DictionaryOptions, GlobalDictionary, fit_entries
from vlattn.catt.files import default_dictionary_path, read_dictionary, write_dictionary
from vlattn.catt.kmeans import stream_kmeans, weighted_kmeans
from vlattn.data.features import RegionFeatures, open_store, write_memmap
from vlattn.data.regions import RegionSampler
from vlattn.errors import ConfigError, DataError
from vlattn.data.resources import PrepareResources

CENTRES = np.array([[8, 0, 0, 0], [0, 8, 0, 0], [0, 0, 8, 0], [0, 0, 0, 8], [-8, -8, 0, 0]], dtype=np.float32)


def blobs(count: int, seed: int = 0) -> np.ndarray:
    """``count`` points around :data:`CENTRES` (std 0.3), in random order."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(len(CENTRES), size=count)
    return (CENTRES[labels] + rng.normal(0, 0.3, (count, 4))).astype(np.float32)


def matched(found: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Distances from each expected centre to the nearest found one."""
    return np.linalg.norm(expected[:, None] - found[None], axis=-1).min(axis=1)


def test_kmeans_finds_the_centres_in_memory_and_streamed() -> None:
    data = blobs(3000)
    in_memory = stream_kmeans([data], 5, seed=0, buffer_rows=10_000)
    assert in_memory.rows == in_memory.buffered == 3000
    assert matched(in_memory.centres, CENTRES).max() < 0.1
    # a buffer of 100 rows, then 29 streamed chunks of 100 (one mini-batch step each)
    streamed = stream_kmeans(np.split(data, 30), 5, seed=0, buffer_rows=100)
    assert streamed.buffered == 100 and streamed.rows == 3000
    assert matched(streamed.centres, CENTRES).max() < 0.3


def test_kmeans_is_reproducible_for_a_seed() -> None:
    data = blobs(2000, seed=1)
    first, again = stream_kmeans([data], 7, seed=3, buffer_rows=500), stream_kmeans([data], 7, seed=3, buffer_rows=500)
    other = stream_kmeans([data], 7, seed=4, buffer_rows=500)
    np.testing.assert_array_equal(first.centres, again.centres)
    assert not np.array_equal(first.centres, other.centres)
    with pytest.raises(DataError, match="k-means needs at least 7 points for 7 dictionary entries, got 5"):
        stream_kmeans([data[:5]], 7, seed=0, buffer_rows=100)


def test_word_kmeans_weighs_words_by_their_counts() -> None:
    points = np.array([[0, 0], [1, 0], [10, 10], [11, 10], [50, 50]], dtype=np.float32)
    # the unused word (count 0) is never a centre; two clusters, the first pulled towards the frequent word
    centres = weighted_kmeans(points, np.array([3, 1, 1, 1, 0]), 2, seed=0)
    np.testing.assert_allclose(sorted(centres.tolist()), [[0.25, 0.0], [10.5, 10.0]], atol=1e-5)
    # no more distinct words than entries: every used word is an entry, the spare entries repeat used words
    exact = weighted_kmeans(points, np.array([5, 1, 1, 1, 0]), 9, seed=0)
    assert exact.shape == (9, 2)
    assert {tuple(row) for row in exact} == {tuple(row) for row in points[:4]}
    assert (exact[4:] == points[0]).all(axis=1).sum() >= 1
    np.testing.assert_array_equal(exact, weighted_kmeans(points, np.array([5, 1, 1, 1, 0]), 9, seed=0))


@pytest.fixture(scope="module")
def region_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 images of 3 regions each drawn around :data:`CENTRES`."""
    root = tmp_path_factory.mktemp("regions")
    data = blobs(120, seed=2).reshape(40, 3, 4)
    boxes = np.tile(np.array([[0, 0, 8, 8]], dtype=np.float32), (3, 1))
    write_memmap(root / "features", [(i, RegionFeatures(data[i], boxes, 10, 10)) for i in range(40)])
    return root


def resources(root: Path, seed: int = 0, ids: range = range(30), **extra) -> PrepareResources:
    sampler = RegionSampler(open_store(root / "features"), list(ids), max_regions=3)
    return PrepareResources(seed=seed, regions=sampler, data_root=root, generator=torch.Generator().manual_seed(seed),
                            **extra)


def test_stream_chunks_are_the_sample(region_store: Path) -> None:
    sampler = RegionSampler(open_store(region_store / "features"), list(range(30)), max_regions=3)
    chunks = list(sampler.stream(50, torch.Generator().manual_seed(5), chunk_rows=7))
    assert all(len(c) >= 7 for c in chunks[:-1]) and sum(map(len, chunks)) == 50
    np.testing.assert_array_equal(np.concatenate(chunks), sampler.sample(50, torch.Generator().manual_seed(5)).numpy())


def test_prepare_fits_the_training_regions_reproducibly(region_store: Path) -> None:
    def prepared(seed: int, size: int = 5) -> torch.Tensor:
        dictionary = GlobalDictionary(4, "image", DictionaryOptions(size=size, sample=1000))
        with torch.no_grad():
            dictionary.prepare(resources(region_store, seed))
        return dictionary.entries.detach().clone()

    first = prepared(0)
    assert matched(first.numpy(), CENTRES).max() < 0.3
    torch.testing.assert_close(prepared(0), first, rtol=0, atol=0)
    assert not torch.equal(prepared(0, size=8)[:5], first) and not torch.equal(prepared(1, size=8), prepared(0, size=8))
    fitted = fit_entries("image", 5, 4, resources(region_store), sample=1000)
    assert fitted.meta["rows"] == 90 and fitted.meta["size"] == 5  # the 30 training images' 90 regions


def test_zero_channels_stay_zero_and_kmeans_fits_the_raw_width(region_store: Path) -> None:
    """A dictionary at a site whose keys carry 2 extra (box) channels: 4 learned channels, fitted by k-means over
    the 4-d regions, and 2 channels that are zero in every entry and get no parameter."""
    dictionary = GlobalDictionary(6, "image", DictionaryOptions(size=5, sample=1000), zero_channels=2)
    assert dictionary.entries.shape == (5, 4)
    with torch.no_grad():
        dictionary.prepare(resources(region_store))
    entries = dictionary()
    assert entries.shape == (5, 6) and not entries[:, 4:].any()
    assert matched(entries[:, :4].detach().numpy(), CENTRES).max() < 0.3
    entries.sum().backward()
    torch.testing.assert_close(dictionary.entries.grad, torch.ones(5, 4))
    with pytest.raises(ValueError, match=r"zero_channels must lie in \[0, 6\), got 6"):
        GlobalDictionary(6, "image", zero_channels=6)


def test_prepare_checks_the_source(region_store: Path) -> None:
    with pytest.raises(ConfigError, match=r"image dictionary \(5 x 6\): k-means runs over the 4-d training regions"):
        GlobalDictionary(6, "image", DictionaryOptions(size=5)).prepare(resources(region_store))
    with pytest.raises(ConfigError, match="word dictionary .* needs the word embeddings"):
        GlobalDictionary(4, "word", DictionaryOptions(size=5)).prepare(resources(region_store))
    no_regions = dataclasses.replace(resources(region_store), regions=None)
    with pytest.raises(ConfigError, match="needs training region features"):
        GlobalDictionary(4, "image", DictionaryOptions(size=5)).prepare(no_regions)


def test_word_dictionary_from_the_embedding_table(region_store: Path) -> None:
    table = torch.randn(6, 4)
    counts = torch.tensor([0, 0, 3, 1, 2, 0])
    dictionary = GlobalDictionary(4, "word", DictionaryOptions(size=5))
    with torch.no_grad():
        dictionary.prepare(resources(region_store, word_embeddings=table, word_counts=counts))
    rows = {tuple(row) for row in dictionary.entries.tolist()}
    assert rows == {tuple(row) for row in table[2:5].tolist()}  # 3 used words, 5 entries: each used word, repeated


def test_vocabulary_cap_gives_one_entry_per_word(region_store: Path) -> None:
    """``cap: vocabulary``: V = 6 words under a 500-entry dictionary -> 6 entries, the embedding table row for row
    (no frequency-weighted copies, whatever the counts); a vocabulary larger than the size keeps the size and
    k-means; the cap is refused for an image dictionary or without a vocabulary, naming the key."""
    table, counts = torch.randn(6, 4), torch.tensor([0, 0, 30, 1, 2, 0])
    capped = GlobalDictionary(4, "word", DictionaryOptions(size=500, cap="vocabulary"), vocabulary_size=6)
    assert tuple(capped.entries.shape) == (6, 4)
    with torch.no_grad():
        capped.prepare(resources(region_store, word_embeddings=table, word_counts=counts))
    torch.testing.assert_close(capped.entries.detach(), table, rtol=0, atol=0)
    large = GlobalDictionary(4, "word", DictionaryOptions(size=3, cap="vocabulary"), vocabulary_size=6)
    with torch.no_grad():
        large.prepare(resources(region_store, word_embeddings=table, word_counts=counts))
    assert tuple(large.entries.shape) == (3, 4) and large.whole_vocabulary is False
    # k-means with 3 centres over the 3 used words: each used word once
    assert sorted(large.entries.tolist()) == sorted(table[2:5].tolist())
    for source, vocabulary in (("image", 6), ("word", None)):
        with pytest.raises(ConfigError, match=r"^config key model.options.word_dictionary.cap: 'vocabulary'"):
            GlobalDictionary(4, source, DictionaryOptions(cap="vocabulary"), vocabulary_size=vocabulary,
                             where="model.options.word_dictionary")


def test_random_init_is_the_released_codes_and_prepare_keeps_it(region_store: Path) -> None:
    torch.manual_seed(0)
    dictionary = GlobalDictionary(4, "image", DictionaryOptions(size=500, init="random"))
    before = dictionary.entries.detach().clone()
    assert before.min() >= 0 and before.max() < 0.01 and before.std() > 0.002
    dictionary.prepare(resources(region_store))
    assert torch.equal(dictionary.entries, before)
    assert dictionary.no_weight_decay == ("entries",)


def test_dictionary_files_round_trip_and_load_relative_to_the_data(region_store: Path, tmp_path: Path) -> None:
    path = default_dictionary_path(region_store, "image", 5)
    assert path == region_store / "catt" / "image-5.npz"
    write_dictionary(path, CENTRES, {"source": "image", "size": 5})
    saved = read_dictionary(path)
    np.testing.assert_array_equal(saved.entries, CENTRES) and saved.meta == {"source": "image", "size": 5}
    dictionary = GlobalDictionary(4, "image", DictionaryOptions(size=5, init="file", path="catt/image-5.npz"))
    with torch.no_grad():
        dictionary.prepare(resources(region_store))
    np.testing.assert_array_equal(dictionary.entries.detach().numpy(), CENTRES)
    wrong = GlobalDictionary(4, "image", DictionaryOptions(size=6, init="file", path=str(path)))
    with pytest.raises(DataError, match=r"image-5\.npz: the image dictionary needs \(6, 4\) entries, the file holds \(5, 4\)"):
        wrong.prepare(resources(region_store))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "dictionary file not found"),
        (b"not a zip", "not a dictionary file"),
        ("nan", "dictionary entries contain NaN or infinity"),
        ("1d", r"dictionary entries must be \(K, D\), got shape \(3,\)"),
    ],
)
def test_bad_dictionary_files_are_one_line_errors(tmp_path: Path, content, message: str) -> None:
    path = tmp_path / "d.npz"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content == "nan":
        write_dictionary(path, np.array([[np.nan, 1.0]]), {})
    elif content == "1d":
        with open(path, "wb") as handle:
            np.savez(handle, entries=np.ones(3, dtype=np.float32), meta=np.asarray("{}"))
    with pytest.raises(DataError, match=rf"d\.npz: {message}"):
        read_dictionary(path)


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    write_dictionary(path, CENTRES, {"n": 1})
    with pytest.raises(TypeError):
        write_dictionary(path, CENTRES, {"n": object()})  # not JSON: fails while writing
    assert read_dictionary(path).meta == {"n": 1} and list(tmp_path.iterdir()) == [path]


def test_entries_are_the_parameter_when_recorded_and_a_constant_alias_without_gradients() -> None:
    """With autograd recording, the parameter itself (gradients reach it); under no_grad / inference_mode a
    detached alias of the same storage, whose views (the [None] batch of one every user makes) are constants —
    a view of the parameter made there would claim requires_grad without an autograd node."""
    dictionary = GlobalDictionary(3, "image", DictionaryOptions(size=4, init="random"))
    assert dictionary() is dictionary.entries
    for mode in (torch.no_grad, torch.inference_mode):
        with mode():
            entries = dictionary()[None]  # (1, K, D)
        assert not entries.requires_grad and entries.grad_fn is None
        assert entries.data_ptr() == dictionary.entries.data_ptr()  # no copy
        torch.testing.assert_close(entries[0], dictionary.entries.detach())


def test_overwrite_replaces_only_a_dictionary_file(tmp_path: Path) -> None:
    """``--overwrite`` replaces a dictionary file; a user's file or a link of that name stays (one-line error)."""
    path = tmp_path / "image-5.npz"
    write_dictionary(path, CENTRES, {"source": "image", "size": 5})
    write_dictionary(path, 2 * CENTRES, {"source": "image", "size": 5})
    assert np.array_equal(read_dictionary(path).entries, 2 * CENTRES)
    with pytest.raises(DataError, match="exists; vlattn does not replace it"):
        write_dictionary(path, CENTRES, {}, overwrite=False)
    (tmp_path / "mine.txt").write_text("my notes")
    path.unlink()
    path.symlink_to(tmp_path / "mine.txt")
    with pytest.raises(DataError, match="refusing to overwrite: not a file"):
        write_dictionary(path, CENTRES, {})
    path.unlink()
    path.write_text("my notes")
    with pytest.raises(DataError, match="refusing to overwrite: not a dictionary file written by vlattn"):
        write_dictionary(path, CENTRES, {})
    assert path.read_text() == (tmp_path / "mine.txt").read_text() == "my notes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["image-5.npz", "mine.txt"]
