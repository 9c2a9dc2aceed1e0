"""Fine-tuning from a pretraining run: what the ``vqa`` and ``nlvr2`` stages take from a checkpoint of the
``pretraining`` task (:mod:`vlattn.tasks.pretraining`) given as ``--init``: the encoder's weights (every parameter
of the fine-tuning model but its classifier ``head``, which the task sizes for its own answers and initialises
anew, as the released code's ``--loadLXMERT``) and its WordPiece vocabulary ``words``. The fine-tuning config's
``model`` section must describe the pretrained encoder (a missing tensor or another shape is a one-line error naming
the weights file)."""

from __future__ import annotations

from torch import nn

from vlattn.training.checkpoint import Checkpoint, load_weights_from

PRETRAINING = "pretraining"  # the task whose checkpoints the fine-tuning stages accept as --init


def load_pretrained(model: nn.Module, source: Checkpoint) -> None:
    """Every parameter of ``model`` but its classifier ``head`` from the pretrained ``backbone`` of ``source``."""
    load_weights_from(model, source, "backbone.", fresh=("head.",))


INIT_FROM = {PRETRAINING: load_pretrained}  # a fine-tuning Stage's init_from
