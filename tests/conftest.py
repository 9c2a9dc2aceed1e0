"""Suite-wide settings: one torch thread by default (tiny models gain nothing from more, and several OpenMP threads
on a busy 2-core machine spin against each other; VLATTN_TEST_THREADS=N runs the suite at N threads, which it must
pass as well), the size of the `slow` checks (tests/slow.py: reduced by default, VLATTN_SLOW_SCALE=1 for full size, 0
to skip them) and an in-process CLI runner."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest
import torch

from tests.slow import SLOW_SCALE

THREADS = int(os.environ.get("VLATTN_TEST_THREADS", "1"))
torch.set_num_threads(THREADS)


@pytest.fixture(autouse=True)
def _threads_as_configured() -> Iterator[None]:
    """Every test runs at THREADS: an in-process ``vlattn --threads N`` call must not carry into the tests after it
    (the suite at THREADS = 2 would run partly at 1 thread, and tests comparing runs bit for bit would pass or fail
    with the order they run in)."""
    yield
    torch.set_num_threads(THREADS)


def pytest_report_header() -> str:
    return f"slow checks at VLATTN_SLOW_SCALE={SLOW_SCALE:g}" + (" (skipped)" if SLOW_SCALE == 0 else "")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if SLOW_SCALE == 0:
        skip = pytest.mark.skip(reason="VLATTN_SLOW_SCALE=0")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip)


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


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-epoch run (``RUN/..`` holds ``data/`` and ``tiny.yaml``) on the tiny data set of tests/training."""
    import yaml
    from typer.testing import CliRunner

    from tests.training.conftest import make_tiny_data, tiny_config
    from vlattn.cli import app
    from vlattn.config import config_to_dict

    root = tmp_path_factory.mktemp("tiny-run")
    config = root / "tiny.yaml"
    config.write_text(yaml.safe_dump(config_to_dict(tiny_config(make_tiny_data(root / "data")))))
    result = CliRunner().invoke(app, ["train", "--config", str(config), "--out", str(root / "run"),
                                      "--set", "train.epochs=1", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    return root / "run"
