"""Every UI route checks every parameter before it answers, and the guard is consistent.

A bad value (negative, huge, not a whole number, not digits at all, a run that does not
exist, a run id that cannot be one) gets a 400 or 404 with a message, never a 200 that
fails once the answer has begun (a live stream that fails is asked again by the browser
every second). The loopback test is the same at start and per request (all of 127.0.0.0/8
and ::1), and the redirect that follows `?token=` stays on the site.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the UI needs its extra: pip install '.[ui]'")
pytest.importorskip("uvicorn", reason="the UI needs its extra: pip install '.[ui]'")

from ui_support import get, serving

import eventlog
from eventlog.events import LLMCallStarted, StepCompleted, UserMessage
from eventlog.ui.guard import _host_name, _same_site, is_loopback

ROOT = Path(__file__).resolve().parent.parent

BAD_NUMBERS = [
    "-5",
    "-1",
    "99999999999999999999999",
    "9" * 5000,
    "1.5",
    "x",
    "1e3",
    "%201",
    "%2B1",
    "0x10",
    "%D9%A1",
    "%00",
]
ROUTES = {  # route: (parameters that are numbers, the run parameter's name)
    "/": (["page"], None),
    "/run": (["at", "after", "b", "before"], "id"),
    "/run/state": (["at"], "id"),
    "/run/state.json": (["at"], "id"),
    "/run/diff": (["a", "b"], "id"),
    "/run/diff.json": (["a", "b"], "id"),
    "/run/prompt": (["at"], "id"),
    "/run/find": (["from"], "id"),
    "/stream": (["position"], "run"),
}
BAD_RUNS = ["nope", "x" * 2000, "%ED%A0%80", "%00"]


def _request(url: str, target: str, timeout: float = 10) -> tuple[int, str, str]:
    """(status, content type, the first bytes of the body) of a GET: a stream is not read to its end."""
    port = int(url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", target)
        response = conn.getresponse()
        body = (
            response.read1(200) if response.getheader("content-type", "").startswith("text/event") else response.read()
        )
        return response.status, response.getheader("content-type", ""), body.decode("utf-8", "replace")
    finally:
        conn.close()


@pytest.fixture
def ui(log: eventlog.EventLog) -> Any:
    log.append_many("r", [StepCompleted(node=f"n{i}", superstep=i, update={"i": i}) for i in range(1, 6)])
    log.append("r", LLMCallStarted(call_id="c", model="m"))
    log.append("s", UserMessage(content="hi"))
    with serving(log) as url:
        yield url


def test_every_route_refuses_every_bad_number_before_it_answers(ui: str) -> None:
    for route, (numbers, run) in ROUTES.items():
        base = f"{route}?{run}=r" if run else route
        for name in numbers:
            for bad in BAD_NUMBERS:
                target = f"{base}{'&' if '?' in base else '?'}{name}={bad}"
                status, kind, body = _request(ui, target)
                assert status in (400, 404), (target, status, body[:200])
                assert "event-stream" not in kind and name in body, (target, body[:300])


def test_offsets_past_the_head_are_not_found(ui: str) -> None:
    for route, (numbers, run) in ROUTES.items():
        if run != "id":
            continue
        for name in numbers:
            status, _, body = _request(ui, f"{route}?id=r&{name}=7")
            assert status == 404 and "out of range" in body, (route, name, body[:300])


def test_every_route_refuses_a_run_that_is_not_there(ui: str) -> None:
    for route, (_, run) in ROUTES.items():
        if run is None:
            continue
        for bad in BAD_RUNS:
            status, kind, body = _request(ui, f"{route}?{run}={bad}")
            assert status in (400, 404), (route, bad, status, body[:200])
            assert "event-stream" not in kind
        status, _, body = _request(ui, f"{route}?{run}=")
        assert status == 400 and "no run given" in body, (route, body[:200])


BAD_WORDS = [  # route and parameters: each is a 400 naming the parameter
    "/?status=lost",
    "/?since=1y",
    "/?sort=random",
    "/?kind=%3Cscript%3E",
    "/?q=" + "x" * 1200,
    "/run?id=r&kind=a%20b",
    "/run?id=r&q=" + "x" * 201,
    "/run/find?id=r&kind=failed&direction=sideways",
    "/run/find?id=r&kind=%22",
]


def test_every_word_parameter_is_one_it_knows(ui: str) -> None:
    for target in BAD_WORDS:
        status, _, body = _request(ui, target)
        name = target.split("&")[-1].split("?")[-1].split("=")[0]
        assert status == 400 and name in body, (target, status, body[:300])
    status, kind, body = _request(ui, "/run/find?id=r")
    assert status == 400 and kind == "application/json" and "kind=" in body


def test_the_stream_refuses_a_position_past_the_feed_and_takes_good_ones(ui: str, log: eventlog.EventLog) -> None:
    end = log.position()
    status, _, body = _request(ui, f"/stream?position={end + 1}")
    assert status == 400 and "position" in body
    for target in ("/stream", f"/stream?position={end}", "/stream?position=0&run=r", "/stream?position="):
        status, kind, body = _request(ui, target)
        assert status == 200 and kind.startswith("text/event-stream") and body.startswith("retry:"), target


def test_a_good_request_still_answers(ui: str) -> None:
    for target in (
        "/",
        "/?page=0",
        "/?page=3",
        "/run?id=r",
        "/run?id=r&at=2&b=3",
        "/run/state?id=r&at=",
        "/run/diff?id=r&a=0&b=head",
        "/?q=r&status=running&kind=graph&since=1h&sort=events",
        "/run?id=r&kind=step&q=n2&before=5",
        "/run/find?id=r&kind=step&from=2&direction=previous",
    ):
        assert _request(ui, target)[0] == 200, target
    assert _request(ui, "/run/prompt?id=r&at=6")[0] == 200


def test_a_fork_request_is_checked_before_it_is_done(log: eventlog.EventLog) -> None:
    import re

    log.append_many("r", [StepCompleted(node="n", superstep=i) for i in range(1, 4)])
    with serving(log, allow_writes=True) as url:
        _, page, _ = get(f"{url}/run?id=r")
        key = re.search(r'<meta name="eventlog-write" content="([^"]+)">', page).group(1)
        deep = b'{"run":"r","at":1,"new":"f","x":' + b"[" * 10000 + b"]" * 10000 + b"}"
        bodies = [
            (b"[" * 10000 + b"]" * 10000, 400),
            (deep, 400),
            (b'{"run":"r","at":-1,"new":"f"}', 404),
            (b'{"run":"r","at":99999999999999999999999,"new":"f"}', 400),
            (b'{"run":"r","at":"1","new":"f"}', 400),
            (b'{"run":"nope","at":1,"new":"f"}', 404),
            (b'{"run":"r","at":1,"new":"' + b"x" * 2000 + b'"}', 400),
            (b'{"run":"r","at":1,"new":"  "}', 400),
            (b'{"run":"r","at":1,"new":"f","pad":"' + b"x" * 300_000 + b'"}', 413),
        ]
        for body, expected in bodies:
            status, text, _ = get(url + "/run/fork", {"x-eventlog-write": key}, body)
            assert status == expected, (body[:80], status, text[:300])
    assert sorted(log.runs()) == ["r"]


# -- the guard -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("LOCALHOST", True),
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("127.255.255.254", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
        ("attacker.example", False),
        ("localhost.attacker.example", False),
        ("127.0.0.1.nip.io", False),
    ],
)
def test_loopback_is_one_test(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    assert is_loopback(_host_name(host if host.startswith("[") or ":" not in host else f"[{host}]") + "") is loopback


@pytest.mark.parametrize(
    ("header", "name"),
    [("127.0.0.2:8377", "127.0.0.2"), ("[::1]:80", "[::1]"), ("localhost", "localhost"), ("a.example:1", "a.example")],
)
def test_the_host_header_without_its_port(header: str, name: str) -> None:
    assert _host_name(header) == name


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def test_a_ui_on_another_loopback_address_answers_its_requests(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log") as log:
        log.append("r", UserMessage(content="hi"))
    port = _free_port("127.0.0.2")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "eventlog",
            "ui",
            "--log",
            str(tmp_path / "log"),
            "--host",
            "127.0.0.2",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                status, body, _ = get(f"http://127.0.0.2:{port}/")
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.1)
        assert status == 200 and "r" in body
        assert get(f"http://127.0.0.2:{port}/", {"Host": f"127.0.0.2:{port}"})[0] == 200
        assert get(f"http://127.0.0.2:{port}/", {"Host": "attacker.example"})[0] == 403
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize(
    "path",
    [
        "//other.example/",
        "///other.example/x",
        "/\\other.example/",
        "/\\/other.example",
        "//other.example/%2F..",
        "/%2F%2Fother.example",
    ],
)
def test_the_redirect_after_a_token_stays_on_the_site(path: str) -> None:
    log = eventlog.open(":memory:")
    with serving(log, token="s3cret", loopback=False) as url:
        port = int(url.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", path + "?token=s3cret&x=1")
        response = conn.getresponse()
        location = response.getheader("location")
        conn.close()
    assert response.status == 303
    assert location.startswith("/") and not location.startswith(("//", "/\\")), location
    assert location.endswith("?x=1")


@pytest.mark.parametrize(
    "path", ["//a.example/", "/\\a.example", "/\t/a.example", "/%2F/a", "/\r\nSet-Cookie: x=1", "http://a/"]
)
def test_same_site_paths(path: str) -> None:
    out = _same_site(path)
    assert out.startswith("/") and out[1:2] not in ("/", "\\") and all(c.isprintable() and c != " " for c in out)


def test_a_stream_that_fails_after_it_began_says_end(log: eventlog.EventLog) -> None:
    from eventlog.record._keys import u64

    log.append_many("r", [UserMessage(content="a"), UserMessage(content="b")])
    number = log.store.read(lambda txn: log._runs.require(txn, "r")).number
    log.store.write(lambda txn: txn.put("events", u64(number) + u64(2), b"garbage that fails its checks"))
    with serving(log) as url:
        port = int(url.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        conn.request("GET", "/stream?position=0")
        response = conn.getresponse()
        assert response.status == 200  # the request was good: the damage is met once the stream runs
        rest = response.read().decode()  # the stream ends (the page is told to stop asking)
        conn.close()
    assert "event: end" in rest
    assert "corrupt" in json.loads(rest.split("event: end\ndata: ", 1)[1].split("\n", 1)[0])["message"]
