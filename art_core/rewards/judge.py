"""One RULER judge call over litellm: a strict JSON-schema reply, checked, retried, rate-limited.

The reply schema is built per call with one required entry per trajectory id sent, so a server that
enforces JSON schemas (vLLM, OpenAI strict mode) cannot answer with missing, extra or misnamed ids.
Whatever comes back is still checked here. A malformed or mismatched reply, a timeout, a dropped
connection, a 429 or a 5xx is retried with exponential backoff a bounded number of times, then
`JudgeError` is raised: a failure is never turned into a score. `ask_judge` is the one cache-and-call
block every judge goes through (RULER's ranking, tau2's assertions): the stored reply when these exact
inputs were asked before, else `call_judge` and store the reply.

    reply, usage = await call_judge(messages, judge_model="openai/o4-mini",
                                    response_model=reply_model(["trajectory_1", "trajectory_2"]))
    reply, usage = await ask_judge(resolve_judge(config), messages, response_model, instructions=rubric)
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import weakref
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from art_core.rewards.accounting import JudgeUsage, import_litellm, usage_of
from art_core.rewards.cache import JudgeCache
from art_core.rewards.config import ResolvedJudge
from art_core.storage import Storage

log = logging.getLogger(__name__)


class JudgeError(RuntimeError):
    """The judge gave no usable reply after every allowed attempt (or refused the request outright).

    `usage` holds what the failed attempts cost (replies that could not be used were still paid for).
    """

    def __init__(self, message: str, usage: JudgeUsage | None = None) -> None:
        super().__init__(message)
        self.usage = usage or JudgeUsage()


class MalformedReply(ValueError):
    """A reply that arrived but cannot be used: not JSON, wrong ids or count, score out of range, cut off."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def reply_model(ids: list[str], explanation_max_chars: int | None = None) -> type[BaseModel]:
    """The pydantic reply model: {id: {"explanation": str, "score": 0..1}} with exactly these ids.

    explanation_max_chars becomes the schema's maxLength. vLLM enforces it, which keeps a weak judge
    from writing until max_tokens runs out; leave it None for providers whose strict mode rejects it.
    """
    if not ids or len(set(ids)) != len(ids):
        raise ValueError(f"judge ids must be distinct and non-empty, got {ids!r}")
    explanation = Field(max_length=explanation_max_chars) if explanation_max_chars else Field()
    entry = create_model(
        "JudgedTrajectory",
        __base__=_Strict,
        explanation=(str, explanation),  # first, so the judge reasons before it scores
        score=(float, Field(ge=0.0, le=1.0)),
    )
    return create_model("RulerScores", __base__=_Strict, **{i: (entry, ...) for i in ids})


def parse_reply(
    content: str | None, response_model: type[BaseModel], finish_reason: str | None = None
) -> dict[str, dict[str, Any]]:
    """Validate a reply's text against the ids sent; returns {id: {"explanation", "score"}}."""
    if finish_reason == "length":
        raise MalformedReply("the judge's reply was cut off by max_tokens; raise max_tokens in extra_litellm_params")
    if not content or not content.strip():
        raise MalformedReply("the judge replied with no content")
    text = content.strip()
    if text.startswith("```"):  # some providers fence JSON even when asked for a schema
        text = text.strip("`").removeprefix("json").strip()
    try:
        # strict=False: control characters inside strings (a grammar-constrained small model emits
        # them) are harmless in an explanation and not worth a retry.
        data = json.loads(text, strict=False)
    except json.JSONDecodeError as exc:
        raise MalformedReply(f"the judge's reply is not JSON ({exc}): {text[:200]!r}") from None
    try:
        reply = response_model.model_validate(data)
    except ValidationError as exc:
        expected = list(response_model.model_fields)
        got = list(data) if isinstance(data, dict) else type(data).__name__
        raise MalformedReply(
            f"the judge's reply does not match the ids sent (expected {expected}, got {got}): {exc}"
        ) from None
    return {tid: getattr(reply, tid).model_dump() for tid in response_model.model_fields}


# One semaphore per (event loop, endpoint, model, limit): asyncio primitives belong to one loop.
_LIMITS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, asyncio.Semaphore]]" = (
    weakref.WeakKeyDictionary()
)


def endpoint_semaphore(judge_model: str, api_base: str | None, limit: int) -> asyncio.Semaphore:
    """The semaphore bounding concurrent requests to one judge endpoint (shared by all groups)."""
    if limit < 1:
        raise ValueError(f"max_concurrency must be at least 1, got {limit}")
    per_loop = _LIMITS.setdefault(asyncio.get_running_loop(), {})
    key = (api_base or "", judge_model, limit)
    if key not in per_loop:
        per_loop[key] = asyncio.Semaphore(limit)
    return per_loop[key]


def _is_transient(exc: BaseException) -> bool:
    """Worth another attempt: timeouts, dropped connections, 408/409/429 and 5xx answers."""
    import openai

    if isinstance(exc, (MalformedReply, asyncio.TimeoutError, openai.APIConnectionError, openai.RateLimitError)):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status >= 500 or status in (408, 409, 429))


async def call_judge(
    messages: list[dict[str, Any]],
    *,
    judge_model: str,
    response_model: type[BaseModel],
    extra_litellm_params: dict[str, Any] | None = None,
    max_retries: int = 3,
    backoff_s: float = 1.0,
    timeout_s: float = 120.0,
    max_concurrency: int = 8,
) -> tuple[dict[str, dict[str, Any]], JudgeUsage]:
    """Ask the judge, retrying transient failures; returns ({id: {explanation, score}}, usage)."""
    litellm = import_litellm()
    params = dict(extra_litellm_params or {})
    semaphore = endpoint_semaphore(judge_model, params.get("api_base") or params.get("base_url"), max_concurrency)
    usage = JudgeUsage()
    last: BaseException | None = None
    for attempt in range(max_retries + 1):
        if attempt:
            usage.retries += 1
            delay = backoff_s * 2 ** (attempt - 1) * (1 + random.random() / 2)  # jitter spreads out groups
            log.warning(
                "RULER judge %s: attempt %d failed (%s); retrying in %.2fs", judge_model, attempt, _short(last), delay
            )
            await asyncio.sleep(delay)
        try:
            async with semaphore:
                response = await asyncio.wait_for(
                    litellm.acompletion(
                        model=judge_model,
                        messages=messages,
                        response_format=response_model,
                        timeout=timeout_s,
                        num_retries=0,  # retries are ours: counted, backed off and bounded here
                        max_retries=0,
                        caching=False,
                        **params,
                    ),
                    timeout=timeout_s + 5,  # backstop in case a provider ignores `timeout`
                )
            usage = usage + usage_of(response, judge_model)  # a reply we cannot use was still paid for
            choice = response.choices[0]
            return parse_reply(choice.message.content, response_model, getattr(choice, "finish_reason", None)), usage
        except Exception as exc:
            if not _is_transient(exc):
                raise JudgeError(
                    f"RULER judge {judge_model} refused the request ({_short(exc)}); check the model name, "
                    "api_base and api key (extra_litellm_params or ART_JUDGE_* settings)",
                    usage,
                ) from exc
            last = exc
    raise JudgeError(
        f"RULER judge {judge_model} gave no usable reply in {max_retries + 1} attempts; last error: {_short(last)}",
        usage,
    ) from last


async def ask_judge(
    judge: ResolvedJudge,
    messages: list[dict[str, Any]],
    response_model: type[BaseModel],
    *,
    instructions: str,
    call_defaults: dict[str, Any] | None = None,
) -> tuple[dict[str, dict[str, Any]], JudgeUsage]:
    """The judge's validated reply ({id: verdict}, usage): from the cache under `judge.cache_root` when these
    exact inputs were asked before (usage: one cache hit), else asked with `call_judge` and stored.

    The cache keys on the model, `instructions` (RULER's rubric, tau2's prompt), the messages, the reply
    schema and the config's own litellm params, never on the judge's address or key. `call_defaults` are
    litellm params the call uses unless the config sets them (tau2 judges at temperature 0).
    Raises JudgeError, naming `judge.model`, when the judge gives no usable reply.
    """
    config = judge.config
    cache = key = None
    if config.cache:
        cache = JudgeCache(Storage(judge.cache_root))  # resolve_judge sets it whenever caching is on
        schema = response_model.model_json_schema()
        key = cache.key(judge.model, instructions, messages, schema, config.litellm_params)
        record = cache.get(key)
        if record is not None and set(record["scores"]) == set(response_model.model_fields):
            return record["scores"], JudgeUsage(cache_hits=1)
    verdicts, usage = await call_judge(
        messages,
        judge_model=judge.model,
        response_model=response_model,
        extra_litellm_params={**(call_defaults or {}), **judge.litellm_params},
        max_retries=config.max_retries,
        backoff_s=config.backoff_s,
        timeout_s=config.timeout_s,
        max_concurrency=config.max_concurrency,
    )
    if cache is not None and key is not None:
        try:
            cache.put(key, judge.model, verdicts, usage.model_dump())
        except Exception as exc:  # the verdicts are valid and paid for; a full disk must not lose them
            log.warning("could not store the judge's reply in the cache at %s: %s", cache.path(key), exc)
    return verdicts, usage


def _short(exc: BaseException | None) -> str:
    if exc is None:
        return "none"
    text = str(exc).replace("\n", " ")
    return f"{type(exc).__name__}: {text[:300]}"
