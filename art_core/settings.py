"""Settings: code defaults, then environment variables, then a `.env` file in the working directory.

Every key is documented in `.env.example`. Secrets are read here and never written anywhere.

    >>> s = Settings()
    >>> s.storage_root  # ART_STORAGE_ROOT, default ./.art
    './.art'
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Process-wide settings. Environment variables win over `.env`; both win over the defaults."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore")

    storage_root: str = Field("./.art", validation_alias="ART_STORAGE_ROOT")
    aws_endpoint_url: str | None = Field(None, validation_alias="AWS_ENDPOINT_URL")
    aws_access_key_id: str | None = Field(None, validation_alias="AWS_ACCESS_KEY_ID")
    aws_secret_access_key: SecretStr | None = Field(None, validation_alias="AWS_SECRET_ACCESS_KEY")
    judge_model: str | None = Field(None, validation_alias="ART_JUDGE_MODEL")
    judge_api_base: str | None = Field(None, validation_alias="ART_JUDGE_API_BASE")
    judge_api_key: SecretStr | None = Field(None, validation_alias="ART_JUDGE_API_KEY")
    wandb_api_key: SecretStr | None = Field(None, validation_alias="WANDB_API_KEY")
    prefect_api_url: str | None = Field(None, validation_alias="PREFECT_API_URL")
    inference_api_key: SecretStr | None = Field(None, validation_alias="ART_INFERENCE_API_KEY")
    # A model's training lease (art_core.lease): a holder whose heartbeat is older than this is taken over.
    lease_timeout_s: float = Field(180.0, gt=0, validation_alias="ART_LEASE_TIMEOUT")
    # Take a live run's lease anyway (that run stops before its next step): set it for one run, never in .env.
    lease_takeover: bool = Field(False, validation_alias="ART_LEASE_TAKEOVER")


def get_settings() -> Settings:
    """Read settings now (not cached: tests and long-lived workers may change the environment)."""
    return Settings()
