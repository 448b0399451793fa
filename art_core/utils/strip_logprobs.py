"""ART's `art.utils.strip_logprobs`: a copy of a nested structure without its `logprobs` (ART's notebooks pass it
to weave as `global_postprocess_output`, so traces do not carry every token's logprob)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def strip_logprobs(obj: Any) -> Any:
    """`obj` with every `logprobs` key removed, at any depth; pydantic models (a Choice) become dicts.
    The input is left as it was.

        >>> strip_logprobs({"choices": [{"text": "hi", "logprobs": {"content": []}}]})
        {'choices': [{'text': 'hi'}]}
    """
    if isinstance(obj, BaseModel):
        obj = obj.model_dump()
    if isinstance(obj, dict):
        return {k: strip_logprobs(v) for k, v in obj.items() if k != "logprobs"}
    if isinstance(obj, (list, tuple)):
        return type(obj)(strip_logprobs(v) for v in obj)
    return obj


__all__ = ["strip_logprobs"]
