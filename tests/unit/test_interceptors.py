"""The services' observing interceptor: each method's handler wrapped once, every call
counted under its own outcome."""

from __future__ import annotations

from typing import Any, NamedTuple, cast

import grpc
import pytest
from grpc import aio
from prometheus_client import REGISTRY

from services.common.interceptors import ObservingInterceptor

SERVICE = "interceptor-test"


class Details(NamedTuple):
    """What grpc hands an interceptor about a call."""

    method: str
    invocation_metadata: tuple[tuple[str, str], ...] = ()


def details(method: str) -> grpc.HandlerCallDetails:
    return cast(grpc.HandlerCallDetails, Details(method))


def calls(method: str, code: str) -> float:
    labels = {"service": SERVICE, "method": method, "code": code}
    return REGISTRY.get_sample_value("codelab_grpc_calls_total", labels) or 0.0


async def test_a_methods_handler_is_wrapped_once_and_every_call_counted() -> None:
    outcomes: list[BaseException | None] = [None, aio.AbortError(), None]

    async def behaviour(request: str, context: Any) -> str:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        return request

    handler = grpc.unary_unary_rpc_method_handler(behaviour)
    interceptor = ObservingInterceptor(SERVICE)

    async def continuation(_: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        return handler

    before_ok, before_aborted = calls("Echo", "OK"), calls("Echo", "ABORTED_BY_HANDLER")
    first = await interceptor.intercept_service(continuation, details("/x.Svc/Echo"))
    second = await interceptor.intercept_service(continuation, details("/x.Svc/Echo"))
    assert first is second and first is not handler
    assert await first.unary_unary("hi", None) == "hi"
    with pytest.raises(aio.AbortError):
        await second.unary_unary("hi", None)
    assert await second.unary_unary("again", None) == "again"
    assert calls("Echo", "OK") == before_ok + 2
    assert calls("Echo", "ABORTED_BY_HANDLER") == before_aborted + 1


async def test_a_method_whose_handler_changed_is_wrapped_again() -> None:
    async def one(request: Any, context: Any) -> str:
        return "one"

    async def two(request: Any, context: Any) -> str:
        return "two"

    handlers = [grpc.unary_unary_rpc_method_handler(f) for f in (one, two)]
    interceptor = ObservingInterceptor(SERVICE)

    async def continuation(_: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        return handlers[0]

    first = await interceptor.intercept_service(continuation, details("/x.Svc/Swap"))
    handlers.pop(0)
    second = await interceptor.intercept_service(continuation, details("/x.Svc/Swap"))
    assert await first.unary_unary(None, None) == "one"
    assert await second.unary_unary(None, None) == "two"
