"""ART's `art.megatron.backend`: `MegatronBackend()` raises NotImplementedError saying why (see art_core)."""

from art_core import MegatronBackend

__all__ = ["MegatronBackend"]
