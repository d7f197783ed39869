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

gRPC's fork handlers are turned off too (``GRPC_ENABLE_FORK_SUPPORT=false``). A process that
serves gRPC also forks: the embedded Postgres runs its tools as another user when started as
root, which makes Python fork instead of vfork, and with fork support on gRPC's handlers
restart its poller in the child between fork and exec. About one such child in 170 died there
(SIGABRT or SIGBUS, 9-10 of 1,500 under load on 2 CPUs; a CI run lost initdb to it), none of
3,000 with the handlers off. No process here uses gRPC across a fork; children exec.
"""

from __future__ import annotations

import os

GRPC_TRANSPORT = (
    "-event_engine_client,-event_engine_listener,"
    "-event_engine_callback_cq,-event_engine_for_all_other_endpoints"
)
os.environ.setdefault("GRPC_EXPERIMENTS", GRPC_TRANSPORT)
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
