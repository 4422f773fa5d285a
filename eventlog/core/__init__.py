"""The core log: runs and their lineage, the group commit, reads and the feed, replay, zstd
dictionaries, the format record, and the fold's generic reducer (docs/architecture.md, "Layers")."""
