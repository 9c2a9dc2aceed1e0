"""The layers and the lint rules hold (docs/architecture.md "Layers"; pyproject.toml's [tool.importlinter] and
[tool.ruff]): the same checks `make lint` runs, so that a suite run alone also refuses an upward import, an import
cycle or a lint error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_import_contracts_are_kept() -> None:
    result = run(str(BIN / "lint-imports"), "--no-logo", "--no-cache")
    assert result.returncode == 0 and "0 broken" in result.stdout, result.stdout + result.stderr


def test_ruff_is_clean() -> None:
    result = run(str(BIN / "ruff"), "check", "--quiet", ".")
    assert result.returncode == 0, result.stdout + result.stderr
