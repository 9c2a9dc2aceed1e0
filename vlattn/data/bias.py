"""Lexicons and ground truth for the bias metrics of :mod:`vlattn.metrics.bias` (CHAIR, A@Attr), per data set:

- the synthetic set (``vlattn data synth``): the generator's own words (:mod:`vlattn.data.synth.lexicon`: the shape
  nouns with their synonyms and plurals as objects, colour words as attributes, size words as modifiers,
  "object"/"shape"/"thing" as generic nouns) and ``scenes.json``, which lists every object of every image with its
  colour;
- real data (COCO): a synonym file in the format of CHAIR's ``synonyms.txt`` (Rohrbach et al.'s list of the 80 COCO
  objects and their synonyms; vlattn does not ship it — give its path), the basic colour terms as attributes, and the
  ground truth CHAIR uses: the objects (and colour-object pairs) the image's reference captions mention, plus the
  categories annotated in COCO instance files (``instances_<split>2014.json``) when given.

Which applies is ``eval.bias_lexicon``: ``auto`` (the synthetic one when the data root holds ``scenes.json``, none
otherwise), ``synthetic``, ``off``, or the path of a synonym file (relative to the data root);
``eval.bias_instances`` lists COCO instance files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from vlattn.data.synth.lexicon import COLOUR_OF_WORD, GENERIC_NOUNS, SHAPE_OF_WORD, SIZE_OF_WORD
from vlattn.errors import DataError
from vlattn.metrics.bias import Lexicon, Truth, read_caption, read_synonyms

SCENES_FILE = "scenes.json"
# The basic colour terms of English (Berlin and Kay), the attributes of real captions; "grey" is "gray".
BASIC_COLOURS: dict[str, str] = {c: c for c in ("black", "white", "red", "green", "yellow", "blue", "brown",
                                                "orange", "pink", "purple", "gray")} | {"grey": "gray"}


def synthetic_lexicon() -> Lexicon:
    """The synthetic generator's words."""
    return Lexicon({(word,): shape for word, shape in SHAPE_OF_WORD.items()}, dict(COLOUR_OF_WORD),
                   frozenset(SIZE_OF_WORD), GENERIC_NOUNS)


def scene_truth(path: str | Path) -> dict[int, Truth]:
    """{image id: Truth} from a synthetic set's ``scenes.json``: shapes and (colour, shape) pairs."""
    path = Path(path)
    try:
        images = json.loads(path.read_text())["images"]
        return {int(image["image_id"]): Truth(frozenset(o["shape"] for o in image["objects"]),
                                              frozenset((o["colour"], o["shape"]) for o in image["objects"]))
                for image in images}
    except FileNotFoundError:
        raise DataError("scenes file not found", path=path) from None
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise DataError(f"not a scenes file ({type(err).__name__}: {err})", path=path) from None


def reference_truth(references: Mapping[int, Sequence[str]], lexicon: Lexicon) -> dict[int, Truth]:
    """{image id: Truth}: the objects and attribute-object pairs the reference captions of each image mention."""
    truth = {}
    for image_id, captions in references.items():
        mentions = [read_caption(caption, lexicon) for caption in captions]
        truth[image_id] = Truth(frozenset(o for m in mentions for o in m.objects),
                                frozenset(pair for m in mentions for pair in m.attributes))
    return truth


def instance_objects(path: str | Path, lexicon: Lexicon) -> dict[int, set[str]]:
    """{image id: objects} of a COCO instances file, category names read through the lexicon (a name it lacks is
    its own object)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
        names = {int(c["id"]): c["name"].lower() for c in data["categories"]}
        objects: dict[int, set[str]] = {}
        for annotation in data["annotations"]:
            name = names[int(annotation["category_id"])]
            canonical = lexicon.objects.get(tuple(name.split()), name)
            objects.setdefault(int(annotation["image_id"]), set()).add(canonical)
        return objects
    except FileNotFoundError:
        raise DataError("instances file not found", path=path) from None
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise DataError(f"not a COCO instances file ({type(err).__name__}: {err})", path=path) from None


@dataclass(frozen=True)
class BiasSource:
    """The ``lexicon`` and per-image ``truth`` of a data set (``name`` says which)."""

    name: str
    lexicon: Lexicon
    truth: dict[int, Truth]


def bias_source(setting: str, instances: Sequence[str], root: str | Path,
                references: Mapping[int, Sequence[str]]) -> BiasSource | str:
    """The bias metrics' source for ``eval.bias_lexicon`` = ``setting`` (see the module docstring) over the images
    of ``references``, or the reason (a string) why there is none."""
    root = Path(root)
    scenes = root / SCENES_FILE
    if setting == "off":
        return "turned off (eval.bias_lexicon: off)"
    if setting == "synthetic" or (setting == "auto" and scenes.is_file()):
        return BiasSource("synthetic", synthetic_lexicon(), scene_truth(scenes))
    if setting == "auto":
        return (f"no lexicon: {scenes} is absent (not a synthetic set); set eval.bias_lexicon to a CHAIR synonym "
                "file for real data")
    lexicon = read_synonyms(root / setting, BASIC_COLOURS)
    truth = reference_truth(references, lexicon)
    for file in instances:
        for image_id, objects in instance_objects(root / file, lexicon).items():
            if image_id in truth:
                truth[image_id] = Truth(truth[image_id].objects | objects, truth[image_id].pairs)
    return BiasSource(f"synonyms {setting}", lexicon, truth)
