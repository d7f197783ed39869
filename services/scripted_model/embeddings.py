"""Deterministic text embeddings for the scripted model.

Feature hashing of lowercased word tokens and character trigrams into a fixed
number of dimensions, then L2 normalisation. Texts sharing words or word
fragments get similar vectors, which is enough for retrieval tests without a
real embedding model. Results are stable across processes (no `hash()`).
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import struct
from collections.abc import Sequence
from typing import Any

from services.scripted_model.chunks import JsonObject, count_tokens
from services.scripted_model.errors import EmbeddingInputError

DIMENSIONS = 384
_WORD_RE = re.compile(r"\w+")
# Whole words carry more meaning than fragments; trigrams only smooth over morphology.
_WORD_WEIGHT = 1.0
_TRIGRAM_WEIGHT = 0.5


def _bucket(feature: str) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    # A hashed sign keeps collisions from always adding up (the "hashing trick").
    return value % DIMENSIONS, 1.0 if (value >> 32) & 1 else -1.0


def embed_text(text: str, dimensions: int = DIMENSIONS) -> list[float]:
    """A unit-length vector for text; the zero-feature text maps to a fixed unit vector."""
    vector = [0.0] * DIMENSIONS
    for word in _WORD_RE.findall(text.lower()):
        index, sign = _bucket("w:" + word)
        vector[index] += sign * _WORD_WEIGHT
        padded = f"#{word}#"
        for start in range(len(padded) - 2):
            index, sign = _bucket("t:" + padded[start : start + 3])
            vector[index] += sign * _TRIGRAM_WEIGHT
    vector = vector[:dimensions]
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0.0:
        return [1.0] + [0.0] * (len(vector) - 1)
    return [v / norm for v in vector]


def encode_base64(vector: Sequence[float]) -> str:
    """Little-endian float32 bytes in base64, the way OpenAI sends `encoding_format=base64`."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def normalise_input(raw: Any) -> list[str]:
    """Accept a string, a list of strings, or token-id lists; return texts to embed."""
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list) and raw:
        if all(isinstance(item, str) for item in raw):
            return list(raw)
        if all(isinstance(item, int) for item in raw):
            return [_tokens_as_text(raw)]
        if all(isinstance(item, list) and item for item in raw):
            return [_tokens_as_text(item) for item in raw]
    raise EmbeddingInputError("input must be a non-empty string, list of strings or token lists")


def _tokens_as_text(tokens: list[Any]) -> str:
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise EmbeddingInputError("token lists must contain integers only")
    return " ".join(f"tok{t}" for t in tokens)


def embeddings_response(
    texts: Sequence[str], *, model: str, encoding_format: str, dimensions: int
) -> JsonObject:
    """The OpenAI `list` of embedding objects plus usage."""
    data = []
    for index, text in enumerate(texts):
        vector = embed_text(text, dimensions)
        embedding: list[float] | str = (
            encode_base64(vector) if encoding_format == "base64" else vector
        )
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    tokens = sum(count_tokens(text) for text in texts)
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
