"""The closed world of the synthetic scenes: attribute inventories and the words that name them.

Every word the caption grammar and the VQA generator can say about an object comes from here, and
the reverse maps (``SHAPE_OF_WORD`` ...) let tests and metrics read a caption back into attributes.
"""

from __future__ import annotations

SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "diamond", "star", "cross")
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 225),
    "yellow": (240, 220, 40),
    "purple": (145, 55, 200),
    "orange": (250, 140, 20),
    "white": (245, 245, 245),
    "black": (20, 20, 20),
}
SIZES: tuple[str, ...] = ("small", "large")

# (singular, plural) synonyms; the first entry is the canonical word used in VQA questions and answers.
SHAPE_WORDS: dict[str, tuple[tuple[str, str], ...]] = {
    "circle": (("circle", "circles"), ("disk", "disks")),
    "square": (("square", "squares"), ("box", "boxes"), ("block", "blocks")),
    "triangle": (("triangle", "triangles"),),
    "diamond": (("diamond", "diamonds"), ("rhombus", "rhombuses")),
    "star": (("star", "stars"),),
    "cross": (("cross", "crosses"), ("plus", "pluses")),
}
COLOUR_WORDS: dict[str, tuple[str, ...]] = {name: (name,) for name in COLOURS} | {"purple": ("purple", "violet")}
SIZE_WORDS: dict[str, tuple[str, ...]] = {"small": ("small", "little", "tiny"), "large": ("large", "big")}
GENERIC_WORDS: tuple[tuple[str, str], ...] = (("object", "objects"), ("shape", "shapes"), ("thing", "things"))
NUMBER_WORDS: tuple[str, ...] = ("zero", "one", "two", "three", "four", "five")

# Spatial relations between two boxes (see :mod:`.relations`) and the phrases that express them.
RELATION_WORDS: dict[str, tuple[str, ...]] = {
    "left of": ("to the left of", "left of"),
    "right of": ("to the right of", "right of"),
    "above": ("above", "over"),
    "below": ("below", "under", "beneath"),
    "next to": ("next to", "beside"),
}

SHAPE_OF_WORD: dict[str, str] = {w: s for s, pairs in SHAPE_WORDS.items() for pair in pairs for w in pair}
COLOUR_OF_WORD: dict[str, str] = {w: c for c, words in COLOUR_WORDS.items() for w in words}
SIZE_OF_WORD: dict[str, str] = {w: s for s, words in SIZE_WORDS.items() for w in words}
GENERIC_NOUNS: frozenset[str] = frozenset(w for pair in GENERIC_WORDS for w in pair)
