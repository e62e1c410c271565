"""Secrets: from the environment locally, from Secrets Manager (cached) in AWS; never in the template."""

from __future__ import annotations

import threading
import time

from aws_lambda_powertools import Logger

from precis.errors import Unavailable
from precis.settings import get_settings

logger = Logger(child=True)

_MAX_AGE_S = 300  # a rotated secret is picked up within five minutes
# A secret found missing, and when: not looked up again for _MAX_AGE_S (every call would otherwise ask Secrets Manager
# and log), and said once per cold start.
_missing: dict[str, float] = {}
_lookup = threading.Lock()


def _secret_field(name: str) -> str | None:
    settings = get_settings()
    if not settings.secret_name:
        return None
    # One lookup at a time: the threads of a cold start (a derive batch's targets) would each build a Secrets Manager
    # client and ask, before the first answer (or its absence) is remembered.
    with _lookup:
        return _looked_up(settings.secret_name, name)


def _looked_up(secret_name: str, name: str) -> str | None:
    missing_since = _missing.get(secret_name)
    if missing_since is not None and time.monotonic() - missing_since < _MAX_AGE_S:
        return None
    from aws_lambda_powertools.utilities import parameters  # deferred: only cold starts that need it pay

    try:
        value = parameters.get_secret(secret_name, transform="json", max_age=_MAX_AGE_S)
    except parameters.exceptions.GetParameterError as exc:
        # No such secret (the local stack has none): the caller decides whether that is fatal.
        if missing_since is None:
            logger.warning("secret unavailable", extra={"secret": secret_name, "error": str(exc)})
        _missing[secret_name] = time.monotonic()
        return None
    _missing.pop(secret_name, None)
    return value.get(name) if isinstance(value, dict) else None


def jwt_secret() -> str:
    """The key that signs and verifies bearer keys."""
    secret = get_settings().jwt_secret or _secret_field("jwt_secret")
    if not secret:
        raise Unavailable(
            "no key-signing secret is configured: set PRECIS_JWT_SECRET (local stack) or the "
            "jwt_secret field of the stack's secret"
        )
    return secret


def llm_api_key() -> str | None:
    """The summarizer's LLM API key, if one is configured."""
    return get_settings().llm_api_key or _secret_field("llm_api_key")


def webhook_secret() -> str | None:
    """Honcho's one deployment secret (X-Honcho-Signature), when the stack's secret has a webhook_secret field."""
    return _secret_field("webhook_secret")


def with_llm_key(settings):
    """`settings` with the LLM API key from Secrets Manager when the environment has none (deployed stacks) and a role
    uses the openai provider (Bedrock needs no key: its calls are signed with the function's role)."""
    providers = {
        getattr(settings, f"{role}_provider", None) or settings.llm_provider for role in ("summaries", "derive", "chat")
    }
    if settings.llm_api_key or ("openai" not in providers and settings.embedder != "openai"):
        return settings
    key = llm_api_key()
    return settings.model_copy(update={"llm_api_key": key}) if key else settings
