"""Failed writes: a one-line error naming the file, exit status 2, no traceback, and no half-written output.

- The fuzzer runs each writing command (train, eval, data synth, data convert to memmap and to HDF5, score
  --per-image) as a child process under a file-size limit (``RLIMIT_FSIZE``: a write past it fails with
  ``EFBIG``) set just below the size of one of the files the command writes, so the write fails at that point.
  ``make test`` runs a quarter of the points (``VLATTN_SLOW_SCALE``; 1 runs them all).
- A full disk (``ENOSPC``) and a read-only directory are real small file systems (tmpfs), mounted where the
  test may (root); elsewhere those tests are skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest
import yaml

from tests.slow import SLOW_SCALE
from tests.test_bad_input import one_line
from tests.training.conftest import make_tiny_data, tiny_config
from vlattn.config import config_to_dict
from vlattn.data.features import RegionFeatures, open_store, write_memmap
from vlattn.training.checkpoint import load_checkpoint
from vlattn.validation import load_valid_config

ROOT = Path(__file__).resolve().parents[1]
TEMPORARY = re.compile(r"^\..+\.\d+\.[0-9a-f]{16}\.(tmp|old)$")
TEMPORARY_NAME = re.compile(r"\.[^/\s]+\.\d+\.[0-9a-f]{16}\.(tmp|old)\b")  # inside a message
SYNTH = ["--images", "12", "--val", "2", "--test", "2", "--feature-dim", "8", "--epochs", "1"]


class Workspace:
    """The inputs every command reads (built once), and the command line of each writing command for an output
    path."""

    def __init__(self, root: Path, run: Path) -> None:
        self.root = root
        data = make_tiny_data(root / "data")
        self.config = root / "tiny.yaml"
        self.config.write_text(yaml.safe_dump(config_to_dict(tiny_config(data, "train.epochs=1", "train.max_steps=2"))))
        self.run = run  # a trained run (tests/conftest.py's tiny_run), copied before each eval
        rng = np.random.default_rng(0)
        boxes = np.tile(np.array([[0, 0, 4, 4]], np.float32), (3, 1))
        regions = [(i, RegionFeatures(rng.standard_normal((3, 256)).astype(np.float32), boxes, 9, 9)) for i in range(40)]
        self.store = root / "store"
        write_memmap(self.store, regions)
        self.results, self.references = root / "results.json", root / "refs.json"
        self.results.write_text(json.dumps([{"image_id": i, "caption": f"a red circle number {i}"} for i in range(30)]))
        self.references.write_text(json.dumps({
            "images": [{"id": i, "file_name": f"{i}.jpg", "width": 9, "height": 9} for i in range(30)],
            "annotations": [{"id": 5 * i + k, "image_id": i, "caption": f"a {c} circle"}
                            for i in range(30) for k, c in enumerate(["red", "blue", "big", "small", "red red"])]}))

    def command(self, name: str, out: Path) -> list[str]:
        """The command line of ``name`` writing to ``out`` (eval: the run copied to ``out``)."""
        if name == "eval":
            return ["eval", "--checkpoint", str(out), "--device", "cpu", "--beam-size", "1"]
        return {
            "train": ["train", "--config", str(self.config), "--out", str(out), "--device", "cpu"],
            "synth": ["data", "synth", "--out", str(out), *SYNTH],
            "convert-memmap": ["data", "convert", "--from", str(self.store), "--to", str(out), "--format", "memmap",
                               "--no-progress"],
            "convert-hdf5": ["data", "convert", "--from", str(self.store), "--to", str(out), "--format", "m2-hdf5",
                             "--no-progress"],
            "score": ["score", "--results", str(self.results), "--annotations", str(self.references), "--tokenizer",
                      "python", "--metrics", "BLEU,CIDEr", "--per-image", str(out)],
        }[name]

    def prepare(self, name: str, out: Path) -> None:
        if name == "eval":
            shutil.copytree(self.run, out)


COMMANDS = ["train", "eval", "synth", "convert-memmap", "convert-hdf5", "score"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, tiny_run: Path) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("write-failures"), tiny_run)


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str


def run_limited(cases: list[tuple[list[str], int | None]], cwd: Path) -> list[Outcome]:
    """``vlattn --threads 1 ARGS`` of each case in its own child process (tests/fork_cli.py) whose files may not
    grow past the case's limit (bytes; None: no limit)."""
    spec = [{"args": ["--threads", "1", *args], "limit": limit, "out": str(cwd / f"case{k}.out"),
             "err": str(cwd / f"case{k}.err")} for k, (args, limit) in enumerate(cases)]
    (cwd / "cases.json").write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tests.fork_cli", str(cwd / "cases.json")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr
    codes = json.loads(done.stdout.splitlines()[-1])
    return [Outcome(code, Path(case["out"]).read_text(), Path(case["err"]).read_text()) for code, case in zip(codes, spec)]


def written_sizes(path: Path) -> list[int]:
    """Sizes of the files below ``path`` (or of the file ``path``)."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return [p.stat().st_size for p in files]


def failure_points(sizes: list[int]) -> list[int]:
    """File-size limits that stop the command at distinct writes: just below each size (sizes within 20% of a
    larger one taken once), plus 0 (not even a marker can be written)."""
    points: list[int] = []
    for size in sorted(set(sizes), reverse=True):
        if size > 1 and (not points or size < 0.8 * points[-1]):
            points.append(size - 1)
    return sorted([0, *points])


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.rglob("*") if TEMPORARY.match(p.name))


def half_written(name: str, out: Path, workspace: Workspace) -> list[str]:
    """What is wrong with the outputs of a command that failed (or succeeded): each must be absent or whole."""
    problems = [f"leftover {n}" for n in leftovers(out.parent)]
    if not out.exists():
        return problems
    try:
        if name == "train":
            for checkpoint in (out / "checkpoints").glob("[!.]*") if (out / "checkpoints").exists() else []:
                load_checkpoint(checkpoint, with_state=True)
            for line in (out / "metrics.jsonl").read_text().splitlines() if (out / "metrics.jsonl").exists() else []:
                json.loads(line)
            if (out / "config.yaml").exists():
                load_valid_config(out / "config.yaml")
        elif name == "eval":
            for file in (out / "eval").glob("*.json") if (out / "eval").exists() else []:
                json.loads(file.read_text())
        elif name == "synth":
            from vlattn.config import DataConfig
            from vlattn.tasks.captioning import load_caption_data

            assert len(load_caption_data(DataConfig(root=str(out))).entries["test"]) == 2
        elif name.startswith("convert"):
            assert open_store(out).ids() == list(range(40))
        else:
            assert len(json.loads(out.read_text())) == 30
    except Exception as err:  # noqa: BLE001 - any failure to read the output is the finding
        problems.append(f"{type(err).__name__}: {err}")
    return problems


def check_outcome(result: Outcome, name: str, out: Path, workspace: Workspace) -> list[str]:
    """The findings of one run: a traceback, another exit status than 0/2, an error that is not one line naming a
    write, half-written outputs; eval and score must have printed their scores first."""
    findings = []
    if "Traceback" in result.stderr or result.returncode not in (0, 2):
        findings.append(f"exit {result.returncode}: {result.stderr[-600:]}")
    elif result.returncode == 2:
        if not one_line(result.stderr) or "cannot write" not in result.stderr:
            findings.append(f"not a one-line write error: {result.stderr[-300:]}")
        if TEMPORARY_NAME.search(result.stderr):  # gone when the user reads the error: name the final place
            findings.append(f"names a temporary directory: {result.stderr[-300:]}")
        if name in ("eval", "score") and "CIDEr" not in result.stdout:
            findings.append("scores not printed before the failed write")
    return findings + half_written(name, out, workspace)


@pytest.fixture(scope="module")
def references(workspace: Workspace, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[int]]:
    """The sizes of the files each command writes when nothing fails."""
    root = tmp_path_factory.mktemp("references")
    outs = {name: root / name / "out" for name in COMMANDS}
    for name, out in outs.items():
        out.parent.mkdir()
        workspace.prepare(name, out)
    before = set(written_sizes(outs["eval"]))
    results = run_limited([(workspace.command(name, out), None) for name, out in outs.items()], root)
    assert all(r.returncode == 0 for r in results), [r.stderr[-500:] for r in results]
    return {name: [s for s in written_sizes(out) if name != "eval" or s not in before] for name, out in outs.items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", COMMANDS)
def test_write_failure_fuzzer(name: str, workspace: Workspace, references: dict[str, list[int]], tmp_path: Path) -> None:
    points = failure_points(references[name])
    count = len(points) if SLOW_SCALE >= 1 else min(len(points), max(2, round(len(points) * SLOW_SCALE)))
    chosen = sorted({points[round(i * (len(points) - 1) / max(1, count - 1))] for i in range(count)})
    outs = [tmp_path / f"limit-{limit}" / "out" for limit in chosen]
    for out in outs:
        out.parent.mkdir()
        workspace.prepare(name, out)
    results = run_limited([(workspace.command(name, out), limit) for out, limit in zip(outs, chosen)], tmp_path)
    findings = {limit: found for limit, out, result in zip(chosen, outs, results)
                if (found := check_outcome(result, name, out, workspace))}
    failed = sum(r.returncode == 2 for r in results)
    print(f"{name}: {len(chosen)} of {len(points)} failure points run, {failed} failed writes, "
          f"{len(findings)} with findings")
    assert failed >= 1  # the smallest limit stops every command
    assert not findings, findings


# --- a full disk and a read-only directory (tmpfs) ---------------------------------------------------------


@contextlib.contextmanager
def small_fs(path: Path, size: str, fill: Callable[[Path], None] = lambda p: None, *,
             read_only: bool = False) -> Iterator[Path]:
    """A tmpfs of ``size`` at ``path``, filled by ``fill``, then (``read_only``) remounted read-only; unmounted
    afterwards. Skips the test where mounting is not allowed."""
    path.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        fill(path)
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True, capture_output=True)
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True, capture_output=True)


def assert_write_error(code: int, err: str, where: Path) -> None:
    assert code == 2 and one_line(err) and "cannot write" in err and str(where) in err, err


@pytest.mark.parametrize("name", COMMANDS)
def test_a_full_disk_is_a_one_line_error(name: str, workspace: Workspace, tmp_path: Path, vlattn_cli) -> None:
    """ENOSPC on a small tmpfs (eval: its run fits, its outputs do not); the outputs are absent or whole, and the
    HDF5 writer does not crash."""
    def fill(fs: Path) -> None:
        workspace.prepare(name, fs / "out")
        if name in ("eval", "score"):  # their outputs are small: fill the disk
            free = os.statvfs(fs)
            (fs / "ballast").write_bytes(b"\0" * (free.f_bavail * free.f_frsize))

    with small_fs(tmp_path / "fs", "2m" if name == "eval" else "64k", fill) as fs:
        args = workspace.command(name, fs / "out")
        if name == "convert-hdf5":  # in a child: HDF5 crashing on a full disk would take the test process with it
            result = run_limited([(args, None)], tmp_path)[0]
            code, out, err = result.returncode, result.stdout, result.stderr
        else:
            code, out, err = vlattn_cli("--threads", "1", *args)
        assert_write_error(code, err, fs)
        assert "No space left on device" in err
        assert check_outcome(Outcome(code, out, err), name, fs / "out", workspace) == []


@pytest.mark.parametrize("name", COMMANDS)
def test_a_read_only_directory_is_a_one_line_error(name: str, workspace: Workspace, tmp_path: Path, vlattn_cli) -> None:
    """Every writing command on a read-only file system: one line naming the place, exit 2, nothing changed; eval
    and score print their scores first (train: resuming a run that lies there)."""
    def fill(fs: Path) -> None:
        workspace.prepare(name, fs / "out")
        if name == "train":
            assert vlattn_cli("--threads", "1", *workspace.command(name, fs / "out"))[0] == 0

    with small_fs(tmp_path / "fs", "64m", fill, read_only=True) as fs:
        before = {str(p): p.read_bytes() for p in fs.rglob("*") if p.is_file()}
        args = ["train", "--out", str(fs / "out"), "--resume", "--set", "train.max_steps=3", "--device", "cpu"] \
            if name == "train" else workspace.command(name, fs / "out")
        code, out, err = vlattn_cli("--threads", "1", *args)
        assert_write_error(code, err, fs)
        assert "Read-only file system" in err
        if name in ("eval", "score"):
            assert "CIDEr" in out
        assert {str(p): p.read_bytes() for p in fs.rglob("*") if p.is_file()} == before
