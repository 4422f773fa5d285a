"""The record format: event kinds encoded and checked (codec), compressed, sealed and framed
(pipeline), the key space (keys) and the records of runs and checkpoints (docs/architecture.md, "Layers")."""
