"""Building blocks shared by the model stacks: feed-forward, positions, residual + LayerNorm."""

from vlattn.layers.feedforward import FeedForward
from vlattn.layers.positional import SinusoidalPositions, sinusoidal_positions
from vlattn.layers.sublayer import PostNorm

__all__ = ["FeedForward", "PostNorm", "SinusoidalPositions", "sinusoidal_positions"]
