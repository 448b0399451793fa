"""ART's `art.megatron` (multi-GPU Megatron training): the name exists, constructing it says why not."""

from art_core import MegatronBackend

__all__ = ["MegatronBackend"]
