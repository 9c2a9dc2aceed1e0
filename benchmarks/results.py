"""Write one ``## Heading`` section of ``benchmarks/RESULTS.md`` (measured results) or ``benchmarks/PARAMETERS.md``
(parameter and MAdds accounting beside the papers' figures), keeping every other section as it is."""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")
PARAMETERS = Path(__file__).with_name("PARAMETERS.md")


def write_section(heading: str, body: str, path: Path = RESULTS) -> None:
    """Replace the section under ``## heading`` (up to the next ``## ``) with ``body``, or append it."""
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    section = f"## {heading}\n\n{body.strip()}\n\n"
    pattern = re.compile(rf"^## {re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def parse_args(
    doc: str, repeats: int, extra: Callable[[argparse.ArgumentParser], None] | None = None
) -> argparse.Namespace:
    """The options every benchmark takes: ``--repeats``, ``--no-write`` and ``--quick`` (the reduced size that
    ``make bench`` runs: smaller shapes where the script has them, one repeat, nothing written); ``extra`` adds a
    script's own options."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=repeats, help="interleaved runs of each variant")
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    parser.add_argument("--quick", action="store_true", help="reduced size, one repeat, print only (make bench)")
    if extra is not None:
        extra(parser)
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.no_write = min(args.repeats, 1), True
    return args


def sized(args: argparse.Namespace, full: int, quick: int) -> int:
    """``full`` normally, ``quick`` under ``--quick``."""
    return quick if args.quick else full


def publish(heading: str, body: str, args: argparse.Namespace, path: Path = RESULTS) -> None:
    """Print ``body`` with the command that produced it, and write it as a section of ``path`` unless
    ``--no-write``."""
    body = f"{body.strip()}\n\nCommand: `{' '.join(['.venv/bin/python', *sys.argv])}`"
    print(body)
    if not args.no_write:
        write_section(heading, body, path)


def paired_ratio(numerator: list[float], denominator: list[float]) -> float:
    """Median over interleaved rounds of numerator_i / denominator_i (robust to load that shifts mid-run)."""
    return statistics.median(a / b for a, b in zip(numerator, denominator, strict=True))


def mean_sd(values: list[float], digits: int) -> str:
    """``mean ± sample standard deviation`` at ``digits`` decimals; the mean alone for a single value."""
    mean = f"{statistics.mean(values):.{digits}f}"
    return f"{mean} ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else mean
