"""Karpathy split files and COCO caption annotation files: reading, writing, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlattn.data.karpathy import (
    ImageEntry,
    check_caption,
    load_coco_captions,
    load_karpathy,
    write_coco_captions,
    write_karpathy,
)
from vlattn.errors import DataError


def karpathy_record(cocoid: int, split: str, sentences: list[dict]) -> dict:
    return {"cocoid": cocoid, "imgid": cocoid % 7, "filepath": "val2014", "filename": f"COCO_{cocoid:012d}.jpg",
            "split": split, "sentids": list(range(len(sentences))), "sentences": sentences}  # fmt: skip


def write_dataset(path: Path, images: list[dict]) -> Path:
    path.write_text(json.dumps({"images": images, "dataset": "coco"}))
    return path


def test_load_real_layout(tmp_path: Path) -> None:
    images = [
        karpathy_record(391895, "restval", [{"tokens": ["a", "man", "on", "a", "bike"], "raw": "A man on a bike."}]),
        karpathy_record(522418, "test", [{"raw": "A woman cutting a cake, smiling."}, {"raw": "Cake!"}]),
        karpathy_record(184613, "val", [{"tokens": ["two", "dogs"], "raw": "Two dogs"}]),
    ]
    entries = load_karpathy(write_dataset(tmp_path / "dataset_coco.json", images))
    assert [(e.image_id, e.split) for e in entries] == [(391895, "train"), (522418, "test"), (184613, "val")]
    assert entries[0].captions == [["a", "man", "on", "a", "bike"]] and entries[0].raw == ["A man on a bike."]
    assert entries[1].captions == [["a", "woman", "cutting", "a", "cake", "smiling"], ["cake"]]
    assert entries[1].filename == "COCO_000000522418.jpg" and entries[1].filepath == "val2014"


def test_write_load_round_trip(tmp_path: Path) -> None:
    entries = [
        ImageEntry(5, "train", "5.png", [["a", "red", "cube"], ["red", "cube"]], ["A red cube.", "Red cube"]),
        ImageEntry(9, "val", "9.png", [["nothing"]], ["Nothing"]),
    ]
    write_karpathy(tmp_path / "out.json", entries)
    assert load_karpathy(tmp_path / "out.json") == entries
    record = json.loads((tmp_path / "out.json").read_text())["images"][1]
    assert record["cocoid"] == 9 and record["sentences"] == [{"tokens": ["nothing"], "raw": "Nothing"}]


@pytest.mark.parametrize(
    ("images", "item", "reason"),
    [
        ([{"cocoid": 4, "sentences": [{"raw": "x"}]}], "image 4", "missing key 'split'"),
        ([karpathy_record(4, "train", [{"raw": "ok"}, {"tokens": [], "raw": ""}])], "image 4 sentence 1", "empty caption"),
        ([karpathy_record(4, "train", [{"raw": "ok"}, {"raw": " , . "}])], "image 4 sentence 1", "empty caption"),
        ([karpathy_record(4, "train", [])], "image 4", "no sentences"),
        ([karpathy_record(4, "dev", [{"raw": "ok"}])], "image 4", "unknown split"),
        ([{"split": "train", "sentences": []}], "images[0]", "missing key 'imgid'"),
        ([karpathy_record(4, "train", [{"raw": "a"}]), karpathy_record(4, "val", [{"raw": "b"}])], "image 4", "duplicate"),
    ],
)
def test_bad_records_name_file_and_item(tmp_path: Path, images: list[dict], item: str, reason: str) -> None:
    path = write_dataset(tmp_path / "bad.json", images)
    with pytest.raises(DataError, match=reason) as err:
        load_karpathy(path)
    assert str(path) in str(err.value) and f"item {item!r}" in str(err.value)


def test_malformed_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text('{"images": [')
    with pytest.raises(DataError, match="malformed JSON at line 1") as err:
        load_karpathy(tmp_path / "broken.json")
    assert "broken.json" in str(err.value)
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(DataError, match="expected a JSON object"):
        load_karpathy(tmp_path / "list.json")
    with pytest.raises(DataError, match="not found"):
        load_karpathy(tmp_path / "absent.json")


def test_check_caption() -> None:
    check_caption(["a", "b"], max_len=2)
    with pytest.raises(DataError, match="empty caption") as err:
        check_caption([], path="f.json", item="image 3")
    assert "f.json" in str(err.value) and "image 3" in str(err.value)
    with pytest.raises(DataError, match="3 tokens, more than the maximum 2"):
        check_caption(["a", "b", "c"], max_len=2)


def test_coco_captions_real_layout_and_round_trip(tmp_path: Path) -> None:
    real = {
        "info": {"year": 2014}, "licenses": [], "type": "captions",
        "images": [{"id": 1, "file_name": "a.jpg"}, {"id": 2, "file_name": "b.jpg"}],
        "annotations": [{"id": 10, "image_id": 2, "caption": "B one"}, {"id": 11, "image_id": 1, "caption": "A one"},
                        {"id": 12, "image_id": 2, "caption": "B two"}],
    }  # fmt: skip
    (tmp_path / "captions_val2014.json").write_text(json.dumps(real))
    refs = load_coco_captions(tmp_path / "captions_val2014.json")
    assert refs == {1: ["A one"], 2: ["B one", "B two"]}
    write_coco_captions(tmp_path / "out.json", refs, filenames={1: "a.jpg"})
    assert load_coco_captions(tmp_path / "out.json") == refs
    written = json.loads((tmp_path / "out.json").read_text())
    assert {"info", "licenses", "type", "images", "annotations"} <= set(written)
    assert written["images"] == [{"id": 1, "file_name": "a.jpg"}, {"id": 2, "file_name": "2.jpg"}]
    assert sorted(a["id"] for a in written["annotations"]) == [1, 2, 3]


def test_coco_captions_errors(tmp_path: Path) -> None:
    bad = {"images": [{"id": 1}, {"id": 2}], "annotations": [{"id": 5, "image_id": 1, "caption": "  "}]}
    (tmp_path / "c.json").write_text(json.dumps(bad))
    with pytest.raises(DataError, match="empty caption") as err:
        load_coco_captions(tmp_path / "c.json")
    assert "c.json" in str(err.value) and "image 1" in str(err.value)
    bad["annotations"][0]["caption"] = "fine"
    (tmp_path / "c.json").write_text(json.dumps(bad))
    with pytest.raises(DataError, match="no captions") as err:
        load_coco_captions(tmp_path / "c.json")
    assert "image 2" in str(err.value)
