"""What a bench's model calls would cost: list prices of the default OpenAI and Bedrock models Precis uses, each
provider's cache discount, and the bill of a run's usage per 1,000 messages.

Prices are US dollars per million tokens, list prices (on-demand, standard tier, no batch or volume discount) as of
December 2025:
- OpenAI `gpt-4o-mini` (precis.settings.DEFAULT_MODELS["openai"]): input $0.15, cached input $0.075 (automatic
  prompt caching of prompts of 1,024 tokens or more: 50% off; no charge for writing the cache), output $0.60; the
  OpenAI API pricing page, unchanged since the model's release in July 2024.
- Amazon Bedrock `us.amazon.nova-2-lite-v1:0` (DEFAULT_MODELS["bedrock"], Nova 2 Lite, US cross-region inference
  profile, priced as the source region): input $0.30, output $2.50; prompt caching (a `cachePoint` after at least
  1,000 tokens) reads the cache at a 75% discount ($0.075) and charges no more than input for writing it; the Amazon
  Bedrock pricing page at the model's launch (December 2025).
A change of a default model fails `check_defaults` until its prices here follow.
"""

from __future__ import annotations

from dataclasses import dataclass

MILLION = 1_000_000


@dataclass(frozen=True, slots=True)
class Price:
    """A model's list prices, $ per million tokens."""

    provider: str
    model: str
    input: float
    cached_input: float  # a cache hit (OpenAI's cached input, Bedrock's cache read)
    cache_write: float  # a token written to the cache (Bedrock charges some models more; equal to input otherwise)
    output: float


OPENAI = Price("openai", "gpt-4o-mini", input=0.15, cached_input=0.075, cache_write=0.15, output=0.60)
BEDROCK = Price("bedrock", "us.amazon.nova-2-lite-v1:0", input=0.30, cached_input=0.075, cache_write=0.30, output=2.50)
PRICES = (OPENAI, BEDROCK)


@dataclass(frozen=True, slots=True)
class Bill:
    """A run's usage at one model's prices, per 1,000 messages."""

    price: Price
    requests: float  # per 1,000 messages
    input_tokens: float  # per 1,000 messages, as sent
    billed_input_tokens: float  # per 1,000 messages: the full-price input tokens that cost what the input did
    output_tokens: float  # per 1,000 messages
    dollars: float  # per 1,000 messages


def bill(
    price: Price,
    *,
    messages: int,
    requests: int,
    input_tokens: int,
    cached_input_tokens: int = 0,
    output_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> Bill:
    """The bill of `requests` calls (their input, of which `cached_input_tokens` hit the cache and
    `cache_write_tokens` were written to it, and output) over a conversation of `messages` messages, per 1,000."""
    if not 0 <= cached_input_tokens + cache_write_tokens <= input_tokens or messages <= 0:
        raise ValueError(
            f"inconsistent usage: {cached_input_tokens} cached and {cache_write_tokens} written of {input_tokens} "
            f"input tokens over {messages} messages"
        )
    plain = input_tokens - cached_input_tokens - cache_write_tokens
    billed = (
        plain
        + cached_input_tokens * price.cached_input / price.input
        + cache_write_tokens * price.cache_write / price.input
    )
    per = 1_000 / messages
    return Bill(
        price=price,
        requests=requests * per,
        input_tokens=input_tokens * per,
        billed_input_tokens=billed * per,
        output_tokens=output_tokens * per,
        dollars=(billed * price.input + output_tokens * price.output) / MILLION * per,
    )


def check_defaults() -> None:
    """Fail when Precis's default models are no longer the ones priced here."""
    from precis.settings import DEFAULT_MODELS

    for price in PRICES:
        default = DEFAULT_MODELS[price.provider]["llm"]
        if default != price.model:
            raise RuntimeError(f"bench/pricing.py prices {price.model}, but {price.provider}'s default is {default}")
