"""What the tasks take: small pydantic references to a model in storage and to how it is rolled out.

Tasks take these instead of the whole run config so that their cache keys hold only what changes
their result: raising `steps` or the learning rate must not re-run step 0's rollouts.

    ref = ModelRef(storage_url="s3://bucket/runs", project="demo", model="agent-001", base_model="/models/tiny")
    ref.storage().checkpoint_path(ref.project, ref.model, 2)   # 's3://bucket/runs/demo/models/agent-001/checkpoints/0002'
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from art_core.storage import Storage


class ModelRef(BaseModel):
    """A trained model: where its storage is, its project and name, and the base model under its adapter."""

    model_config = ConfigDict(frozen=True)

    storage_url: str
    project: str
    model: str
    base_model: str

    def storage(self) -> Storage:
        return Storage(self.storage_url)

    def path(self, *parts: str) -> str:
        """A path under the model's folder, e.g. ref.path("history.jsonl")."""
        s = self.storage()
        return s.join(s.model_path(self.project, self.model), *parts)


class RolloutSpec(BaseModel):
    """How a step is rolled out: environment, batch shape, sampling and how many failures are tolerated."""

    model_config = ConfigDict(frozen=True)

    environment: str
    env_options: dict[str, Any] = Field(default_factory=dict)
    groups_per_step: int = 2
    group_size: int = 4
    seed: int = 0
    sampling: dict[str, Any] = Field(default_factory=dict)
    max_exceptions: float = 0

    def load_environment(self):
        from art_core.envs import load_environment

        return load_environment(self.environment, **self.env_options)


class JudgeConfig(BaseModel):
    """RULER settings. The key is read from ART_JUDGE_API_KEY (or the provider's own variable), never
    passed as a parameter: Prefect stores parameters, and secrets must not be stored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(description="litellm model name of the judge, e.g. openai/o4-mini or hosted_vllm/judge.")
    api_base: str | None = Field(None, description="OpenAI-compatible base URL of the judge; None for the provider's.")
    rubric: str | None = Field(None, description="Replaces RULER's default rubric when set.")
    combine: Literal["ruler", "weighted"] = Field("ruler", description="'ruler': reward = judge score; 'weighted': "
                                                  "mixed with the environment's reward by ruler_weight.")  # fmt: skip
    ruler_weight: float = Field(0.5, ge=0, le=1, description="With combine='weighted', the judge score's weight.")
    timeout_s: float = Field(60.0, gt=0, description="Seconds to wait for one judge reply.")
    max_retries: int = Field(3, ge=0, description="Retries of a failed judge call (with backoff) before the step fails.")
    explanation_max_chars: int | None = Field(None, ge=1, description="Cap on each explanation (small self-hosted judges).")
    litellm_params: dict[str, Any] = Field(default_factory=dict, description="More litellm arguments, e.g. temperature, "
                                           "max_tokens. Keys go in ART_JUDGE_API_KEY, not here.")  # fmt: skip

    @field_validator("litellm_params")
    @classmethod
    def _no_secrets(cls, v: dict[str, Any]) -> dict[str, Any]:
        secret = [k for k in v if "key" in k.lower() or "secret" in k.lower() or k.lower() in ("token", "password")]
        if secret:
            raise ValueError(f"{secret} look like secrets: set ART_JUDGE_API_KEY in the worker's environment instead "
                             "(flow parameters are stored by Prefect)")  # fmt: skip
        return v


class GatherResult(BaseModel):
    """Where a step's trajectories were written, and their reward summary (small: this is the cached result)."""

    step: int
    uri: str
    summary: dict[str, float]
    seconds: float


class ScoreResult(BaseModel):
    """Where the scored groups are (the gathered file itself when no judge rescored them)."""

    step: int
    uri: str
    summary: dict[str, float]
    judged: bool
    seconds: float


class TrainStepResult(BaseModel):
    """The checkpoint a train step produced (or found already there) and its metrics."""

    step: int
    checkpoint_uri: str
    metrics: dict[str, Any] = Field(default_factory=dict)
    trained: bool = Field(description="False when the checkpoint existed and training was skipped.")
    seconds: float = 0.0
