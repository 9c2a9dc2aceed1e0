"""Same seed -> byte-identical files; another seed -> another data set. The markers (``.vlattn.json``) differ
only in their random ids."""

from __future__ import annotations

import json
from pathlib import Path

from vlattn.data.synth import generate

TINY = {"images": 16, "feature_dim": 16, "extractor_epochs": 1, "val_size": 3, "test_size": 3, "grid": 2}


def _files(root: Path) -> dict[str, bytes]:
    """Every file's bytes; a marker's without its random id."""
    files = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.name == ".vlattn.json":
            marker = json.loads(data)
            assert len(marker.pop("id")) == 16
            data = json.dumps(marker, sort_keys=True).encode()
        files[str(path.relative_to(root))] = data
    return files


def test_same_seed_same_bytes_other_seed_differs(tmp_path: Path) -> None:
    first = _files(generate(tmp_path / "a", seed=5, **TINY))
    again = _files(generate(tmp_path / "b", seed=5, **TINY))
    other = _files(generate(tmp_path / "c", seed=6, **TINY))
    assert first.keys() == again.keys() == other.keys()
    assert {"dataset.json", "scenes.json", "features/features.f16", "grid_features/features.f16"} <= first.keys()
    assert first == again
    for name in ("dataset.json", "scenes.json", "features/features.f16", "vqa/questions_train.json",
                 "images/synth_000001.png"):
        assert first[name] != other[name], name
