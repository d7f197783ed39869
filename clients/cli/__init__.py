"""``codelab``: the terminal IDE. It runs the IDE's tools in the folder it starts in and talks
to the runtime only through the gateway's public WebSocket and REST protocol."""
