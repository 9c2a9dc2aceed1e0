"""Model-independent decoding: greedy, batched beam search, multinomial sampling; opt-in wrappers that change
how a model's steps are computed, never what they return (:class:`PackedOutput`; ``active.ActiveImages``).

All functions drive a model only through ``encode``/``step``/``reorder`` and return tokens without BOS.
"""

from vlattn.decoding.beam import Beams, beam_search
from vlattn.decoding.packed import PackedOutput
from vlattn.decoding.sampling import Samples, forced_decode, greedy_decode, sample

__all__ = ["Beams", "PackedOutput", "Samples", "beam_search", "forced_decode", "greedy_decode", "sample"]
