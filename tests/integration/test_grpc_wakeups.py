"""grpc.aio's completions reach a loop that fell behind all at once, not one per loop turn
(services/common/grpc_wakeups.py)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator

import grpc
import pytest

from services.common.grpc_wakeups import unblock_wakeups, wake_sockets

# A server in its own process, so it answers while this test's loop is blocked; each
# answer waits a moment so that every call is sent before the answers come.
SERVER = """
import asyncio, grpc
async def echo(request, context):
    await asyncio.sleep(0.3)
    return request
async def main():
    handler = grpc.method_handlers_generic_handler(
        "t.T", {"Echo": grpc.unary_unary_rpc_method_handler(echo)})
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()
asyncio.run(main())
"""
CALLS = 800
"""More completions than the wake-up socket holds pending (~270 one-byte writes)."""


@pytest.fixture(scope="module")
def echo_port() -> Iterator[int]:
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    try:
        yield int(server.stdout.readline())
    finally:
        server.kill()
        server.wait(10)


async def test_the_poller_s_end_is_made_non_blocking_and_stays_so(echo_port: int) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{echo_port}"):
        assert unblock_wakeups()
        assert unblock_wakeups()  # a second call (another server in the process) is fine
        sockets = wake_sockets()
        assert len(sockets) == 2 and not any(s.getblocking() for s in sockets)


async def test_completions_that_piled_up_reach_the_loop_in_a_few_turns(echo_port: int) -> None:
    loop = asyncio.get_running_loop()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{echo_port}") as channel:
        assert unblock_wakeups()
        echo = channel.unary_unary("/t.T/Echo")
        await echo(b"warm")
        calls = [asyncio.ensure_future(echo(b"x")) for _ in range(CALLS)]
        await asyncio.sleep(0.1)  # every call sent; the answers come ~0.2 s later
        time.sleep(1.5)  # noqa: ASYNC251 - the loop held up (as under load) while answers arrive

        turns = 0

        def tick() -> None:
            nonlocal turns
            turns += 1
            if not all(c.done() for c in calls):
                loop.call_soon(tick)

        tick()
        replies = await asyncio.gather(*calls)
        assert replies == [b"x"] * CALLS
        # Blocking, the poller hands the loop one completion per turn once ~270 are
        # pending: hundreds of turns here (checked by making it block again).
        assert turns < 100, turns
