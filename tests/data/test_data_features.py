"""Feature-store readers on fixture files in each real layout, writers, converter and error cases."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from vlattn.data.features import (
    FeatureStore,
    M2HDF5Store,
    MemmapStore,
    NpzDirStore,
    RegionFeatures,
    convert_store,
    open_store,
    write_m2_hdf5,
    write_memmap,
    write_npz_dir,
)
from vlattn.errors import DataError

DIM = 8


def sample_regions(seed: int, count: int, dim: int = DIM) -> RegionFeatures:
    """Random regions inside a 64x48 image, x1y1x2y2."""
    rng = np.random.default_rng(seed)
    x1, y1 = rng.uniform(0, 30, count), rng.uniform(0, 20, count)
    boxes = np.stack([x1, y1, x1 + rng.uniform(1, 30, count), y1 + rng.uniform(1, 25, count)], axis=1)
    features = rng.normal(size=(count, dim)) * 3
    return RegionFeatures(features.astype(np.float32), boxes.astype(np.float32), 64, 48)


REFERENCE = {7: sample_regions(0, 5), 3: sample_regions(1, 2), 11: sample_regions(2, 4)}


def write_real_m2(path: Path, items: dict[int, RegionFeatures], cls_prob: bool) -> Path:
    """An HDF5 file as M2's coco_detections.hdf5: no image sizes, optional class probabilities."""
    with h5py.File(path, "w") as handle:
        for image_id, regions in items.items():
            handle[f"{image_id}_features"] = regions.features
            handle[f"{image_id}_boxes"] = regions.boxes
            if cls_prob:
                handle[f"{image_id}_cls_prob"] = np.full((regions.num_regions, 3), 1 / 3, dtype=np.float32)
    return path


def write_real_npz(root: Path, items: dict[int, RegionFeatures], layout: str, with_size: bool = True) -> Path:
    """A directory of <id>.npz in the self-critical ('feat') or MCAN ('x-dk' / 'x-kd') layout."""
    root.mkdir()
    for image_id, regions in items.items():
        size = {"image_h": regions.height, "image_w": regions.width} if with_size else {}
        if layout == "feat":
            np.savez(root / f"{image_id}.npz", feat=regions.features, boxes=regions.boxes, **size)
        else:
            x = regions.features.T if layout == "x-dk" else regions.features
            np.savez(root / f"{image_id}.npz", x=x, bbox=regions.boxes, num_bbox=regions.num_regions, **size)
    return root


def assert_same(got: RegionFeatures, want: RegionFeatures, atol: float = 0.0, size: bool = True) -> None:
    assert got.features.dtype == np.float32 and got.boxes.dtype == np.float32
    np.testing.assert_allclose(got.features, want.features, atol=atol, rtol=atol)
    np.testing.assert_array_equal(got.boxes, want.boxes)
    if size:
        assert (got.width, got.height) == (want.width, want.height)


@pytest.mark.parametrize("cls_prob", [True, False])
def test_m2_reader_real_layout(tmp_path: Path, cls_prob: bool) -> None:
    store = M2HDF5Store(write_real_m2(tmp_path / "det.hdf5", REFERENCE, cls_prob))
    assert isinstance(store, FeatureStore)
    assert store.dim == DIM and store.ids() == [3, 7, 11] and len(store) == 3 and 7 in store and 8 not in store
    for image_id, want in REFERENCE.items():
        got = store.get(image_id)
        assert_same(got, want, size=False)
        # No size in M2 files: the boxes' max extents, rounded up.
        assert got.width == math.ceil(want.boxes[:, 2].max()) and got.height == math.ceil(want.boxes[:, 3].max())
    probs = store.cls_prob(7)
    assert (probs is not None and probs.shape == (5, 3)) if cls_prob else probs is None


@pytest.mark.parametrize("with_size", [True, False])
def test_npz_self_critical_layout(tmp_path: Path, with_size: bool) -> None:
    store = NpzDirStore(write_real_npz(tmp_path / "feats", REFERENCE, "feat", with_size))
    assert store.dim == DIM and store.ids() == [3, 7, 11]
    got = store.get(11)
    assert_same(got, REFERENCE[11], size=with_size)
    if not with_size:
        assert got.width == math.ceil(REFERENCE[11].boxes[:, 2].max())


@pytest.mark.parametrize("layout", ["x-dk", "x-kd"])
@pytest.mark.parametrize("dim", [None, DIM])
def test_npz_mcan_layout_both_orientations(tmp_path: Path, layout: str, dim: int | None) -> None:
    store = NpzDirStore(write_real_npz(tmp_path / "feats", REFERENCE, layout), dim=dim)
    assert store.dim == DIM
    for image_id, want in REFERENCE.items():
        assert_same(store.get(image_id), want)


def test_npz_square_x_needs_explicit_orientation(tmp_path: Path) -> None:
    square = {5: sample_regions(3, DIM)}  # K == D: (D, K) and (K, D) look alike
    root = write_real_npz(tmp_path / "feats", square, "x-dk")
    for store_dim in (None, DIM):
        with pytest.raises(DataError, match="orientation") as err:
            NpzDirStore(root, dim=store_dim).get(5)
        assert "5.npz" in str(err.value)
    assert_same(NpzDirStore(root, dim=DIM, orientation="dk").get(5), square[5])
    np.testing.assert_array_equal(NpzDirStore(root, orientation="kd").get(5).features, square[5].features.T)


def test_npz_x_fitting_no_orientation(tmp_path: Path) -> None:
    root = write_real_npz(tmp_path / "feats", {4: sample_regions(0, 3)}, "x-dk")
    with pytest.raises(DataError, match="fits neither") as err:
        NpzDirStore(root, dim=5).get(4)
    assert "4.npz" in str(err.value) and "item 4" in str(err.value)


def write_with(fmt: str, path: Path, items: dict[int, RegionFeatures]) -> Path:
    writer = {"m2-hdf5": write_m2_hdf5, "npz-dir": write_npz_dir, "memmap": write_memmap}[fmt]
    assert writer(path, sorted(items.items())) == len(items)
    return path


FORMATS = ["m2-hdf5", "npz-dir", "memmap"]
STORE_TYPES = {"m2-hdf5": M2HDF5Store, "npz-dir": NpzDirStore, "memmap": MemmapStore}


@pytest.mark.parametrize("fmt", FORMATS)
def test_writer_reader_round_trip_and_detection(tmp_path: Path, fmt: str) -> None:
    store = open_store(write_with(fmt, tmp_path / "store", REFERENCE))
    assert type(store) is STORE_TYPES[fmt]
    assert store.ids() == [3, 7, 11] and list(store) == [3, 7, 11] and store.dim == DIM
    atol = 1e-2 if fmt == "memmap" else 0.0  # float16 storage: relative precision 2**-11, |x| < ~12
    for image_id, want in REFERENCE.items():
        assert_same(store.get(image_id), want, atol=atol)


def test_npz_writer_mcan_layout_stores_d_by_k(tmp_path: Path) -> None:
    assert write_npz_dir(tmp_path / "feats", REFERENCE.items(), layout="x") == 3  # images, not the last box count
    with np.load(tmp_path / "feats" / "7.npz") as data:
        assert data["x"].shape == (DIM, 5) and data["bbox"].shape == (5, 4) and int(data["num_bbox"]) == 5
    assert_same(NpzDirStore(tmp_path / "feats").get(7), REFERENCE[7])


@pytest.mark.parametrize("src_fmt", FORMATS)
@pytest.mark.parametrize("dst_fmt", FORMATS)
def test_convert_all_pairs(tmp_path: Path, src_fmt: str, dst_fmt: str) -> None:
    src = write_with(src_fmt, tmp_path / "src", REFERENCE)
    assert convert_store(src, tmp_path / "dst", dst_fmt) == 3
    dst = open_store(tmp_path / "dst")
    assert type(dst) is STORE_TYPES[dst_fmt] and dst.ids() == [3, 7, 11]
    fp16 = "memmap" in (src_fmt, dst_fmt)
    for image_id, want in REFERENCE.items():
        got = dst.get(image_id)
        # float16 relative precision 2**-11 on |x| < ~12.
        assert_same(got, want, atol=1e-2 if fp16 else 0.0)
        if fp16:
            np.testing.assert_array_equal(got.features, want.features.astype(np.float16).astype(np.float32))


def test_convert_refuses_unknown_format_and_same_path(tmp_path: Path) -> None:
    src = write_with("memmap", tmp_path / "src", REFERENCE)
    with pytest.raises(DataError, match="unknown feature format 'zarr'"):
        convert_store(src, tmp_path / "dst", "zarr")
    with pytest.raises(DataError, match="same path"):
        convert_store(src, src, "memmap", overwrite=True)


@pytest.mark.parametrize("fmt", FORMATS)
def test_missing_id_is_an_error_never_a_substitute(tmp_path: Path, fmt: str) -> None:
    store = open_store(write_with(fmt, tmp_path / "store", REFERENCE))
    with pytest.raises(DataError) as err:
        store.get(999)
    message = str(err.value)
    assert "store" in message and "999" in message


@pytest.mark.parametrize("fmt", FORMATS)
def test_nan_and_inf_features_rejected(tmp_path: Path, fmt: str) -> None:
    for bad_value, name in ((np.nan, "nan"), (np.inf, "inf")):
        bad = sample_regions(4, 3)
        bad.features[1, 2] = bad_value
        items = {**REFERENCE, 42: bad}
        if fmt == "memmap":  # refused by the writer
            with pytest.raises(DataError, match="NaN/inf") as err:
                write_memmap(tmp_path / f"store-{name}", items.items())
            assert "item 42" in str(err.value) and f"store-{name}" in str(err.value)
            assert not (tmp_path / f"store-{name}").exists()
            continue
        store = open_store(write_with(fmt, tmp_path / f"store-{name}", items))
        with pytest.raises(DataError, match="NaN or inf") as err:
            store.get(42)
        assert "item 42" in str(err.value) and f"store-{name}" in str(err.value)
        assert_same(store.get(7), REFERENCE[7])


def test_memmap_writer_rejects_float16_overflow(tmp_path: Path) -> None:
    big = sample_regions(5, 2)
    big.features[0, 0] = 1e6
    with pytest.raises(DataError, match="float16 range") as err:
        write_memmap(tmp_path / "mm", [(1, REFERENCE[3]), (9, big)])
    assert "item 9" in str(err.value)


@pytest.mark.parametrize("fmt", FORMATS)
def test_wrong_feature_dimension(tmp_path: Path, fmt: str) -> None:
    path = write_with(fmt, tmp_path / "store", REFERENCE)
    with pytest.raises(DataError, match="expected 16") as err:
        opened = open_store(path, dim=16)
        opened.get(3)
    assert "store" in str(err.value)


def test_mixed_dimensions_in_one_file(tmp_path: Path) -> None:
    items = {1: sample_regions(0, 2), 2: sample_regions(1, 2, dim=DIM + 1)}
    store = M2HDF5Store(write_real_m2(tmp_path / "det.h5", items, cls_prob=False))
    with pytest.raises(DataError, match=f"expected {DIM}, got {DIM + 1}") as err:
        store.get(2)
    assert "det.h5" in str(err.value) and "item 2" in str(err.value)
    npz = NpzDirStore(write_real_npz(tmp_path / "npz", items, "x-dk"))
    with pytest.raises(DataError, match=f"fits neither .* D={DIM}") as err:
        npz.get(2)
    assert "2.npz" in str(err.value)
    with pytest.raises(DataError, match="wrong feature dimension") as err:
        write_memmap(tmp_path / "mm", items.items())
    assert "item 2" in str(err.value)


def test_missing_files(tmp_path: Path) -> None:
    for opener in (open_store, M2HDF5Store, NpzDirStore, MemmapStore):
        with pytest.raises(DataError) as err:
            opener(tmp_path / "nowhere")
        assert "nowhere" in str(err.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no meta.json"):
        open_store(tmp_path / "empty")


def test_corrupt_hdf5(tmp_path: Path) -> None:
    bad = tmp_path / "det.h5"
    bad.write_bytes(b"\x89HDF\r\n\x1a\n" + b"garbage" * 50)
    with pytest.raises(DataError) as err:
        M2HDF5Store(bad)
    assert "det.h5" in str(err.value)
    with pytest.raises(DataError, match="cannot read HDF5") as err:
        open_store(bad)
    assert "det.h5" in str(err.value)
    (tmp_path / "plain.h5").write_text("just text")
    with pytest.raises(DataError, match="not a feature store: neither HDF5"):
        open_store(tmp_path / "plain.h5")


def test_hdf5_without_boxes(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "det.h5", "w") as handle:
        handle["5_features"] = np.zeros((2, DIM), dtype=np.float32)
    with pytest.raises(DataError, match="5_boxes is missing") as err:
        M2HDF5Store(tmp_path / "det.h5").get(5)
    assert "det.h5" in str(err.value)


def test_corrupt_and_pickled_npz(tmp_path: Path) -> None:
    root = write_real_npz(tmp_path / "feats", REFERENCE, "feat")
    data = (root / "7.npz").read_bytes()
    (root / "7.npz").write_bytes(data[: len(data) // 2])
    np.savez(root / "8.npz", feat=np.array([object()], dtype=object), boxes=np.zeros((1, 4)))
    np.save(root / "9.npy", np.zeros(3))
    (root / "9.npy").rename(root / "9.npz")
    np.savez(root / "10.npz", feat=np.zeros((2, DIM)))
    store = NpzDirStore(root)
    for image_id, reason in ((7, "cannot read npz"), (8, "cannot read npz"), (9, "not an .npz"), (10, "boxes")):
        with pytest.raises(DataError, match=reason) as err:
            store.get(image_id)
        assert f"{image_id}.npz" in str(err.value) and f"item {image_id}" in str(err.value)
    assert_same(store.get(3), REFERENCE[3])


def test_truncated_memmap_store(tmp_path: Path) -> None:
    path = write_with("memmap", tmp_path / "mm", REFERENCE)
    data = (path / "features.f16").read_bytes()
    (path / "features.f16").write_bytes(data[:-2])
    with pytest.raises(DataError, match="truncated") as err:
        MemmapStore(path)
    assert "mm" in str(err.value)
    (path / "meta.json").write_text("{not json")
    with pytest.raises(DataError, match="meta.json"):
        MemmapStore(path)


def test_memmap_store_truncated_after_opening_is_a_named_error(tmp_path: Path) -> None:
    """Rows are read with positioned reads: a file cut short while the store is open gives a one-line error naming
    the file and the image (a read through a memory map would kill the process with SIGBUS)."""
    path = write_with("memmap", tmp_path / "mm", REFERENCE)
    store = MemmapStore(path)
    assert_same(store.get(11), REFERENCE[11], atol=1e-2)  # the files are open
    size = (path / "features.f16").stat().st_size
    with open(path / "features.f16", "r+b") as handle:
        handle.truncate(size - 2 * DIM * 2)  # the last two regions: image 11 is stored last (written in id order)
    with pytest.raises(DataError, match=r"features.f16 ends early") as err:
        store.get(11)
    assert "mm" in str(err.value) and "11" in str(err.value)
    assert_same(store.get(7), REFERENCE[7], atol=1e-2)  # the rows still there read as before


def test_writers_are_atomic_and_refuse_to_overwrite(tmp_path: Path) -> None:
    def failing():
        yield 1, REFERENCE[3]
        raise RuntimeError("source broke")

    for fmt in FORMATS:
        dest = tmp_path / fmt
        writer = {"m2-hdf5": write_m2_hdf5, "npz-dir": write_npz_dir, "memmap": write_memmap}[fmt]
        with pytest.raises(RuntimeError):
            writer(dest, failing())
        assert not dest.exists()
        write_with(fmt, dest, {3: REFERENCE[3]})
        with pytest.raises(DataError, match="destination exists"):
            writer(dest, REFERENCE.items())
        writer(dest, REFERENCE.items(), overwrite=True)
        assert open_store(dest).ids() == [3, 7, 11]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FORMATS)  # no temporary leftovers


@pytest.mark.parametrize("fmt", FORMATS)
def test_stores_pickle_and_serve_dataloader_workers(tmp_path: Path, fmt: str) -> None:
    store = open_store(write_with(fmt, tmp_path / "store", REFERENCE))
    store.get(3)  # opens handles in this process; pickling must drop them
    clone = pickle.loads(pickle.dumps(store))
    np.testing.assert_array_equal(clone.get(7).features, store.get(7).features)

    class Items(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 3

        def __getitem__(self, index: int) -> float:
            return float(store.get(store.ids()[index]).features.sum())

    loader = torch.utils.data.DataLoader(Items(), batch_size=1, num_workers=2)
    sums = [float(batch) for batch in loader]
    assert sums == pytest.approx([float(store.get(i).features.sum()) for i in store.ids()], rel=1e-5)
