"""PTB tokenisation of captions before scoring, as the COCO caption evaluation code does it.

Two interchangeable backends:

- ``"python"``: :func:`vlattn.data.text.tokenize` (no Java; agrees with the Java path on caption text);
- ``"java"``: the Stanford PTBTokenizer from the ``stanford-corenlp-3.4.1.jar`` bundled with pycocoevalcap,
  run once per call with ``-preserveLines -lowerCase``, then the COCO punctuation list removed;
- ``"auto"``: Java when both ``java`` and the jar are present, else Python.
"""

from __future__ import annotations

import subprocess
from typing import Hashable, Mapping, Sequence, TypeVar

from vlattn.data.text import PTB_PUNCTUATION, tokenize
from vlattn.metrics._java import find_jar

K = TypeVar("K", bound=Hashable)
BACKENDS = ("auto", "python", "java")
_JAR = ("tokenizer", "stanford-corenlp-3.4.1.jar")


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
        lines = self._java(texts) if self.jar else [" ".join(tokenize(t)) for t in texts]
        out: dict[K, list[str]] = {k: [] for k in captions_for_image}
        for key, line in zip(keys, lines):
            out[key].append(line)
        return out

    def _java(self, texts: list[str]) -> list[str]:
        """Run the Stanford tokenizer on all captions at once (one line per caption)."""
        cmd = ["java", "-cp", str(self.jar), "edu.stanford.nlp.process.PTBTokenizer",
               "-preserveLines", "-lowerCase", "-encoding", "utf-8"]
        text = "".join(t.replace("\n", " ").replace("\r", " ") + "\n" for t in texts)
        proc = subprocess.run(cmd, input=text.encode("utf-8"), capture_output=True, check=True)
        lines = proc.stdout.decode("utf-8").split("\n")[: len(texts)]
        if len(lines) != len(texts):
            raise RuntimeError(f"Java PTB tokenizer returned {len(lines)} lines for {len(texts)} captions")
        return [" ".join(w for w in line.split() if w not in PTB_PUNCTUATION) for line in lines]
