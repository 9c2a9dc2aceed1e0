"""The bias benchmark's driver (benchmarks/synth_catt.py) through its command line: the training commands of every
variant (``--dry-run``) build the model its row names, main variants first; the table collected from finished runs
(``--collect-only``) holds the bias columns computed by hand, the paired differences and the commands that
reproduce it; the section written holds the setup, the tables, the note and the commands, not the per-seed rows."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from vlattn.attention import AdditiveAttention, AdditiveCausalAttention
from vlattn.models import build_captioner
from vlattn.validation import load_valid_config

ROOT = Path(__file__).resolve().parents[2]
DRIVER = [sys.executable, "benchmarks/synth_catt.py"]

# variant -> (model kind, image entries, word entries, share, dictionary init); None: no such dictionary
EXPECTED = {
    "base": ("transformer", None, None, None, None),
    "catt": ("catt", 500, 500, True, "kmeans"),
    "wo_init": ("catt", 500, 500, True, "random"),
    "wo_share": ("catt", 500, 500, False, "kmeans"),
    "d100": ("catt", 100, 100, True, "kmeans"),
    "d200": ("catt", 200, 200, True, "kmeans"),
    "d1000": ("catt", 1000, 1000, True, "kmeans"),
}


def driver(*args: str) -> str:
    return subprocess.run([*DRIVER, *args], cwd=ROOT, check=True, capture_output=True, text=True, timeout=300).stdout


@pytest.fixture(scope="module")
def commands(tmp_path_factory) -> dict[str, tuple[str, list[str]]]:
    """Run name (``<variant>-s<seed>``) -> (config, ``--set`` items) of each training command, in the printed order."""
    runs = tmp_path_factory.mktemp("runs")
    out = driver("--data", "d", "--runs", str(runs), "--seeds", "1", "2", "--variants", "d100", *EXPECTED.keys() - {"d100"},
                 "updown", "updown_catt", "--dry-run")
    found = {}
    for line in out.splitlines():
        words = shlex.split(line)
        run = Path(words[words.index("--out") + 1]).name
        found[run] = (words[words.index("--config") + 1], [words[i + 1] for i, w in enumerate(words) if w == "--set"])
    return found


def built(commands, run: str):
    config, sets = commands[run]
    cfg = load_valid_config(config, sets)
    return cfg, build_captioner(cfg.model, 30)


def test_main_variants_run_first_seed_by_seed(commands) -> None:
    order = list(commands)
    main = [run for run in order if run.rsplit("-s", 1)[0] in ("base", "catt", "updown", "updown_catt")]
    assert order[:len(main)] == main and len(main) == 8
    assert [run.rsplit("-s", 1)[1] for run in main] == ["1"] * 4 + ["2"] * 4
    assert len(order) == 2 * (len(EXPECTED) + 2)


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_transformer_variants_build_what_their_rows_name(commands, key: str) -> None:
    kind, image, word, share, init = EXPECTED[key]
    cfg, model = built(commands, f"{key}-s1")
    assert cfg.model.kind == kind and (cfg.model.d_model, cfg.model.encoder_layers) == (128, 2)
    assert (cfg.train.seed, cfg.train.epochs) == (1, 6)
    # like for like: the dropout (and its masks) and the batching of the baseline Transformer, none on the attention
    # weights
    base = built(commands, "base-s1")[0]
    assert (cfg.model.dropout, cfg.model.attention_dropout) == (base.model.dropout, None)
    assert (cfg.model.dropout_mask, cfg.train.length_buckets) == (base.model.dropout_mask, base.train.length_buckets)
    if image is None:
        assert not any(name.endswith("dictionary.entries") for name, _ in model.named_parameters())
        return
    assert model.encoder.dictionary.entries.shape == (image, 512)  # the synthetic features, no box channels
    assert model.decoder.dictionary.entries.shape == (word, 128)
    assert cfg.model.options["share"] is share
    assert {cfg.model.options[d]["init"] for d in ("image_dictionary", "word_dictionary")} == {init}


def test_updown_variants_differ_only_at_the_top_down_site(commands) -> None:
    base_cfg, base = built(commands, "updown-s2")
    catt_cfg, catt = built(commands, "updown_catt-s2")
    assert type(base.attention) is AdditiveAttention and isinstance(catt.attention, AdditiveCausalAttention)
    assert catt.attention.dictionary.entries.shape == (100, 512) and catt.attention.cross_sample is not None
    assert (base_cfg.train, base_cfg.data) == (catt_cfg.train, catt_cfg.data)


def obj(shape: str, colour: str, ambiguous: bool = False) -> dict:
    return {"shape": shape, "colour": colour, **({"ambiguous": True} if ambiguous else {})}


def choice(beam: int) -> dict:
    """A `vlattn eval` report's ``beam_choice``: ``beam`` chosen on val among 1 and 2."""
    return {"beam_size": beam, "metric": "CIDEr", "split": "val", "images": 1, "scores": {"1": 0.3, "2": 0.2},
            "source": "after training"}


def bias_runs(tmp_path: Path, beams: dict[str, int | None]) -> tuple[Path, Path]:
    """Image 1: an ambiguous red circle and a clear white star; 2: an ambiguous blue circle and an ambiguous green
    square; 3: a clear green circle (no star); 4: a clear black square. The captions say red of both ambiguous
    circles (right, wrong), red of the ambiguous square (wrong), the clear objects' colours right, and a star in
    image 3 (a circle without a star) but not in 2 (the same) or 4 (neither). Four runs with those captions differ
    in CIDEr only: base 0.5 / 0.4, catt 0.4 / 0.7 at seeds 1 / 2; each evaluated at the beam of ``beams`` chosen
    on val (an int) or at a fixed beam 3 (None)."""
    data, runs = tmp_path / "data", tmp_path / "runs"
    data.mkdir()
    scenes = [{"image_id": 1, "objects": [obj("circle", "red", True), obj("star", "white")]},
              {"image_id": 2, "objects": [obj("circle", "blue", True), obj("square", "green", True)]},
              {"image_id": 3, "objects": [obj("circle", "green")]}, {"image_id": 4, "objects": [obj("square", "black")]}]
    (data / "scenes.json").write_text(json.dumps({"info": {"images": 4, "seed": 7}, "images": scenes}))
    (data / "dataset.json").write_text(json.dumps({"images": [{"split": s} for s in ("train", "val", "test", "test")]}))
    (data / "confound.json").write_text(json.dumps({"pairs": [{"attribute": "red", "shape": "circle"}], "p": 0.9}))
    captions = ["a large red circle and a big white star", "a red circle and a red square",
                "one green circle and one star", "a black square"]
    for run, cider in {"base-s1": 0.5, "base-s2": 0.4, "catt-s1": 0.4, "catt-s2": 0.7}.items():
        (runs / run / "eval").mkdir(parents=True)
        (runs / run / "eval" / "test_predictions.json").write_text(json.dumps(
            [{"image_id": k, "caption": c} for k, c in enumerate(captions, start=1)]))
        decoding = {"beam_size": 3} if beams[run] is None else {"beam_size": beams[run], "beam_choice": choice(beams[run])}
        (runs / f"{run}.eval.json").write_text(json.dumps(
            {**decoding, "scores": {"CIDEr": cider, "CHAIR_s": 0.1, "CHAIR_i": 0.2, "A@Attr": 0.75}}))
    return data, runs


def cells(lines: list[str], header_start: str, row_start: str) -> dict[str, str]:
    header = [cell.strip() for cell in next(line for line in lines if line.startswith(header_start)).strip("|").split("|")]
    row = next(line for line in lines if line.startswith(row_start))
    return dict(zip(header, (cell.strip() for cell in row.strip("|").split("|")), strict=True))


def test_collected_table_by_hand(tmp_path: Path) -> None:
    data, runs = bias_runs(tmp_path, {"base-s1": 1, "base-s2": 2, "catt-s1": 1, "catt-s2": 1})
    out = driver("--data", str(data), "--runs", str(runs), "--seeds", "1", "2", "3", "--variants", "base", "catt",
                 "--collect-only", "--no-write")
    lines = out.splitlines()
    assert cells(lines, "| model | seed |", "| Transformer | 1 |") == {
        "model": "Transformer", "seed": "1", "beam": "1", "CIDEr ↑": "0.500", "CHAIR_s ↓": "0.100",
        "CHAIR_i ↓": "0.200", "A@Attr ↑": "0.750", "A@Attr amb. circle ↑": "0.500", "A@Attr amb. other ↑": "0.000",
        "A@Attr clear ↑": "1.000", "red: amb. circle ↓": "1.000", "red: amb. other": "1.000",
        "star: circle ↓": "0.500", "star: no circle ↓": "0.000", "amb. circle words": "2"}
    assert any(line.startswith("| Transformer | 2 | 2 | 0.400 | 0.100 |") for line in lines)  # seed 2's row
    # seeds 1-2 of 3, the beam each chose
    assert any(line.startswith("| Transformer | 2 | 1, 2 | 0.450 ± 0.071 | 0.100 ± 0.000 |") for line in lines)
    assert any(line.startswith("| Transformer+CATT (D#500) − Transformer | 2 | 0.100 ± 0.283 | 0.000 ± 0.000 |")
               for line in lines)
    assert f".venv/bin/vlattn --threads 1 data synth --out {data} --images 4 --seed 7 --val 1 --test 2 --confound " \
           "red:circle --confound-p 0.9" in lines
    assert f".venv/bin/python benchmarks/synth_catt.py --data {data} --runs {runs} --epochs 6 --seeds 1 2 --variants base catt" in lines


def test_the_written_section_replaces_only_its_own(tmp_path: Path) -> None:
    data, runs = bias_runs(tmp_path, {"base-s1": 1, "base-s2": 2, "catt-s1": 1, "catt-s2": 1})
    results = tmp_path / "RESULTS.md"
    heading = "## CATT bias benchmark on confounded synthetic data"
    results.write_text(f"# Benchmark results\n\n## Before\n\nkept\n\n{heading}\n\nreplaced\n\n## After\n\nkept too\n")
    out = driver("--data", str(data), "--runs", str(runs), "--seeds", "1", "2", "--variants", "base", "catt",
                 "--val-images", "50", "--note", "Seed 2 differs.", "--collect-only", "--results", str(results))
    text = results.read_text()
    assert text.startswith("# Benchmark results\n\n## Before\n\nkept\n\n" + heading + "\n\nCATT paper Tables 2 and 6 ")
    assert text.endswith("```\n\n## After\n\nkept too\n") and "replaced" not in text
    section = text[text.index(heading):text.index("## After")].splitlines()
    assert "1 / 1 / 2 images, 6 XE epochs, checkpoint best on 50 val images" in " ".join(section)
    assert any(line.startswith("| Transformer | 2 | 1, 2 | 0.450 ± 0.071 |") for line in section)
    assert any(line.startswith("| Transformer+CATT (D#500) − Transformer | 2 | 0.100 ± 0.283 |") for line in section)
    assert "Seed 2 differs." in section
    command = f".venv/bin/python benchmarks/synth_catt.py --data {data} --runs {runs} --epochs 6 --seeds 1 2 " \
              "--variants base catt --val-images 50"
    assert section.index("Seed 2 differs.") < section.index(command)
    # the per-seed rows are printed, not written
    seed_row = "| Transformer | 1 | 1 | 0.500 |"
    assert any(line.startswith(seed_row) for line in out.splitlines())
    assert not any(line.startswith(seed_row) for line in section) and "Per seed:" not in section


def test_only_runs_decoded_as_asked_are_tabulated(tmp_path: Path) -> None:
    """catt-s2 was decoded at a fixed beam 3, the others at the beam chosen on val: each decoding's table holds only
    its own runs, and a fixed beam is part of the command that reproduces the table."""
    data, runs = bias_runs(tmp_path, {"base-s1": 1, "base-s2": 2, "catt-s1": 2, "catt-s2": None})
    common = ("--data", str(data), "--runs", str(runs), "--seeds", "1", "2", "--variants", "base", "catt",
              "--collect-only", "--no-write")
    auto = driver(*common).splitlines()
    assert any(line.startswith("| Transformer+CATT (D#500) | 1 | 2 | 0.400 |") for line in auto)
    assert f".venv/bin/python benchmarks/synth_catt.py --data {data} --runs {runs} --epochs 6 --seeds 1 --variants catt" in auto
    fixed = driver(*common, "--beam-size", "3").splitlines()
    assert any(line.startswith("| Transformer+CATT (D#500) | 1 | 3 | 0.700 |") for line in fixed)
    assert not any(line.startswith("| Transformer |") for line in fixed)
    assert f".venv/bin/python benchmarks/synth_catt.py --data {data} --runs {runs} --epochs 6 --seeds 2 --variants catt " \
           "--beam-size 3" in fixed


def test_a_run_decoded_otherwise_is_not_trained_again(tmp_path: Path) -> None:
    data, runs = bias_runs(tmp_path, {"base-s1": 1, "base-s2": 2, "catt-s1": 1, "catt-s2": 1})
    planned = driver("--data", str(data), "--runs", str(runs), "--seeds", "1", "2", "3", "--variants", "base",
                     "--beam-size", "1", "--dry-run").splitlines()
    assert [Path(shlex.split(line)[shlex.split(line).index("--out") + 1]).name for line in planned] == ["base-s3"]


@pytest.mark.parametrize("value", ["0", "wide", "-1", "2.5"])
def test_a_bad_beam_size_is_a_usage_error(value: str) -> None:
    done = subprocess.run([*DRIVER, "--data", "d", "--runs", "r", "--beam-size", value, "--dry-run"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"argument --beam-size: expected auto or a whole number >= 1, got '{value}'" in done.stderr
