"""Writers of the generated data set, each into the layout real data comes in (see :func:`generate`)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

from vlattn.data import vqa
from vlattn.data.features import write_memmap
from vlattn.data.jsonfiles import write_json
from vlattn.data.karpathy import SPLITS, ImageEntry, write_coco_captions, write_karpathy
from vlattn.text import tokenize
from vlattn.io import atomic_write_text, state_sha256

from .confound import Confound, cooccurrence
from .cooccur import cooccurrence_statistics
from .evidence import evidence_statistics
from .extractor import WEIGHTS_FILE, save_extractor
from .featurize import Featurized
from .pairs import gqa_record, nlvr2_records, wordpiece_entries
from .sample import Sample

IMAGE_DIR = "images"


def image_filename(image_id: int) -> str:
    """File name of an image under ``images/``."""
    return f"synth_{image_id:06d}.png"


def question_id(image_id: int, index: int) -> int:
    """VQA question id: the image id times 10 plus the question's index (< 10) in the image."""
    return image_id * 10 + index


def write_images(root: Path, samples: Sequence[Sample]) -> None:
    """PNG files ``root/images/synth_<id>.png``."""
    (root / IMAGE_DIR).mkdir(parents=True, exist_ok=True)
    for sample in samples:
        Image.fromarray(sample.pixels).save(root / IMAGE_DIR / image_filename(sample.scene.image_id))


def write_captions(root: Path, samples: Sequence[Sample]) -> None:
    """``dataset.json`` (Karpathy layout) and ``captions_{val,test}.json`` (COCO annotation layout)."""
    entries = [
        ImageEntry(
            image_id=s.scene.image_id,
            split=s.scene.split,
            filename=image_filename(s.scene.image_id),
            captions=[tokenize(c) for c in s.captions],
            raw=list(s.captions),
            filepath=IMAGE_DIR,
        )
        for s in samples
    ]
    write_karpathy(root / "dataset.json", entries)
    for split in ("val", "test"):
        chosen = [e for e in entries if e.split == split]
        refs, filenames = {e.image_id: e.raw for e in chosen}, {e.image_id: e.filename for e in chosen}
        write_coco_captions(root / f"captions_{split}.json", refs, filenames)


def write_scenes(root: Path, samples: Sequence[Sample], info: dict) -> None:
    """``scenes.json``: generation options and, per image, the objects and the detection regions
    (each region's ``object`` is the index of the object it covers, or null for background)."""
    images = [
        {
            "image_id": s.scene.image_id,
            "split": s.scene.split,
            "filename": image_filename(s.scene.image_id),
            "width": s.scene.image_size,
            "height": s.scene.image_size,
            "objects": [o.to_json() for o in s.scene.objects],
            "regions": s.detections.to_json(),
        }
        for s in samples
    ]
    write_json(root / "scenes.json", {"info": info, "images": images})


def write_vqa(root: Path, samples: Sequence[Sample]) -> None:
    """``vqa/questions_<split>.json`` and ``vqa/annotations_<split>.json`` in the VQA v2 layout
    (a correct annotator answer has confidence "yes", a mistaken one "maybe")."""
    for split in SPLITS:
        questions, annotations = [], []
        for s in (s for s in samples if s.scene.split == split):
            image_id = s.scene.image_id
            for k, (question, answers) in enumerate(zip(s.questions, s.answers)):
                qid = question_id(image_id, k)
                questions.append(vqa.Question(qid, image_id, question.question))
                confidences = ["yes" if a == question.answer else "maybe" for a in answers]
                annotations.append(vqa.Annotation(qid, image_id, question.question_type, question.answer_type,
                                                  question.answer, answers, confidences))
        vqa.write_questions(root / "vqa" / f"questions_{split}.json", questions, data_subtype=split)
        vqa.write_annotations(root / "vqa" / f"annotations_{split}.json", annotations, data_subtype=split)


def write_features(root: Path, samples: Sequence[Sample], featurized: Featurized) -> None:
    """The extractor's weights (``extractor.safetensors``), the memmap stores ``features/`` (detection regions)
    and, with a grid, ``grid_features/``, each recording the extractor (:mod:`vlattn.data.features.record`;
    the weights' path relative to the store).

    The grid store's record is the ``synth`` pixel extractor's (:mod:`vlattn.pixels`), which reproduces it from the
    rendered images; the detection store's names ``synth-detections``: its boxes come from the scene's simulated
    detector, which no extractor can run on pixels."""
    size = samples[0].scene.image_size
    save_extractor(featurized.model, root / WEIGHTS_FILE, size)
    weights = {"source": "file", "path": f"../{WEIGHTS_FILE}", "sha256": state_sha256(featurized.model.state_dict())}
    dim = featurized.report["feature_dim"]
    ids = [s.scene.image_id for s in samples]
    detections = {"name": "synth-detections", "dim": dim, "weights": weights, "settings": {"image_size": size}}
    write_memmap(root / "features", zip(ids, featurized.regions), extractor=detections)
    if featurized.grid is not None:
        grid = {"name": "synth", "dim": dim, "weights": weights,
                "settings": {"grid": featurized.cells, "image_size": size}}
        write_memmap(root / "grid_features", zip(ids, featurized.grid), extractor=grid)


def write_confound(root: Path, samples: Sequence[Sample], confound: Confound) -> None:
    """``confound.json``: the options and the realised statistics per split: attribute co-occurrence
    (``statistics``), object co-occurrence (``cooccurrence``) and weak evidence (``evidence``: ambiguous objects,
    missed detections)."""
    objects = ((s.scene.split, o.to_json()) for s in samples for o in s.scene.objects)
    shapes = ((s.scene.split, {o.shape for o in s.scene.objects}) for s in samples)
    seen = ((s.scene.split, [o.to_json() for o in s.scene.objects], set(s.detections.objects)) for s in samples)
    write_json(root / "confound.json", {
        **confound.to_json(), "statistics": cooccurrence(objects, confound),
        "cooccurrence": cooccurrence_statistics(shapes, confound.cooccur),
        "evidence": evidence_statistics(seen, [b for _, b in confound.cooccur]),
    })


def write_gqa(root: Path, samples: Sequence[Sample]) -> None:
    """``gqa/<split>_balanced_questions.json`` in GQA's layout (:mod:`.pairs`); question ids as the VQA files'."""
    for split in SPLITS:
        records = {
            str(question_id(s.scene.image_id, k)): gqa_record(s.scene.image_id, question)
            for s in samples if s.scene.split == split for k, question in enumerate(s.questions)
        }
        write_json(root / "gqa" / f"{split}_balanced_questions.json", records)


def write_nlvr2(root: Path, samples: Sequence[Sample], seed: int) -> list[str]:
    """``nlvr2/<split>.json`` in LXMERT's NLVR2 layout (:mod:`.pairs`); returns the statements."""
    rng = np.random.default_rng([seed, 2])
    sentences = []
    for split in SPLITS:
        records = nlvr2_records(split, [s.scene for s in samples if s.scene.split == split], rng)
        write_json(root / "nlvr2" / f"{split}.json", records)
        sentences += [r["sent"] for r in records]
    return sentences


def write_wordpiece_vocab(root: Path, samples: Sequence[Sample], statements: Sequence[str]) -> None:
    """``vocab.txt``: a BERT WordPiece vocabulary of every synthetic question, statement and caption."""
    texts = [q.question for s in samples for q in s.questions] + [c for s in samples for c in s.captions]
    atomic_write_text(root / "vocab.txt", "\n".join(wordpiece_entries([*texts, *statements])) + "\n")
