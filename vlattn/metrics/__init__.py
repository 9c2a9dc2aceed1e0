"""Caption metrics with pycocoevalcap's interfaces and numbers, and the CIDEr-D reward for SCST.

``Bleu``, ``Rouge``, ``CiderD`` are pure numpy; ``Meteor`` and ``Spice`` bridge to pycocoevalcap's jars when
Java (and, for SPICE, the CoreNLP models) are present. ``evaluate_captions`` tokenises and scores in one call.
"""

from vlattn.metrics.bleu import Bleu
from vlattn.metrics.cider import CiderD
from vlattn.metrics.evaluate import CaptionReport, best_constant_caption, evaluate_captions
from vlattn.metrics.meteor import Meteor
from vlattn.metrics.reward import CiderDocumentFrequency, CiderReward
from vlattn.metrics.rouge import Rouge
from vlattn.metrics.spice import Spice
from vlattn.metrics.tokenizer import PTBTokenizer

__all__ = [
    "Bleu", "CaptionReport", "CiderD", "CiderDocumentFrequency", "CiderReward", "Meteor", "PTBTokenizer",
    "Rouge", "Spice", "best_constant_caption", "evaluate_captions",
]
