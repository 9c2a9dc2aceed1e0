"""`vlattn import-checkpoint --format m2-official` (issue 15): reading released checkpoint files safely, mapping
every tensor exactly once (missing, unexpected and mis-shaped tensors named), the word-list vocabulary, and
the written run directory used by `vlattn caption` — whose captions are the released beam search's
(``tests/m2_released.py``)."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from m2_released import random_released_state, released_beam_search
from typer.testing import CliRunner

import vlattn.importers as importers
from vlattn.cli import app
from vlattn.validation import load_valid_config
from vlattn.data.features import RegionFeatures
from vlattn.data.features.hdf5 import write_m2_hdf5
from vlattn.data.vocab import Vocabulary, read_word_list
from vlattn.errors import DataError
from vlattn.importers import import_checkpoint
from vlattn.importers.m2_official import OFFICIAL_OPTIONS, RELEASED_EVAL, RELEASED_MAX_REGIONS, map_state_dict
from vlattn.importers.torchfile import load_state_dict
from vlattn.training.checkpoint import load_checkpoint
from tests.training.conftest import make_tiny_data

runner = CliRunner()
WORDS = ["<unk>", "<pad>", "<bos>", "<eos>"] + [f"w{i}" for i in range(26)]
HEADS = 4


def state(**kwargs) -> dict[str, torch.Tensor]:
    return random_released_state(vocab=len(WORDS), **kwargs)


def train_py_file(path: Path, weights: dict[str, torch.Tensor], *, zip_format: bool = False) -> Path:
    """A checkpoint as the released train.py saves it: RNG states (NumPy's holds a uint32 array), NumPy float64
    scores, optimizer/scheduler state dicts; old PyTorch wrote the legacy (non-zip) format."""
    data = {
        "torch_rng_state": torch.get_rng_state(), "numpy_rng_state": np.random.get_state(),
        "random_rng_state": random.getstate(), "epoch": 27, "val_loss": 2.5, "val_cider": np.float64(1.31),
        "state_dict": weights, "optimizer": {"state": {}, "param_groups": [{"lr": 5e-6, "params": [0, 1]}]},
        "scheduler": {"base_lrs": [1.0], "last_epoch": 3, "lr_lambdas": [None]}, "patience": 0,
        "best_cider": np.mean(np.array([1.2, 1.4])), "use_rl": True,
    }
    torch.save(data, path, _use_new_zipfile_serialization=zip_format)
    return path


def word_list(path: Path, words: list[str] = WORDS) -> Path:
    path.write_text("\n".join(words) + "\n")
    return path


# --- reading files ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("zip_format", [False, True])
def test_reads_the_state_dict_of_a_train_py_checkpoint(tmp_path: Path, zip_format: bool) -> None:
    weights = state()
    loaded = load_state_dict(train_py_file(tmp_path / "m2.pth", weights, zip_format=zip_format))
    assert loaded.keys() == weights.keys() and all(torch.equal(loaded[k], weights[k]) for k in weights)


def test_reads_numpy_1_pickles_and_bare_state_dicts(tmp_path: Path) -> None:
    weights = state()
    path = train_py_file(tmp_path / "m2.pth", weights)
    old = path.read_bytes().replace(b"numpy._core.multiarray", b"numpy.core.multiarray")  # NumPy 1's name
    (tmp_path / "old.pth").write_bytes(old)
    assert torch.equal(load_state_dict(tmp_path / "old.pth")["decoder.fc.weight"], weights["decoder.fc.weight"])
    torch.save(weights, tmp_path / "bare.pth")
    assert load_state_dict(tmp_path / "bare.pth").keys() == weights.keys()


def test_refuses_arbitrary_objects_and_explains_the_workaround(tmp_path: Path) -> None:
    torch.save({"state_dict": state(), "args": argparse.Namespace(m=40)}, tmp_path / "args.pth")
    with pytest.raises(DataError, match=r"args.pth: holds an object that weights_only loading refuses "
                                        r"\(argparse.Namespace\); re-save the weights alone"):
        load_state_dict(tmp_path / "args.pth")
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(DataError, match="junk.pth: not a readable PyTorch checkpoint"):
        load_state_dict(tmp_path / "junk.pth")
    torch.save({"state_dict": {"a": torch.zeros(1), "epoch": 3}}, tmp_path / "mixed.pth")
    with pytest.raises(DataError, match="mixed.pth: item 'epoch': expected a tensor, got int"):
        load_state_dict(tmp_path / "mixed.pth")
    with pytest.raises(DataError, match="missing.pth: checkpoint file not found"):
        load_state_dict(tmp_path / "missing.pth")


# --- mapping --------------------------------------------------------------------------------------------------


def test_maps_every_tensor_once_and_permutes_the_vocabulary() -> None:
    weights = state()
    result = map_state_dict(weights, WORDS, heads=HEADS)
    assert result.vocab.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"] and result.vocab.itos[4:] == WORDS[4:]
    runtime = {k for k in weights if ".running_" in k}
    assert len(result.state) == len(weights) - len(runtime) and sorted(result.dropped) == sorted(runtime)
    released_rows = [WORDS.index(w) for w in result.vocab.itos]
    torch.testing.assert_close(result.state["decoder.embed.weight"], weights["decoder.word_emb.weight"][released_rows])
    torch.testing.assert_close(result.state["decoder.output.weight"], weights["decoder.fc.weight"][released_rows])
    torch.testing.assert_close(result.state["encoder.layers.2.self_attn.memory_values"],
                               weights["encoder.layers.2.mhatt.attention.m_v"][0])
    torch.testing.assert_close(result.state["decoder.layers.1.cross.gate_proj.2.bias"],
                               weights["decoder.layers.1.fc_alpha3.bias"])
    torch.testing.assert_close(result.state["decoder.layers.0.cross.norm.norm.weight"],
                               weights["decoder.layers.0.enc_att.layer_norm.weight"])
    model = result.config.model
    assert (model.kind, model.d_model, model.d_ff, model.feature_dim, model.max_positions) == ("m2", 32, 64, 12, 54)
    assert model.encoder_self_attention.options == {"slots": 6, "init": "official"} and not model.output_bias
    assert model.options == OFFICIAL_OPTIONS and model.num_heads == HEADS


def test_plain_attention_checkpoints_are_the_without_memory_ablation() -> None:
    result = map_state_dict(state(slots=0), WORDS, heads=HEADS)
    assert result.config.model.encoder_self_attention.name == "mha"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.pop("decoder.layers.2.fc_alpha2.bias"), r"item 'decoder.layers.2.fc_alpha2.bias': missing tensor"),
        (lambda s: s.update({"decoder.layers.0.extra.weight": torch.zeros(2)}),
         r"item 'decoder.layers.0.extra.weight': unexpected tensor"),
        (lambda s: s.update({"encoder.layers.1.pwff.fc2.weight": torch.zeros(32, 63)}),
         r"item 'encoder.layers.1.pwff.fc2.weight': shape \(32, 63\) does not fit encoder.layers.1.ffn.fc2.weight \(32, 64\)"),
        (lambda s: s.update({"encoder.layers.0.mhatt.attention.m_k": torch.zeros(2, 6, 32)}),
         r"item 'encoder.layers.0.mhatt.attention.m_k': expected a leading axis of 1"),
        (lambda s: s.update({"decoder.layers.1.self_att.running_keys": torch.zeros(3, 32)}),
         r"item 'decoder.layers.1.self_att.running_keys': runtime-state buffer has shape \(3, 32\)"),
        (lambda s: s.pop("encoder.fc.weight"), r"item 'encoder.fc.weight': missing tensor"),
        (lambda s: [s.pop(k) for k in list(s) if "fc_alpha3" in k], r"gate 2 encoder levels .* the encoder has 3 layers"),
    ],
)
def test_bad_tensors_are_named(change, message: str) -> None:
    weights = state()
    change(weights)
    with pytest.raises(DataError, match=message):
        map_state_dict(weights, WORDS, heads=HEADS, source="m2.pth")


def test_word_list_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="the word list has 29 words but decoder.word_emb.weight has 30 rows"):
        map_state_dict(state(), WORDS[:-1], heads=HEADS)
    with pytest.raises(DataError, match="lacks the special token\\(s\\) <bos>"):
        map_state_dict(state(), [w if w != "<bos>" else "bos" for w in WORDS], heads=HEADS)
    with pytest.raises(DataError, match="word 'w3' appears twice \\(entries 7 and 8\\)"):
        map_state_dict(state(), WORDS[:8] + ["w3"] + WORDS[9:], heads=HEADS)
    with pytest.raises(DataError, match="d_model 32 is not divisible by --heads 5"):
        map_state_dict(state(), WORDS, heads=5)
    (tmp_path / "gap.txt").write_text("<unk>\n<pad>\n\n<bos>\n")
    with pytest.raises(DataError, match="gap.txt: line 3: expected one word without spaces, got ''"):
        read_word_list(tmp_path / "gap.txt")
    (tmp_path / "crlf.txt").write_text("<unk>\r\n<pad>\r\nred car\r\n")
    with pytest.raises(DataError, match="line 3: expected one word without spaces, got 'red car'"):
        read_word_list(tmp_path / "crlf.txt")
    (tmp_path / "ok.txt").write_bytes(b"<unk>\r\n<pad>\r\n")
    assert read_word_list(tmp_path / "ok.txt") == ["<unk>", "<pad>"]


# --- the command and the run directory --------------------------------------------------------------------------


def features_file(path: Path, images: dict[int, np.ndarray]) -> Path:
    boxes = lambda n: np.tile(np.array([[0, 0, 10, 10]], dtype=np.float32), (n, 1))  # noqa: E731
    write_m2_hdf5(path, ((i, RegionFeatures(f, boxes(len(f)), 32, 32)) for i, f in images.items()))
    return path


def test_import_then_caption_gives_the_released_beam_search(tmp_path: Path) -> None:
    weights = state(seed=5)
    source = train_py_file(tmp_path / "meshed_memory_transformer.pth", weights)
    vocab = word_list(tmp_path / "vocab.txt")
    run = tmp_path / "imported"
    result = runner.invoke(app, ["import-checkpoint", str(source), "--format", "m2-official", "--vocab", str(vocab),
                                 "--out", str(run), "--heads", str(HEADS)])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["layout"]["vocab_size"] == len(WORDS) and record["tensors"] == len(weights) - 8
    assert json.loads((run / "import.json").read_text()) == record
    checkpoint = load_checkpoint(run)
    assert checkpoint.config.eval.collapse_repeats is RELEASED_EVAL["collapse_repeats"]
    assert checkpoint.config.data.max_regions == RELEASED_MAX_REGIONS
    assert load_valid_config(run / "config.yaml") == checkpoint.config

    generator = torch.Generator().manual_seed(0)
    images = {7: torch.randn(5, 12, generator=generator).numpy(), 9: torch.randn(3, 12, generator=generator).numpy()}
    store = features_file(tmp_path / "features.hdf5", images)
    result = runner.invoke(app, ["caption", "--checkpoint", str(run), "--features", str(store), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    captions = {row["image_id"]: row["caption"] for row in json.loads(result.stdout)}
    for image_id, features in images.items():  # the released loader zero-pads every image to 50 regions
        padded = F.pad(torch.from_numpy(features), (0, 0, 0, RELEASED_MAX_REGIONS - len(features)))[None]
        words = released_beam_search(weights, padded, bos=2, eos=3, pad=1, heads=HEADS).words[0, 0]
        expected = Vocabulary(WORDS[4:]).decode(Vocabulary(WORDS[4:]).stoi[WORDS[w]] for w in words.tolist())
        assert captions[image_id] == expected and expected


def test_imported_run_fine_tunes(tmp_path: Path) -> None:
    """SCST starts from an imported run (--init): its config, vocabulary and weights serve a training stage that
    reads a data set and validates on it (`vlattn eval` takes the same path; it is not run here because
    METEOR's Java start-up alone takes tens of seconds)."""
    tiny_data = make_tiny_data(tmp_path / "data")
    source = train_py_file(tmp_path / "m2.pth", state(d_in=16))  # the tiny data set's 16-d regions
    run = tmp_path / "imported"
    import_checkpoint("m2-official", source, word_list(tmp_path / "vocab.txt"), run, heads=HEADS)
    scst = tmp_path / "scst"
    result = runner.invoke(app, [
        "train", "--stage", "scst", "--init", str(run), "--config", str(run / "config.yaml"), "--out", str(scst),
        "--set", f"data.root={tiny_data}", "--set", "train.scst_epochs=1", "--set", "train.scst_batch_size=12",
        "--set", "train.scst_samples=2", "--set", "train.val_max_images=2", "--set", "eval.max_len=8",
        "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert (scst / "checkpoints" / "best" / "model.safetensors").is_file()
    records = [json.loads(line) for line in (scst / "metrics.jsonl").read_text().splitlines()]
    assert any(r["kind"] == "val" and "CIDEr" in r for r in records)


def test_import_refuses_a_used_directory_and_leaves_nothing_on_error(tmp_path: Path) -> None:
    source = train_py_file(tmp_path / "m2.pth", state())
    vocab = word_list(tmp_path / "vocab.txt")
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match="used: exists and is not empty"):
        import_checkpoint("m2-official", source, vocab, used, heads=HEADS)
    assert [p.name for p in used.iterdir()] == ["notes.txt"]
    short = word_list(tmp_path / "short.txt", WORDS[:-1])
    result = runner.invoke(app, ["import-checkpoint", str(source), "--format", "m2-official", "--vocab", str(short),
                                 "--out", str(tmp_path / "new"), "--heads", str(HEADS)])
    assert result.exit_code != 0 and not (tmp_path / "new").exists()
    assert "has 29 words but decoder.word_emb.weight has 30 rows" in str(result.exception or result.output)
    with pytest.raises(Exception, match="unknown checkpoint format .m2.; valid names: lxmert-hf, m2-official"):
        import_checkpoint("m2", source, vocab, tmp_path / "other", heads=HEADS)
    empty = tmp_path / "empty"
    empty.mkdir()
    import_checkpoint("m2-official", source, vocab, empty, heads=HEADS)  # an empty directory is used
    assert (empty / "checkpoints" / "best" / "model.safetensors").is_file()
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_import_removes_only_its_own_kind_of_leftover(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A killed import's temporary (vlattn's name, dead writer) is removed by the next import of that run
    directory; a user's directories with similar names, and a live process's temporary, stay intact; a failed
    import removes its own temporary and creates nothing."""
    source = train_py_file(tmp_path / "m2.pth", state())
    vocab = word_list(tmp_path / "vocab.txt")
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True)
    dead = int(finished.stdout)  # a process id whose process has exited
    killed = tmp_path / f".run.{dead}.00000000abcd1234.tmp"
    (killed / "checkpoints").mkdir(parents=True)
    (killed / ".vlattn.json").write_text(json.dumps({"written_by": "vlattn", "kind": "temporary",
                                                     "id": "00000000abcd1234"}))
    users = [tmp_path / ".run.import-tmp", tmp_path / ".run.backup.tmp", tmp_path / f".run.{os.getpid()}.zzzz9999.tmp",
             tmp_path / f".run.{dead}.00000000abcd5678.tmp"]  # vlattn's name, but no marker proving it vlattn's
    for mine in users:
        mine.mkdir()
        (mine / "notes.txt").write_text("mine")

    def failing(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(importers, "save_config", failing)
    with pytest.raises(OSError, match="disk full"):
        import_checkpoint("m2-official", source, vocab, tmp_path / "run", heads=HEADS)
    assert not killed.exists() and not (tmp_path / "run").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".run")) == sorted(u.name for u in users)
    monkeypatch.undo()
    import_checkpoint("m2-official", source, vocab, tmp_path / "run", heads=HEADS)
    assert (tmp_path / "run" / "import.json").is_file()
    assert all((mine / "notes.txt").read_text() == "mine" for mine in users)
