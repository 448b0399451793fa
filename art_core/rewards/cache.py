"""A cache of RULER judge replies under the storage root, so re-running a step never pays twice.

A reply is stored at `{root}/_cache/ruler/{sha256}.json`, where the hash covers the judge model, the
rubric, the exact messages sent, the reply schema and the sampling parameters. The judge's address
and key are not part of it: the same judge moved to another port still hits, and no secret is hashed
or written. Works on any Storage root (a local folder or s3://).

    >>> cache = JudgeCache(Storage("/tmp/art"))
    >>> key = cache.key("openai/o4-mini", "be fair", [{"role": "user", "content": "..."}], {}, {})
    >>> cache.get(key) is None
    True
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Any

from art_core.storage import Storage

log = logging.getLogger(__name__)

CACHE_VERSION = 1
# litellm parameters that choose where and how the request travels, not what the judge answers.
_TRANSPORT_PARAMS = frozenset(
    {
        "api_base",
        "base_url",
        "api_key",
        "api_version",
        "timeout",
        "num_retries",
        "max_retries",
        "extra_headers",
        "organization",
    }
)


def answer_params(extra_litellm_params: dict[str, Any] | None) -> dict[str, Any]:
    """The parameters that can change the judge's answer (temperature, max_tokens, seed, ...)."""
    return {k: v for k, v in sorted((extra_litellm_params or {}).items()) if k not in _TRANSPORT_PARAMS}


class JudgeCache:
    """Judge replies stored as JSON files under `{storage.root}/_cache/ruler/`."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def key(
        self,
        judge_model: str,
        rubric: str,
        messages: list[dict[str, Any]],
        schema: dict[str, Any],
        extra_litellm_params: dict[str, Any] | None,
    ) -> str:
        material = {
            "version": CACHE_VERSION,
            "judge_model": judge_model,
            "rubric": rubric,
            "messages": messages,
            "schema": schema,
            "params": answer_params(extra_litellm_params),
        }
        blob = json.dumps(material, sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def path(self, key: str) -> str:
        return self.storage.join("_cache", "ruler", f"{key}.json")

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored record, or None. An unreadable record counts as a miss (and is rewritten later)."""
        path = self.path(key)
        try:
            if not self.storage.exists(path):
                return None
            record = self.storage.read_json(path)
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable RULER cache entry %s: %s", path, exc)
            return None
        return record if isinstance(record, dict) and "scores" in record else None

    def put(self, key: str, judge_model: str, scores: dict[str, dict[str, Any]], usage: dict[str, Any]) -> None:
        """Store a validated reply: scores by trajectory id, and what the call cost when it was paid."""
        record = {"judge_model": judge_model, "scores": scores, "usage": usage, "created": time.time()}
        self.storage.write_json(self.path(key), record)
