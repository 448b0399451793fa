"""ART's `art.serverless.backend`: `ServerlessBackend()` raises NotImplementedError saying why (see art_core)."""

from art_core import ServerlessBackend

__all__ = ["ServerlessBackend"]
