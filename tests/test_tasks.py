"""The task protocol is enough for a second task: a toy classification task (the colour of the object in the
tiny data set, BCE on soft scores, accuracy as validator and selection metric, an ``answers`` vocabulary),
registered from outside the library, trains, checkpoints and evaluates through the unchanged trainer and
``vlattn train``/``vlattn eval``; configs name their task and model kinds the task they serve."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import nn
from torch.utils.data import Dataset
from typer.testing import CliRunner

from vlattn.cli import app
from vlattn.config import Config, config_to_dict
from vlattn.validation import valid_config
from vlattn.data.captioning import collate_regions
from vlattn.data.features import open_store
from vlattn.data.karpathy import load_karpathy
from vlattn.data.regions import first_regions
from vlattn.data.vqa_answers import AnswerVocabulary
from vlattn.errors import ConfigError
from vlattn.models import MODELS, ModelKind
from vlattn.tasks import TASKS, EvalRequest, ProfileShapes, output_dir, stage_of, task_of
from vlattn.tasks.captioning import CAPTIONING
from vlattn.training.checkpoint import Checkpoint, load_weights
from vlattn.data.resources import PrepareResources
from vlattn.training.stage import Stage
from tests.training.conftest import COLOURS, DIM, make_tiny_data, tiny_config

runner = CliRunner()


class ColourProbe(nn.Module):
    """Mean of the real regions -> linear scores over the answers."""

    def __init__(self, feature_dim: int, answers: int) -> None:
        super().__init__()
        self.classifier = nn.Linear(feature_dim, answers)

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        mask = inputs["region_mask"][..., None].float()  # (B, N, 1)
        pooled = (inputs["features"] * mask).sum(1) / mask.sum(1)  # (B, D)
        return self.classifier(pooled)  # (B, A)


class ColourSet(Dataset):
    def __init__(self, root: Path, split: str, answers: AnswerVocabulary) -> None:
        self.store = open_store(root / "features")
        entries = [e for e in load_karpathy(root / "dataset.json") if e.split == split]
        self.items = [(e.image_id, answers.index(e.captions[0][1])) for e in entries]  # "a <colour> <shape>"

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        image_id, label = self.items[index]
        return {"image_id": image_id, "regions": first_regions(self.store, image_id, 4), "label": label}


def collate(batch: list[dict[str, Any]]) -> dict[str, Any]:
    return {**collate_regions(batch), "labels": torch.tensor([item["label"] for item in batch])}


class ColourData:
    def __init__(self, cfg: Config, answers: AnswerVocabulary) -> None:
        self.root, self.answers = Path(cfg.data.root), answers

    @property
    def vocabularies(self) -> dict[str, AnswerVocabulary]:
        return {"answers": self.answers}

    def prepare_resources(self, model: nn.Module, seed: int) -> PrepareResources:
        return PrepareResources(seed=seed)


def predict(model: nn.Module, dataset: ColourSet) -> dict[int, int]:
    batch = collate([dataset[i] for i in range(len(dataset))])
    with torch.no_grad():
        return dict(zip(batch["image_ids"].tolist(), model(batch).argmax(-1).tolist()))


def accuracy(predictions: dict[int, int], dataset: ColourSet) -> float:
    return sum(predictions[i] == label for i, label in dataset.items) / len(dataset.items)


def bce_objective(cfg: Config, data: ColourData, device: torch.device):
    def objective(model: nn.Module, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
        logits = model(batch)
        targets = F.one_hot(batch["labels"], logits.shape[-1]).float()  # soft scores, here all 0/1
        return F.binary_cross_entropy_with_logits(logits, targets), {}

    return objective


def validator(cfg: Config, data: ColourData, device: torch.device):
    val = ColourSet(data.root, "val", data.answers)
    return lambda model: {"accuracy": accuracy(predict(model, val), val)}


TRAIN: Stage[ColourData] = Stage(
    name="train",
    summary="BCE on soft answer scores",
    load_data=lambda cfg, source: ColourData(
        cfg, AnswerVocabulary(COLOURS) if source is None else source.vocabulary("answers", AnswerVocabulary.load)),
    build_model=lambda cfg, data: MODELS[cfg.model.kind].build(cfg.model, len(data.answers)),
    objective=bce_objective,
    train_set=lambda cfg, data: ColourSet(data.root, "train", data.answers),
    collate=collate,
    validator=validator,
    selection_metric="accuracy",
)


class Colours:
    name = "colours"
    stages = {"train": TRAIN}
    reads = frozenset()  # beside what its stage reads

    def check(self, cfg: Config) -> None:
        if cfg.model.feature_dim != DIM:
            raise ConfigError(f"model.feature_dim: the colour probe reads {DIM}-d features")

    def evaluate(self, checkpoint: Checkpoint, request: EvalRequest) -> dict[str, Any]:
        answers = checkpoint.vocabulary("answers", AnswerVocabulary.load)
        model = load_weights(MODELS[checkpoint.config.model.kind].build(checkpoint.config.model, len(answers)), checkpoint)
        split = request.split or "val"
        dataset = ColourSet(Path(checkpoint.config.data.root), split, answers)
        predictions = predict(model.eval(), dataset)
        out = output_dir(checkpoint) / f"{split}_answers.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps([{"image_id": i, "answer": answers.itos[a]} for i, a in predictions.items()]))
        return {"split": split, "accuracy": accuracy(predictions, dataset), "answers": str(out)}

    def format_report(self, report: dict[str, Any]) -> str:
        return f"{report['split']}: accuracy {report['accuracy']:.3f}"

    def profile(self, cfg: Config, shapes: ProfileShapes) -> dict[str, Any]:
        raise NotImplementedError


@pytest.fixture
def colours(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "colours", Colours())
    monkeypatch.setitem(MODELS, "colour-probe", ModelKind("colours", lambda cfg, answers: ColourProbe(cfg.feature_dim, answers),
                                                          reads=frozenset({"kind", "feature_dim"})))


def colour_config(root: Path) -> dict[str, Any]:
    return {
        "task": "colours",
        "model": {"kind": "colour-probe", "feature_dim": DIM},
        "data": {"root": str(root)},
        "train": {"epochs": 4, "batch_size": 4, "log_every": 1, "schedule": {"name": "constant", "options": {"lr": 0.05}}},
    }


def test_a_second_task_trains_and_evaluates_through_the_generic_cli(colours: None, tmp_path: Path) -> None:
    data = make_tiny_data(tmp_path / "data")
    config = tmp_path / "colours.yaml"
    config.write_text(yaml.safe_dump(colour_config(data)))
    run = tmp_path / "run"
    result = runner.invoke(app, ["train", "--config", str(config), "--out", str(run), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["task"], summary["stage"]) == ("colours", "train")
    checkpoint = run / "checkpoints" / "best"
    assert {"vocab-answers.json", "model.safetensors"} <= {p.name for p in checkpoint.iterdir()}
    assert not (checkpoint / "vocab-words.json").exists()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    val = [r["accuracy"] for r in records if r["kind"] == "val"]
    assert len(val) == 4 and summary["last_val"]["accuracy"] == val[-1]

    result = runner.invoke(app, ["eval", "--checkpoint", str(run), "--split", "test", "--json", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["task"] == "colours" and report["split"] == "test"
    # the report's accuracy is that of the written answers against the colour words of the test captions
    written = {row["image_id"]: row["answer"] for row in json.loads(Path(report["answers"]).read_text())}
    truth = {e.image_id: e.captions[0][1] for e in load_karpathy(data / "dataset.json") if e.split == "test"}
    assert report["accuracy"] == sum(written[i] == colour for i, colour in truth.items()) / len(truth)
    assert report["accuracy"] == 1.0  # region 0 one-hot encodes the colour: a linear probe learns it

    # --resume continues the same stage; captioning commands refuse the checkpoint in one line
    result = runner.invoke(app, ["train", "--config", str(config), "--out", str(run), "--resume", "--device", "cpu",
                                 "--set", "train.epochs=5"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["caption", "--checkpoint", str(run), "--features", str(data / "features")])
    assert result.exit_code != 0 and "a colours checkpoint; captioning needs a captioning model" in str(result.exception)
    # nor does a captioning run start from its weights
    captioning = tmp_path / "captioning.yaml"
    captioning.write_text(yaml.safe_dump(config_to_dict(tiny_config(data))))
    result = runner.invoke(app, ["train", "--config", str(captioning), "--out", str(tmp_path / "c"), "--init", str(run)])
    assert isinstance(result.exception, ConfigError)
    assert str(result.exception) == f"--init {run}: a colours checkpoint, but the config's task is 'captioning'"


def test_stage_names_are_checked_against_the_task(colours: None) -> None:
    assert stage_of(task_of("colours"), None) is TRAIN
    assert stage_of(CAPTIONING, None).name == "xe"
    with pytest.raises(ConfigError, match=r"^--stage: task 'colours' has no stage 'xe'; valid: train \(BCE on soft "
                                          r"answer scores\)$"):
        stage_of(task_of("colours"), "xe")
    with pytest.raises(ConfigError, match=r"^--stage: task 'captioning' has no stage 'train'; valid: xe \(cross-entropy "
                                          r"with teacher forcing\); scst \(self-critical"):
        stage_of(CAPTIONING, "train")


def test_config_task_and_model_kind_must_agree(colours: None, tmp_path: Path) -> None:
    assert valid_config(colour_config(tmp_path)).task == "colours"
    with pytest.raises(ConfigError, match=r"^task: unknown task 'ocr'; valid names: captioning, colours, nlvr2, vqa$"):
        valid_config({"task": "ocr"})
    with pytest.raises(ConfigError, match=r"^model\.kind: 'transformer' is a captioning model, but the config's "
                                          r"task is 'colours' \(its kinds: colour-probe\)$"):
        valid_config({**colour_config(tmp_path), "model": {"kind": "transformer"}})
    with pytest.raises(ConfigError, match=r"^model\.kind: 'colour-probe' is a colours model, but the config's task "
                                          r"is 'captioning'"):
        valid_config({"model": {"kind": "colour-probe"}})
    with pytest.raises(ConfigError, match="model.feature_dim: the colour probe reads 16-d features"):
        valid_config({**colour_config(tmp_path), "model": {"kind": "colour-probe", "feature_dim": 8}})


def test_every_registered_stage_names_existing_config_keys() -> None:
    cfg = config_to_dict(Config())
    for task in TASKS.values():
        for stage in task.stages.values():
            for key in (stage.schedule, stage.epochs, stage.batch_size):
                section, name = key.split(".")
                assert name in cfg[section], (task.name, stage.name, key)


def test_every_model_kind_serves_a_registered_task() -> None:
    assert {entry.task for entry in MODELS.values()} <= set(TASKS)
