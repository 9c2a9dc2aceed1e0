"""``make bench`` (benchmarks/run_all.py) through its command line: every script it starts takes the ``--quick`` it
passes (an unknown option would fail that script), and the training drivers are left out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"

# each script's --help, run as ``python SCRIPT --help`` would run it, in one interpreter (torch imported once)
HELP_OF_EACH = """
import contextlib, io, json, runpy, sys
sys.path.insert(0, sys.argv[1])
helps = {}
for path in sys.argv[2:]:
    out = io.StringIO()
    sys.argv = [path, "--help"]
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        runpy.run_path(path, run_name="__main__")
    helps[path] = out.getvalue()
print(json.dumps(helps))
"""


def run_all(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "run_all.py"), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=True)
    return done.stdout.split()


def test_every_script_make_bench_starts_takes_quick() -> None:
    scripts = run_all("--list")
    names = {Path(path).name for path in scripts}
    assert {"bench_scale.py", "bench_gpu.py", "params_lw.py"} <= names and "bench_variance.py" not in names
    assert not any(name.startswith("synth_") for name in names)
    done = subprocess.run([sys.executable, "-c", HELP_OF_EACH, str(BENCHMARKS), *scripts], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=True)
    helps = json.loads(done.stdout)
    assert set(helps) == set(scripts) and all(helps.values())  # every script printed its usage
    assert [Path(path).name for path, text in helps.items() if "--quick" not in text] == []


def test_only_keeps_the_scripts_named() -> None:
    assert [Path(path).name for path in run_all("--list", "--only", "bench_gpu", "params_m2")] == [
        "bench_gpu.py", "params_m2.py"]
