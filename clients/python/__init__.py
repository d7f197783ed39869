"""The typed async Python client of the mesh (used by the gateway and the tests)."""

from clients.python.client import MeshClient, SessionStream

__all__ = ["MeshClient", "SessionStream"]
