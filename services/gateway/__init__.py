"""gateway: the IDE-facing HTTP/WebSocket shim over the mesh. It holds no session state."""
