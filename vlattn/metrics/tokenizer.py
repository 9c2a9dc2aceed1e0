"""PTB tokenisation of captions before scoring, as the COCO caption evaluation code does it.

Two interchangeable backends:

- ``"java"``: the Stanford PTBTokenizer from the ``stanford-corenlp-3.4.1.jar`` bundled with pycocoevalcap,
  run once per call with ``-preserveLines -lowerCase`` over one caption per line;
- ``"python"``: :func:`vlattn.text.ptb_lines`, a re-implementation of that lexer (no Java needed). It
  agrees with the jar token for token except on exotic Unicode listed in ``docs/tokenization.md``;
- ``"auto"``: Java when both ``java`` and the jar are present, else Python.

Both backends read the characters the Stanford tokenizer treats as line breaks (``\r``, ``\x0b``, ``\x0c``,
``\u2028``, ``\u2029``) as spaces — pycocoevalcap only replaces ``\n``, so a caption holding one of them
shifts every later caption onto the wrong image there — and then post-process each output line as
pycocoevalcap does (split on ``" "``, COCO punctuation removed).
"""

from __future__ import annotations

import subprocess
import unicodedata
from typing import Any, Hashable, Iterable, Mapping, Sequence, TypeVar

from vlattn.text import finish_line, one_line, ptb_lines
from vlattn.metrics._java import find_jar

K = TypeVar("K", bound=Hashable)
BACKENDS = ("auto", "python", "java")
_JAR = ("tokenizer", "stanford-corenlp-3.4.1.jar")


# Where the Python backend can differ from the jar (docs/tokenization.md), as reports state it.
PYTHON_DIFFERENCES = (
    "equal to the jar token for token except: a Greek capital sigma lower-cased at the end of a word (σ/ς), "
    "and letters/digits assigned after Unicode 14.0 when Python's tables are newer (docs/tokenization.md)"
)
_TESTED_UNICODE = (14, 0, 0)


def python_may_differ(text: str) -> bool:
    """Whether the Python backend can tokenise ``text`` differently from the jar (see :data:`PYTHON_DIFFERENCES`)."""
    if "\u03a3" in text:
        return True
    if tuple(int(part) for part in unicodedata.unidata_version.split(".")) <= _TESTED_UNICODE:
        return False
    return any(0x7F < ord(ch) <= 0xFFFF and unicodedata.category(ch)[0] in "LMN" for ch in text)


def java_tokenizer_jar() -> tuple[str | None, str]:
    """``(jar path, "")`` when the Java tokenizer can run, else ``(None, reason)``."""
    jar, reason = find_jar(*_JAR)
    return (str(jar) if jar else None), reason


class PTBTokenizer:
    """``tokenize({image_id: [caption, ...]}) -> {image_id: [tokenised caption, ...]}`` (pycocoevalcap's layout).

    Captions may be strings or pycocoevalcap's ``{"caption": str}`` dicts. Tokens are joined by single spaces.
    """

    def __init__(self, backend: str = "auto") -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown tokenizer backend {backend!r}; valid: {', '.join(BACKENDS)}")
        jar, reason = java_tokenizer_jar()
        if backend == "java" and jar is None:
            raise RuntimeError(f"Java PTB tokenizer unavailable: {reason}")
        self.jar = jar if backend in ("auto", "java") else None
        self.backend = "java" if self.jar else "python"

    def tokenize(self, captions_for_image: Mapping[K, Sequence[str | Mapping[str, str]]]) -> dict[K, list[str]]:
        """Tokenise every caption, keeping the image ids and the order of captions."""
        keys = [k for k, caps in captions_for_image.items() for _ in caps]
        texts = [c["caption"] if isinstance(c, Mapping) else c for caps in captions_for_image.values() for c in caps]
        lines = self._java(texts) if self.jar else ptb_lines(texts)
        out: dict[K, list[str]] = {k: [] for k in captions_for_image}
        for key, line in zip(keys, lines):
            out[key].append(" ".join(finish_line(line)))
        return out

    def describe(self, texts: Iterable[str]) -> dict[str, Any]:
        """What reports record about the tokenisation of ``texts``: the backend and, for Python, how many
        captions hold text on which it can differ from the jar."""
        if self.backend == "java":
            return {"backend": "java", "jar": _JAR[-1]}
        return {"backend": "python", "differences": PYTHON_DIFFERENCES,
                "captions_that_may_differ": sum(python_may_differ(text) for text in texts)}

    def _java(self, texts: list[str]) -> list[str]:
        """The jar's output lines for all captions at once (one line per caption; line breaks read as spaces)."""
        if not texts:
            return []
        cmd = ["java", "-cp", str(self.jar), "edu.stanford.nlp.process.PTBTokenizer",
               "-preserveLines", "-lowerCase", "-encoding", "utf-8"]
        text = "".join(one_line(t) + "\n" for t in texts)
        proc = subprocess.run(cmd, input=text.encode("utf-8"), capture_output=True)
        if proc.returncode != 0:
            detail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no message"]
            raise RuntimeError(f"Java PTB tokenizer failed (exit {proc.returncode}): {detail[0]}")
        lines = proc.stdout.decode("utf-8").split("\n")
        if len(lines) != len(texts) + 1 or lines[-1]:  # one line per caption, then the final newline
            raise RuntimeError(f"Java PTB tokenizer returned {len(lines) - 1} lines for {len(texts)} captions")
        return lines[:-1]
