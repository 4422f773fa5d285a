"""Stores: the narrow transactional interface the log is built on, and its implementations."""

from ._base import TABLES, Store, Txn
from .lmdb import LMDBStore
from .memory import MemoryStore

__all__ = ["TABLES", "LMDBStore", "MemoryStore", "Store", "Txn"]
