"""The embedders' old home: they are `precis.llm.embeddings` now, beside the chat models. Kept for the callers outside
the layer that still import it from here (the local Bedrock stand-in)."""

from precis.llm.embeddings import (
    BedrockEmbedder,
    HashedEmbedder,
    ModelEmbedder,
    OpenAIEmbedder,
    configured_embedder,
    embed_query,
    fallback_vector,
    features,
    get_embedder,
    normalised,
    stem,
    terms,
)

__all__ = [
    "BedrockEmbedder",
    "HashedEmbedder",
    "ModelEmbedder",
    "OpenAIEmbedder",
    "configured_embedder",
    "embed_query",
    "fallback_vector",
    "features",
    "get_embedder",
    "normalised",
    "stem",
    "terms",
]
