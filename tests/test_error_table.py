"""docs/errors.md stays true: every row of its table is run here and the documented message is checked.

A documented message is compared piece by piece: the text between ``...`` elisions must appear in the
real output (paths in the table are shortened, the real ones are absolute).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
from pathlib import Path
from typing import Callable

import h5py
import numpy as np
import pytest
import torch
import yaml
from m2_released import random_released_state

from vlattn.config import ModelConfig, config_to_dict
from vlattn.data.features import RegionFeatures, open_store, write_m2_hdf5, write_memmap
from vlattn.data.synth import generate
from vlattn.data.vocab import Vocabulary
from vlattn.metrics import evaluate_captions
from vlattn.metrics.tokenizer import PTBTokenizer
from vlattn.training.rundir import run_lock
from tests.test_bad_input import one_line
from tests.test_hostile_input import Payload
from tests.training.conftest import make_tiny_vqa_data, tiny_vqa_config

DOC = Path(__file__).resolve().parent.parent / "docs" / "errors.md"
Case = Callable[["Workspace"], list[str]]


def documented() -> dict[str, tuple[str, str]]:
    """``class -> (first backticked text of the error column, the whole error column)`` of the table."""
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) == 3 and not cells[0].startswith(("**", "---", "class")):
            quoted = re.findall(r"`([^`]+)`", cells[2])
            rows[cells[0]] = (quoted[0] if quoted else "", cells[2])
    return rows


class Workspace:
    """Files the cases point at: the tiny run and its data, plus whatever a case writes under ``root``."""

    def __init__(self, root: Path, run: Path) -> None:
        self.root, self.run, self.data = root, run, run.parent / "data"
        self.held = contextlib.ExitStack()  # locks a case holds while its command runs

    def path(self, name: str) -> Path:
        return self.root / name

    def karpathy(self, name: str, images: object) -> Path:
        """A data root with the tiny features and a Karpathy file holding ``images``."""
        root = self.path(name)
        shutil.copytree(self.data / "features", root / "features")
        (root / "dataset.json").write_text(images if isinstance(images, str) else json.dumps({"images": images}))
        return root

    def regions(self, name: str, features: list, boxes: list, size: int = 10) -> Path:
        feats, box = np.asarray(features, np.float32).reshape(len(boxes), 2), np.asarray(boxes, np.float32)
        write_memmap(self.path(name), [(1, RegionFeatures(feats, box.reshape(-1, 4), size, size))], dim=2)
        return self.path(name)


def config(ws: Workspace, *extra: str) -> list[str]:
    return ["profile", "--config", str(ws.run.parent / "tiny.yaml"), *extra]


def written(ws: Workspace, name: str, text: str | bytes) -> str:
    path = ws.path(name)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


def convert(source: Path | str, dest: Path | str, *extra: str) -> list[str]:
    return ["data", "convert", "--from", str(source), "--to", str(dest), "--format", "memmap", *extra]


def evaluate(ws: Workspace, *extra: str) -> list[str]:
    return ["eval", "--checkpoint", str(ws.run), "--device", "cpu", *extra]


def extract(ws: Workspace, image: str, *flags: str, extractor: str = "grid", weights: str = "random") -> list[str]:
    """``vlattn features extract`` of ``image`` with a small randomly initialised grid extractor."""
    return ["features", "extract", "--images", image, "--out", str(ws.path("feats")), "--extractor", extractor,
            "--weights", weights, "--set", "arch=resnet18", "--set", "size=32", "--no-progress", "--device", "cpu",
            *flags]


def sentence(cocoid: int, split: str, raw: str) -> dict:
    return {"cocoid": cocoid, "split": split, "sentences": [{"raw": raw}]}


def damaged_hdf5(ws: Workspace) -> Path:
    rng = np.random.default_rng(0)
    boxes = np.tile([0, 0, 4, 4], (3, 1)).astype(np.float32)
    write_m2_hdf5(ws.path("damaged.h5"), [(i, RegionFeatures(rng.random((3, 8), dtype=np.float32), boxes, 10, 10))
                                          for i in range(20)])
    data = bytearray(ws.path("damaged.h5").read_bytes())
    data[136:168] = np.random.default_rng(136).integers(0, 256, 32, dtype=np.uint8).tobytes()
    ws.path("damaged.h5").write_bytes(data)
    return ws.path("damaged.h5")


def hdf5(ws: Workspace, name: str, datasets: dict[str, np.ndarray], groups: tuple[str, ...] = ()) -> Path:
    with h5py.File(ws.path(name), "w") as handle:
        for key, value in datasets.items():
            handle[key] = value
        for key in groups:
            handle.create_group(key)
    return ws.path(name)


def npz_dir(ws: Workspace, name: str, **arrays: np.ndarray) -> Path:
    ws.path(name).mkdir()
    np.savez(ws.path(name) / "4.npz", **arrays)
    return ws.path(name)


def user_dir(ws: Workspace, name: str) -> Path:
    ws.path(name).mkdir()
    (ws.path(name) / "thesis.tex").write_text("\\chapter{Results}")
    return ws.path(name)


def own_store(ws: Workspace, name: str, extra_file: str | None = None) -> Path:
    write_memmap(ws.path(name), [(1, RegionFeatures(np.ones((1, 16), np.float32), np.zeros((1, 4), np.float32), 5, 5))])
    if extra_file:
        (ws.path(name) / extra_file).write_text("mine")
    return ws.path(name)


def empty_dir(ws: Workspace, name: str) -> Path:
    ws.path(name).mkdir()
    return ws.path(name)


def damaged(file: Path, content: bytes) -> Path:
    """Replace ``file``'s content; returns the directory holding it."""
    file.write_bytes(content)
    return file.parent


def link(ws: Workspace, name: str, target: Path) -> Path:
    ws.path(name).symlink_to(target)
    return ws.path(name)


def library(ws: Workspace, call: Callable[[], object]) -> str:
    """The ``Type: message`` a library call raises."""
    try:
        call()
    except Exception as err:  # noqa: BLE001 - the documented message is what is checked
        return f"{type(err).__name__}: {err}"
    return "no error"


WORDS = ["<unk>", "<pad>", "<bos>", "<eos>"] + [f"w{i}" for i in range(26)]


def released(ws: Workspace, name: str, change: Callable[[dict], object] = lambda state: None, **extra: object) -> str:
    """A checkpoint file in the released M2 layout (random weights), changed by ``change``."""
    state = random_released_state(vocab=len(WORDS))
    change(state)
    torch.save({"state_dict": state, **extra}, ws.path(name))
    return str(ws.path(name))


def import_args(ws: Workspace, checkpoint: str, words: list[str] = WORDS, out: str = "imported",
                fmt: str = "m2-official", vocab: str = "vocab.txt") -> list[str]:
    return ["import-checkpoint", checkpoint, "--format", fmt, "--vocab", written(ws, vocab, "\n".join(words)),
            "--out", str(ws.path(out)), "--heads", "4"]


def lxmert_dir(ws: Workspace, name: str, *, labels: bool = True, head: bool = True) -> Path:
    """A tiny randomly initialised LXMERT saved by transformers (config.json, weights, a 30-entry vocab.txt); without
    ``labels`` its config names no answers, without ``head`` only the encoder's tensors are saved."""
    from transformers import LxmertConfig, LxmertForQuestionAnswering

    config = LxmertConfig(vocab_size=30, hidden_size=8, num_attention_heads=2, intermediate_size=8, l_layers=1,
                          r_layers=1, x_layers=1, visual_feat_dim=4, max_position_embeddings=8, num_qa_labels=3)
    if labels:
        config.id2label = {0: "yes", 1: "no", 2: "red"}
    model = LxmertForQuestionAnswering(config)
    directory = ws.path(name)
    model.save_pretrained(directory)
    if not head:
        (directory / "model.safetensors").unlink()
        state = {k: v for k, v in model.state_dict().items() if k.startswith("lxmert.")}
        torch.save(state, directory / "pytorch_model.bin")
    written(ws, f"{name}/vocab.txt", "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + [f"w{i}" for i in range(26)]))
    return directory


def lxmert_import(ws: Workspace, directory: Path, *extra: str) -> list[str]:
    return ["import-checkpoint", str(directory), "--format", "lxmert-hf", "--out", str(ws.path("imported")), *extra]


def lxmert_vqa_train(ws: Workspace, *extra: str, vocab: list[str] | None = None) -> list[str]:
    """:func:`vqa_train` of a tiny LXMERT reading WordPiece questions over ``vocab`` (written as the data's vocab.txt)."""
    def change(root: Path) -> None:
        (root / "vocab.txt").write_text("\n".join(vocab or []) + "\n")

    return vqa_train(ws, "--set", "model.kind=lxmert", "--set", "model.options={object_layers: 1}", *extra,
                     change=change)


def nlvr2_string_ids(ws: Workspace) -> list[str]:
    root = ws.path("nlvr2data")
    shutil.copytree(ws.data, root)
    (root / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n")
    (root / "nlvr2").mkdir()
    (root / "nlvr2" / "train.json").write_text(json.dumps(
        [{"identifier": "train-0-0-0", "img0": "train-1-0-img0", "img1": 2, "sent": "the", "label": 1}]))
    return ["train", "--config", "nlvr2-lxmert", "--out", str(ws.path("nlvr2run")), "--device", "cpu",
            "--set", f"data.root={root}", "--set", "data.questions=nlvr2/{split}.json", "--set", "model.feature_dim=16",
            "--set", "data.vqa_splits={train: [train], val: [train], test: [train]}"]


def used_dir(ws: Workspace) -> str:
    (ws.path("used") / "notes.txt").parent.mkdir()
    (ws.path("used") / "notes.txt").write_text("mine")
    return "used"


def run_copy(ws: Workspace, *, locked: bool = False, swapped_words: bool = False) -> Path:
    """A copy of the tiny run (its lock held by this process if ``locked``; two words of its ``vocab-words.json``
    swapped if ``swapped_words``)."""
    run = ws.path("run")
    shutil.copytree(ws.run, run)
    if locked:
        ws.held.enter_context(run_lock(run))
    if swapped_words:
        words = list(Vocabulary.load(run / "vocab-words.json").itos)
        words[5], words[6] = words[6], words[5]
        Vocabulary(words[4:]).save(run / "vocab-words.json")
    return run


def resume(ws: Workspace, *extra: str, foreign_file: bool = False, **copy: bool) -> list[str]:
    run = run_copy(ws, **copy)
    if foreign_file:
        (run / "checkpoints" / "last" / "notes.txt").write_text("mine")
    return ["train", "--out", str(run), "--resume", "--device", "cpu", *extra]


def with_lock(ws: Workspace, name: str, text: str | None) -> Path:
    """A directory holding only ``.lock``: the user's file with ``text``, or (None) a link to a file of theirs."""
    path = empty_dir(ws, name)
    if text is None:
        (path / ".lock").symlink_to(Path(written(ws, "victim", "IMPORTANT")))
    else:
        (path / ".lock").write_text(text)
    return path


def other_data(ws: Workspace) -> Path:
    """The tiny data set's files with other region features."""
    from tests.training.conftest import make_tiny_data

    return make_tiny_data(ws.path("other"), seed=1)


def synth_set(ws: Workspace, name: str, planted: str) -> Path:
    """A tiny synthetic set with the user's file ``planted`` inside it."""
    generate(ws.path(name), 12, feature_dim=8, val_size=2, test_size=2, extractor_epochs=1)
    (ws.path(name) / planted).parent.mkdir(exist_ok=True)
    (ws.path(name) / planted).write_text("{}")
    return ws.path(name)


def damaged_state(ws: Workspace, damage: str) -> list[str]:
    """``--resume`` of a copy of the tiny run whose ``last/train_state.pt`` is cut short, holds a pickled
    ``os.system`` call, or lacks its ``loop`` entry."""
    run = run_copy(ws)
    state_file = run / "checkpoints" / "last" / "train_state.pt"
    if damage == "cut":
        state_file.write_bytes(state_file.read_bytes()[:200])
    elif damage == "payload":
        torch.save({"stage": "xe", "loop": Payload(ws.path("executed"))}, state_file)
    else:
        state = torch.load(state_file, weights_only=True)
        del state["loop"]
        torch.save(state, state_file)
    return ["train", "--out", str(run), "--resume", "--device", "cpu"]


def evil_checkpoint(ws: Workspace) -> str:
    torch.save({"state_dict": Payload(ws.path("executed"))}, ws.path("evil.pth"))
    return str(ws.path("evil.pth"))


def score_files(ws: Workspace, results: str) -> list[str]:
    annotations = {"images": [{"id": 1}], "annotations": [{"image_id": 1, "id": 5, "caption": "a dog runs"}]}
    return ["score", "--results", written(ws, "res.json" if results.startswith("[{") else "deep.json", results),
            "--annotations", written(ws, "ann.json", json.dumps(annotations)), "--tokenizer", "python"]


def vqa_train(ws: Workspace, *extra: str, change: Callable[[Path], object] = lambda root: None) -> list[str]:
    """``vlattn train`` of a tiny MCAN on the tiny VQA data (written under ``data``, then changed by ``change``)."""
    root = make_tiny_vqa_data(ws.path("data"))
    change(root)
    config = written(ws, "vqa.yaml", yaml.safe_dump(config_to_dict(tiny_vqa_config(root))))
    return ["train", "--config", config, "--out", str(ws.path("vqarun")), "--device", "cpu", *extra]


def twin_stream_train(ws: Workspace, *extra: str) -> list[str]:
    """``vlattn train`` of the twin-stream model on the tiny VQA data: the tiny MCAN config without the
    Transformer-stack keys that kind never reads."""
    root = make_tiny_vqa_data(ws.path("data"))
    config = config_to_dict(tiny_vqa_config(root))
    for key in ("num_heads", "d_ff", "encoder_layers", "decoder_layers", "options"):
        config["model"].pop(key, None)
    config["model"]["kind"] = "twin_stream"
    path = written(ws, "vqa.yaml", yaml.safe_dump(config))
    return ["train", "--config", path, "--out", str(ws.path("vqarun")), "--device", "cpu", *extra]


def catt_dictionary(ws: Workspace, *extra: str) -> list[str]:
    """``vlattn catt dictionary`` of 4 image entries over the tiny data (``extra`` options override)."""
    return ["catt", "dictionary", "--source", "image", "--size", "4", "--data", str(ws.data), "--out",
            str(ws.path("x.npz")), *extra]


def catt_train(ws: Workspace, *sets: str) -> list[str]:
    """``vlattn train`` of a tiny Transformer+CATT (random word dictionary) with the ``sets`` overrides."""
    sets = ("model.kind=catt", "model.options.word_dictionary.init=random", *sets)
    return ["train", "--config", str(ws.run.parent / "tiny.yaml"), "--out", str(ws.path("r")), "--device", "cpu",
            *[arg for s in sets for arg in ("--set", s)]]


def dictionary_file(path: Path | str) -> tuple[str, str]:
    return "model.options.image_dictionary.init=file", f"model.options.image_dictionary.path={path}"


def four_entries(ws: Workspace) -> Path:
    """A dictionary file of 4 entries of the tiny data's 16 features."""
    from vlattn.catt.files import write_dictionary

    write_dictionary(ws.path("d4.npz"), np.zeros((4, 16), np.float32), {"source": "image"})
    return ws.path("d4.npz")


def question_image(root: Path, image_id: int) -> None:
    """Point the sixth training question (and its annotation) at ``image_id``."""
    for name, key in (("questions_train.json", "questions"), ("annotations_train.json", "annotations")):
        data = json.loads((root / "vqa" / name).read_text())
        data[key][5]["image_id"] = image_id
        (root / "vqa" / name).write_text(json.dumps(data))


F32 = np.float32
CASES: dict[str, Callable[[Workspace], list[str] | str]] = {
    "unknown key": lambda ws: config(ws, "--set", "model.dmodel=3"),
    "wrong type": lambda ws: ["profile", "--config", written(ws, "type.yaml", "train:\n  epochs: many\n")],
    "file missing": lambda ws: ["profile", "--config", str(ws.path("nowhere.yaml"))],
    "not YAML / not JSON": lambda ws: ["profile", "--config", written(ws, "bad.yaml", "model: [1, 2")],
    "not UTF-8": lambda ws: ["profile", "--config", written(ws, "latin1.yaml", b"model:\n  d_model: 512 \xe9\n")],
    "override without `=`": lambda ws: config(ws, "--set", "train.epochs"),
    "override into a value": lambda ws: config(ws, "--set", "train.epochs.x=1"),
    "unknown preset": lambda ws: ["profile", "--config", "m3"],
    "a key nothing reads": lambda ws: ["profile", "--config", "vqa-demo", "--set", "eval.beam_size=3"],
    "a `base` cycle": lambda ws: ["profile", "--config", written(ws, "a.yaml", "base: b.yaml\n"),
                                  written(ws, "b.yaml", "base: a.yaml\n") and "--json"],
    "a config built by hand (library)": lambda ws: library(ws, lambda: ModelConfig(dropout=2.0)),
    "unknown stage": lambda ws: ["train", "--config", str(ws.run.parent / "tiny.yaml"), "--out", str(ws.path("r")),
                                 "--stage", "rl"],
    "model and store disagree": lambda ws: ["train", "--config", str(ws.run.parent / "tiny.yaml"), "--out",
                                            str(ws.path("r")), "--set", "model.feature_dim=32"],
    "no checkpoint": lambda ws: ["eval", "--checkpoint", str(ws.path("nowhere"))],
    "unknown split": lambda ws: evaluate(ws, "--split", "dev"),
    "beam size below 1": lambda ws: evaluate(ws, "--beam-size", "0"),
    "beam size above the vocabulary": lambda ws: evaluate(ws, "--beam-size", "100000"),
    "beam size not a number": lambda ws: evaluate(ws, "--beam-size", "wide"),
    "beam size auto without val images": lambda ws: evaluate(ws, "--beam-size", "auto", "--data", str(ws.karpathy(
        "noval", [sentence(130, "test", "a red circle"), sentence(100, "train", "a red circle")]))),
    "device without CUDA": lambda ws: evaluate(ws, "--device", "cuda"),
    "not a device": lambda ws: evaluate(ws, "--device", "gpu"),
    "image ids not in the store": lambda ws: ["caption", "--checkpoint", str(ws.run), "--features",
                                              str(ws.data / "features"), "--ids", "7", "--device", "cpu"],
    "malformed option value": lambda ws: convert(ws.data / "features", ws.path("o"))[:-1] + ["zarr"],
    "split missing from the file": lambda ws: evaluate(ws, "--split", "val", "--data", str(ws.karpathy(
        "noval", [sentence(130, "test", "a red circle"), sentence(100, "train", "a red circle")]))),
    "malformed JSON": lambda ws: evaluate(ws, "--data", str(ws.karpathy("kp", '{"images": ['))),
    "missing key": lambda ws: evaluate(ws, "--data", str(ws.karpathy("kp", [{"cocoid": 1, "split": "test"}]))),
    "empty caption": lambda ws: evaluate(ws, "--data", str(ws.karpathy("kp", [sentence(1, "test", " . ")]))),
    "unknown split in the file": lambda ws: evaluate(ws, "--data", str(ws.karpathy("kp", [sentence(1, "dev", "a")]))),
    "duplicate image id": lambda ws: evaluate(ws, "--data", str(ws.karpathy("kp", [sentence(1, "test", "a")] * 2))),
    "store not found": lambda ws: convert(ws.path("nostore"), ws.path("o")),
    "directory without a store": lambda ws: convert(empty_dir(ws, "empty"), ws.path("o")),
    "not a store file": lambda ws: convert(written(ws, "plain.h5", "text"), ws.path("o")),
    "HDF5 with damaged internals": lambda ws: convert(damaged_hdf5(ws), ws.path("o")),
    "dataset that is an HDF5 group": lambda ws: convert(hdf5(ws, "group.h5", {
        "2_features": np.ones((1, 4), F32), "2_boxes": np.zeros((1, 4), F32)}, groups=("3_features",)), ws.path("o")),
    "boxes missing": lambda ws: convert(hdf5(ws, "nobox.h5", {"2_features": np.ones((1, 4), F32)}), ws.path("o")),
    "missing image id": lambda ws: library(ws, lambda: open_store(ws.data / "features").get(9)),
    "wrong feature dimension": lambda ws: convert(ws.data / "features", ws.path("o"), "--dim", "3"),
    "NaN / inf features": lambda ws: convert(npz_dir(ws, "nan", feat=np.array([[np.nan, 1]], F32),
                                                     boxes=np.array([[0, 0, 1, 1]], F32)), ws.path("o")),
    "image without regions": lambda ws: convert(ws.regions("zero", [], []), ws.path("o")),
    "inverted box": lambda ws: convert(ws.regions("inv", [[1, 1]], [[5, 1, 2, 3]]), ws.path("o")),
    "box outside the image": lambda ws: convert(ws.regions("out", [[1, 1]], [[0, 0, 15, 3]]), ws.path("o")),
    "corrupt `.npz`": lambda ws: convert(damaged(npz_dir(ws, "npz", feat=np.ones((1, 2))) / "4.npz", b"PK\x03\x04"),
                                         ws.path("o")),
    "pickled objects in `.npz`": lambda ws: convert(npz_dir(ws, "pk", feat=np.array([object()], dtype=object),
                                                            boxes=np.zeros((1, 4))), ws.path("o")),
    "ambiguous MCAN `x`": lambda ws: convert(npz_dir(ws, "sq", x=np.ones((3, 3), F32), bbox=np.zeros((3, 4), F32)),
                                             ws.path("o")),
    "truncated memmap store": lambda ws: convert(damaged(own_store(ws, "cut") / "features.f16", b"\0"), ws.path("o")),
    "float16 overflow when writing memmap": lambda ws: library(ws, lambda: write_memmap(ws.path("mm"), [
        (1, RegionFeatures(np.full((1, 2), 1e6, F32), np.zeros((1, 4), F32), 5, 5))])),
    "destination exists": lambda ws: convert(ws.data / "features", own_store(ws, "mine_store")),
    "a user's directory": lambda ws: convert(ws.data / "features", user_dir(ws, "home"), "--overwrite"),
    "a parent of the source": lambda ws: convert(ws.data / "features", ws.data, "--overwrite"),
    "inside the source": lambda ws: convert(ws.data / "features", ws.data / "features" / "x"),
    "the source itself": lambda ws: convert(ws.data / "features", ws.data / "features", "--overwrite"),
    "a symbolic link": lambda ws: convert(ws.data / "features", link(ws, "link", user_dir(ws, "home")), "--overwrite"),
    "vlattn's store holding other files": lambda ws: convert(ws.data / "features",
                                                             own_store(ws, "mine_store", "notes.txt"), "--overwrite"),
    "a store of another kind": lambda ws: convert(ws.data / "features", generate(
        ws.path("synth"), images=12, feature_dim=8, extractor_epochs=1, val_size=2, test_size=2), "--overwrite"),
    "someone else's HDF5 file": lambda ws: convert(ws.data / "features", hdf5(
        ws, "coco_detections.hdf5", {"1_features": np.ones((1, 4), F32)}), "--overwrite")[:-2] + ["m2-hdf5",
                                                                                                  "--overwrite"],
    "synth onto a user's directory": lambda ws: ["data", "synth", "--out", str(user_dir(ws, "home")), "--images",
                                                 "12", "--overwrite"],
    "impossible synthetic sizes": lambda ws: ["data", "synth", "--out", str(ws.path("s")), "--images", "3", "--val",
                                              "2", "--test", "1"],
    "bad confound": lambda ws: ["data", "synth", "--out", str(ws.path("s")), "--confound", "red-circle"],
    "bad cooccur": lambda ws: ["data", "synth", "--out", str(ws.path("s")), "--cooccur", "circle:circle"],
    "ambiguity without a confound": lambda ws: ["data", "synth", "--out", str(ws.path("s")), "--ambiguous", "0.5"],
    "bad ambiguity": lambda ws: ["data", "synth", "--out", str(ws.path("s")), "--cooccur", "circle:star",
                                 "--ambiguous", "1.5"],
    "unknown checkpoint format": lambda ws: import_args(ws, released(ws, "m2.pth"), fmt="m2"),
    "not a checkpoint": lambda ws: import_args(ws, written(ws, "plain.pth", "text")),
    "checkpoint holding other objects": lambda ws: import_args(ws, released(ws, "args.pth", args=argparse.Namespace(m=40))),
    "tensor missing": lambda ws: import_args(ws, released(ws, "m2.pth", lambda s: s.pop("decoder.layers.2.fc_alpha2.bias"))),
    "unexpected tensor": lambda ws: import_args(ws, released(ws, "m2.pth", lambda s: s.update(
        {"decoder.extra.weight": torch.zeros(2)}))),
    "tensor of another shape": lambda ws: import_args(ws, released(ws, "m2.pth", lambda s: s.update(
        {"encoder.layers.1.pwff.fc2.weight": torch.zeros(32, 63)}))),
    "word list of another size": lambda ws: import_args(ws, released(ws, "m2.pth"), WORDS[:-1], vocab="short.txt"),
    "word list without a special token": lambda ws: import_args(ws, released(ws, "m2.pth"), [
        w if w != "<bos>" else "bos" for w in WORDS], vocab="nobos.txt"),
    "run directory in use": lambda ws: import_args(ws, released(ws, "m2.pth"), out=used_dir(ws)),
    "LXMERT checkpoint without an answer head": lambda ws: lxmert_import(ws, lxmert_dir(ws, "lxmert", head=False)),
    "LXMERT answers not named": lambda ws: lxmert_import(ws, lxmert_dir(ws, "lxmert", labels=False)),
    "WordPiece vocabulary of another size": lambda ws: lxmert_import(ws, lxmert_dir(ws, "lxmert"), "--vocab", written(
        ws, "short.txt", "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + [f"w{i}" for i in range(25)]))),
    "question about an image without features": lambda ws: vqa_train(ws, change=lambda root: question_image(root, 777)),
    "train split without annotations": lambda ws: vqa_train(ws, "--set", "data.vqa_splits.train=[test]", change=lambda
                                                            root: (root / "vqa" / "annotations_test.json").unlink()),
    "no frequent answer": lambda ws: vqa_train(ws, "--set", "data.answer_min_count=1000"),
    "question file missing": lambda ws: vqa_train(ws, "--set", "data.vqa_splits.train=[train2014]"),
    "file pattern without `{split}`": lambda ws: vqa_train(ws, "--set", "data.questions=q.json"),
    "WordPiece vocabulary without `[PAD]` first": lambda ws: lxmert_vqa_train(
        ws, "--set", "data.question_tokens=wordpiece", vocab=["[UNK]", "[PAD]", "[CLS]", "[SEP]"]),
    "a WordPiece model reading words": lambda ws: lxmert_vqa_train(ws),
    "NLVR2 image ids that are not the store's": nlvr2_string_ids,
    "grid positional bias, store of other sizes": lambda ws: twin_stream_train(
        ws, "--set", "model.options.attention.name=sla", "--set", "model.options.attention.options.position=grid",
        "--set", "model.options.attention.options.grid_cells=36"),
    "word vectors file missing": lambda ws: vqa_train(ws, "--set", f"model.word_vectors={ws.path('nowhere.txt')}"),
    "word vectors of another size": lambda ws: vqa_train(ws, "--set", "model.word_vectors=" + written(
        ws, "glove.txt", "what 0.1 0.2 0.3\n")),
    "more dictionary entries than regions": lambda ws: catt_dictionary(ws, "--size", "1000"),
    "dictionary file exists": lambda ws: catt_dictionary(ws, "--out", written(ws, "d.npz", "kept")),
    "word dictionary without a model": lambda ws: catt_dictionary(ws, "--source", "word"),
    "`init: file` without a path": lambda ws: catt_train(ws, "model.options.image_dictionary.init=file"),
    "dictionary file missing": lambda ws: catt_train(ws, *dictionary_file(ws.path("none.npz"))),
    "not a dictionary file": lambda ws: catt_train(ws, *dictionary_file(written(ws, "bad.npz", "text"))),
    "dictionary of another size": lambda ws: catt_train(ws, *dictionary_file(four_entries(ws)), "model.options.image_dictionary.size=3"),
    "predictions and references differ": lambda ws: library(ws, lambda: evaluate_captions(
        {1: ["a dog"], 2: ["a cat"]}, {2: "a cat"}, tokenizer_backend="python", metrics=("CIDEr",))),
    "unknown tokenizer backend": lambda ws: library(ws, lambda: PTBTokenizer("perl")),
    "run directory of a running train": lambda ws: resume(ws, locked=True),
    "checkpoints without `--resume`": lambda ws: ["train", "--config", str(ws.run.parent / "tiny.yaml"), "--out",
                                                  str(run_copy(ws)), "--device", "cpu"],
    "not a run directory": lambda ws: ["train", "--config", str(ws.run.parent / "tiny.yaml"), "--out",
                                       str(user_dir(ws, "home")), "--device", "cpu"],
    "nothing to resume": lambda ws: ["train", "--out", str(empty_dir(ws, "empty")), "--resume"],
    "a start without `--config`": lambda ws: ["train", "--out", str(ws.path("new"))],
    "resume changing the model or data": lambda ws: resume(ws, "--set", "model.d_model=64"),
    "`--config` of another run on resume": lambda ws: resume(ws, "--config", written(
        ws, "other.yaml", (ws.run.parent / "tiny.yaml").read_text().replace("num_heads: 2", "num_heads: 4"))),
    "resume in another stage": lambda ws: resume(ws, "--stage", "scst"),
    "the run's vocabulary changed": lambda ws: resume(ws, swapped_words=True),
    "override value not YAML": lambda ws: config(ws, "--set", "train.adam_betas=[0.9, 0.98"),
    "nested too deeply": lambda ws: ["profile", "--config", written(ws, "deep.yaml", f"model: {'[' * 5000}{']' * 5000}\n")],
    "size above its bound": lambda ws: config(ws, "--set", "model.encoder_layers=1000000000"),
    "integer beyond 64 bits": lambda ws: config(ws, "--set", "model.d_model=9223372036854775808"),
    "number not finite": lambda ws: config(ws, "--set", "train.grad_clip=.inf"),
    "lone surrogate in a config string": lambda ws: config(ws, "--set", 'data.karpathy="a\\ud800.json"'),
    "weights beyond the memory available": lambda ws: config(ws, "--set", "model.d_model=65536", "--set",
                                                             "model.d_ff=65536"),
    "base preset missing": lambda ws: ["profile", "--config", written(ws, "run.yaml", "base: nan\n")],
    "profile shape out of range": lambda ws: config(ws, "--batch", "0"),
    "profile activation beyond memory": lambda ws: config(ws, "--batch", "65536", "--regions", "65536"),
    "lone surrogate in a JSON string": lambda ws: score_files(ws, json.dumps([{"image_id": 1, "caption": "a dog \ud800 runs"}])),
    "JSON nested too deeply": lambda ws: score_files(ws, "[" * 100_000 + "]" * 100_000),
    "checkpoint holding a pickle payload": lambda ws: import_args(ws, evil_checkpoint(ws)),
    "run directory under a missing directory": lambda ws: import_args(ws, released(ws, "m2.pth"), out="no/such/run"),
    "word table with whitespace tokens as text": lambda ws: import_args(ws, released(ws, "m2.pth"),
                                                                        WORDS[:6] + [" "] + WORDS[7:]),
    "damaged training state": lambda ws: damaged_state(ws, "cut"),
    "training state holding other objects": lambda ws: damaged_state(ws, "payload"),
    "training state of another layout": lambda ws: damaged_state(ws, "no loop"),
    "non-finite loss": lambda ws: ["train", "--config", str(ws.run.parent / "tiny.yaml"), "--out", str(ws.path("r")),
                                   "--device", "cpu", "--set", "train.schedule={name: constant, options: {lr: 1.0e+30}}",
                                   "--set", "train.epochs=2"],
    "a lock file vlattn did not write": lambda ws: ["train", "--config", str(ws.run.parent / "tiny.yaml"), "--out",
                                                    str(with_lock(ws, "shared", "my notes")), "--device", "cpu"],
    "a linked lock file": lambda ws: ["train", "--config", str(ws.run.parent / "tiny.yaml"), "--out",
                                      str(with_lock(ws, "shared", None)), "--device", "cpu"],
    "a checkpoint holding the user's files": lambda ws: resume(ws, "--set", "train.epochs=2", foreign_file=True),
    "resume on another data set": lambda ws: resume(ws, "--set", f"data.root={other_data(ws)}"),
    "a user's file in a subfolder": lambda ws: ["data", "synth", "--out", str(synth_set(ws, "s", "vqa/my_labels.json")),
                                                "--images", "12", "--val", "2", "--test", "2", "--feature-dim", "8",
                                                "--epochs", "1", "--overwrite"],
    "caches in the set's `cache/`": lambda ws: ["data", "synth", "--out", str(synth_set(ws, "s", "cache/notes.txt")),
                                                 "--images", "12", "--val", "2", "--test", "2", "--feature-dim", "8",
                                                 "--epochs", "1", "--overwrite"],
    "`--per-image` onto an existing file": lambda ws: ["score", "--results", written(ws, "R.json", "[]"),
                                                      "--annotations", written(ws, "A.json", "{}"), "--per-image",
                                                      str(ws.path("A.json"))],
    "dictionary `--overwrite` onto another file": lambda ws: catt_dictionary(
        ws, "--out", written(ws, "notes.npz", "my notes"), "--overwrite"),
    "image file without an id": lambda ws: extract(ws, written(ws, "beach.png", b"")),
    "unknown extractor": lambda ws: extract(ws, written(ws, "photo_1.png", b""), extractor="sift"),
    "weights file missing": lambda ws: extract(ws, written(ws, "photo_1.png", b""), weights=str(ws.path("nowhere.pt"))),
    "unreadable image": lambda ws: extract(ws, written(ws, "photo_9.png", b"\x89PNG broken"), "--strict"),
    "image files for a run without an extractor record": lambda ws: [
        "caption", "--checkpoint", str(ws.run), "--images", written(ws, "photo_1.png", b""), "--device", "cpu"],
}
# Rows whose behaviour is not an error message; each is checked by the test named in the row.
NOT_ERRORS = {"box at most 1 px outside", "leftovers of a killed writer",
              "`--overwrite` killed between its two renames", "destination appearing while writing",
              "nothing left to train", "disk full", "file-size limit", "read-only directory",
              "line breaks inside a caption", "Java tokenizer returns another line count",
              "a VQA checkpoint for captioning", "a decoding option for a VQA checkpoint",
              "question without words", "Ctrl-C or SIGTERM during training",
              "kill -9 during the first checkpoint write", "another `batch_size` on resume",
              "another extractor than the run's"}


def test_every_row_is_checked() -> None:
    assert set(documented()) == set(CASES) | NOT_ERRORS


@pytest.mark.parametrize("name", sorted(CASES))
def test_documented_message(name: str, tiny_run: Path, tmp_path: Path, vlattn_cli) -> None:
    message, column = documented()[name]
    ws = Workspace(tmp_path, tiny_run)
    with ws.held:
        case = CASES[name](ws)
        if isinstance(case, str):  # a library call: "Type: message"
            output = case
        else:
            code, _, output = vlattn_cli(*case)
    if not isinstance(case, str):
        assert code == 2, output
        if "usage message" not in column:
            assert one_line(output), output
    output = output.replace(f"{ws.root}/", "").replace(f"{ws.run.parent}/", "")  # the table's short paths
    pieces = [p.strip(" ,;()") for p in message.split("...")]
    missing = [p for p in pieces if p and p not in output]
    assert not missing, f"{name}: {missing} not in {output!r}"
