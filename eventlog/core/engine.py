"""`Engine`: the core of one log wired once — codec, runs, dictionaries, the format record, the
id source, the group commit, the reader and replay, and the signal every commit fires. The
sync face (`EventLog`) and the async face (`AsyncEventLog`) both work through one engine."""

from __future__ import annotations

from collections.abc import Callable

from ..record._keys import IdSource
from ..record.codec import Cipher, Codec
from ..store._base import Store
from ._commit import GroupCommit
from ._dictionaries import Dictionaries
from ._meta import open_meta
from ._reader import Reader
from ._replay import Replay
from ._runs import Runs
from ._signal import Signal

__all__ = ["Engine"]


class Engine:
    """The core of one log over one store."""

    def __init__(
        self,
        store: Store,
        clock: Callable[[], int],
        ids: Callable[[], str] | None,
        record_size_bytes_max: int,
        cipher: Cipher | None,
    ) -> None:
        self.store = store
        dictionaries: list[Dictionaries] = []
        self.codec = Codec(lambda dict_id: dictionaries[0].load(dict_id), record_size_bytes_max, cipher=cipher)
        self.runs = Runs(self.codec)
        self.dictionaries = Dictionaries(store, self.codec, self.runs)
        dictionaries.append(self.dictionaries)
        self.format = open_meta(store, self.codec, self.runs, self.dictionaries)
        self.id_source = IdSource(ids, self.codec.log_id if self.format >= 4 else b"")  # docs/format.md, "Event ids"
        self.committed = Signal()
        """Fired at each commit of this process, and at close."""
        self.commit = GroupCommit(store, self.codec, self.runs, self.id_source, clock, self._after_commit)
        self.reader = Reader(store, self.codec, self.runs)
        self.replay = Replay(store, self.codec, self.runs, self.reader)

    def _after_commit(self, position: int, events: int) -> None:
        self.dictionaries.after_commit(position, events)
        self.committed.fire()

    def commits(self) -> Signal:
        """What followers wait on: this process's commits, and others' where the store hears them (LISTEN)."""
        listen = getattr(self.store, "listen", None)
        if listen is not None:
            listen(self.committed.fire)
        return self.committed
