"""`vlattn import-checkpoint --format lxmert-hf`: a model written by Hugging Face transformers
(``LxmertForQuestionAnswering.save_pretrained``: config.json + model.safetensors), built here randomly initialised,
imports as a vlattn VQA run whose logits equal transformers' on the same batches and whose `vlattn eval` answers
are transformers' top answers; the released code's parameter names (``module.lxrt_encoder.model.bert.*``,
``logit_fc.*`` in a .pth) import to the same model; bad sources are one-line errors naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import LxmertConfig, LxmertForQuestionAnswering
from typer.testing import CliRunner

import vlattn
from vlattn.cli import app
from vlattn.config import load_config
from vlattn.data.vqa import collate_vqa, load_questions
from vlattn.errors import DataError
from vlattn.importers import import_checkpoint
from vlattn.tasks.vqa import checkpoint_vocabularies, load_model, load_vqa_data
from vlattn.training.checkpoint import load_checkpoint
from tests.training.conftest import DIM, make_tiny_vqa_data

runner = CliRunner()
ENTRIES = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "what", "color", "is", "the", "object", "?", "shape", "it", "red",
           "made", "of", "##s"] + [f"[unused{i}]" for i in range(14)]
ANSWERS = ["red", "green", "blue", "yes", "no", "circle", "square", "paper"]


def reference_model(seed: int = 0) -> LxmertForQuestionAnswering:
    torch.manual_seed(seed)
    config = LxmertConfig(
        vocab_size=len(ENTRIES), hidden_size=32, num_attention_heads=4, intermediate_size=48, l_layers=2, r_layers=1,
        x_layers=2, visual_feat_dim=DIM, max_position_embeddings=24, num_qa_labels=len(ANSWERS),
        id2label=dict(enumerate(ANSWERS)), label2id={a: i for i, a in enumerate(ANSWERS)},
    )
    return LxmertForQuestionAnswering(config).eval()


@pytest.fixture(scope="module")
def tiny_vqa(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_vqa_data(tmp_path_factory.mktemp("vqa"), images=12)


def hf_directory(path: Path, model: LxmertForQuestionAnswering) -> Path:
    model.save_pretrained(path)
    (path / "vocab.txt").write_text("\n".join(ENTRIES) + "\n", encoding="utf-8")
    return path


def assert_answers_like(reference: LxmertForQuestionAnswering, run: Path, data_root: Path) -> tuple[torch.Tensor, dict]:
    """The imported run's logits on the val questions equal the reference's on the same batch."""
    checkpoint = load_checkpoint(run)
    checkpoint.config.data.root = str(data_root)
    words, answers = checkpoint_vocabularies(checkpoint)
    assert answers.itos == ANSWERS
    data = load_vqa_data(checkpoint.config.data, words, answers)
    model = load_model(checkpoint, words, answers, data.store.dim, torch.device("cpu"))
    dataset = data.dataset("val")
    batch = collate_vqa([dataset[i] for i in range(len(dataset))])
    assert (batch["questions"][:, 0] == ENTRIES.index("[CLS]")).all()
    with torch.no_grad():
        expected = reference(input_ids=batch["questions"], attention_mask=batch["question_mask"].float(),
                             visual_feats=batch["features"], visual_pos=batch["boxes"],
                             visual_attention_mask=batch["region_mask"].float()).question_answering_score
        torch.testing.assert_close(model(batch), expected, atol=1e-5, rtol=0)
    return expected, batch


def test_transformers_directory_imports_and_answers_identically(tmp_path: Path, tiny_vqa: Path) -> None:
    reference = reference_model()
    source = hf_directory(tmp_path / "lxmert-vqa", reference)
    run = tmp_path / "imported"
    result = runner.invoke(app, ["import-checkpoint", str(source), "--format", "lxmert-hf", "--out", str(run),
                                 "--config", str(tmp_path / "absent.yaml")])
    assert "absent.yaml: config file not found" in str(result.exception)  # named, nothing written
    assert not run.exists()
    result = runner.invoke(app, ["import-checkpoint", str(source), "--format", "lxmert-hf", "--out", str(run)])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["tensors"] == len(reference.state_dict()) and record["dropped_runtime_buffers"] == []
    assert set(record["checkpoint_sha256"]) == {"config.json", "model.safetensors", "vocab.txt"}
    expected, batch = assert_answers_like(reference, run, tiny_vqa)

    result = runner.invoke(app, ["eval", "--checkpoint", str(run), "--split", "val", "--data", str(tiny_vqa),
                                 "--device", "cpu"])
    assert result.exit_code == 0, result.output
    results = next((run / "eval").glob("vqa_OpenEnded_*_results.json"))
    answered = {row["question_id"]: row["answer"] for row in json.loads(results.read_text())}
    best = {int(q): ANSWERS[int(i)] for q, i in zip(batch["question_ids"], expected.argmax(1))}
    assert answered == best

    # the Python front door answers the same (a question of the val split, its image read from the store)
    answerer = vlattn.load(run, device="cpu")
    assert answerer.reads_boxes  # LXMERT embeds every region's box
    qid = int(batch["question_ids"][0])
    question = next(q for q in load_questions(tiny_vqa / "vqa" / "questions_val.json") if q.question_id == qid)
    top = answerer.answer(question.question, store=tiny_vqa / "features", ids=[question.image_id], top=1)
    assert top[0][0].answer == best[qid]


def test_released_parameter_names_import_to_the_same_model(tmp_path: Path, tiny_vqa: Path) -> None:
    """The released fine-tuned VQA model's names (DataParallel's ``module.``, ``lxrt_encoder.model.bert.``,
    ``logit_fc.``), a pretraining head beside them, no config.json: the answers from --answers, heads from
    --heads."""
    reference = reference_model(seed=3)
    released = {}
    for name, tensor in reference.state_dict().items():
        name = name.replace("lxmert.", "lxrt_encoder.model.bert.", 1).replace("answer_head.logit_fc.", "logit_fc.", 1)
        released[f"module.{name}"] = tensor
    released["module.obj_predict_head.decoder_dict.obj.bias"] = torch.zeros(3)
    source = tmp_path / "released"
    source.mkdir()
    torch.save(released, source / "BEST.pth")
    (source / "vocab.txt").write_text("\n".join(ENTRIES) + "\n", encoding="utf-8")
    (tmp_path / "label2ans.json").write_text(json.dumps(ANSWERS))
    run = tmp_path / "imported"
    record = import_checkpoint("lxmert-hf", source / "BEST.pth", None, run, heads=4,
                               answers=tmp_path / "label2ans.json")
    assert record["dropped_runtime_buffers"] == ["module.obj_predict_head.decoder_dict.obj.bias"]
    assert_answers_like(reference, run, tiny_vqa)


def test_bad_sources_are_named(tmp_path: Path) -> None:
    reference = reference_model()
    source = hf_directory(tmp_path / "hf", reference)
    with pytest.raises(DataError, match=r"label2ans.json.*3 answers for a head of 8"):
        (tmp_path / "label2ans.json").write_text(json.dumps(ANSWERS[:3]))
        import_checkpoint("lxmert-hf", source, None, tmp_path / "a", answers=tmp_path / "label2ans.json")
    short = tmp_path / "short.txt"
    short.write_text("\n".join(ENTRIES[:-1]) + "\n")
    with pytest.raises(DataError, match=r"short.txt.*29 WordPiece entries for a word table of 30 rows"):
        import_checkpoint("lxmert-hf", source, short, tmp_path / "b")
    encoder_only = tmp_path / "encoder"
    encoder_only.mkdir()
    torch.save({k: v for k, v in reference.state_dict().items() if k.startswith("lxmert.")}, encoder_only / "x.bin")
    with pytest.raises(DataError, match=r"x.bin.*no answer classifier"):
        import_checkpoint("lxmert-hf", encoder_only / "x.bin", source / "vocab.txt", tmp_path / "c")
    unnamed = tmp_path / "unnamed"
    unnamed.mkdir()
    torch.save(reference.state_dict(), unnamed / "pytorch_model.bin")
    with pytest.raises(DataError, match=r"names no answers; give --answers"):
        import_checkpoint("lxmert-hf", unnamed, source / "vocab.txt", tmp_path / "d", heads=4)
    with pytest.raises(DataError, match=r"empty.*no model.safetensors or pytorch_model.bin"):
        (tmp_path / "empty").mkdir()
        import_checkpoint("lxmert-hf", tmp_path / "empty", None, tmp_path / "e")
    assert not any((tmp_path / name).exists() for name in "abcde")


@pytest.mark.parametrize("preset", ["vqa-lxmert-catt", "vqa-lw-lxmert"])
def test_variants_load_the_fitting_weights_and_initialise_the_rest(tmp_path: Path, tiny_vqa: Path, preset: str) -> None:
    """``--config`` an LXMERT variant: its kind, sites and options with the checkpoint's sizes; every tensor whose
    name and shape fit is loaded (the rest listed in import.json). LXMERT+CATT's in-sample stream is then the
    released LXMERT itself: its half of the language output equals the plain import's output."""
    reference = reference_model()
    source = hf_directory(tmp_path / "hf", reference)
    plain_record = import_checkpoint("lxmert-hf", source, None, tmp_path / "plain")
    assert "initialised" not in plain_record  # the plain import is strict
    record = import_checkpoint("lxmert-hf", source, None, tmp_path / "variant", base=load_config(preset))
    variant, plain = load_checkpoint(tmp_path / "variant"), load_checkpoint(tmp_path / "plain")
    assert (variant.config.model.d_model, variant.config.model.encoder_layers) == (32, 2)  # the checkpoint's sizes
    words, answers = checkpoint_vocabularies(plain)
    models = {name: load_model(c, words, answers, DIM, torch.device("cpu")) for name, c in
              (("variant", variant), ("plain", plain))}
    state, own = models["plain"].state_dict(), models["variant"].state_dict()
    loaded = {name for name in own if name in state and own[name].shape == state[name].shape}
    assert record["loaded"] == len(loaded) and record["initialised"] == sorted(set(own) - loaded)
    assert all(torch.equal(own[name], state[name]) for name in loaded)
    if preset == "vqa-lxmert-catt":
        assert variant.config.model.kind == "lxmert_catt"
        options = variant.config.model.options
        assert options["image_dictionary"]["init"] == options["word_dictionary"]["init"] == "random"
        assert record["initialised"] == ["encoder.image_dictionary.entries", "encoder.pooler.weight",
                                         "encoder.word_dictionary.entries"]
        assert record["not_loaded"] == ["encoder.pooler.weight (32, 32)"]
        entries = own["encoder.image_dictionary.entries"]
        assert entries.shape == (500, DIM) and 0 <= entries.min() and entries.max() < 0.01  # U(0, 0.01)
        x = {"questions": torch.tensor([[2, 4, 5, 6, 3]]), "question_mask": torch.ones(1, 5, dtype=torch.bool),
             "features": torch.randn(1, 4, DIM), "boxes": torch.rand(1, 4, 4), "region_mask": torch.ones(1, 4, dtype=torch.bool)}
        with torch.no_grad():
            torch.testing.assert_close(models["variant"].encode(x).language[..., :32], models["plain"].encode(x).language)
    else:
        assert variant.config.model.encoder_self_attention.name == "gmha"
        grouped = ("q_proj", "k_proj", "v_proj", "ffn.fc2")
        assert record["initialised"] == sorted(n for n in own if any(f"{g}." in n for g in grouped))
        assert any(".ffn.fc1." in n for n in loaded) and any(".out_proj." in n for n in loaded)
