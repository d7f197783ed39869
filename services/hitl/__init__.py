"""Human-in-the-loop approval policy: decides which proposed tool calls need a human."""
