"""``make bench``: run every benchmark script (``bench_*.py``, ``params_*.py``) of this directory at its reduced
``--quick`` size, one after the other, and report which ran; RESULTS.md is not touched (``--quick`` prints only).

Full-size runs, which write their section of RESULTS.md, are one script at a time:
``.venv/bin/python benchmarks/bench_beam.py``. Scripts that collect finished training runs into RESULTS.md
(``synth_*.py``) need those runs and are not started here, nor is ``bench_variance.py``, which trains whole demo
presets over seeds and CPU kernel paths (minutes per job; its ``--dry-run`` lists the jobs).

Usage: ``python benchmarks/run_all.py [--only NAME ...] [--full] [--list]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRAINING_DRIVERS = {"bench_variance.py"}  # trains demo presets for minutes per job: no quick size


def scripts(only: list[str]) -> list[Path]:
    """The benchmark scripts, sorted; ``only`` keeps those whose stem contains one of the given names."""
    found = sorted([*HERE.glob("bench_*.py"), *HERE.glob("params_*.py")])
    found = [path for path in found if path.name not in TRAINING_DRIVERS]
    return [path for path in found if not only or any(name in path.stem for name in only)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="run only scripts whose name contains one of these")
    parser.add_argument("--full", action="store_true", help="full size; each script writes its RESULTS.md section")
    parser.add_argument("--list", action="store_true", help="print the scripts that would run, run nothing")
    args = parser.parse_args()
    if args.list:
        print("\n".join(str(path) for path in scripts(args.only)))
        return 0
    failed = []
    for path in scripts(args.only):
        command = [sys.executable, str(path), *([] if args.full else ["--quick"])]
        print(f"[bench] {' '.join(command[1:])}", flush=True)
        start = time.perf_counter()
        result = subprocess.run(command, cwd=HERE.parent, check=False)
        status = "ok" if result.returncode == 0 else f"FAILED (exit {result.returncode})"
        print(f"[bench] {path.name}: {status} in {time.perf_counter() - start:.0f} s", flush=True)
        if result.returncode:
            failed.append(path.name)
    print(f"[bench] {len(scripts(args.only)) - len(failed)} ran, {len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
