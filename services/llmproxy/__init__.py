"""llmproxy: upstream OpenAI-compatible models behind one gRPC door."""
