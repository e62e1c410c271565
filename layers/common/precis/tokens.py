"""Token counting with tiktoken, from encoding files that ship in the layer (no download, ever).

Counting happens at ingestion and in the summarizer; the read path never loads an encoding because every
stored thing carries its count.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tiktoken import Encoding

DEFAULT_ENCODING = "o200k_base"
_URLS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}
_SHIPPED = Path(__file__).resolve().parent / "encodings"

# OpenAI's chat format: every message costs a few tokens of framing, every reply is primed with 3.
_TOKENS_PER_MESSAGE = 3
_TOKENS_PER_NAME = 1
_REPLY_PRIMING = 3


@lru_cache(maxsize=4)
def encoding(name: str = DEFAULT_ENCODING) -> Encoding:
    """The tiktoken encoding `name`, loaded from the shipped files; fails loudly rather than downloading."""
    if name not in _URLS:
        raise ValueError(f"unknown encoding {name!r}; shipped: {', '.join(sorted(_URLS))}")
    cache_dir = Path(os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(_SHIPPED)))
    if not (cache_dir / hashlib.sha1(_URLS[name].encode()).hexdigest()).exists():
        raise RuntimeError(
            f"tiktoken encoding {name} is not in {cache_dir}; run `make encodings` (tiktoken would "
            "otherwise try to download it)"
        )
    import tiktoken  # deferred: loading an encoding costs ~0.5 s, only writers pay it

    return tiktoken.get_encoding(name)


def count_text(text: str, encoding_name: str = DEFAULT_ENCODING) -> int:
    """Tokens of `text`; special-token markers in user text are counted as ordinary text."""
    if not text:
        return 0
    return len(encoding(encoding_name).encode_ordinary(text))


def count_messages(messages: Iterable[Mapping[str, str]], encoding_name: str = DEFAULT_ENCODING) -> int:
    """Tokens a list of chat messages ({"role", "content", "name"?}) costs as a model prompt."""
    total = _REPLY_PRIMING
    for message in messages:
        total += _TOKENS_PER_MESSAGE
        for key, value in message.items():
            total += count_text(value or "", encoding_name)
            if key == "name":
                total += _TOKENS_PER_NAME
    return total
