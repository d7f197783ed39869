"""grpc.aio's completions reach a loop that fell behind all at once, not one per loop turn
(services/common/grpc_wakeups.py).

The client runs in a process of its own: grpc.aio's completion queue is one per process,
and a test process that froze its heap earlier (``settle_heap``) hides it from ``gc``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Each answer waits a moment, so that every call is sent before the answers come.
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

# 800 calls: more completions than the wake-up socket holds pending (~270 one-byte
# writes). The loop is held up (as under load) while the answers arrive, then the loop
# turns it takes to run them all are counted.
CLIENT = """
import asyncio, sys, time, grpc
from services.common.grpc_wakeups import unblock_wakeups, wake_sockets
async def main(port, unblock):
    loop = asyncio.get_running_loop()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        if unblock:
            assert unblock_wakeups() and unblock_wakeups()  # a second call is fine
            assert not any(s.getblocking() for s in wake_sockets())
        echo = channel.unary_unary("/t.T/Echo")
        await echo(b"warm")
        calls = [asyncio.ensure_future(echo(b"x")) for _ in range(800)]
        await asyncio.sleep(0.1)
        time.sleep(1.5)
        turns = 0
        def tick():
            nonlocal turns
            turns += 1
            if not all(c.done() for c in calls):
                loop.call_soon(tick)
        tick()
        assert await asyncio.gather(*calls) == [b"x"] * 800
        print(turns)
asyncio.run(main(int(sys.argv[1]), sys.argv[2] == "unblock"))
"""


@pytest.fixture(scope="module")
def echo_port() -> Iterator[int]:
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    try:
        yield int(server.stdout.readline())
    finally:
        server.kill()
        server.wait(10)


def loop_turns(port: int, mode: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, str(port), mode],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


def test_completions_that_piled_up_reach_the_loop_in_a_few_turns(echo_port: int) -> None:
    assert loop_turns(echo_port, "unblock") < 100


def test_left_blocking_the_poller_hands_them_over_one_per_turn(echo_port: int) -> None:
    # Why the module exists (grpcio 1.85): without it the same answers take hundreds of
    # loop turns. A gRPC that wakes the loop another way fails here: look at the module.
    assert loop_turns(echo_port, "leave") > 200
