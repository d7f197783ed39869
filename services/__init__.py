"""The runtime's services. Importing the package picks gRPC's transport for the process.

gRPC core reads ``GRPC_EXPERIMENTS`` once, when it first starts (the first server or channel),
and every service process imports this package before anything of gRPC. grpcio 1.85 serves
sockets through its EventEngine, which hands each received message from an engine thread to
grpc.aio's poller thread and then to the event loop; the older poller (iomgr, still in 1.85
behind these experiments) reads the socket on the poller thread itself. Measured on the
1,000-session live pass (alternating runs, 2 CPUs): the orchestrator's CPU 9.6-10.0 ->
8.4-8.6 s and the turn p50 4.1-4.6 -> 3.7-4.3 s; a unary call's round trip ~0.52 -> ~0.43 ms
between two processes. An operator's own ``GRPC_EXPERIMENTS`` (even empty) wins. gRPC plans
to remove these experiments; an upgrade that has removed them logs "Unknown experiment" at
start (``tests/unit/test_grpc_transport.py`` catches it) and runs the EventEngine again.
"""

from __future__ import annotations

import os

GRPC_TRANSPORT = (
    "-event_engine_client,-event_engine_listener,"
    "-event_engine_callback_cq,-event_engine_for_all_other_endpoints"
)
os.environ.setdefault("GRPC_EXPERIMENTS", GRPC_TRANSPORT)
