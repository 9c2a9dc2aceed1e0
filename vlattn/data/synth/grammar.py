"""Reference captions: five different true sentences per scene from a small randomised grammar.

Five templates say different things — how many objects there are, a list of them with attributes,
a spatial relation between two of them, counts per shape or colour, and where one object sits —
each with synonyms and more than one word order. Every statement is true of the scene: a noun
phrase with attributes names an existing object, a number word gives an exact count, and a relation
holds for the two objects' boxes (:mod:`.relations`).
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Sequence, TypeVar

import numpy as np

from .lexicon import COLOUR_WORDS, GENERIC_WORDS, NUMBER_WORDS, RELATION_WORDS, SHAPE_WORDS, SIZE_WORDS
from .relations import true_relations
from .scene import Scene, SceneObject

CAPTIONS_PER_IMAGE = 5
MAX_TRIES = 200
T = TypeVar("T")


def pick(rng: np.random.Generator, items: Sequence[T]) -> T:
    """One element of ``items``, uniformly."""
    return items[int(rng.integers(len(items)))]


def with_article(phrase: str) -> str:
    """``phrase`` preceded by "a" or "an"."""
    return f"{'an' if phrase[0] in 'aeiou' else 'a'} {phrase}"


def join_list(parts: Sequence[str]) -> str:
    """"x", "x and y", "x, y and z"."""
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def describe(rng: np.random.Generator, obj: SceneObject, size_p: float, colour_p: float) -> str:
    """Words for ``obj`` without a determiner: size (with prob. ``size_p``), colour, a shape synonym."""
    words = []
    if rng.random() < size_p:
        words.append(pick(rng, SIZE_WORDS[obj.size]))
    if rng.random() < colour_p:
        words.append(pick(rng, COLOUR_WORDS[obj.colour]))
    words.append(pick(rng, SHAPE_WORDS[obj.shape])[0])
    return " ".join(words)


def count_phrase(n: int, noun: tuple[str, str]) -> str:
    """"one object", "three shapes": an exact count with ``noun`` = (singular, plural)."""
    return f"{NUMBER_WORDS[n]} {noun[int(n != 1)]}"


def position_phrase(obj: SceneObject, image_size: int) -> str:
    """Where the object's centre lies in a 3 x 3 division of the image, e.g. "in the top left corner"."""
    cx, cy = (obj.box[0] + obj.box[2]) / 2, (obj.box[1] + obj.box[3]) / 2
    column = ("left", "centre", "right")[min(int(3 * cx / image_size), 2)]
    row = ("top", "middle", "bottom")[min(int(3 * cy / image_size), 2)]
    if column == "centre":
        return {"top": "at the top", "middle": "in the centre", "bottom": "at the bottom"}[row]
    if row == "middle":
        return f"on the {column}"
    return f"in the {row} {column} corner"


def count_caption(rng: np.random.Generator, scene: Scene) -> str:
    """How many objects there are."""
    n = len(scene.objects)
    counted = count_phrase(n, pick(rng, GENERIC_WORDS))
    forms = (f"{counted} in the picture", f"there {'is' if n == 1 else 'are'} {counted} in the image",
             f"an image with {counted}", f"{counted} on a plain background")
    return pick(rng, forms)


def listing_caption(rng: np.random.Generator, scene: Scene) -> str:
    """Up to three objects with their attributes, often from left to right."""
    objects = list(scene.objects)
    order = rng.permutation(len(objects))
    shown = [objects[i] for i in order[:3]]
    if rng.random() < 0.5:
        shown.sort(key=lambda o: o.box[0])
    listed = join_list([with_article(describe(rng, o, 0.6, 1.0)) for o in shown])
    if len(objects) > 3:
        return f"{count_phrase(len(objects), pick(rng, GENERIC_WORDS))} including {listed}"
    return pick(rng, ("", "there is ", "a picture of ")) + listed


def relation_caption(rng: np.random.Generator, scene: Scene) -> str | None:
    """A spatial relation that holds between two objects, in one of four word orders."""
    if len(scene.objects) < 2:
        return None
    i, j = rng.choice(len(scene.objects), size=2, replace=False)
    a, b = scene.objects[int(i)], scene.objects[int(j)]
    relation = pick(rng, true_relations(a.box, b.box, scene.next_to_gap))
    words = pick(rng, RELATION_WORDS[relation])
    subject, anchor = with_article(describe(rng, a, 0.4, 0.8)), with_article(describe(rng, b, 0.4, 0.8))
    forms = (f"{subject} {words} {anchor}", f"{subject} is {words} {anchor}",
             f"{words} {anchor} there is {subject}", f"{words} {anchor} is {subject}")
    return pick(rng, forms)


def group_caption(rng: np.random.Generator, scene: Scene) -> str:
    """Exact counts per shape or per colour, e.g. "two circles and one square"."""
    if rng.random() < 0.5:
        groups = Counter(o.shape for o in scene.objects)
        parts = [count_phrase(n, pick(rng, SHAPE_WORDS[shape])) for shape, n in groups.items()]
    else:
        groups = Counter(o.colour for o in scene.objects)
        parts = [f"{NUMBER_WORDS[n]} {pick(rng, COLOUR_WORDS[colour])} {pick(rng, GENERIC_WORDS)[int(n != 1)]}"
                 for colour, n in groups.items()]
    parts = [parts[k] for k in rng.permutation(len(parts))]
    return pick(rng, ("", "the image shows ")) + join_list(parts)


def salient_caption(rng: np.random.Generator, scene: Scene) -> str:
    """One object and where it is in the image."""
    obj = pick(rng, scene.objects)
    phrase, where = with_article(describe(rng, obj, 0.8, 1.0)), position_phrase(obj, scene.image_size)
    return pick(rng, (f"{phrase} {where}", f"{where} there is {phrase}"))


TEMPLATES: tuple[Callable[[np.random.Generator, Scene], str | None], ...] = (
    count_caption, listing_caption, relation_caption, group_caption, salient_caption,
)


def captions(scene: Scene, rng: np.random.Generator) -> list[str]:
    """Five distinct raw captions ("A red circle above a blue square."): one per template first, then
    random templates until five different sentences exist."""
    found: dict[str, None] = {}
    candidates = [template(rng, scene) for template in TEMPLATES]
    for _ in range(MAX_TRIES):
        found.update({c: None for c in candidates if c is not None})
        if len(found) >= CAPTIONS_PER_IMAGE:
            return [f"{c[0].upper()}{c[1:]}." for c in list(found)[:CAPTIONS_PER_IMAGE]]
        candidates = [pick(rng, TEMPLATES)(rng, scene)]
    raise RuntimeError(f"image {scene.image_id}: the grammar found fewer than {CAPTIONS_PER_IMAGE} distinct captions")
