"""toolsearch: the tool catalog and retrieval over it."""
