"""Export runs to a JSON Lines file and import them into another log, losslessly.

An export file is UTF-8 JSON, one object a line, each tagged by its `type`::

    {"type":"header","format":"eventlog-export","version":1}
    {"type":"run","run_id":"run-1","parent":null,"fork_offset":0,"head":3,"created_ns":...}
    {"type":"entry","run_id":"run-1","offset":1,"event_id":"...","time_ns":...,"meta":null,
     "event":{"kind":"run.started","input":{"topic":"tides"}}}
    {"type":"checkpoint","run_id":"run-1","checkpoint_id":"...","offset":3,...}
    {"type":"end","runs":1,"entries":3,"checkpoints":1}

A run comes after its parent, with its own entries (offsets after its fork offset, in
order) and then its checkpoints, oldest first. Events are JSON with their kind tag and are
decoded with the registered kinds. Where JSON cannot carry a value exactly (bytes, NaN,
integer map keys), the entry or checkpoint also holds `msgpack`: the exact msgpack of
`[meta, event]` (or of the metadata), base64-encoded, and import reads that instead. The
`end` line counts what came before it, so a cut file is refused.

Import reads the file twice: once to check all of it (and that none of its runs exist),
then to write. Entry ids, times, metadata and event bytes come out identical, and so does
`state_at` at every offset of every run; forks are forks again, sharing their parent's
events. A fork's creation time and a checkpoint's save time are those of the import, and
every imported event id is indexed as a caller's id (appending it again is a no-op).
"""

from ._export import export_runs
from ._format import FORMAT, VERSION, ExportFileError, NotExportableError, Progress, TransferSummary
from ._import import import_runs

__all__ = [
    "FORMAT",
    "VERSION",
    "ExportFileError",
    "NotExportableError",
    "Progress",
    "TransferSummary",
    "export_runs",
    "import_runs",
]
