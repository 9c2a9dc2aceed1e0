"""The test decoding of the synthetic comparison drivers: ``--beam-size auto`` (default: each run's beam size chosen
on validation CIDEr-D among its config's ``eval.beam_candidates``, as `vlattn eval --beam-size auto` does) or a
fixed ``K`` (1 = greedy), and whether a stored evaluation report was decoded that way (a report decoded otherwise is
evaluated again, without retraining)."""

from __future__ import annotations

import argparse

from vlattn.tasks.beam_choice import BeamChoice


def add_beam_option(parser: argparse.ArgumentParser) -> None:
    """``--beam-size auto|K`` on ``parser`` (dest ``beam_size``: the string ``auto`` or an int >= 1)."""
    parser.add_argument("--beam-size", type=beam_size, default="auto", metavar="auto|K",
                        help="test decoding: auto (default: chosen on validation per run) or a fixed beam K (1 = greedy)")


def beam_size(text: str) -> str | int:
    """``auto`` or a whole number >= 1 (argparse type)."""
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected auto or a whole number >= 1, got {text!r}")
    return int(text)


def decoded_as(report: dict, beam: str | int) -> bool:
    """Whether the `vlattn eval --json` ``report`` decoded as ``beam`` asks: auto = a beam size chosen on validation
    (the report carries the choice), K = beam K without a choice."""
    if beam == "auto":
        return "beam_choice" in report
    return report.get("beam_size") == beam and "beam_choice" not in report


def beam_of(report: dict) -> str:
    """The beam size a report decoded with (``?`` for a report that does not say)."""
    return str(report.get("beam_size", "?"))


def chosen(report: dict) -> str:
    """One line on the report's decoding: ``beam 1 chosen on val CIDEr (beam 1 0.8123, beam 2 0.7011; after
    training)`` or ``beam 3 (fixed)``."""
    if "beam_choice" not in report:
        return f"beam {beam_of(report)} (fixed)"
    return BeamChoice.from_dict(report["beam_choice"]).describe()


def decoding_text(beam: str | int) -> str:
    """How the table's runs were decoded, for its section text."""
    if beam == "auto":
        return "the beam chosen per run on val CIDEr-D among eval.beam_candidates (column \"beam\")"
    return "greedy decoding (fixed)" if beam == 1 else f"beam {beam} (fixed)"
