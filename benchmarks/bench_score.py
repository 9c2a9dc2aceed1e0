"""`vlattn score` vs pycocoevalcap's COCOEvalCap on the same files: identical scores, time ratio.

Writes a COCO caption annotation file (5,000 images x 5 references; 250 with --quick) and a results file for 4,000
of them (captions from a small grammar with COCO-like punctuation, numbers and clitics) to a temporary directory,
then times, interleaved (A B A B ...), one torch/BLAS thread, both from the files to the scores:

* COCOEvalCap: ``COCO(ann)``, ``loadRes``, ``params["image_id"] = cocoRes.getImgIds()``, ``evaluate()``;
* vlattn: ``score_caption_files(results, ann, tokenizer="java")`` (what ``vlattn score`` runs).

Both run BLEU-1..4, METEOR (the same Java jar), ROUGE-L and CIDEr-D with the Java PTB tokenizer. SPICE cannot
run here (its CoreNLP models are not installed and downloads are impossible), so it is left out of both:
COCOEvalCap's is replaced by a no-op, vlattn reports it unavailable. Writes "## vlattn score vs COCOEvalCap".

    .venv/bin/python benchmarks/bench_score.py [--repeats 3] [--no-write]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from results import paired_ratio, parse_args, publish, sized  # noqa: E402

from vlattn.scoring import score_caption_files  # noqa: E402

HEADING = "vlattn score vs COCOEvalCap"
REFS = 5
SUBJECTS = ["man", "woman", "dog", "cat", "group of people", "giraffe", "train", "bus", "plate of food", "kid",
            "skateboarder", "young boy", "bathroom", "kitchen", "pizza", "tennis player", "clock tower", "zebra"]
ADJECTIVES = ["", "", "", "red", "large", "small", "black-and-white", "old-fashioned", "wooden", "2-door", "happy"]
VERBS = ["sitting on", "standing next to", "riding", "holding", "eating", "walking down", "parked near",
         "looking at", "playing with", "flying over", "is n't near", "can't reach"]
OBJECTS = ["the street", "a table", "the beach", "a field", "the kitchen counter", "a laptop", "the U.S. flag",
           "3 umbrellas", "a frisbee", "the man's bike", "a 747 jet", "the sink", "10:30 a.m. traffic", "a t.v."]


def caption(rng: random.Random) -> str:
    adjective = rng.choice(ADJECTIVES)
    words = [rng.choice(["A", "a", "The", "Two"]), adjective, rng.choice(SUBJECTS), rng.choice(VERBS),
             rng.choice(OBJECTS)]
    text = " ".join(w for w in words if w)
    if rng.random() < 0.3:
        text += rng.choice([", with ", "; near ", " and "]) + rng.choice(OBJECTS)
    return text + rng.choice([".", "", "", " .", "!"])


def write_files(root: Path, images: int, scored: int) -> tuple[Path, Path]:
    rng = random.Random(0)
    ids = rng.sample(range(1, 600000), images)
    images = [{"id": i, "file_name": f"COCO_val2014_{i:012d}.jpg"} for i in ids]
    annotations = [{"id": n, "image_id": i, "caption": caption(rng)}
                   for n, i in enumerate((i for i in ids for _ in range(REFS)), start=1)]
    ann = root / "captions_val2014.json"
    ann.write_text(json.dumps({"info": {}, "licenses": [], "type": "captions", "images": images,
                               "annotations": annotations}))
    results = root / "captions_val2014_bench_results.json"
    results.write_text(json.dumps([{"image_id": i, "caption": caption(rng)} for i in rng.sample(ids, scored)]))
    return ann, results


def coco_eval_cap(ann: Path, results: Path) -> tuple[dict, dict]:
    import pycocoevalcap.eval as coco_eval
    from pycocotools.coco import COCO

    class NoSpice:
        def compute_score(self, gts: dict, res: dict) -> tuple[float, list]:
            return float("nan"), []

        def method(self) -> str:
            return "SPICE (not run)"

    coco_eval.Spice = NoSpice  # type: ignore[attr-defined]
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO(str(ann))
        res = coco.loadRes(str(results))
        evaluator = coco_eval.COCOEvalCap(coco, res)
        evaluator.params["image_id"] = res.getImgIds()
        evaluator.evaluate()
    scores = {k: v for k, v in evaluator.eval.items() if k != "SPICE"}
    per_image = {i: {k: v for k, v in d.items() if k not in ("SPICE", "image_id")} for i, d in evaluator.imgToEval.items()}
    return scores, per_image


def ours(ann: Path, results: Path) -> tuple[dict, dict]:
    scored = score_caption_files(results, ann, tokenizer="java")
    per_image = {row.pop("image_id"): row for row in scored.per_image()}
    return dict(scored.report.scores), per_image


def main() -> None:
    args = parse_args(__doc__, repeats=3)
    images, scored = sized(args, 5000, 250), sized(args, 4000, 200)
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="vlattn-bench-score-"))
    try:
        ann, results = write_files(tmp, images, scored)
        theirs_t, ours_t = [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            theirs_scores, theirs_images = coco_eval_cap(ann, results)
            theirs_t.append(time.perf_counter() - start)
            start = time.perf_counter()
            our_scores, our_images = ours(ann, results)
            ours_t.append(time.perf_counter() - start)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert set(our_scores) == set(theirs_scores), (our_scores, theirs_scores)
    identical = all(our_scores[k] == theirs_scores[k] for k in theirs_scores)
    corpus_diff = max(abs(our_scores[k] - theirs_scores[k]) for k in theirs_scores)
    image_diff = max(abs(our_images[i][k] - theirs_images[i][k]) for i in theirs_images for k in theirs_scores)
    rows = "\n".join(f"| {k} | {theirs_scores[k]:.6f} | {our_scores[k]:.6f} |" for k in theirs_scores)
    median_theirs, median_ours = statistics.median(theirs_t), statistics.median(ours_t)
    body = (
        f"COCO caption annotation file of {images} images x {REFS} references and a results file for {scored} of "
        f"them (grammar-generated captions with punctuation, numbers, clitics), written to a temporary directory. "
        f"Both from the files to the scores with the Java PTB tokenizer, BLEU, METEOR, ROUGE-L, CIDEr-D "
        f"(SPICE cannot run here: its CoreNLP models are absent; left out of both). torch/BLAS 1 thread, "
        f"{args.repeats} interleaved rounds (COCOEvalCap, vlattn, ...), medians; {os.cpu_count()} CPUs, shared machine.\n\n"
        "| metric | COCOEvalCap | vlattn score |\n|---|---|---|\n"
        f"{rows}\n\n"
        f"Corpus scores bit-identical: **{identical}** (max corpus difference {corpus_diff:.1e}, max per-image difference "
        f"{image_diff:.1e} over {len(theirs_images)} images x {len(theirs_scores)} metrics).\n\n"
        f"| tool | median time (s) | all runs (s) |\n|---|---|---|\n"
        f"| COCOEvalCap | {median_theirs:.1f} | {', '.join(f'{t:.1f}' for t in theirs_t)} |\n"
        f"| vlattn score | {median_ours:.1f} | {', '.join(f'{t:.1f}' for t in ours_t)} |\n\n"
        f"Speed-up: **{median_theirs / median_ours:.2f}x** from the medians, {paired_ratio(theirs_t, ours_t):.2f}x "
        "median of the per-round ratios. Most of both times is the METEOR Java process (the same jar and protocol "
        "on both sides; ~20-30 s of it is loading its paraphrase table). vlattn starts that process first so its "
        "loading overlaps the tokenisation and the other metrics, tokenises references and results in one Java "
        "call instead of two, and computes BLEU, ROUGE-L and CIDEr-D in vectorised numpy."
    )
    publish(HEADING, body, args)


if __name__ == "__main__":
    main()
