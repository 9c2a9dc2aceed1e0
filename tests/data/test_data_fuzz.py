"""Data-file fuzzing: Karpathy split files, VQA question and annotation files, vocabularies, word tables and
feature stores (memmap, HDF5, npz), cut short, with bytes overwritten, or with JSON values replaced by hostile
ones, must be read or refused with a one-line :class:`~vlattn.errors.VlattnError`: never another exception.

``make test`` runs ``VLATTN_DATA_FUZZ`` cases (default 200, seeded); set it higher for a longer search.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.training.conftest import make_tiny_data, make_tiny_vqa_data
from vlattn.data.features import RegionFeatures, open_store, write_m2_hdf5
from vlattn.data.karpathy import load_karpathy
from vlattn.data.vocab import Vocabulary, read_word_list
from vlattn.data.vqa import load_annotations, load_questions
from vlattn.data.vqa_answers import AnswerVocabulary
from vlattn.errors import VlattnError

CASES = int(os.environ.get("VLATTN_DATA_FUZZ", "200"))
SEED = 27
HOSTILE: list[Any] = [None, True, -1, 0, 2**63, 2**64, 1e308, math.nan, math.inf, "", "\u00e9\U0001f600", "\ud800",
                      [], {}, [[[]]], {"a": 1}, "a" * 5000, -0.0, 1.5, "1"]


def read_store(path: Path) -> None:
    store = open_store(path)
    for image_id in store.ids():
        store.get(image_id)


def fixtures(root: Path) -> dict[str, tuple[Path, Callable[[Path], object]]]:
    """One file of each kind (the tiny data sets of tests/training), and the reader vlattn uses for it; for a
    store, the file that is damaged and the store's directory is read."""
    data = make_tiny_data(root / "cap", images=12)
    vqa = make_tiny_vqa_data(root / "vqa", images=12)
    words = Vocabulary(["a", "red", "circle", "there", "is"])
    words.save(root / "vocab-words.json")
    questions = load_questions(vqa / "vqa" / "questions_train.json")
    answers = AnswerVocabulary.build(["yes", "no", "red", "2"], min_count=1)
    answers.save(root / "vocab-answers.json")
    (root / "table.json").write_text(json.dumps(["<unk>", "<pad>", "<bos>", "<eos>", " ", "a"]))
    (root / "table.txt").write_text("<unk>\n<pad>\n<bos>\n<eos>\na\n")
    rng = np.random.default_rng(0)
    boxes = np.tile(np.array([[0, 0, 4, 4]], np.float32), (3, 1))
    write_m2_hdf5(root / "det.h5", [(i, RegionFeatures(rng.random((3, 8), dtype=np.float32), boxes, 10, 10))
                                    for i in range(4)])
    (root / "npz").mkdir()
    for i in range(3):
        np.savez(root / "npz" / f"{i}.npz", feat=rng.random((3, 8), dtype=np.float32), boxes=boxes,
                 image_w=10, image_h=10)
    memmap = data / "features"
    assert questions
    return {
        "karpathy": (data / "dataset.json", load_karpathy),
        "questions": (vqa / "vqa" / "questions_train.json", load_questions),
        "annotations": (vqa / "vqa" / "annotations_train.json", load_annotations),
        "vocabulary": (root / "vocab-words.json", Vocabulary.load),
        "answers": (root / "vocab-answers.json", AnswerVocabulary.load),
        "word table json": (root / "table.json", read_word_list),
        "word table text": (root / "table.txt", read_word_list),
        "memmap meta": (memmap / "meta.json", lambda path: read_store(path.parent)),
        **{f"memmap {p.name}": (p, lambda path: read_store(path.parent))
           for p in sorted(memmap.iterdir()) if p.name not in ("meta.json", ".vlattn.json")},
        "hdf5": (root / "det.h5", read_store),
        "npz": (root / "npz" / "1.npz", lambda path: read_store(path.parent)),
    }


def leaves(data: Any, path: tuple = ()) -> list[tuple]:
    found = [path]
    if isinstance(data, dict):
        for key, value in data.items():
            found += leaves(value, (*path, key))
    elif isinstance(data, list):
        for i, value in enumerate(data[:3]):
            found += leaves(value, (*path, i))
    return found


def damage(rng: random.Random, original: bytes) -> bytes:
    """The file cut short, bytes overwritten or inserted, or (JSON) one value replaced by a hostile one."""
    roll = rng.random()
    if roll < 0.45 and original[:1] in (b"{", b"["):
        data = json.loads(original)
        path = rng.choice(leaves(data))
        if not path:
            return json.dumps(rng.choice(HOSTILE)).encode("utf-8", "surrogatepass")
        data = copy.deepcopy(data)
        node = data
        for key in path[:-1]:
            node = node[key]
        if rng.random() < 0.2 and isinstance(node, dict):
            del node[path[-1]]
        else:
            node[path[-1]] = rng.choice(HOSTILE)
        return json.dumps(data, allow_nan=True).encode("utf-8", "surrogatepass")
    if roll < 0.65:
        return original[: rng.randrange(len(original) + 1)]
    if roll < 0.9:
        damaged = bytearray(original)
        for _ in range(rng.randint(1, 8)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        return bytes(damaged)
    cut = rng.randrange(len(original) + 1)
    return original[:cut] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))) + original[cut:]


def test_data_fuzzer_gives_no_traceback(tmp_path: Path) -> None:
    pristine = tmp_path / "pristine"
    files = fixtures(pristine)
    for path, read in files.values():  # every reader accepts its file as written
        read(path)
    rng = random.Random(SEED)
    outcomes: Counter[str] = Counter()
    failures = []
    for i in range(CASES):
        name = rng.choice(sorted(files))
        case = tmp_path / "case"
        shutil.copytree(pristine, case)
        path, read = files[name]
        target = case / path.relative_to(pristine)
        target.write_bytes(damage(rng, path.read_bytes()))
        try:
            read(target)
            outcomes["read"] += 1
        except VlattnError as err:
            outcomes["error"] += 1
            if "\n" in str(err).strip():
                failures.append(f"case {i} {name}: a message of several lines: {err}")
        except Exception as err:  # noqa: BLE001 - any other exception is what the fuzzer looks for
            outcomes["traceback"] += 1
            failures.append(f"case {i} {name}: {type(err).__name__}: {str(err)[:200]}")
        shutil.rmtree(case)
    print(f"data fuzzer: {sum(outcomes.values())} cases, {dict(outcomes)}")
    assert not failures, "\n".join(failures[:20])
    assert outcomes["error"] > CASES // 4


# --- the classes the fuzzer found, each reproduced directly --------------------------------------------------------


def test_memmap_index_with_a_damaged_npy_header(tmp_path: Path) -> None:
    """NumPy parses a .npy header with Python's tokenizer: an unbalanced brace is a TokenError."""
    store = make_tiny_data(tmp_path / "data", images=6) / "features"
    header = (store / "ids.npy").read_bytes()
    (store / "ids.npy").write_bytes(header.replace(b"}", b" ", 1))
    with pytest.raises(VlattnError, match=r"features: cannot read memmap index arrays: .*EOF in multi-line"):
        read_store(store)


def test_npz_with_an_unknown_compression_method(tmp_path: Path) -> None:
    (tmp_path / "npz").mkdir()
    np.savez(tmp_path / "npz" / "4.npz", feat=np.ones((2, 3), np.float32), boxes=np.zeros((2, 4), np.float32))
    data = bytearray((tmp_path / "npz" / "4.npz").read_bytes())
    for header in (0, data.find(b"PK\x01\x02"), data.find(b"PK\x01\x02", data.find(b"PK\x01\x02") + 1)):
        offset = 8 if header == 0 else 10  # the method field of the local and the central headers
        data[header + offset:header + offset + 2] = (99).to_bytes(2, "little")
    (tmp_path / "npz" / "4.npz").write_bytes(bytes(data))
    with pytest.raises(VlattnError, match=r"4\.npz: item 4: cannot read npz file: That compression method"):
        read_store(tmp_path / "npz")


def test_hdf5_with_a_name_that_is_not_utf8(tmp_path: Path) -> None:
    """h5py gives such names as bytes; they are not vlattn's ``<id>_features`` datasets, so the file holds none."""
    import h5py

    with h5py.File(tmp_path / "k.h5", "w") as handle:
        handle[b"\xff_features"] = np.ones((1, 4), np.float32)
        handle["2_features"], handle["2_boxes"] = np.ones((1, 4), np.float32), np.zeros((1, 4), np.float32)
    assert open_store(tmp_path / "k.h5").ids() == [2]


def test_memmap_index_of_another_dtype(tmp_path: Path) -> None:
    """Found by the fuzzer: ids.npy whose header says bytes ('|S8') instead of integers."""
    store = make_tiny_data(tmp_path / "data", images=6) / "features"
    np.save(store / "ids.npy", np.load(store / "ids.npy").astype("S8"))
    with pytest.raises(VlattnError, match=r"features: ids/offsets/sizes arrays do not match meta\.json"):
        read_store(store)
