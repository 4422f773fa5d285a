"""Stores: the narrow transactional interface the log is built on, and its implementations."""

from ._base import TABLES, KeyExistsError, Store, Txn
from .lmdb import LMDBStore
from .memory import MemoryStore

__all__ = ["TABLES", "KeyExistsError", "LMDBStore", "MemoryStore", "Store", "Txn"]
