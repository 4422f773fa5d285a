"""`eventlog ui`: a time-travel viewer for a log's runs, in the browser.

    eventlog ui --log runs.lmdb --open

A local web page over a log (LMDB or PostgreSQL): the runs and their fork tree; a run's
timeline, read as a conversation or as supersteps where it is one; the state at any offset
and what changed between two; new events as they are committed. It reads only, unless
started with `allow_writes` (then a fork button appears). It binds to 127.0.0.1 unless
told otherwise, and then it wants a token. Needs the `ui` extra: `pip install 'eventlog[ui]'`.

See docs/guides/ui.md.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import urllib.parse
import webbrowser
from collections.abc import Callable
from typing import Any

import eventlog
from eventlog.errors import EventLogError

from .app import create_app
from .guard import UI, is_loopback
from .spans import Prices, read_prices

__all__ = ["UI", "Prices", "RemoteBindError", "create_app", "default_port", "read_prices", "serve"]

default_port = 8377
"""The port `eventlog ui` listens on unless told another (0: any free port)."""


class RemoteBindError(EventLogError):
    """The UI was asked to listen on an address other machines reach, without saying it may."""


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _shown(path: str) -> str:
    """The log's name as the page shows it: a PostgreSQL URL without its password."""
    parts = urllib.parse.urlsplit(path)
    if parts.scheme.startswith("postgres") and parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return path


def serve(
    path: str,
    *,
    host: str = "127.0.0.1",
    port: int = default_port,
    allow_writes: bool = False,
    allow_remote: bool = False,
    token: str | None = None,
    open_browser: bool = False,
    ready: Callable[[str], None] | None = None,
    key: bytes | None = None,
    prices: Prices | None = None,
) -> None:
    """Serve the UI over the log at `path` until interrupted.

    A `host` that is not a loopback address needs `allow_remote`, and every request must
    then carry a token (`token`, or a new random one); `ready` is called with the URL to
    open (the token in it) once the port listens. Without `allow_writes` the log is opened
    read-only; a log that does not exist is not created (NoLogError). `key` opens a sealed log;
    `prices` give the waterfall its costs (`read_prices`).
    """
    import uvicorn

    loopback = is_loopback(host)
    if not loopback and not allow_remote:
        raise RemoteBindError(
            f"--host {host} lets other machines read the log: pass --allow-remote too (a token is then required)"
        )
    if not loopback and not token:
        token = secrets.token_urlsafe(24)
    with (
        eventlog.open(path, readonly=not allow_writes, create=False, key=key) as log,
        contextlib.closing(_listen(host, port)) as sock,
    ):
        shown = f"[{host.strip('[]')}]" if ":" in host else host
        url = f"http://{shown}:{sock.getsockname()[1]}/" + (f"?token={token}" if token else "")
        app = create_app(
            log, name=_shown(path), allow_writes=allow_writes, token=token, loopback=loopback, prices=prices
        )

        class Server(uvicorn.Server):
            def handle_exit(self, sig: int, frame: Any) -> None:
                app.stop_streams()  # a page left open does not hold the server up
                super().handle_exit(sig, frame)

        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=1)
        server = Server(config)
        if ready is not None:
            ready(url)
        if open_browser:
            webbrowser.open(url)
        server.run(sockets=[sock])
