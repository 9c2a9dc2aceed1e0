"""README.md: it opens with the two commands, then the Python quickstart, which runs verbatim (the code block is
read from README.md and executed) on a trained run and a feature store at the paths it names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.training.conftest import make_tiny_data, tiny_config
from vlattn.shipped_presets import describe
from vlattn.tasks import train
from vlattn.tasks.captioning import caption as cli_caption

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def blocks() -> list[tuple[str, str, int]]:
    """The fenced code blocks of README.md: (language, code, offset of the fence)."""
    text = README.read_text(encoding="utf-8")
    return [(m.group(1), m.group(2), m.start()) for m in FENCE.finditer(text)]


def quickstart() -> str:
    return blocks()[1][1]


def test_readme_opens_with_the_two_commands_then_the_python_quickstart() -> None:
    (lang, code, start), (next_lang, _, _) = blocks()[:2]
    assert README.read_text(encoding="utf-8")[:start].strip() == "# vlattn"
    commands = [line.split("#")[0].strip() for line in code.splitlines() if line.strip()]
    assert (lang, commands) == ("bash", ["make demo", "make test"])
    assert next_lang == "python" and "import vlattn" in quickstart()


@pytest.fixture
def demo_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with the paths the quickstart names: a feature store data/synth/features holding
    images 1 and 2, and a trained captioning run runs/demo (a tiny model: the quickstart reads whatever run is
    there)."""
    data = make_tiny_data(tmp_path / "data" / "synth", first_id=1)
    monkeypatch.chdir(tmp_path)
    train(tiny_config(data, "train.epochs=1"), "runs/demo", device="cpu")
    return tmp_path


def test_readme_quickstart_runs_verbatim(demo_layout: Path, capsys: pytest.CaptureFixture) -> None:
    capsys.readouterr()
    exec(compile(quickstart(), str(README), "exec"), {"__name__": "__readme__"})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == describe()["m2"]
    # the captions printed are those `vlattn caption` gives for the same run and images
    expected = cli_caption("runs/demo", "data/synth/features", [1, 2], device="cpu")
    printed = [line.rsplit(" ", 1) for line in lines[1:]]
    assert [head for head, _ in printed] == [f"{row['image_id']} {row['caption']}" for row in expected]
    assert all(float(score) < 0 for _, score in printed)  # sums of log-probabilities
