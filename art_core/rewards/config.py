"""The one judge configuration: what RULER asks, which model it asks, and how hard it tries; and the one
place a judge is resolved.

The same `JudgeConfig` is a field of the Prefect run config (so the UI draws its form), the argument of
the scoring task and the config `ruler`/`ruler_score_group` resolve. It is stored (flow parameters,
cache keys), so it never holds a secret. Every door (ruler, ruler_score_group, the scoring task, tau2's
assertion judge) calls `resolve_judge` once: the default model, the address and the key are decided
there, from the call's own `extra_litellm_params` (ART style) or the ART_JUDGE_* settings, and the
`ResolvedJudge` it returns is what gets called and what errors name.

    >>> cfg = JudgeConfig(model="openai/o4-mini", timeout_s=30)
    >>> cfg.rubric_text.startswith("- An attempt")
    True
    >>> JudgeConfig(model="x", litellm_params={"api_key": "sk-..."})
    Traceback (most recent call last):
    pydantic_core._pydantic_core.ValidationError: 1 validation error for JudgeConfig
    ...
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

DEFAULT_RUBRIC = """\
- An attempt that achieves what the user asked for scores far above one that does not, however \
polished the failing attempt reads.
- Rules the agent was given (system prompt, policy) count: breaking one costs heavily, even when \
the goal is reached.
- Among attempts that succeed, prefer the one that gets there with fewer wasted steps, fewer \
errors and no needless or repeated tool calls.
- Partial progress earns partial credit: an attempt that got further toward the goal beats one \
that did not start.
- Let the gaps between scores mirror the gaps in quality: attempts of about equal quality get \
about equal scores."""

SECRET_HINT = "set ART_JUDGE_API_KEY in the worker's environment instead (configs are stored by Prefect)"


def _looks_secret(key: str) -> bool:
    k = key.lower()
    return "key" in k or "secret" in k or k in ("token", "password", "authorization")


class JudgeConfig(BaseModel):
    """RULER's settings. `model=None`: the judge `default_judge_model()` names when the judge is resolved."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    model: str | None = Field(
        None,
        validation_alias=AliasChoices("model", "judge_model"),
        description="litellm model name of the judge, e.g. openai/o4-mini or hosted_vllm/judge; "
        "None: ART_JUDGE_MODEL, else openai/o3 (ART's default) when OPENAI_API_KEY is set.",
    )
    api_base: str | None = Field(None, description="OpenAI-compatible base URL of the judge; None for the provider's.")
    rubric: str | None = Field(None, description="What makes an attempt better, in plain words; None: RULER's default.")
    combine: Literal["ruler", "weighted"] = Field(
        "ruler", description="'ruler': reward = judge score; 'weighted': mixed with the environment's reward."
    )
    ruler_weight: float = Field(0.5, ge=0, le=1, description="With combine='weighted', the judge score's weight.")
    timeout_s: float = Field(120.0, gt=0, description="Seconds one judge request may take.")
    max_retries: int = Field(3, ge=0, description="Retries of a failed or malformed judge reply (with backoff).")
    backoff_s: float = Field(1.0, ge=0, description="First retry delay; doubles on each further retry.")
    max_concurrency: int = Field(8, ge=1, description="Judge requests in flight at once per endpoint and model.")
    explanation_max_chars: int | None = Field(
        None, ge=1, description="Cap on each explanation (set it for small self-hosted judges)."
    )
    cache: bool = Field(True, description="Reuse stored replies for identical requests (under the storage root).")
    litellm_params: dict[str, Any] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("litellm_params", "extra_litellm_params"),
        description="More litellm arguments, e.g. temperature, max_tokens. Keys go in ART_JUDGE_API_KEY, not here.",
    )

    @field_validator("litellm_params")
    @classmethod
    def _no_secrets(cls, v: dict[str, Any]) -> dict[str, Any]:
        secret = sorted(k for k in v if _looks_secret(k))
        if secret:
            raise ValueError(f"{secret} look like secrets: {SECRET_HINT}")
        return v

    @property
    def rubric_text(self) -> str:
        return self.rubric or DEFAULT_RUBRIC

    # ART's names for two fields, read-only.
    @property
    def judge_model(self) -> str | None:
        return self.model

    @property
    def extra_litellm_params(self) -> dict[str, Any]:
        return self.litellm_params


def split_secrets(params: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(plain, secret) halves of litellm params a caller passed, so only the plain half is ever stored."""
    plain, secret = {}, {}
    for k, v in (params or {}).items():
        (secret if _looks_secret(k) else plain)[k] = v
    return plain, secret


# ART's default judge: its ruler_score_group asks openai/o3 when no judge is named, which it can only call with
# OpenAI's key.
ART_DEFAULT_JUDGE_MODEL = "openai/o3"


def default_judge_model() -> str | None:
    """The judge asked when none is named: ART_JUDGE_MODEL, else ART's default openai/o3 when OPENAI_API_KEY is
    set; None when neither (naming a judge is then required). The one place this default is decided.

        >>> default_judge_model()   # with ART_JUDGE_MODEL=hosted_vllm/judge        # doctest: +SKIP
        'hosted_vllm/judge'
    """
    from art_core.settings import get_settings

    named = get_settings().judge_model
    if named:
        return named
    return ART_DEFAULT_JUDGE_MODEL if os.environ.get("OPENAI_API_KEY") else None


@dataclass(frozen=True)
class ResolvedJudge:
    """A judge ready to call: the config with its model filled in, the call's litellm params (secrets included:
    never stored, never printed) and where its replies are cached. Built by `resolve_judge`, once per door,
    and passed on as is; errors name `model` and `api_base`, the judge actually asked."""

    config: JudgeConfig
    litellm_params: dict[str, Any] = field(repr=False)
    cache_root: str | None = None

    @property
    def model(self) -> str:
        return self.config.model  # type: ignore[return-value]  # resolve_judge always sets it

    @property
    def api_base(self) -> str | None:
        return self.litellm_params.get("api_base") or self.litellm_params.get("base_url")

    def describe(self) -> str:
        """`'openai/o4-mini' at http://host/v1`: what an error says about the judge."""
        return f"{self.model!r} at {self.api_base or 'the provider default'}"


def resolve_judge(
    config: JudgeConfig | None = None,
    *,
    judge_model: str | None = None,
    extra_litellm_params: dict[str, Any] | None = None,
    rubric: str | None = None,
    cache_root: str | None = None,
    **options: Any,
) -> ResolvedJudge:
    """The judge a call asks: a config, ART's arguments and JudgeConfig fields as keywords, then the settings.

    Explicit arguments win over the config; a key in `extra_litellm_params` stays in this call only (the
    config keeps its plain half). With no model named: `default_judge_model()`, with ART_JUDGE_API_BASE
    when the model came from ART_JUDGE_MODEL. The key: the call's own, else ART_JUDGE_API_KEY, else what
    litellm reads itself (e.g. OPENAI_API_KEY). Replies are cached under `cache_root` (default: the
    storage root) unless the config says cache=False.

        >>> resolve_judge(JudgeConfig(model="openai/o4-mini"), timeout_s=30).config.timeout_s
        30.0
    """
    from art_core.settings import get_settings

    unknown = set(options) - set(JudgeConfig.model_fields)
    if unknown:
        valid = sorted({*JudgeConfig.model_fields, "cache_root"})
        raise TypeError(f"unknown RULER option(s) {sorted(unknown)}; valid ones: {valid}")
    settings = get_settings()
    fields = (config or JudgeConfig()).model_dump()
    fields.update(options)
    if judge_model is not None:
        fields["model"] = judge_model
    plain, secrets = split_secrets(extra_litellm_params)
    if extra_litellm_params is not None:
        fields["litellm_params"] = plain
    if rubric is not None:
        fields["rubric"] = rubric
    params: dict[str, Any] = dict(fields["litellm_params"])
    if fields["model"] is None:
        fields["model"] = default_judge_model()
        if fields["model"] is None:
            raise ValueError(
                "no RULER judge model: pass judge_model='openai/...' (or JudgeConfig.model) or set ART_JUDGE_MODEL"
            )
        if fields["model"] == settings.judge_model and settings.judge_api_base and not fields["api_base"]:
            params["api_base"] = settings.judge_api_base
    resolved = JudgeConfig.model_validate(fields)
    if resolved.api_base:
        params["api_base"] = resolved.api_base
    params.update(secrets)
    if "api_key" not in params and settings.judge_api_key is not None:
        params["api_key"] = settings.judge_api_key.get_secret_value()
    if resolved.cache and cache_root is None:
        cache_root = settings.storage_root
    return ResolvedJudge(config=resolved, litellm_params=params, cache_root=cache_root)
