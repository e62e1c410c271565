"""Settings, read once per cold start from the environment (the template, or the local stack).

A bad value fails the cold start with a message naming the variable (and the template parameter it comes from),
never a silent fallback.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from precis.schemas.summary_settings import SummaryConfig

# Every setting, declared once: Settings field -> (environment variable, template parameter or None). A parameter
# reaches its variable through template.yaml's environment (Globals, or the one function that reads it); None: the
# template fixes the value or names one of its resources, or the setting is a `make dev` knob whose built-in default
# deploys. The README's tables list the variables and parameters; tests/deploy/test_settings_agree.py holds the
# template, this table, the local stack's pass-through and the README together.
ENVIRONMENT: dict[str, tuple[str, str | None]] = {
    "table_name": ("TABLE_NAME", None),
    "bucket_name": ("BUCKET_NAME", None),
    "stage": ("STAGE", "Stage"),
    "secret_name": ("PRECIS_SECRET_NAME", "SecretName"),
    "inline_body_max_bytes": ("PRECIS_INLINE_BODY_MAX_BYTES", None),
    "context_recall_share": ("PRECIS_CONTEXT_RECALL_SHARE", None),
    "max_message_chars": ("PRECIS_MAX_MESSAGE_CHARS", None),
    "auth": ("PRECIS_AUTH", None),
    "jwt_secret": ("PRECIS_JWT_SECRET", None),
    # Model providers: the default for every role, each role's own (None: the default), the Bedrock region.
    "llm_provider": ("PRECIS_LLM_PROVIDER", "LlmProvider"),
    "summaries_provider": ("PRECIS_SUMMARIES_PROVIDER", None),
    "derive_provider": ("PRECIS_DERIVE_PROVIDER", None),
    "chat_provider": ("PRECIS_CHAT_PROVIDER", None),
    "bedrock_region": ("PRECIS_BEDROCK_REGION", "BedrockRegion"),
    "llm_model": ("PRECIS_LLM_MODEL", "LlmModel"),
    "llm_base_url": ("OPENAI_BASE_URL", "LlmBaseUrl"),
    "llm_api_key": ("OPENAI_API_KEY", None),
    "llm_timeout": ("PRECIS_LLM_TIMEOUT_S", None),
    "llm_max_attempts": ("PRECIS_LLM_MAX_ATTEMPTS", None),
    "llm_max_input_tokens": ("PRECIS_LLM_MAX_INPUT_TOKENS", "LlmMaxInputTokens"),
    "purge_grace_s": ("PRECIS_PURGE_GRACE_S", None),
    "summarize_concurrency": ("PRECIS_SUMMARIZE_CONCURRENCY", None),
    # The deployment's summary defaults: summary_<SummaryConfig field>.
    "summary_strategy": ("PRECIS_SUMMARY_STRATEGY", "SummaryStrategy"),
    "summary_engine": ("PRECIS_SUMMARY_ENGINE", "SummaryEngine"),
    "summary_token_threshold": ("PRECIS_SUMMARY_TOKEN_THRESHOLD", "SummaryTokenThreshold"),
    "summary_keep_recent_runs": ("PRECIS_SUMMARY_KEEP_RECENT_RUNS", "SummaryKeepRecentRuns"),
    "summary_keep_runs": ("PRECIS_SUMMARY_KEEP_RUNS", "SummaryKeepRuns"),
    "summary_max_output_tokens": ("PRECIS_SUMMARY_MAX_OUTPUT_TOKENS", "SummaryMaxOutputTokens"),
    "summary_whole_runs": ("PRECIS_SUMMARY_WHOLE_RUNS", "SummaryWholeRuns"),
    # Derived memory.
    "embedder": ("PRECIS_EMBEDDER", "Embedder"),
    "embed_model": ("PRECIS_EMBED_MODEL", "EmbedModel"),
    "embed_dimensions": ("PRECIS_EMBED_DIMENSIONS", "EmbedDimensions"),
    "derive_engine": ("PRECIS_DERIVE_ENGINE", "DeriveEngine"),
    "derive_model": ("PRECIS_DERIVE_MODEL", None),
    "derive_batch_tokens": ("PRECIS_DERIVE_BATCH_TOKENS", "DeriveBatchTokens"),
    "derive_max_wait_s": ("PRECIS_DERIVE_MAX_WAIT_S", "DeriveMaxWaitSeconds"),
    "derive_quiet_s": ("PRECIS_DERIVE_QUIET_S", "DeriveQuietSeconds"),
    "derive_concurrency": ("PRECIS_DERIVE_CONCURRENCY", "DeriveConcurrency"),
    "derive_wake_queue_url": ("PRECIS_DERIVE_WAKE_QUEUE_URL", None),
    "derive_card_every": ("PRECIS_DERIVE_CARD_EVERY", None),
    "derive_card_max_s": ("PRECIS_DERIVE_CARD_MAX_S", None),
    "derive_card_quiet_s": ("PRECIS_DERIVE_CARD_QUIET_S", None),
    "dream_min_conclusions": ("PRECIS_DREAM_MIN_CONCLUSIONS", None),
    "dream_idle_s": ("PRECIS_DREAM_IDLE_S", None),
    "webhooks_allow_http_local": ("PRECIS_WEBHOOKS_ALLOW_HTTP_LOCAL", None),
    "webhook_queue_url": ("PRECIS_WEBHOOK_QUEUE_URL", None),
    "event_bus_name": ("PRECIS_EVENT_BUS_NAME", "EventBusName"),
}
# The deployment's summary defaults: SummaryConfig field -> (variable, parameter).
SUMMARY_ENV = {
    field.removeprefix("summary_"): names for field, names in ENVIRONMENT.items() if field.startswith("summary_")
}


# A Bedrock model id (amazon.titan-..., anthropic.claude-...), a cross-region inference profile id
# (us.anthropic.claude-...), or the ARN of a model or inference profile.
BEDROCK_MODEL = re.compile(
    r"^(arn:aws[a-z-]*:bedrock:[a-z0-9-]*:\d{0,12}:[a-z-]+/\S+|"
    r"([a-z]{2,4}\.)?[a-z][a-z0-9]*\.[A-Za-z0-9._:-]+)$"
)
# The model a role asks for when none is set, by the provider answering it (README "Models"): `llm` for the chat roles
# (summaries, derive, chat), `embed` for the embedder. The Bedrock ones are current, generally available and enabled
# in every account without a use-case form: Amazon Nova 2 Lite, which Bedrock serves only through cross-Region
# inference profiles (this one keeps requests in US Regions), and Titan Text Embeddings V2 (256, 512 or 1024
# dimensions). template.yaml grants the same ids (Mappings BedrockDefaults) when LlmModel or EmbedModel is empty.
DEFAULT_MODELS = {
    "openai": {"llm": "gpt-4o-mini", "embed": "text-embedding-3-small"},
    "bedrock": {"llm": "us.amazon.nova-2-lite-v1:0", "embed": "amazon.titan-embed-text-v2:0"},
}
LLM_ROLES = ("summaries", "derive", "chat")
# The Bedrock embedding models Precis speaks to, and the dimensions each can answer.
BEDROCK_EMBED_DIMENSIONS = {
    "amazon.titan-embed-text-v2": (256, 512, 1024),
    "amazon.titan-embed-text-v1": (1536,),
    "cohere.embed-v4": (256, 512, 1024, 1536),
    "cohere.embed-": (1024,),
}


class SettingsError(RuntimeError):
    """The environment holds a value Precis cannot run with (a bad template parameter or `make dev` variable)."""


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True)

    table_name: str = "precis-dev"
    bucket_name: str = "precis-dev-bucket"
    stage: str = "dev"
    secret_name: str | None = None
    # Message bodies longer than this (UTF-8 bytes) go to S3; the item keeps a pointer. At most 300,000 so that
    # an item (inline body + metadata of up to 64 KiB + ~1 KB of attributes) stays below DynamoDB's 400 KB.
    inline_body_max_bytes: int = Field(16_384, ge=1, le=300_000)
    # The share of a context's tokens that the messages its search query recalls may take (the rest: representation,
    # summary, newest messages; what recall leaves unused goes to the newest messages). Chosen on the retrieval bench
    # (bench/retrieval.py, "recall share"): the share whose contexts hold the most answer words over 1k, 2k and 4k.
    context_recall_share: float = Field(0.25, ge=0, le=1)
    # Honcho's limit by default; raise it for agents that store large tool outputs. At most 1 Mi characters:
    # one message must fit Lambda's 6 MB response even when every character is escaped in JSON.
    max_message_chars: int = Field(25_000, ge=1, le=1024 * 1024)
    auth: bool = False
    jwt_secret: str | None = None
    # Which provider answers each role's model calls: openai (an OpenAI-compatible endpoint and key) or bedrock (Amazon
    # Bedrock through the function's IAM role, in bedrock_region, else the function's own). None: llm_provider.
    llm_provider: Literal["openai", "bedrock"] = "openai"
    summaries_provider: Literal["openai", "bedrock"] | None = None
    derive_provider: Literal["openai", "bedrock"] | None = None
    chat_provider: Literal["openai", "bedrock"] | None = None
    bedrock_region: str | None = Field(None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    llm_model: str | None = None  # None: each role's provider's default (DEFAULT_MODELS; see model_for)
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
    # The deployment's summary defaults, under the workspace's and the session's configuration.summarizer. None:
    # the built-in default. Checked together as a SummaryConfig when read (e.g. a rolling max_output_tokens over a
    # quarter of token_threshold fails the cold start).
    summary_strategy: Literal["cadence", "rolling", "sliding_window"] | None = None
    summary_engine: Literal["llm", "extractive"] | None = None  # None (auto): llm when one is configured
    summary_token_threshold: int | None = None
    summary_keep_recent_runs: int | None = None
    summary_keep_runs: int | None = None
    summary_max_output_tokens: int | None = None  # None (0 in the template): derived from the strategy
    summary_whole_runs: bool | None = None
    # Derived memory. Conclusions are embedded by `embedder`: "hashed" (offline, lexical) or "openai" (the
    # OpenAI-compatible embeddings endpoint, `embed_model`) or "bedrock" (Titan Text Embeddings or Cohere Embed on
    # Bedrock, `embed_model`). `embed_dimensions` is the vector index's dimension
    # (template parameter EmbedDimensions): changing it means a new index and re-embedding every conclusion.
    embedder: Literal["hashed", "openai", "bedrock"] = "hashed"
    embed_model: str | None = None  # None: the embedder's default (DEFAULT_MODELS; see model_for)
    embed_dimensions: int = Field(256, ge=8, le=4096)
    # The deriver's defaults, under configuration.deriver of workspaces and sessions. None (auto): llm when one is
    # configured, else extractive. An llm batch (every sender of a session at once) waits for `derive_batch_tokens`
    # of the observed senders' new messages or until the oldest has waited `derive_max_wait_s`; extractive derives at
    # once. The defaults are chosen on `make bench derive` (docs/design.md, "What derivation costs").
    derive_engine: Literal["llm", "extractive"] | None = None
    derive_model: str | None = None
    derive_batch_tokens: int = Field(2048, ge=0, le=100_000)
    derive_max_wait_s: float = Field(1800.0, ge=0, le=86_400)
    # ... or until its session has been quiet for `derive_quiet_s` (0: never early): a wake-up delayed that long on
    # `derive_wake_queue_url` (the template's DeriveWakeQueue; at most SQS's 900 s delay) derives it after a pause.
    derive_quiet_s: float = Field(50.0, ge=0, le=900)
    derive_wake_queue_url: str | None = None
    # An llm engine's cards are refreshed once `derive_card_every` conclusions wait for them or the first has waited
    # `derive_card_max_s`, and when their session has been quiet `derive_card_quiet_s` (memory/card_refresh.py).
    derive_card_every: int = Field(50, ge=1, le=10_000)
    derive_card_max_s: float = Field(1800.0, ge=0, le=86_400)
    derive_card_quiet_s: float = Field(300.0, ge=0, le=900)
    # Targets one deriver invocation serves at once (a stream batch's senders, a wake-up's sessions, the flush's
    # cursors and dreams): its LLM calls in flight. At most 32, as `summarize_concurrency` (store.db's connections).
    derive_concurrency: int = Field(16, ge=1, le=32)
    # A collection dreams once it has `dream_min_conclusions` new explicit conclusions and has been idle for
    # `dream_idle_s` (Honcho's 50 and an hour); POST /schedule_dream asks for one at once.
    dream_min_conclusions: int = Field(50, ge=1, le=100_000)
    dream_idle_s: int = Field(3600, ge=0, le=7 * 86_400)
    # Webhook endpoints may be http and loopback addresses (127.0.0.0/8, ::1): `make dev`'s receivers on the
    # developer's machine. Off in every deployment: a target is https and resolves to public addresses only
    # (precis.webhooks.targets; docs/design.md, "Webhooks: safe targets").
    webhooks_allow_http_local: bool = Field(False, strict=True)  # strict: "yes" or "1" is a typo, not a yes
    # The template's WebhookQueue: deliveries are sent to it, and its function delays a failed one's retry on it.
    webhook_queue_url: str | None = None
    # The template's EventBus (parameter EventBus: create): every event is put on it too (precis.events.publish).
    event_bus_name: str | None = None

    @field_validator("derive_engine", mode="before")
    @classmethod
    def _auto_derive_engine(cls, value: Any) -> Any:
        return None if isinstance(value, str) and value.strip().lower() in ("", "auto") else value

    @field_validator("summary_engine", mode="before")
    @classmethod
    def _auto_engine(cls, value: Any) -> Any:
        return None if isinstance(value, str) and value.strip().lower() in ("", "auto") else value

    @field_validator("summary_max_output_tokens", mode="before")
    @classmethod
    def _derived_output(cls, value: Any) -> Any:
        return None if str(value).strip() == "0" else value

    def provider_for(self, role: str | None = None) -> str:
        """The provider answering `role`: summaries, derive and chat their own or llm_provider; embed the embedder."""
        if role == "embed":
            return self.embedder
        return (getattr(self, f"{role}_provider") if role else None) or self.llm_provider

    def model_for(self, role: str | None = None) -> str:
        """The model `role` asks for: the one set for it (embed_model; derive_model for derive; else llm_model), else
        its provider's default (DEFAULT_MODELS), so a provider alone, with no model named, is a working setup."""
        if role == "embed":
            return self.embed_model or DEFAULT_MODELS.get(self.embedder, DEFAULT_MODELS["openai"])["embed"]
        chosen = self.derive_model if role == "derive" and self.derive_model else self.llm_model
        return chosen or DEFAULT_MODELS[self.provider_for(role)]["llm"]

    @model_validator(mode="after")
    def _bedrock_models_valid(self) -> Settings:
        """A role on Bedrock needs a Bedrock model id; a Bedrock embedder a model it can speak to, at a dimension
        that model answers."""
        roles = [r for r in LLM_ROLES if self.provider_for(r) == "bedrock"]
        for role in roles:
            model = self.model_for(role)
            field = "derive_model" if role == "derive" and self.derive_model else "llm_model"
            if not BEDROCK_MODEL.match(model):
                raise ValueError(
                    f"{_VARIABLES[field]}={model!r}{_parameter(field)}: not a Bedrock model id or "
                    f"inference profile (the {', '.join(roles)} role(s) use Bedrock)"
                )
        if self.embedder == "bedrock":
            model = self.model_for("embed")
            family = next((f for f in BEDROCK_EMBED_DIMENSIONS if model.startswith(f)), None)
            if family is None:
                raise ValueError(
                    f"PRECIS_EMBED_MODEL={model!r} (template parameter EmbedModel): not a "
                    "Bedrock embedding model (amazon.titan-embed-text-v2:0, cohere.embed-*)"
                )
            if self.embed_dimensions not in BEDROCK_EMBED_DIMENSIONS[family]:
                raise ValueError(
                    f"PRECIS_EMBED_DIMENSIONS={self.embed_dimensions} (template parameter "
                    f"EmbedDimensions): {model} answers "
                    f"{', '.join(map(str, BEDROCK_EMBED_DIMENSIONS[family]))} dimensions"
                )
        return self

    @model_validator(mode="after")
    def _summary_defaults_valid(self) -> Settings:
        try:
            SummaryConfig.model_validate(self.summary_defaults)
        except ValidationError as exc:
            error = exc.errors()[0]
            field = str(error["loc"][0]) if error["loc"] else ""
            variable, parameter = SUMMARY_ENV.get(field, ("PRECIS_SUMMARY_*", "Summary*"))
            value = self.summary_defaults.get(field, error.get("input"))
            raise ValueError(f"{variable}={value} (template parameter {parameter}): {error['msg']}") from None
        return self

    @property
    def summary_defaults(self) -> dict[str, Any]:
        """The SummaryConfig fields the deployment sets (the layer between the built-in defaults and a workspace's)."""
        return {field: value for field in SUMMARY_ENV if (value := getattr(self, f"summary_{field}")) is not None}


def _env_bool(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def _env_flag(value: str | None) -> bool | str | None:
    """A strict boolean for settings where a typo must not read as false: true/false (any case), else the text
    itself, which validation refuses."""
    text = (value or "").strip().lower()
    return {"": None, "true": True, "false": False}.get(text, value)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    env = os.environ
    raw: dict[str, Any] = {field: env.get(variable) for field, (variable, _) in ENVIRONMENT.items()}
    raw["auth"] = _env_bool(raw["auth"])
    raw["summary_whole_runs"] = _env_flag(raw["summary_whole_runs"])
    raw["webhooks_allow_http_local"] = _env_flag(raw["webhooks_allow_http_local"])
    try:
        return Settings(**{k: v for k, v in raw.items() if v not in (None, "")})
    except ValidationError as exc:
        raise SettingsError(f"invalid settings in the environment: {_explain(exc)}") from None


_VARIABLES = {field: variable for field, (variable, _) in ENVIRONMENT.items()}
_PARAMETERS = {field: parameter for field, (_, parameter) in ENVIRONMENT.items() if parameter}


def _parameter(field: str) -> str:
    return f" (template parameter {_PARAMETERS[field]})" if field in _PARAMETERS else ""


def _explain(exc: ValidationError) -> str:
    """Each error as `VARIABLE=value: what is wrong`."""
    parts = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        message = error["msg"].removeprefix("Value error, ")
        parts.append(
            f"{_VARIABLES[field]}={error['input']!r}{_parameter(field)}: {message}" if field in _VARIABLES else message
        )
    return "; ".join(parts)
