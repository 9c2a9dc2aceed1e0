"""The SCST CIDEr-D reward: hand-computed values for both document-frequency modes and include_eos, agreement
with CiderD, token-id input, and the on-disk cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vlattn.metrics import CiderD, CiderDocumentFrequency, CiderReward

# Training references of two images; every table is built with "<eos>" appended to each reference.
TRAIN = [["a b", "a c"], ["b c"]]


@pytest.mark.parametrize(
    ("mode", "include_eos", "expected"),
    [
        # image mode, N = 2: df(b) = df(c) = df(<eos>) = 2 -> idf 0, every other n-gram idf log 2.
        # Without eos only the bigram "b c" has weight: cosine 1 for order 2 -> 10 * 1 / 4.
        ("image", False, 2.5),
        # With eos: bigrams {"b c": log 2, "c <eos>": 0}, trigram "b c <eos>": log 2 -> cosine 1 for orders
        # 2 and 3 -> 10 * 2 / 4.
        ("image", True, 5.0),
        # caption mode, N = 3: unigrams b, c get idf log 1.5 (> 0), so order 1 adds a cosine of 1 too.
        ("caption", False, 5.0),
        ("caption", True, 7.5),
    ],
)
def test_hand_computed_identical_caption(mode: str, include_eos: bool, expected: float) -> None:
    reward = CiderReward(CiderDocumentFrequency.build(TRAIN, mode=mode), include_eos=include_eos)
    assert reward(["b c"], [["b c"]]).tolist() == pytest.approx([expected], rel=1e-12)


def test_hand_computed_two_references() -> None:
    # Image mode without eos; idf: a = "a b" = "a c" = log 2 =: L, b = c = 0.
    # vs "a b": order 1 {a: L, b: 0} twice -> cosine 1; order 2 {"a b": L} -> 1.   sum 2
    # vs "a c": order 1 {a: L, b: 0} vs {a: L, c: 0} -> L^2 / (L L) = 1; order 2 -> 0.   sum 1
    # 10 * (2 + 1) / 4 orders / 2 references = 3.75
    reward = CiderReward(CiderDocumentFrequency.build(TRAIN, mode="image"), include_eos=False)
    assert reward(["a b"], [TRAIN[0]]).tolist() == pytest.approx([3.75], rel=1e-12)


def test_samples_per_image_and_token_ids() -> None:
    vocabulary = ["<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c"]
    reward = CiderReward(CiderDocumentFrequency.build(TRAIN, mode="image"), include_eos=True, vocabulary=vocabulary)
    ids = np.array([[5, 6, 2, 0], [4, 5, 2, 0]])  # "b c <eos>", "a b <eos>" for image 1
    assert reward(ids, [TRAIN[1]]).tolist() == pytest.approx(reward(["b c", "a b"], [["b c"]]).tolist())
    assert reward(ids, [TRAIN[1]])[0] == pytest.approx(5.0)
    with pytest.raises(ValueError, match="multiple"):
        reward(["a", "b", "c"], [["a"], ["b"]])


def test_same_numbers_as_cider_d_with_the_evaluated_references(corpus: tuple[dict, dict]) -> None:
    gts, res = corpus
    keys = list(gts)
    table = CiderDocumentFrequency.build([gts[k] for k in keys], mode="image")
    expected = CiderD().compute_score(gts, res)[1]
    got = CiderReward(table, include_eos=False)([res[k][0] for k in keys], [gts[k] for k in keys])
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)
    with_eos = CiderD().compute_score(
        {k: [c + " <eos>" for c in v] for k, v in gts.items()}, {k: [v[0] + " <eos>"] for k, v in res.items()}
    )[1]
    got = CiderReward(table, include_eos=True)([res[k][0] for k in keys], [gts[k] for k in keys])
    np.testing.assert_allclose(got, with_eos, rtol=1e-12, atol=1e-14)


def test_cache_round_trip_and_rebuild(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "df" / "cider_df.npz"
    built = CiderDocumentFrequency.cached(path, TRAIN, mode="caption", tokenization="vocab-v1")
    assert path.exists() and not list(path.parent.glob("*.tmp"))

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("rebuilt although the fingerprint matches")

    with monkeypatch.context() as patch:
        patch.setattr(CiderDocumentFrequency, "build", classmethod(no_build))
        loaded = CiderDocumentFrequency.cached(path, TRAIN, mode="caption", tokenization="vocab-v1")
    assert loaded.fingerprint == built.fingerprint and loaded.words == built.words
    for a, b in zip(loaded.counts, built.counts):
        np.testing.assert_array_equal(a, b)
    for change in ({"tokenization": "vocab-v2"}, {"mode": "image"}):
        kwargs = {"mode": "caption", "tokenization": "vocab-v1"} | change
        assert CiderDocumentFrequency.cached(path, TRAIN, **kwargs).fingerprint != built.fingerprint
    rebuilt = CiderDocumentFrequency.cached(path, [["a b", "a d"], ["b c"]], mode="caption", tokenization="vocab-v1")
    assert "d" in rebuilt.words and rebuilt.fingerprint != built.fingerprint
    path.write_bytes(b"not an npz")
    assert CiderDocumentFrequency.cached(path, TRAIN, mode="caption", tokenization="vocab-v1").fingerprint == built.fingerprint


def test_unknown_mode() -> None:
    with pytest.raises(ValueError, match="image, caption"):
        CiderDocumentFrequency.build(TRAIN, mode="corpus")


def test_a_file_that_is_not_a_table_is_left_in_place(tmp_path: Path) -> None:
    """The cache path holding someone else's file: the table is built and used, the file kept."""
    path = tmp_path / "df.npz"
    path.write_text("my notes")
    table = CiderDocumentFrequency.cached(path, [["a b", "a d"], ["b c"]], mode="caption", tokenization="v1")
    assert table.num_documents == 3 and path.read_text() == "my notes"  # caption mode: one per caption
    assert sorted(p.name for p in tmp_path.iterdir()) == ["df.npz"]


@pytest.mark.parametrize("damage", ["truncated", "zip header only", "bad member"])
def test_a_damaged_table_is_left_in_place_and_rebuilt_in_memory(tmp_path: Path, damage: str) -> None:
    """A damaged ``.npz`` (a cache cut short by a full disk, a broken archive) is not vlattn's provably: the table
    is built and used, the file kept as it is, no crash."""
    path = tmp_path / "df.npz"
    whole = CiderDocumentFrequency.cached(path, TRAIN, mode="caption", tokenization="v1")
    data = path.read_bytes()
    broken = {"truncated": data[: len(data) // 2], "zip header only": b"PK\x03\x04" + b"\0" * 40,
              "bad member": data.replace(b"meta", b"mexa", 1)}[damage]
    path.write_bytes(broken)
    table = CiderDocumentFrequency.cached(path, TRAIN, mode="caption", tokenization="v1")
    assert table.fingerprint == whole.fingerprint and path.read_bytes() == broken
