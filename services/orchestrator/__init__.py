"""orchestrator: sessions, agents, the agent loop and the IDE Stream."""
