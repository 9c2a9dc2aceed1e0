"""Word tables holding any token: the released M2 vocabulary has whitespace tokens (``' '`` is entry 86), which a
one-word-per-line text cannot carry; ``import-checkpoint --vocab table.json`` takes a JSON list of the tokens in
index order (docs/m2-official.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from m2_released import random_released_state
from typer.testing import CliRunner

from vlattn.cli import app
from vlattn.data.vocab import Vocabulary, read_word_list
from vlattn.errors import DataError
from vlattn.training.checkpoint import load_checkpoint

# torchtext's specials first (as the released vocab.pkl), then words and six whitespace tokens among them
WORDS = ["<unk>", "<pad>", "<bos>", "<eos>", "a", "dog", " ", "runs", "\n", "\t", "  ", "\r\n", "\u00a0", "x y"] + [
    f"w{i}" for i in range(16)]


def test_json_table_carries_whitespace_tokens(tmp_path: Path) -> None:
    (tmp_path / "vocab.json").write_text(json.dumps(WORDS))
    assert read_word_list(tmp_path / "vocab.json") == WORDS


def test_text_export_of_such_a_table_is_refused_with_the_json_path(tmp_path: Path) -> None:
    """The export ``'\\n'.join(v.itos)`` splits ``'\\n'`` into two lines and leaves ``' '`` a line of its own."""
    (tmp_path / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    with pytest.raises(DataError, match=r"vocab\.txt: line 7: expected one word without spaces, got ' ' \(a table "
                                        r"holding whitespace tokens goes in a \.json list"):
        read_word_list(tmp_path / "vocab.txt")


@pytest.mark.parametrize(("content", "message"), [
    ('{"itos": []}', "expected a JSON list of the words in index order, got dict"),
    ('["<unk>", 3]', "item 'entry 1': expected a non-empty string, got 3"),
    ('["<unk>", ""]', "item 'entry 1': expected a non-empty string, got ''"),
    ("[]", "the word list is empty"),
    ('["<unk>", "a', "malformed JSON"),
])
def test_bad_json_tables(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "vocab.json").write_text(content)
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_word_list(tmp_path / "vocab.json")


def test_import_with_a_json_table_keeps_every_token_and_its_rows(tmp_path: Path) -> None:
    weights = random_released_state(vocab=len(WORDS))
    torch.save({"state_dict": weights}, tmp_path / "m2.pth")
    (tmp_path / "vocab.json").write_text(json.dumps(WORDS))
    result = CliRunner().invoke(app, ["import-checkpoint", str(tmp_path / "m2.pth"), "--format", "m2-official",
                                      "--vocab", str(tmp_path / "vocab.json"), "--out", str(tmp_path / "run"),
                                      "--heads", "4"])
    assert result.exit_code == 0, result.output
    vocab = Vocabulary.load(tmp_path / "run" / "vocab-words.json")
    assert vocab.itos[4:] == WORDS[4:] and vocab.stoi[" "] == 6
    checkpoint = load_checkpoint(tmp_path / "run")
    assert checkpoint.vocabulary("words", Vocabulary.load).itos == vocab.itos
    from safetensors.torch import load_file

    embedding = load_file(str(tmp_path / "run" / "checkpoints" / "best" / "model.safetensors"))["decoder.embed.weight"]
    for token in (" ", "\n", "x y"):  # the row of each whitespace token is the released row of that token
        torch.testing.assert_close(embedding[vocab.stoi[token]], weights["decoder.word_emb.weight"][WORDS.index(token)])
