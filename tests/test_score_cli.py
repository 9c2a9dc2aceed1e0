"""`vlattn score`: caption results vs pycocoevalcap's COCOEvalCap on the same files, Karpathy references,
files written by `vlattn eval`, VQA results with hand-computed accuracies, and the id checks."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.metrics.corpora import CAPTIONS
from vlattn.cli import app
from vlattn.errors import ConfigError, DataError
from vlattn.tasks.captioning import write_predictions
from vlattn.metrics.tokenizer import java_tokenizer_jar
from vlattn.scoring import write_vqa_results

runner = CliRunner()
FAST = "BLEU,ROUGE_L,CIDEr"  # METEOR's Java start-up costs ~20 s; its numbers are tested in test_java_bridges
needs_java = pytest.mark.skipif(java_tokenizer_jar()[0] is None, reason="Java PTB tokenizer unavailable")

IMAGE_IDS = [391895, 522418, 184613, 318219, 554625, 397133, 37777, 252219, 87038, 174482]


def references() -> dict[int, list[str]]:
    rng = random.Random(0)
    texts = [c for c in CAPTIONS if c]
    return {image_id: rng.sample(texts, 5) for image_id in IMAGE_IDS}


def predictions(ids: list[int]) -> dict[int, str]:
    rng = random.Random(1)
    texts = [c for c in CAPTIONS if c]
    return {image_id: rng.choice(texts) for image_id in ids}


def write_coco(path: Path, refs: dict[int, list[str]]) -> Path:
    images = [{"id": i, "file_name": f"COCO_val2014_{i:012d}.jpg", "width": 640, "height": 480} for i in refs]
    annotations = [{"id": n, "image_id": i, "caption": c}
                   for n, (i, c) in enumerate(((i, c) for i, cs in refs.items() for c in cs), start=1)]
    path.write_text(json.dumps({"info": {}, "licenses": [], "type": "captions", "images": images,
                                "annotations": annotations}))
    return path


def write_results(path: Path, rows: list[dict]) -> Path:
    path.write_text(json.dumps(rows))
    return path


def invoke(*args: str) -> tuple[dict, object]:
    result = runner.invoke(app, ["score", *args, "--json"])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result


def coco_eval_cap(annotations: Path, results: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, dict]:
    """pycocoevalcap's COCOEvalCap on the files, METEOR/SPICE stubbed out (their Java is slow/absent here)."""
    import pycocoevalcap.eval as coco_eval
    from pycocotools.coco import COCO

    class Skipped:
        def compute_score(self, gts: dict, res: dict) -> tuple[float, list[float]]:
            return 0.0, [0.0] * len(gts)

        def method(self) -> str:
            return "skipped"

    monkeypatch.setattr(coco_eval, "Meteor", Skipped)
    monkeypatch.setattr(coco_eval, "Spice", Skipped)
    coco = COCO(str(annotations))
    coco_results = coco.loadRes(str(results))
    evaluator = coco_eval.COCOEvalCap(coco, coco_results)
    evaluator.params["image_id"] = coco_results.getImgIds()  # pycocoevalcap's usage for a subset of images
    evaluator.evaluate()
    return evaluator.eval, evaluator.imgToEval


@needs_java
def test_captions_equal_coco_eval_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    annotations = write_coco(tmp_path / "captions_val2014.json", references())
    subset = IMAGE_IDS[::-1][:7]  # results cover part of the annotation file, in another order
    results = write_results(tmp_path / "captions_val2014_mine_results.json",
                            [{"image_id": i, "caption": c} for i, c in predictions(subset).items()])
    ours, _ = invoke("--results", str(results), "--annotations", str(annotations), "--metrics", FAST,
                     "--per-image", str(tmp_path / "per_image.json"))
    theirs, theirs_per_image = coco_eval_cap(annotations, results, monkeypatch)
    assert ours["images"] == 7 and ours["tokenizer"] == "java" and ours["reference_format"] == "coco"
    assert set(ours["scores"]) == {"Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "ROUGE_L", "CIDEr"}
    for name, value in ours["scores"].items():
        assert value == pytest.approx(theirs[name], rel=1e-12, abs=1e-15), name
    rows = json.loads((tmp_path / "per_image.json").read_text())
    assert [r["image_id"] for r in rows] == [i for i in IMAGE_IDS if i in subset]  # COCOEvalCap's order
    for row in rows:
        for name in ours["scores"]:
            assert row[name] == pytest.approx(theirs_per_image[row["image_id"]][name], rel=1e-12, abs=1e-15)


@needs_java
def test_python_tokenizer_gives_the_same_scores_here(tmp_path: Path) -> None:
    annotations = write_coco(tmp_path / "refs.json", references())
    results = write_results(tmp_path / "r.json", [{"image_id": i, "caption": c} for i, c in predictions(IMAGE_IDS).items()])
    java, _ = invoke("--results", str(results), "--annotations", str(annotations), "--metrics", FAST)
    python, _ = invoke("--results", str(results), "--annotations", str(annotations), "--metrics", FAST,
                       "--tokenizer", "python")
    assert python["tokenizer"] == "python" and python["scores"] == pytest.approx(java["scores"], rel=1e-12)


def test_karpathy_references_and_eval_output(tmp_path: Path) -> None:
    refs = references()
    images = [{"cocoid": i, "filename": f"{i}.jpg", "split": "test" if n < 6 else "restval",
               "sentences": [{"raw": c, "tokens": c.lower().split()} for c in captions]}
              for n, (i, captions) in enumerate(refs.items())]
    karpathy = tmp_path / "dataset_coco.json"
    karpathy.write_text(json.dumps({"images": images, "dataset": "coco"}))
    test_ids = IMAGE_IDS[:6]
    results = tmp_path / "eval" / "test_predictions.json"
    write_predictions(results, predictions(test_ids))  # exactly what `vlattn eval` writes
    coco = write_coco(tmp_path / "captions.json", {i: refs[i] for i in test_ids})
    args = ("--results", str(results), "--metrics", FAST, "--tokenizer", "python")
    from_karpathy, _ = invoke(*args, "--annotations", str(karpathy), "--split", "test")
    from_coco, _ = invoke(*args, "--annotations", str(coco))
    assert from_karpathy["reference_format"] == "karpathy" and from_karpathy["images"] == 6
    assert from_karpathy["scores"] == from_coco["scores"]
    partial = write_results(tmp_path / "p.json", [{"image_id": i, "caption": "a dog"} for i in test_ids[1:]])
    with pytest.raises(DataError, match=rf"1 image ids of .*dataset_coco.json have no result: \[{test_ids[0]}\]"):
        invoke("--results", str(partial), "--annotations", str(karpathy), "--split", "test", "--tokenizer", "python")
    with pytest.raises(ConfigError, match="--split applies to Karpathy"):
        invoke(*args, "--annotations", str(coco), "--split", "test")


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"image_id": 391895, "caption": "a"}, {"image_id": 37777, "caption": "b"}, {"image_id": 391895, "caption": "c"}],
         r"1 image ids appear more than once: \[391895\]"),
        ([{"image_id": 391895, "caption": "a"}, {"image_id": 5, "caption": "b"}, {"image_id": 3, "caption": "b"}],
         r"2 image ids are not in .*captions_val2014.json: \[3, 5\]"),
        ([{"image_id": "391895", "caption": "a"}], r"results\[0\].*'image_id' should be int, got str"),
        ([{"image_id": 391895}], r"results\[0\] \(image 391895\).*missing key 'caption'"),
        ({"image_id": 1}, "results must be a JSON list"),
    ],
)  # fmt: skip
def test_caption_results_refused_with_ids_named(tmp_path: Path, rows: object, message: str) -> None:
    annotations = write_coco(tmp_path / "captions_val2014.json", references())
    results = write_results(tmp_path / "r.json", rows)  # type: ignore[arg-type]
    with pytest.raises(DataError, match=message) as err:
        invoke("--results", str(results), "--annotations", str(annotations), "--tokenizer", "python")
    assert "r.json" in str(err.value)


def test_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    annotations = write_coco(tmp_path / "captions_val2014.json", references())
    results = write_results(tmp_path / "r.json", [{"image_id": 12, "caption": "a cat"}])
    proc = subprocess.run([sys.executable, "-m", "vlattn.cli", "score", "--results", str(results), "--annotations",
                           str(annotations), "--tokenizer", "python"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "1 image ids are not in" in proc.stderr and "[12]" in proc.stderr


# -- VQA -----------------------------------------------------------------------------------------------------

ANNOTATIONS = [  # (question id, image id, question type, answer type, the ten human answers)
    (1, 10, "is the", "yes/no", ["yes"] * 10),
    (2, 10, "how many", "number", ["2"] * 2 + ["3"] * 8),
    (3, 11, "what color is the", "other", ["red"] * 3 + ["dark red"] * 7),
    (4, 11, "is the", "yes/no", ["no"] * 9 + ["yes"]),
]


def write_vqa(tmp_path: Path) -> tuple[Path, Path]:
    questions = [{"image_id": image, "question": "Is it?", "question_id": qid} for qid, image, *_ in ANNOTATIONS]
    annotations = [{"question_id": qid, "image_id": image, "question_type": qtype, "answer_type": atype,
                    "multiple_choice_answer": answers[0],
                    "answers": [{"answer": a, "answer_confidence": "yes", "answer_id": k + 1}
                                for k, a in enumerate(answers)]}
                   for qid, image, qtype, atype, answers in ANNOTATIONS]
    (tmp_path / "q.json").write_text(json.dumps({"questions": questions}))
    (tmp_path / "a.json").write_text(json.dumps({"annotations": annotations}))
    return tmp_path / "q.json", tmp_path / "a.json"


def test_vqa_scores_hand_computed(tmp_path: Path) -> None:
    questions, annotations = write_vqa(tmp_path)
    results = tmp_path / "vqa_OpenEnded_mscoco_val2014_mine_results.json"
    write_vqa_results(results, {1: "Yes", 2: "two", 3: "Red.", 4: "no"})
    summary, _ = invoke("--task", "vqa", "--results", str(results), "--questions", str(questions), "--annotations",
                        str(annotations), "--per-image", str(tmp_path / "per_q.json"))
    # q1: humans identical, "Yes" != "yes" -> 0. q2: "two" -> "2", 2 humans: (2 x 1/3 + 8 x 2/3) / 10 = 0.6.
    # q3: "Red." -> "red", 3 humans: (3 x 2/3 + 7 x 1) / 10 = 0.9. q4: 9 humans -> 1.
    assert summary["questions"] == 4
    assert summary["overall"] == round(100 * (0 + 0.6 + 0.9 + 1) / 4, 2) == 62.5
    assert summary["perAnswerType"] == {"number": 60.0, "other": 90.0, "yes/no": 50.0}
    assert summary["perQuestionType"] == {"how many": 60.0, "is the": 50.0, "what color is the": 90.0}
    rows = json.loads((tmp_path / "per_q.json").read_text())
    assert [(r["question_id"], r["normalized"]) for r in rows] == [(1, "yes"), (2, "2"), (3, "red"), (4, "no")]
    assert [r["accuracy"] for r in rows] == pytest.approx([0.0, 0.6, 0.9, 1.0])
    text = runner.invoke(app, ["score", "--task", "vqa", "--results", str(results), "--annotations", str(annotations)])
    assert "overall  62.50" in text.stdout and "yes/no" in text.stdout


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"question_id": q, "answer": "yes"} for q in (1, 2, 3, 4, 2)], r"1 question ids appear more than once: \[2\]"),
        ([{"question_id": q, "answer": "yes"} for q in (1, 2, 3, 4, 9)], r"1 question ids are not in .*a.json: \[9\]"),
        ([{"question_id": q, "answer": "yes"} for q in (1, 3)], r"2 question ids of .*a.json have no result: \[2, 4\]"),
        ([{"question_id": 1, "answer": 2}], r"results\[0\] \(question 1\).*'answer' should be str, got int"),
    ],
)  # fmt: skip
def test_vqa_results_refused_with_ids_named(tmp_path: Path, rows: list[dict], message: str) -> None:
    _, annotations = write_vqa(tmp_path)
    results = write_results(tmp_path / "r.json", rows)
    with pytest.raises(DataError, match=message):
        invoke("--task", "vqa", "--results", str(results), "--annotations", str(annotations))


def test_vqa_questions_file_must_match(tmp_path: Path) -> None:
    questions, annotations = write_vqa(tmp_path)
    data = json.loads(questions.read_text())
    data["questions"][3]["image_id"] = 99
    questions.write_text(json.dumps(data))
    results = tmp_path / "r.json"
    write_vqa_results(results, {q: "yes" for q, *_ in ANNOTATIONS})
    with pytest.raises(DataError, match=r"item 'question 4': image 99 here but 11 in the annotations"):
        invoke("--task", "vqa", "--results", str(results), "--annotations", str(annotations), "--questions",
               str(questions))
    with pytest.raises(ConfigError, match="apply to captions"):
        invoke("--task", "vqa", "--results", str(results), "--annotations", str(annotations), "--metrics", "BLEU")


@pytest.mark.parametrize("target", ["annotations", "results", "other file", "link"])
def test_per_image_never_replaces_an_existing_file(target: str, tmp_path: Path, vlattn_cli) -> None:
    """``--per-image`` writes a new file only: its own inputs, any other file and a link are left as they are,
    with a one-line error before anything is scored."""
    from tests.test_bad_input import one_line

    questions, annotations = write_vqa(tmp_path)
    results = tmp_path / "results.json"
    write_vqa_results(results, {1: "Yes", 2: "two", 3: "Red.", 4: "no"})
    (tmp_path / "victim.txt").write_text("mine")
    (tmp_path / "link.json").symlink_to(tmp_path / "victim.txt")
    path = {"annotations": annotations, "results": results, "other file": tmp_path / "victim.txt",
            "link": tmp_path / "link.json"}[target]
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    code, out, err = vlattn_cli("score", "--task", "vqa", "--results", str(results), "--questions", str(questions),
                                "--annotations", str(annotations), "--per-image", str(path))
    assert code == 2 and one_line(err) and f"{path}: --per-image: exists; vlattn does not replace it" in err, err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before and (tmp_path / "link.json").is_symlink()
