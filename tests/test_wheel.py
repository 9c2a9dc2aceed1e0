"""Installation as users do it: the wheel built from this tree, installed with torch into a fresh virtual environment,
run from a directory with no source tree: `vlattn data synth`, `vlattn train --config demo` (a few steps),
`vlattn eval`, and the README's Python quickstart verbatim.

The environment gets the CPU build of torch 2.13.0 (``WHEEL_TORCH``; pip finds it in the machine's wheel folder,
no download) and no extras: what a user of ``pip install vlattn`` has. Slow (a venv, a torch install, four
processes importing torch): ``make test`` runs it at the reduced size (tests/slow.py), ``VLATTN_SLOW_SCALE=0``
skips it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slow import scaled
from tests.test_readme import quickstart

REPO = Path(__file__).resolve().parents[1]
WHEEL_TORCH = os.environ.get("VLATTN_WHEEL_TORCH", "torch==2.13.0")

pytestmark = pytest.mark.slow


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a command; its stdout, or a failure showing its output."""
    result = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, f"{args}: exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment holding the wheel of this tree, torch and the runtime dependencies only."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "src"  # the packaged files only, so the build writes nothing into the checkout
    shutil.copytree(REPO / "vlattn", source / "vlattn", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip"]
    run(*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", root / "dist", source, cwd=root)
    (wheel,) = (root / "dist").glob("vlattn-*.whl")
    run(sys.executable, "-m", "venv", "--without-pip", root / "venv", cwd=root)
    python = root / "venv" / "bin" / "python"
    run(*pip, "--python", python, "install", "-q", "--no-compile", WHEEL_TORCH, wheel, cwd=root)
    # compile the modules the commands import once (PYTHONDONTWRITEBYTECODE, if set, would make every process
    # compile torch again), as `make install` does
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    run(python, "-c", "import torch._dynamo, vlattn.cli, vlattn.api", cwd=root, env=env)
    return root / "venv"


def test_the_installed_wheel_trains_evaluates_and_runs_the_quickstart(installed: Path, tmp_path: Path) -> None:
    bin_dir = installed / "bin"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    located = run(bin_dir / "python", "-c", "import vlattn, torch; print(vlattn.__file__); print(torch.__version__)",
                  cwd=tmp_path, env=env).splitlines()
    assert Path(located[0]).is_relative_to(installed) and located[1].startswith(WHEEL_TORCH.split("==")[-1])
    vlattn = [bin_dir / "vlattn", "--threads", "1"]
    images = scaled(160, minimum=40)
    run(*vlattn, "data", "synth", "--out", "data/synth", "--images", str(images), "--epochs", "1", cwd=tmp_path,
        env=env)
    trained = json.loads(run(
        *vlattn, "train", "--config", "demo", "--out", "runs/demo", "--set", "train.epochs=1",
        "--set", f"train.max_steps={scaled(20, minimum=4)}", "--set", "data.vocab_min_count=1", cwd=tmp_path,
        env=env))
    assert trained["stage"] == "xe" and "CIDEr" in trained["last_val"]
    report = json.loads(run(*vlattn, "eval", "--checkpoint", "runs/demo", "--json", cwd=tmp_path, env=env))
    assert report["task"] == "captioning" and {"CIDEr", "Bleu_4"} <= set(report["scores"])
    assert report["images"] == len(json.loads((tmp_path / "data/synth/captions_test.json").read_text())["images"])
    (tmp_path / "quickstart.py").write_text(quickstart())
    lines = run(bin_dir / "python", "quickstart.py", cwd=tmp_path, env=env).splitlines()
    assert lines[0].startswith("M2, the Meshed-Memory Transformer")
    assert [line.split()[0] for line in lines[1:]] == ["1", "2"]  # one caption per image asked for
