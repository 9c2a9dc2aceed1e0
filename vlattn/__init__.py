"""vlattn: attention mechanisms for vision-language models behind one Q-K-V interface."""

__version__ = "0.1.0"
