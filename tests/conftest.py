"""Suite-wide settings: one torch thread (tiny models gain nothing from more, and several OpenMP threads
on a busy 2-core machine spin against each other), and the size of the `slow` end-to-end checks."""

from __future__ import annotations

import os
import sys
from typing import Callable

import pytest
import torch

torch.set_num_threads(1)

# `make test` runs the `slow` checks at a reduced size; set VLATTN_SLOW_SCALE=1 for the full size.
SLOW_SCALE = float(os.environ.get("VLATTN_SLOW_SCALE", "0.25"))


@pytest.fixture
def vlattn_cli(capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[int, str, str]]:
    """Run ``vlattn ARGS`` in this process as the console script does: ``(exit status, stdout, stderr)``."""
    from vlattn.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        monkeypatch.setattr(sys, "argv", ["vlattn", *args])
        try:
            main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        out, err = capsys.readouterr()
        return code, out, err

    return run
