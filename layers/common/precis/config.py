"""Settings, read once per cold start from the environment (the template, or the local stack)."""

from __future__ import annotations

import os
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True)

    table_name: str = "precis-dev"
    bucket_name: str = "precis-dev-bucket"
    stage: str = "dev"
    secret_name: str | None = None
    # Message bodies longer than this (UTF-8 bytes) go to S3; the item keeps a pointer. At most 300,000 so that
    # an item (inline body + metadata of up to 64 KiB + ~1 KB of attributes) stays below DynamoDB's 400 KB.
    inline_body_max_bytes: int = Field(16_384, ge=1, le=300_000)
    # Honcho's limit by default; raise it for agents that store large tool outputs. At most 1 Mi characters:
    # one message must fit Lambda's 6 MB response even when every character is escaped in JSON.
    max_message_chars: int = Field(25_000, ge=1, le=1024 * 1024)
    auth: bool = False
    jwt_secret: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_base_url: str | None = None
    llm_api_key: str | None = None
    llm_timeout: float | None = Field(None, gt=0, le=300)  # seconds per LLM call
    llm_max_attempts: int | None = Field(None, ge=1, le=10)
    # The most prompt tokens (system + previous summary + messages) one summary request may hold; larger jobs run in
    # steps. Keep it below the model's context window minus the summary's max_output_tokens.
    llm_max_input_tokens: int = Field(16_000, ge=1_000, le=2_000_000)
    # A deleted session id can be created again this long after the delete: longer than any request that began
    # before the delete can still run (the ingest function's timeout), so none of its writes can land in the new one.
    purge_grace_s: float = Field(30.0, ge=0, le=3600)
    # Targets of one stream batch (sessions to summarize, incarnations to purge) an invocation serves at once: its
    # LLM calls in flight. 16 keeps p99 summary lag under 30 s up to ~10k active sessions a shard, 32 up to a
    # partition's ceiling (12.5k; `make bench`, scale). At most 32: the DynamoDB and S3 clients keep 32 connections
    # each (store.db), and more threads would open connections they cannot reuse.
    summarize_concurrency: int = Field(16, ge=1, le=32)


def _env_bool(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    env = os.environ
    raw = {
        "table_name": env.get("TABLE_NAME"),
        "bucket_name": env.get("BUCKET_NAME"),
        "stage": env.get("STAGE"),
        "secret_name": env.get("PRECIS_SECRET_NAME"),
        "inline_body_max_bytes": env.get("PRECIS_INLINE_BODY_MAX_BYTES"),
        "max_message_chars": env.get("PRECIS_MAX_MESSAGE_CHARS"),
        "auth": _env_bool(env.get("PRECIS_AUTH")),
        "jwt_secret": env.get("PRECIS_JWT_SECRET"),
        "llm_model": env.get("PRECIS_LLM_MODEL"),
        "llm_base_url": env.get("OPENAI_BASE_URL"),
        "llm_api_key": env.get("OPENAI_API_KEY"),
        "llm_timeout": env.get("PRECIS_LLM_TIMEOUT_S"),
        "llm_max_attempts": env.get("PRECIS_LLM_MAX_ATTEMPTS"),
        "llm_max_input_tokens": env.get("PRECIS_LLM_MAX_INPUT_TOKENS"),
        "purge_grace_s": env.get("PRECIS_PURGE_GRACE_S"),
        "summarize_concurrency": env.get("PRECIS_SUMMARIZE_CONCURRENCY"),
    }
    return Settings(**{k: v for k, v in raw.items() if v not in (None, "")})
