"""Embedders turn texts (conclusions, messages, queries) into unit vectors for the table's vector indexes: the one
place that picks an embedding model, beside `model_from`, which picks the chat models.

`hashed` (the default) needs no network: feature hashing of stemmed words, word pairs and character n-grams, so
texts that share words are near. `openai` asks an OpenAI-compatible embeddings endpoint, `bedrock` Amazon Bedrock
(Titan Text Embeddings, one text a request, or Cohere Embed, up to 96), through the LLM seam (`precis.llm`), with
its retries. Importing this module stays cheap: a provider's client is loaded by the embedder's first call alone.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Callable
from functools import lru_cache
from hashlib import blake2b
from typing import TYPE_CHECKING, Any

from precis.llm import BadAnswer, Embedder, EngineError, Model

if TYPE_CHECKING:
    from precis.settings import Settings

_WORD = re.compile(r"[^\W_]+")
# Words that say little about a peer: dropped from the word features so "where did" cannot outweigh "moved".
_STOPWORDS = frozenset(
    "a an and are as at be been being but by can could did do does doing done for from had has have having he her "
    "hers him his how i if in into is it its me my no not of on or our ours s she so t than that the their theirs "
    "them then there these they this those to too up us very was we were what when where which who whom why will "
    "with would you your yours".split()
)
_SUFFIXES = ("ing", "ed", "es", "s")


def stem(word: str) -> str:
    """A light suffix stemmer: "move", "moved", "moves" and "moving" all become "mov"."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            word = word[: -len(suffix)]
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiouls":
                word = word[:-1]  # stopped -> stop, but not fell -> fel
            break
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


def terms(text: str) -> set[str]:
    """The stemmed content words of a text (its stopwords only when it has nothing else): what a lexical match
    shares."""
    words = _WORD.findall(text.casefold())
    return {stem(w) for w in ([w for w in words if w not in _STOPWORDS] or words)}


def features(text: str) -> dict[str, float]:
    """The weighted features of a text: stemmed content words, adjacent word pairs, character 3- and 4-grams."""
    words = _WORD.findall(text.casefold())
    content = [w for w in words if w not in _STOPWORDS] or words  # a text of stopwords alone still says something
    stems = [stem(w) for w in content]
    weights: dict[str, float] = {}

    def add(feature: str, weight: float) -> None:
        weights[feature] = weights.get(feature, 0.0) + weight

    for s in stems:
        add("w:" + s, 1.0)
    for left, right in zip(stems, stems[1:]):
        add(f"b:{left} {right}", 0.5)
    for word in content:
        padded = f" {word} "
        grams = [padded[i : i + n] for n in (3, 4) for i in range(len(padded) - n + 1)]
        for gram in grams:  # a word's n-grams together weigh as much as half of the word
            add("c:" + gram, 0.5 / len(grams))
    return weights


@lru_cache(maxsize=65_536)
def _slot(feature: str, dimensions: int) -> tuple[int, float]:
    """Where a feature lands and with which sign: a stable hash (blake2b), never Python's per-process hash()."""
    digest = blake2b(feature.encode(), digest_size=8).digest()
    return int.from_bytes(digest[:6], "big") % dimensions, 1.0 if digest[7] & 1 else -1.0


def fallback_vector(dimensions: int) -> list[float]:
    """The unit vector of a text with no features (empty, or punctuation alone): never the zero vector."""
    vector = [0.0] * dimensions
    index, sign = _slot("\0empty", dimensions)
    vector[index] = sign
    return vector


def normalised(vector: list[float]) -> list[float]:
    """`vector` scaled to length 1 (the fallback vector when it is zero)."""
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else fallback_vector(len(vector))


class HashedEmbedder:
    """Offline, deterministic, lexical embeddings: signed feature hashing into `dimensions` slots."""

    name = "hashed"

    def __init__(self, dimensions: int = 256):
        if dimensions < 1:
            raise ValueError(f"dimensions: must be at least 1, got {dimensions}")
        self.dimensions = dimensions

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self._one(text) for text in texts]

    def _one(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        for feature, weight in features(text).items():
            index, sign = _slot(feature, self.dimensions)
            vector[index] += sign * weight
        return normalised(vector)


class ModelEmbedder:
    """Embeddings from a provider of the LLM seam, asked for `dimensions` floats, normalised.

    Throttling, 5xx, timeouts, connection errors and unusable answers are retried by the seam with exponential
    backoff and jitter, honouring Retry-After, up to `max_attempts` (no time budget beyond each call's timeout); then
    EngineError.
    """

    name = "none"

    def __init__(
        self,
        *,
        model: str,
        dimensions: int,
        timeout: float = 30.0,
        max_attempts: int = 4,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        sleep: Callable[[float], None] = time.sleep,
        rng: Callable[[], float] = random.random,
        **provider_options: Any,
    ):
        if max_attempts < 1:
            raise ValueError(f"max_attempts: must be at least 1, got {max_attempts}")
        self.model, self.dimensions = model, dimensions
        self.timeout, self.max_attempts = timeout, max_attempts
        self.backoff_base, self.backoff_max = backoff_base, backoff_max
        self._sleep, self._rng = sleep, rng
        self._provider_options = provider_options
        self._llm: Model | None = None

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text; raises EngineError when the endpoint fails or answers nothing usable."""
        vectors = [fallback_vector(self.dimensions) for _ in texts]
        asked = [i for i, text in enumerate(texts) if text.strip()]  # the APIs refuse empty input
        llm = self._model()
        batch = llm.batch_size()
        for start in range(0, len(asked), batch):
            chunk = asked[start : start + batch]
            for i, vector in zip(chunk, self._request(llm, [texts[i] for i in chunk])):
                vectors[i] = vector
        return vectors

    def _model(self) -> Model:
        if self._llm is None:
            from precis.llm import model_of  # the provider's client (openai, about 0.7 s): only when asked for

            self._llm = model_of(
                self.name,
                model=self.model,
                timeout=self.timeout,
                max_attempts=self.max_attempts,
                backoff_base=self.backoff_base,
                backoff_max=self.backoff_max,
                sleep=self._sleep,
                rng=self._rng,
                **self._provider_options,
            )
        return self._llm

    def _request(self, llm: Model, texts: list[str]) -> list[list[float]]:
        def attempt(timeout: float) -> list[list[float]]:
            return self._vectors_of(llm.embed(texts, dimensions=self.dimensions, timeout=timeout), len(texts))

        vectors, _attempts = llm.retrying(attempt, math.inf, name=f"{self.name} embedder")
        return vectors

    def _vectors_of(self, data: list[Any], count: int) -> list[list[float]]:
        if len(data) != count:
            raise BadAnswer(f"{len(data)} embeddings for {count} texts")
        vectors = []
        for vector in data:
            if not isinstance(vector, list) or not all(isinstance(x, (int, float)) for x in vector):
                raise BadAnswer("an embedding that is not a list of numbers")
            if len(vector) != self.dimensions:
                # The model ignores `dimensions` (or has fewer): asking again cannot help.
                raise BadAnswer(
                    f"model {self.model} answered {len(vector)} dimensions, not {self.dimensions}", retryable=False
                )
            if not all(math.isfinite(x) for x in vector):
                raise BadAnswer("an embedding with a non-finite number")
            vectors.append(normalised([float(x) for x in vector]))
        return vectors


class OpenAIEmbedder(ModelEmbedder):
    """Embeddings from an OpenAI-compatible endpoint (256 texts a request)."""

    name = "openai"

    def __init__(
        self, *, model: str, dimensions: int, base_url: str | None = None, api_key: str | None = None, **options: Any
    ):
        if not (base_url or api_key):
            raise EngineError(
                "openai embedder: neither OPENAI_BASE_URL nor OPENAI_API_KEY is configured", retryable=False
            )
        super().__init__(model=model, dimensions=dimensions, base_url=base_url, api_key=api_key, **options)


class BedrockEmbedder(ModelEmbedder):
    """Embeddings from Amazon Bedrock through the function's IAM role: Titan Text Embeddings V2 (256, 512 or 1024
    dimensions, one text a request) or Cohere Embed (up to 96 texts a request)."""

    name = "bedrock"

    def __init__(self, *, model: str, dimensions: int, region: str | None = None, **options: Any):
        super().__init__(model=model, dimensions=dimensions, region=region, **options)


def get_embedder(settings: Settings) -> Embedder:
    """The embedder `settings` (precis.settings.Settings) configure, one per distinct configuration."""
    return _embedder(
        settings.embedder,
        settings.model_for("embed"),
        settings.embed_dimensions,
        getattr(settings, "llm_base_url", None),
        getattr(settings, "llm_api_key", None),
        getattr(settings, "llm_timeout", None),
        getattr(settings, "llm_max_attempts", None),
        getattr(settings, "bedrock_region", None),
    )


def embed_query(text: str) -> list[float]:
    """The deployment's embedding of one query text (a search's, a recall's, a representation's)."""
    return configured_embedder().embed([text])[0]


def semantic_query(settings: Settings) -> Callable[[str], list[float]] | None:
    """`embed_query` when `settings` embed by meaning; None for `hashed`, whose vectors add nothing to BM25's words."""
    return embed_query if settings.embedder != "hashed" else None


def configured_embedder() -> Embedder:
    """This deployment's embedder (openai: with the LLM API key from Secrets Manager when the environment has none)."""
    from precis.secrets import with_llm_key
    from precis.settings import get_settings

    settings = get_settings()
    return get_embedder(with_llm_key(settings) if settings.embedder == "openai" else settings)


@lru_cache(maxsize=8)
def _embedder(
    kind: str,
    model: str,
    dimensions: int,
    base_url: str | None,
    api_key: str | None,
    timeout: float | None,
    max_attempts: int | None,
    region: str | None = None,
) -> Embedder:
    if kind == "hashed":
        return HashedEmbedder(dimensions)
    if kind == "openai":
        return OpenAIEmbedder(
            model=model,
            dimensions=dimensions,
            base_url=base_url,
            api_key=api_key,
            timeout=timeout or 30.0,
            max_attempts=max_attempts or 4,
        )
    if kind == "bedrock":
        return BedrockEmbedder(
            model=model, dimensions=dimensions, region=region, timeout=timeout or 30.0, max_attempts=max_attempts or 4
        )
    raise ValueError(f"embedder: must be hashed, openai or bedrock, got {kind!r}")
