"""Readers of other projects' feature layouts, each on a fixture built from the layout's documentation:
MCAN/OpenVQA npz trees, self-critical att/box/fc siblings, bottom-up/LXMERT TSV files and LMDB stores."""

from __future__ import annotations

import base64
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vlattn.data.features import (
    MemmapStore,
    NpzDirStore,
    RegionFeatures,
    SelfCriticalStore,
    TSVStore,
    detect_layout,
    open_store,
)
from vlattn.errors import DataError

DIM = 6
IMAGES = {
    9: (640, 480, 3),  # COCO-like ids: (width, height, regions)
    42: (500, 375, 4),
    1000: (320, 240, 2),
}


def regions_of(image_id: int) -> RegionFeatures:
    width, height, count = IMAGES[image_id]
    rng = np.random.default_rng(image_id)
    x1, y1 = rng.uniform(0, width / 2, count), rng.uniform(0, height / 2, count)
    boxes = np.stack([x1, y1, x1 + rng.uniform(5, width / 2, count), y1 + rng.uniform(5, height / 2, count)], 1)
    return RegionFeatures(rng.normal(size=(count, DIM)).astype(np.float32), boxes.astype(np.float32), width, height)


def same(got: RegionFeatures, want: RegionFeatures, atol: float = 0.0) -> None:
    np.testing.assert_allclose(got.features, want.features, atol=atol, rtol=0)
    np.testing.assert_allclose(got.boxes, want.boxes, rtol=1e-6)
    assert (got.width, got.height) == (want.width, want.height)


# -- MCAN / OpenVQA ------------------------------------------------------------------------------------------


def write_mcan(root: Path, splits: dict[str, list[int]]) -> Path:
    """MCAN's coco_extract tree: <split>/COCO_<split>_<12-digit id>.jpg.npz with x (D, K), bbox, sizes."""
    for split, ids in splits.items():
        (root / split).mkdir(parents=True)
        for image_id in ids:
            r = regions_of(image_id)
            np.savez(root / split / f"COCO_{split}_{image_id:012d}.jpg.npz", x=r.features.T, bbox=r.boxes,
                     image_h=r.height, image_w=r.width, num_bbox=r.num_regions)
    return root


def test_mcan_nested_split_directories(tmp_path: Path) -> None:
    root = write_mcan(tmp_path / "coco_extract", {"train2014": [9, 1000], "val2014": [42]})
    store = open_store(root)
    assert isinstance(store, NpzDirStore) and store.ids() == [9, 42, 1000] and store.dim == DIM
    for image_id in IMAGES:
        same(store.get(image_id), regions_of(image_id))
    assert store.file(42).name == "COCO_val2014_000000000042.jpg.npz"
    assert open_store(root / "val2014").ids() == [42]  # one split directory alone


def test_mcan_errors_name_the_file(tmp_path: Path) -> None:
    root = write_mcan(tmp_path / "feats", {"train2014": [9], "test2015": [42]})
    np.savez(root / "test2015" / "COCO_test2015_000000000009.jpg.npz", x=np.zeros((DIM, 1)), bbox=np.zeros((1, 4)))
    with pytest.raises(DataError, match="image id 9 is in two files") as err:
        open_store(root)
    assert "COCO_train2014_000000000009.jpg.npz" in str(err.value)
    assert "COCO_test2015_000000000009.jpg.npz" in str(err.value)
    (root / "test2015" / "COCO_test2015_000000000009.jpg.npz").unlink()
    r = regions_of(42)
    bad = root / "test2015" / "COCO_test2015_000000000042.jpg.npz"
    np.savez(bad, x=r.features.T, bbox=r.boxes, image_h=1, image_w=1, num_bbox=7)
    with pytest.raises(DataError, match="num_bbox is 7 but 'bbox' has 4 rows") as err:
        open_store(root).get(42)
    assert str(bad) in str(err.value)
    bad.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(DataError, match="cannot read npz") as err:
        open_store(root).get(42)
    assert str(bad) in str(err.value)


# -- self-critical.pytorch -----------------------------------------------------------------------------------


def write_self_critical(root: Path, ids: list[int], *, normalised: bool = False, key: str = "feat") -> Path:
    """make_bu_data's output: <prefix>_att/<id>.npz (feat), <prefix>_box/<id>.npy, <prefix>_fc/<id>.npy."""
    for kind in ("att", "box", "fc"):
        (root / f"cocobu_{kind}").mkdir(parents=True)
    for image_id in ids:
        r = regions_of(image_id)
        scale = np.array([r.width, r.height, r.width, r.height], np.float32) if normalised else 1
        np.savez_compressed(root / "cocobu_att" / f"{image_id}.npz", **{key: r.features})
        np.save(root / "cocobu_box" / f"{image_id}.npy", r.boxes / scale)
        np.save(root / "cocobu_fc" / f"{image_id}.npy", r.features.mean(0))
    return root


def write_sizes(path: Path, ids: list[int]) -> Path:
    """cocotalk.json-like: images[].id/width/height."""
    images = [{"id": i, "width": IMAGES[i][0], "height": IMAGES[i][1], "split": "test"} for i in ids]
    path.write_text(json.dumps({"images": images}))
    return path


def test_self_critical_pixel_boxes(tmp_path: Path) -> None:
    root = write_self_critical(tmp_path / "data", [9, 42])
    for path in (root, root / "cocobu_att"):
        assert detect_layout(path) == "self-critical"
        store = open_store(path)
        assert isinstance(store, SelfCriticalStore) and store.box_units == "pixels" and store.ids() == [9, 42]
    got = store.get(42)
    want = regions_of(42)
    np.testing.assert_array_equal(got.features, want.features)
    np.testing.assert_array_equal(got.boxes, want.boxes)
    assert got.width == int(np.ceil(want.boxes[:, 2].max()))  # no sizes given: the boxes' extent
    np.testing.assert_allclose(store.pooled(9), regions_of(9).features.mean(0), rtol=1e-6)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(store)).get(9).features, regions_of(9).features)
    sized = open_store(root, image_sizes=write_sizes(tmp_path / "cocotalk.json", [9, 42]))
    same(sized.get(42), want)


def test_self_critical_normalised_boxes(tmp_path: Path) -> None:
    root = write_self_critical(tmp_path / "data", [9, 42, 1000], normalised=True)
    store = open_store(root)
    assert store.box_units == "normalized"
    raw = store.get(9)  # without sizes: stored boxes kept, image 1 x 1 (boxes / size unchanged)
    r = regions_of(9)
    np.testing.assert_allclose(raw.boxes, r.boxes / [r.width, r.height, r.width, r.height], rtol=1e-6)
    assert (raw.width, raw.height) == (1, 1)
    sized = open_store(root, image_sizes=write_sizes(tmp_path / "sizes.json", [9, 42, 1000]))
    for image_id in IMAGES:
        same(sized.get(image_id), regions_of(image_id))
    # an explicit unit overrides detection
    assert open_store(root, box_units="pixels").get(9).width == 1


def test_self_critical_errors(tmp_path: Path) -> None:
    root = write_self_critical(tmp_path / "data", [9, 42, 1000], normalised=True, key="z")
    assert open_store(root).get(9).features.shape == (3, DIM)  # cocotest_bu's 'z' key
    np.save(root / "cocobu_box" / "1000.npy", regions_of(1000).boxes)  # pixels among normalised boxes
    assert open_store(root).box_units == "pixels"  # detection looks at the first 8 files: one is in pixels
    with pytest.raises(DataError, match="above 1 in a store of normalised boxes") as err:
        open_store(root, box_units="normalized").get(1000)
    assert "1000.npy" in str(err.value)
    np.save(root / "cocobu_box" / "42.npy", np.zeros((2, 4), np.float32))
    with pytest.raises(DataError, match="2 boxes for 4 regions") as err:
        open_store(root).get(42)
    assert "42.npy" in str(err.value)
    (root / "cocobu_box" / "9.npy").unlink()
    with pytest.raises(DataError, match=r"features but no boxes; first: \[9\]"):
        open_store(root)
    with pytest.raises(DataError, match="box_units"):
        SelfCriticalStore(root / "cocobu_att", box_units="inches")


# -- bottom-up TSV -------------------------------------------------------------------------------------------


def b64(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array, dtype="<f4").tobytes()).decode("ascii")


def butd_line(image_id: int) -> str:
    r = regions_of(image_id)
    return "\t".join([str(image_id), str(r.width), str(r.height), str(r.num_regions), b64(r.boxes), b64(r.features)])


def lxmert_line(image_id: int) -> str:
    r = regions_of(image_id)
    k = r.num_regions
    ints = base64.b64encode(np.arange(k, dtype=np.int64).tobytes()).decode()
    return "\t".join([f"COCO_val2014_{image_id:012d}", str(r.height), str(r.width), ints, b64(np.ones(k)), ints,
                      b64(np.ones(k)), str(k), b64(r.boxes), b64(r.features)])


@pytest.fixture(autouse=True)
def _cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("line", [butd_line, lxmert_line])
def test_tsv_random_access_and_cached_index(tmp_path: Path, line) -> None:
    tsv = tmp_path / "test2014_36.tsv"
    tsv.write_text("".join(line(i) + "\n" for i in (42, 9, 1000)))
    store = open_store(tsv)
    assert isinstance(store, TSVStore) and store.dim == DIM
    assert store.ids() == [9, 42, 1000] and len(store) == 3 and 42 in store and 7 not in store
    for image_id in (1000, 9, 42):
        same(store.get(image_id), regions_of(image_id))
    assert [i for i, _ in store.stream()] == [42, 9, 1000]  # file order
    assert len(list((tmp_path / "cache" / "vlattn" / "tsv-index").glob("*.npz"))) == 1
    again = TSVStore(tsv)  # the cached index is used (a fresh object reads the same offsets)
    same(again.get(9), regions_of(9))
    same(pickle.loads(pickle.dumps(again)).get(1000), regions_of(1000))  # DataLoader workers


def test_tsv_shard_directory(tmp_path: Path) -> None:
    (tmp_path / "trainval").mkdir()
    (tmp_path / "trainval" / "part.tsv.0").write_text(butd_line(9) + "\n")
    (tmp_path / "trainval" / "part.tsv.1").write_text(butd_line(42) + "\n" + butd_line(1000) + "\n")
    store = open_store(tmp_path / "trainval")
    assert store.ids() == [9, 42, 1000]
    same(store.get(1000), regions_of(1000))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("42\t500\t375", "line 2 has 3 tab-separated fields"),
        ("x42\t500\t375\t1\tAAAA\tAAAA", "image id field b'x42' has no numeric id"),
        ("42\t500\t375\t4\t!!notbase64\tAAAA", "line 2 \\(image 42\\).*'boxes' is not valid base64"),
        (butd_line(42).replace("\t4\t", "\t3\t", 1), "line 2 \\(image 42\\).*'boxes' has 16 float32 values"),
        ("42\tofficial\t375\t4\tAAAA\tAAAA", "line 2 \\(image 42\\).*non-numeric size"),
    ],
)  # fmt: skip
def test_tsv_malformed_line_named(tmp_path: Path, bad: str, message: str) -> None:
    tsv = tmp_path / "f.tsv"
    tsv.write_text(butd_line(9) + "\n" + bad + "\n")
    with pytest.raises(DataError, match=message) as err:
        list(open_store(tsv).stream())
    assert str(tsv) in str(err.value)


def test_tsv_duplicate_id_named_in_both_passes(tmp_path: Path) -> None:
    tsv = tmp_path / "f.tsv"
    tsv.write_text(butd_line(9) + "\n" + butd_line(42) + "\n" + butd_line(9) + "\n")
    store = open_store(tsv)
    with pytest.raises(DataError, match="image id 9 on line 3 was already on f.tsv line 1"):
        store.ids()
    with pytest.raises(DataError, match="image id 9 on line 3 was already on f.tsv line 1"):
        list(store.stream())


def test_convert_tsv_to_memmap_cli(tmp_path: Path) -> None:
    from vlattn.cli import app

    tsv = tmp_path / "feats.tsv"
    tsv.write_text("".join(butd_line(i) + "\n" for i in (42, 9, 1000)))
    args = ["data", "convert", "--from", str(tsv), "--to", str(tmp_path / "mm"), "--format", "memmap"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "wrote 3 images (6-d features)" in result.output
    store = MemmapStore(tmp_path / "mm")
    for image_id in IMAGES:
        same(store.get(image_id), regions_of(image_id), atol=2e-3)  # float16 storage


# -- LMDB ----------------------------------------------------------------------------------------------------


def npy_bytes(array: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def npz_bytes(**arrays: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def write_lmdb(path: Path, items: dict[bytes, bytes], subdir: bool) -> Path:
    lmdb = pytest.importorskip("lmdb")
    env = lmdb.open(str(path), subdir=subdir, map_size=1 << 26)
    with env.begin(write=True) as txn:
        for key, value in items.items():
            txn.put(key, value)
    env.close()
    return path


def test_lmdb_self_critical_blobs(tmp_path: Path) -> None:
    """dump_to_lmdb's files: key = ascii id, value = the .npz/.npy bytes, lmdbdict bookkeeping keys."""
    (tmp_path / "data").mkdir()
    meta = {b"__keys__": pickle.dumps({"9", "42"}), b"__value_dumps__": pickle.dumps("identity")}
    att = {str(i).encode(): npz_bytes(feat=regions_of(i).features) for i in (9, 42)}
    box = {str(i).encode(): npy_bytes(regions_of(i).boxes) for i in (9, 42)}
    write_lmdb(tmp_path / "data" / "cocobu_att.lmdb", {**meta, **att}, subdir=False)
    write_lmdb(tmp_path / "data" / "cocobu_box.lmdb", {**meta, **box}, subdir=False)
    store = open_store(tmp_path / "data" / "cocobu_att.lmdb")
    assert isinstance(store, SelfCriticalStore) and store.ids() == [9, 42]
    got = store.get(42)
    np.testing.assert_array_equal(got.features, regions_of(42).features)
    np.testing.assert_array_equal(got.boxes, regions_of(42).boxes)
    alone = write_lmdb(tmp_path / "feats.lmdb", att, subdir=False)
    with pytest.raises(DataError, match="has no boxes"):
        open_store(alone)


def test_lmdb_pickled_records(tmp_path: Path) -> None:
    """ViLBERT/VOLTA-style LMDB directory: 'keys' list + one pickled dict per image (arrays or base64)."""
    items = {b"keys": pickle.dumps([b"9", b"42"])}
    for image_id, encode in ((9, b64), (42, lambda a: a)):
        r = regions_of(image_id)
        record = {"image_id": image_id, "image_h": r.height, "image_w": r.width, "num_boxes": r.num_regions,
                  "boxes": encode(r.boxes), "features": encode(r.features)}
        items[str(image_id).encode()] = pickle.dumps(record, protocol=2)
    root = write_lmdb(tmp_path / "coco_trainval.lmdb", items, subdir=True)
    assert detect_layout(root) == "lmdb"
    store = open_store(root)
    assert store.ids() == [9, 42] and store.dim == DIM
    for image_id in (9, 42):
        same(store.get(image_id), regions_of(image_id))
    same(pickle.loads(pickle.dumps(store)).get(9), regions_of(9))  # DataLoader workers


def test_lmdb_records_read_by_forked_workers_while_open_in_the_parent(tmp_path: Path) -> None:
    """A DataLoader worker forked while the main process has the LMDB open reads it, and so does the main
    process afterwards (the lmdb package refuses a second environment on the files in one process)."""
    import multiprocessing

    from torch.utils.data import DataLoader

    items = {}
    for image_id in IMAGES:
        r = regions_of(image_id)
        items[str(image_id).encode()] = pickle.dumps({"image_h": r.height, "image_w": r.width, "num_boxes":
                                                      r.num_regions, "boxes": r.boxes, "features": r.features})
    store = open_store(write_lmdb(tmp_path / "db", items, subdir=True))
    same(store.get(42), regions_of(42))  # the main process holds the environment open
    loader = DataLoader(store.ids(), batch_size=None, num_workers=1, collate_fn=lambda i: (i, store.get(i).features),
                        multiprocessing_context=multiprocessing.get_context("fork"))
    for _ in range(2):  # the main process reads between two epochs' workers, as validation does
        read = dict(loader)
        assert sorted(read) == sorted(IMAGES)
        for image_id, features in read.items():
            np.testing.assert_array_equal(features, regions_of(image_id).features)
        same(store.get(1000), regions_of(1000))


def test_lmdb_refuses_unsafe_or_malformed_records(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self):
            import os

            return (os.system, ("echo pwned",))

    r = regions_of(9)
    good = {"image_h": r.height, "image_w": r.width, "num_boxes": 3, "boxes": r.boxes, "features": r.features}
    items = {b"9": pickle.dumps(good), b"42": pickle.dumps({"evil": Evil()}),
             b"1000": pickle.dumps({**good, "num_boxes": 2})}
    store = open_store(write_lmdb(tmp_path / "db", items, subdir=True))
    with pytest.raises(DataError, match=r"key b'42'.*refusing to load (posix|os)\.system"):
        store.get(42)
    with pytest.raises(DataError, match="'boxes' has 12 values, which does not fit num_boxes=2"):
        store.get(1000)
