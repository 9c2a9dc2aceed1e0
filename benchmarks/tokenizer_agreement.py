"""Agreement of the Python PTB tokenizer (vlattn.text.ptb) with the Java one pycocoevalcap runs.

The reference is ``stanford-corenlp-3.4.1.jar``'s PTBTokenizer (``-preserveLines -lowerCase``), run once over
all captions. Compared: (a) the tokenizer's output lines, every PTB token (punctuation included), and (b) the
scored form (pycocoevalcap's split on " " and punctuation removal), per feature class of the corpus in
tests/metrics/corpora.py, on seeded random strings, and on every BMP character alone and inside a word.
``--baseline REF`` also scores vlattn/text/__init__.py of a git revision (the tokenizer before this rewrite).
Writes the section "## PTB tokenizer agreement" of benchmarks/RESULTS.md.

    .venv/bin/python benchmarks/tokenizer_agreement.py [--baseline 330248c] [--no-write]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

from results import publish

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from metrics.corpora import random_strings, tokenizer_corpus  # noqa: E402

from vlattn.text import finish_line, ptb_lines  # noqa: E402
from vlattn.metrics.tokenizer import PTBTokenizer  # noqa: E402

HEADING = "PTB tokenizer agreement"
Lines = Callable[[Sequence[str]], list[str]]


def java_lines(texts: Sequence[str]) -> list[str]:
    """The jar's output lines (via the library's Java backend)."""
    return PTBTokenizer("java")._java(list(texts))


def baseline_lines(ref: str) -> Lines:
    """Output lines of the ``tokenize`` of vlattn/text/__init__.py at git revision ``ref`` (scored form only)."""
    source = subprocess.run(["git", "show", f"{ref}:vlattn/text/__init__.py"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
        handle.write(source)
    spec = importlib.util.spec_from_file_location("baseline_text", handle.name)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return lambda texts: [" ".join(module.tokenize(text)) for text in texts]


def agreement(texts: Sequence[str], java: list[str], ours: list[str], *, raw: bool) -> tuple[int, list[str]]:
    """Number of captions on which the lines agree (raw PTB tokens, or the scored form) and the first differences."""
    same, diffs = 0, []
    for text, j, o in zip(texts, java, ours):
        a, b = (j.rstrip(), o.rstrip()) if raw else (finish_line(j), finish_line(o))
        if a == b:
            same += 1
        elif len(diffs) < 5:
            diffs.append(f"{text!r}: java {a!r}, python {b!r}")
    return same, diffs


def speed(texts: Sequence[str], variants: dict[str, Lines], repeats: int = 3) -> dict[str, float]:
    """CPU microseconds per caption of each variant, runs interleaved (A B A B ...), medians."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, lines in variants.items():
            start = time.process_time()
            lines(texts)
            times[name].append((time.process_time() - start) / len(texts) * 1e6)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=20000, help="random strings (seeded)")
    parser.add_argument("--baseline", default=None, help="git revision whose text.tokenize is also scored")
    parser.add_argument("--no-write", action="store_true", help="print only, leave RESULTS.md alone")
    args = parser.parse_args()
    corpus = tokenizer_corpus()
    old = baseline_lines(args.baseline) if args.baseline else None
    rows = ["| class | captions | raw PTB lines equal | scored tokens equal |"
            + (f" before ({args.baseline}) |" if old else ""),
            "|---|---:|---:|---:|" + ("---:|" if old else "")]
    notes: list[str] = []
    sets: list[tuple[str, list[str]]] = [(name, texts) for name, texts in corpus.items()]
    sets.append((f"random strings ({args.random}, seed 0)", random_strings(0, args.random)))
    bmp = [chr(c) for c in range(1, 0x10000) if not 0xD800 <= c <= 0xDFFF and chr(c) not in "\n\r\x0b\x0c\u2028\u2029"]
    sets.append((f"every BMP character in 'ab?cd' ({len(bmp)})", [f"ab{c}cd" for c in bmp]))
    sets.append((f"every BMP character alone ({len(bmp)})", bmp))
    totals = [0, 0, 0]
    for name, texts in sets:
        java, ours = java_lines(texts), ptb_lines(texts)
        raw, raw_diffs = agreement(texts, java, ours, raw=True)
        scored, diffs = agreement(texts, java, ours, raw=False)
        row = f"| {name} | {len(texts)} | {raw / len(texts):.2%} | {scored / len(texts):.2%} |"
        if old:
            before, _ = agreement(texts, java, old(texts), raw=False)
            row += f" {before / len(texts):.2%} |"
        rows.append(row)
        if name in corpus and name != "exotic":
            totals = [totals[0] + len(texts), totals[1] + raw, totals[2] + scored]
        notes += [f"- {name}: {d}" for d in (diffs or raw_diffs)]
    timing = []
    if old:
        captions = [text for name, texts in corpus.items() for text in texts]
        cost = speed(captions, {"python": ptb_lines, "before": old})
        timing = ["", f"Speed of the Python backend on the corpus captions (CPU time, one process, interleaved x3, "
                      f"medians): {cost['python']:.0f} us per caption, {cost['python'] / cost['before']:.1f}x the "
                      f"tokenizer before ({cost['before']:.0f} us); the Java backend adds a JVM start per call."]
    body = "\n".join([
        "Python re-implementation of the PTB lexer (`vlattn/text/ptb.py`) against `stanford-corenlp-3.4.1.jar`"
        f" (Java {subprocess.run(['java', '-version'], capture_output=True, text=True).stderr.split()[2]}), "
        "whole tokenizer output lines and the scored form (pycocoevalcap's split and punctuation removal):",
        "",
        *rows,
        "",
        f"Corpus classes except `exotic`: {totals[1]}/{totals[0]} raw lines and {totals[2]}/{totals[0]} scored "
        "captions equal. `exotic` holds the documented differences (docs/tokenization.md).",
        "",
        "Differences (first five per set):" if notes else "No differences outside `exotic`.",
        *notes,
        *timing,
    ])
    publish(HEADING, body, args)


if __name__ == "__main__":
    main()
