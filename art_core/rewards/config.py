"""The one judge configuration: what RULER asks, which model it asks, and how hard it tries.

The same `JudgeConfig` is a field of the Prefect run config (so the UI draws its form), the argument of
the scoring task and the config `ruler`/`ruler_score_group` resolve. It is stored (flow parameters,
cache keys), so it never holds a secret: the judge's key is resolved at call time by
`judge_litellm_params`, from the call's own `extra_litellm_params` (ART style) or ART_JUDGE_API_KEY.

    >>> cfg = JudgeConfig(model="openai/o4-mini", timeout_s=30)
    >>> cfg.rubric_text.startswith("- An attempt")
    True
    >>> JudgeConfig(model="x", litellm_params={"api_key": "sk-..."})
    Traceback (most recent call last):
    pydantic_core._pydantic_core.ValidationError: 1 validation error for JudgeConfig
    ...
"""

from __future__ import annotations

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
    """RULER's settings. `model=None` takes ART_JUDGE_MODEL (and its ART_JUDGE_API_BASE) at call time."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    model: str | None = Field(
        None,
        validation_alias=AliasChoices("model", "judge_model"),
        description="litellm model name of the judge, e.g. openai/o4-mini or hosted_vllm/judge; None: ART_JUDGE_MODEL.",
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


def resolve_judge(config: JudgeConfig, secrets: dict[str, Any] | None = None) -> tuple[JudgeConfig, dict[str, Any]]:
    """The config with its judge model filled in, and the litellm params of the call (secrets included).

    Order: the call's own params win; then the config's api_base and litellm_params; then the settings:
    ART_JUDGE_MODEL / ART_JUDGE_API_BASE when the config names no model, ART_JUDGE_API_KEY when no key
    was given (else litellm reads the provider's own variable, e.g. OPENAI_API_KEY).
    """
    from art_core.settings import get_settings

    settings = get_settings()
    params: dict[str, Any] = dict(config.litellm_params)
    if config.model is None:
        if not settings.judge_model:
            raise ValueError(
                "no RULER judge model: pass judge_model='openai/...' (or JudgeConfig.model) or set ART_JUDGE_MODEL"
            )
        config = config.model_copy(update={"model": settings.judge_model})
        if settings.judge_api_base and not config.api_base:
            params["api_base"] = settings.judge_api_base
    if config.api_base:
        params["api_base"] = config.api_base
    params.update(secrets or {})
    if "api_key" not in params and settings.judge_api_key is not None:
        params["api_key"] = settings.judge_api_key.get_secret_value()
    return config, params
