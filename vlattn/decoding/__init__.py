"""Model-independent decoding: greedy, batched beam search, multinomial sampling.

All functions drive a model only through ``encode``/``step``/``reorder`` and return tokens without BOS.
"""

from vlattn.decoding.beam import Beams, beam_search
from vlattn.decoding.sampling import Samples, greedy_decode, sample

__all__ = ["Beams", "Samples", "beam_search", "greedy_decode", "sample"]
