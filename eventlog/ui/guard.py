"""The guard around the UI's application: the requests it must not answer (a Host that is not
this machine's, a missing token) are refused before the app sees them, and every response gets
the security headers."""

from __future__ import annotations

import hmac
import ipaddress
from urllib.parse import parse_qsl, quote, urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["UI", "is_loopback"]

_COOKIE = "eventlog_ui_token"
_CSP = (
    b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    b"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_HEADERS = [
    (b"content-security-policy", _CSP),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


def is_loopback(host: str) -> bool:
    """True for a host name or address that only this machine reaches: `localhost`, any
    address of 127.0.0.0/8, and ::1. The same test decides at start whether the UI is bound
    to this machine only and, then, which Host headers a request may name."""
    name = host.strip().lower().rstrip(".")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    """The host of a Host header, without its port: `[::1]:80` is `[::1]`, `a:80` is `a`."""
    if header.startswith("["):
        return header[: header.find("]") + 1] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _same_site(path: str) -> str:
    """A path this site serves, for a redirect: one leading slash, the rest percent-encoded, so
    that `//other.example/`, `/\\other.example` or a scheme never lead off the site."""
    return "/" + quote(path.lstrip("/\\"), safe="/:@!$&'()*+,;=-._~")


class UI:
    """The UI's ASGI application. It refuses the requests it must not answer, and sets the
    security headers of every response.

    On a loopback address, a request must name a loopback host (so a web page cannot reach the
    UI through a rebound DNS name). With a token, a request must carry it: `?token=` once (it
    becomes a cookie), the cookie, or `Authorization: Bearer`.
    """

    def __init__(self, app: ASGIApp, *, token: str | None, loopback: bool) -> None:
        self.app = app
        self.token = token
        self.loopback = loopback
        self.stopping = False

    def stop_streams(self) -> None:
        """End the live streams within a poll, so that the server can stop without waiting for them."""
        self.stopping = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        if self.loopback and not self._host_ok(headers.get("host", "")):
            await _plain(send, 403, "this address serves only requests to localhost")
            return
        if self.token is not None:
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            given = query.pop("token", None)
            if given is not None and hmac.compare_digest(given.encode(), self.token.encode()):
                target = _same_site(scope["path"]) + ("?" + urlencode(query) if query else "")
                cookie = f"{_COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict"
                await _redirect(send, target, cookie)
                return
            if not self._token_ok(headers):
                await _plain(send, 401, "this eventlog ui needs its token: open the URL it printed, with ?token=")
                return

        async def secure(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        await self.app(scope, receive, secure)

    def _host_ok(self, host: str) -> bool:
        return is_loopback(_host_name(host))

    def _token_ok(self, headers: dict[str, str]) -> bool:
        assert self.token is not None
        token = self.token.encode()
        cookies = dict(part.strip().split("=", 1) for part in headers.get("cookie", "").split(";") if "=" in part)
        if hmac.compare_digest(cookies.get(_COOKIE, "").encode(), token):
            return True
        auth = headers.get("authorization", "")
        return auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].encode(), token)


async def _plain(send: Send, status: int, text: str) -> None:
    body = (text + "\n").encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + _HEADERS})
    await send({"type": "http.response.body", "body": body})


async def _redirect(send: Send, target: str, cookie: str) -> None:
    headers = [
        (b"location", target.encode("latin-1")),
        (b"set-cookie", cookie.encode("latin-1")),
        (b"content-length", b"0"),
    ]
    await send({"type": "http.response.start", "status": 303, "headers": headers + _HEADERS})
    await send({"type": "http.response.body", "body": b""})
