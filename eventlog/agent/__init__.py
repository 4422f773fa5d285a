"""The agent layer: the standard event kinds' policies, the graph runner and the conversation loop.
The core log does not import it (docs/architecture.md, "Layers")."""
