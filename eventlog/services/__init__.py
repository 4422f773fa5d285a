"""The services over the core log: checkpoints, run writers, fork/prune/delete/repair and verify
(docs/architecture.md, "Layers")."""
