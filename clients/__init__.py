"""Consumers of the mesh: the typed Python client and the reference IDE-side clients."""
