"""ART's `art.serverless` (training on W&B's hosted service): the name exists, constructing it says why not.

from art_core.serverless import ServerlessBackend   # ServerlessBackend() raises NotImplementedError
"""

from art_core import ServerlessBackend

__all__ = ["ServerlessBackend"]
