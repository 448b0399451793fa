"""ART's error names.

`LocalServingUnavailableError`: the local inference server could not start, died, does not answer its health
check, or refused an admin call (loading a step's adapter). It is `art_core.inference.ServerError` under ART's
name, so either name catches it; the message carries the tail of the server's log.

    import art_core as art
    try:
        await model.register(art.LocalBackend())
    except art.LocalServingUnavailableError as e:
        print("vLLM did not come up:", e)
"""

from __future__ import annotations

from art_core.inference.server import ServerError

LocalServingUnavailableError = ServerError

__all__ = ["LocalServingUnavailableError"]
