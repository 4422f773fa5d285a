"""The ASGI application: pages, fragments the page's script fetches, and a stream of changes."""

from __future__ import annotations

import contextlib
import hmac
import secrets
import threading
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import anyio.to_thread
import msgspec
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from eventlog import ConflictError, EventLog, EventLogError, __version__
from eventlog.errors import (
    InvalidArgumentError,
    InvalidRunIdError,
    OffsetOutOfRangeError,
    PrunedError,
    RunExistsError,
    RunReplacedError,
    UnknownRunError,
)
from eventlog.events import Resumed, StateUpdated
from eventlog.views import load_views

from . import answers, find, memory, model, params, readings, render, session_spans, spans, threads
from .guard import UI, is_loopback
from .live import feed_end, follow
from .render import environment

__all__ = ["UI", "create_app", "is_loopback"]

F = TypeVar("F", bound=msgspec.Struct)

_WRITE_HEADER = "x-eventlog-write"
_FRAGMENT_HEADER = "x-eventlog-fragment"
_WRITE_BODY_BYTES_MAX = 256 * 1024
"""The longest body of a fork (with its edited values) or a resume (with its value)."""


def _url(path: str, **fields: Any) -> str:
    query = urlencode({k: v for k, v in fields.items() if v is not None and v != ""})
    return path + ("?" + query if query else "")


class _ForkForm(msgspec.Struct):
    run: str
    at: int
    new: str
    number: int | None = None
    """The run number of the life of the run the page shows: a fork of another life is refused."""
    values: dict[str, Any] | None = None
    """Values to set in the fork before anything else runs (a `StateUpdated` event, as
    `Graph.update_state` writes): a fork with an edited state."""


class _ResumeForm(msgspec.Struct):
    run: str
    head: int
    """The head the page shows: a run that has gone on since is not answered (409)."""
    value: Any
    """The human's answer, as `Graph.resume(run, value=)` takes it."""
    number: int | None = None


def _json_response(doc: Any) -> Response:
    return Response(msgspec.json.encode(doc), media_type="application/json")


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: ".encode() + msgspec.json.encode(data) + b"\n\n"


def create_app(
    log: EventLog[Any],
    *,
    name: str = "",
    allow_writes: bool = False,
    token: str | None = None,
    loopback: bool = True,
    prices: spans.Prices | None = None,
) -> UI:
    """The UI over an open `log` (the caller closes it).

    `name` is shown as the log's name. Without `allow_writes` nothing is ever written: the
    fork button and the route behind it do not exist. `token`, when given, is required of
    every request. `loopback` (a UI bound to this machine only) refuses requests for other
    host names. `prices` (`spans.read_prices`) give the waterfall its costs. Call
    `stop_streams()` on the application before its server stops.
    """
    load_views()  # the installed integrations register their event kinds as they load
    templates = environment()
    write_key = secrets.token_urlsafe(24) if allow_writes else ""
    common: dict[str, Any] = {
        "log_name": name,
        "version": __version__,
        "write_key": write_key,
        "allow_writes": allow_writes,
        "url": _url,
    }

    def page(template: str, status: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(templates.get_template(template).render(**common, **context), status_code=status)

    index = find.RunIndex()

    def runs_page(request: Request) -> HTMLResponse:
        wanted = find.RunFilter(
            query=params.text(request, "q", 1100),
            status=params.choice(request, "status", ("", *find.STATUSES)),
            kind=params.kind(request),
            since=params.choice(request, "since", find.SINCE),
            sort=params.choice(request, "sort", find.SORTS, "activity"),
        )
        number = params.number(request, "page", 0) or 0
        position = feed_end(log)
        summaries = index.summaries(log)
        rows, total = find.select_runs(summaries, wanted, number, model.runs_page_max)
        rows = index.fresh(log, rows)
        context: dict[str, Any] = {
            "rows": rows,
            "total": total,
            "all_runs": len(summaries),
            "kinds": sorted({r.kind for r in summaries} | {"conversation", "graph", "events"}),
            "wanted": wanted,
            "filters": {"q": wanted.query, "status": wanted.status, "kind": wanted.kind, "since": wanted.since},
            "sort": None if wanted.sort == "activity" else wanted.sort,
            "page": number,
            "pages": max(1, -(-total // model.runs_page_max)),
            "position": position,
            "sorts": find.SORTS,
            "since": find.SINCE,
            "statuses": find.STATUSES,
        }
        if request.query_params.get("fragment"):
            return page("_runs_body.html", **context)
        return page("runs.html", **context)

    def run_view(request: Request) -> HTMLResponse:
        run_id = params.run_id(request)
        position = feed_end(log)  # before the window: an entry committed meanwhile comes again, never not at all
        info = model.run_page(log, run_id)
        head, base = info.summary.info.head, info.summary.info.base
        at, after, b, before = (params.in_run(request, n, run_id, base, head) for n in ("at", "after", "b", "before"))
        wanted = params.event_filter(request)
        if wanted:
            win = find.matching_window(log, info.summary.info, wanted, after=after, before=before, at=at)
        else:
            win = model.window(log, run_id, head, base, after, at)
        view_chat = None
        if info.view is not None:  # an integration's run: its view's messages, as a chat
            view_chat = readings.view_transcript(info.view.state(log, run_id, head if at is None else at))
        ways = model.ways_to_read(info, win.entries, view_chat is not None)
        reading = "timeline" if wanted else request.query_params.get("view", "")
        if reading not in ways:
            reading = ways[0]
        context: dict[str, Any] = {
            "run": info,
            "info": info.summary.info,
            "win": win,
            "readings": ways,
            "reading": reading,
            "at": head if at is None else at,
            "b": b,
            "position": position,
            "page_events": model.page_events,
            "history_max": model.history_rows_max,
            "spans_max": spans.run_totals_events_max,
            "priced": prices is not None,
            "wanted": wanted,
            "families": find.families(model.kind_of(e.event) for e in win.entries),
            "waiting": answers.waiting(log, run_id, head, info.view),  # the run's top: what it waits for now
        }
        shown = win.entries  # the page's events drawn in this answer
        if not (wanted or request.query_params.get("fragment")) and reading in ("timeline", "conversation", "steps"):
            shown = model.first_screen(win.entries, context["at"])  # a screen; the page asks for the rest
        context["rest"] = len(shown) < len(win.entries)
        if reading == "timeline":
            context["rows"] = readings.timeline(shown, info.checkpoints, info.forks)
        elif reading == "conversation":
            context["bubbles"] = view_chat if view_chat is not None else readings.transcript(shown)
        elif reading == "steps" and info.view is not None:  # a LangGraph thread's checkpoints and tasks
            context["steps"] = threads.thread_supersteps(shown)
        elif reading == "steps":
            context["steps"] = readings.supersteps(shown)
        elif reading == "waterfall" and info.view is not None and info.view.name in ("adk", "openai-agents"):
            context["fall"] = session_spans.session_waterfall(win.entries, win.after <= win.base, prices)
            context["run_totals"] = session_spans.session_totals(log, run_id, info.summary.info, prices)
        elif reading == "waterfall" and info.view is not None:  # a LangGraph thread's supersteps and tasks
            context["fall"] = threads.thread_waterfall(win.entries, first_page=win.after <= win.base)
            context["run_totals"] = None
        elif reading == "waterfall":
            context["fall"] = spans.waterfall(win.entries, first_page=win.after <= win.base, prices=prices)
            context["run_totals"] = spans.run_totals(log, run_id, info.summary.info, prices)
        elif info.view is not None:  # a page of its checkpoints, newest first: the newest `n` are read
            shown_max = model.history_rows_max
            skipped = shown_max * (params.number(request, "page", 0, high=model.history_pages_max) or 0)
            columns, rows = info.view.history(log, run_id, skipped + shown_max)
            context["history"] = (columns, rows[::-1][skipped:])
            context["history_page"] = (skipped // shown_max, len(rows) == skipped + shown_max)
            if info.view.name == "langgraph":
                context["branches"], context["branches_after"] = threads.branches(log, run_id, info.summary.info)
        template = "_panel.html" if request.query_params.get("fragment") else "run.html"
        return page(template, **context)

    def find_event(request: Request) -> Response:
        run_id = params.run_id(request)
        info = log.run_info(run_id)
        start = params.in_run(request, "from", run_id, info.base, info.head)
        direction = params.choice(request, "direction", ("next", "previous"), "next")
        wanted = params.event_filter(request)
        if not wanted:
            raise HTTPException(400, "say what to find: ?kind= (failed: the errors) or ?q=")
        start = (info.base if direction == "next" else info.head + 1) if start is None else start
        return _json_response(find.find(log, run_id, start, direction == "next", wanted, info))

    def _offset(request: Request, name: str, run_id: str) -> int:
        head = log.run_info(run_id).head
        value = params.in_run(request, name, run_id, 0, head)
        return head if value is None else value

    def state_fragment(request: Request) -> Response:
        run_id = params.run_id(request)
        json_route = request.scope["path"].endswith(".json")  # not request.url: see `holding`
        at = _offset(request, "at", run_id)
        view = model.view_for(log, run_id)
        doc = holding(model.state_doc(log, run_id, at, view))
        if json_route:
            return _json_response(doc)
        entry = log.entry(run_id, at) if at > log.run_info(run_id).base else None
        json, size = model.pretty_or_none(doc["state"])
        return page(
            "_state.html",
            run_id=run_id,
            at=at,
            doc=doc,
            json=json,
            size=size,
            entry=entry,
            kind=model.kind_of(entry.event) if entry else "",
            event_json=model.pretty(model.fields_of(entry.event)) if entry else "",
            fork_name=model.free_fork_name(log, run_id, at) if allow_writes else "",
            edit=model.editable_values(doc["state"], view) if allow_writes else None,
            head=log.run_info(run_id).head,
            waiting=answers.waiting(log, run_id, at, view, doc["state"] if view is None else None),
        )

    def node_fragment(request: Request) -> Response:
        """The items of one map or list of the state at an offset (`?path=` a JSON list of keys
        and indices; `from` and `upto`, a range of a long one): a subtree opened in the page."""
        run_id = params.run_id(request)
        at = _offset(request, "at", run_id)
        path = params.json_path(request, render.subtree_path_max)
        lo = params.number(request, "from", 0) or 0
        hi = params.number(request, "upto")
        state = holding(model.fields_shown(model.state_of(log, run_id, at, model.view_for(log, run_id))))
        try:
            html = render.subtree(state, path, lo, hi)
        except KeyError:
            raise HTTPException(404, f"the state after offset {at} has no map or list at {path!r}"[:300]) from None
        return HTMLResponse(str(html))

    def diff_fragment(request: Request) -> Response:
        run_id = params.run_id(request)
        a, b = _offset(request, "a", run_id), _offset(request, "b", run_id)
        doc = model.diff_doc(log, run_id, a, b, model.view_for(log, run_id))
        if request.scope["path"].endswith(".json"):
            return _json_response(doc)
        json, size = model.pretty_or_none(doc)
        shown_max = model.diff_items_shown_max
        return page("_diff.html", run_id=run_id, a=a, b=b, doc=doc, json=json, size=size, shown_max=shown_max)

    def prompt_fragment(request: Request) -> Response:
        run_id = params.run_id(request)
        at = _offset(request, "at", run_id)
        found = model.prompt_of(log, run_id, at)
        if found is None:
            raise HTTPException(400, f"offset {at} of run {run_id!r} is not an LLM call")
        event, messages = found
        return page(
            "_prompt.html",
            run_id=run_id,
            at=at,
            event=event,
            messages=messages,
            parameters=model.pretty(event.parameters),
        )

    def stream_from(request: Request) -> tuple[str | None, int]:
        """The stream's run (which must exist) and position (0 to the feed's end), checked before it answers."""
        run_id = params.run_id(request, "run") if "run" in request.query_params else None
        if run_id is not None:
            log.run_info(run_id)
        end = feed_end(log)
        after = params.number(request, "position", end, high=end)
        assert after is not None
        return run_id, after

    async def stream(request: Request) -> Response:
        run_id, after = await anyio.to_thread.run_sync(stream_from, request)

        async def changes() -> AsyncIterator[bytes]:
            yield b"retry: 1000\n\n"
            try:
                async for batch in follow(log, after, stop=lambda: guard.stopping):
                    if run_id is None:
                        yield _sse("runs", {"runs": sorted({e.run_id for e in batch}), "position": batch[-1].position})
                        continue
                    mine = [e for e in batch if e.run_id == run_id]
                    if mine:
                        last = mine[-1]
                        status = model.last_status(mine, default="")  # "": the page keeps the one it shows
                        change = {"head": last.offset, "status": status, "position": batch[-1].position}
                        yield _sse("run", {**change, "number": last.run_number})  # another: the run was made again
            except EventLogError as exc:  # the answer has begun: say why it ends, and the page stops asking
                yield _sse("end", {"message": str(exc)})

        headers = {"cache-control": "no-cache", "x-accel-buffering": "no"}
        return StreamingResponse(changes(), media_type="text/event-stream", headers=headers)

    async def write_form(request: Request, what: str, form: type[F], needs: str) -> F:
        """The form of a write, once the page's write key is checked (another site has none)."""
        if not hmac.compare_digest(request.headers.get(_WRITE_HEADER, "").encode(), write_key.encode()):
            raise HTTPException(403, f"a {what} needs the page's write key")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > _WRITE_BODY_BYTES_MAX:
                raise HTTPException(413, f"a {what}'s request is at most {_WRITE_BODY_BYTES_MAX} bytes")
        try:
            return msgspec.json.decode(body, type=form)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise HTTPException(400, f"a {what} needs {needs}: {exc}") from None

    def fork_and_edit(form: _ForkForm, new_id: str) -> str:
        if form.values is not None and model.view_for(log, form.run) is not None:
            raise HTTPException(400, "an integration's run is forked as it is: edit the fork through its framework")
        created = log.fork(form.run, at=form.at, new_run_id=new_id, run_number=form.number)
        if form.values is None:
            return created
        number = log.run_info(created).number  # the fork just made: its edit lands in it or nowhere
        try:  # the edit is the fork's first own event, or there is no fork
            log.append(created, StateUpdated(values=form.values), expected_offset=form.at, run_number=number)
        except BaseException:
            with contextlib.suppress(EventLogError):
                log.delete_run(created, expected_offset=form.at, run_number=number)
            raise
        return created

    async def fork(request: Request) -> Response:
        form = await write_form(request, "fork", _ForkForm, "{run, at, new} (and values, an object)")
        new_id = form.new.strip()
        if not new_id:
            raise HTTPException(400, "a fork needs the new run's id")
        created = await anyio.to_thread.run_sync(partial(fork_and_edit, form, new_id))
        return JSONResponse({"run_id": created, "url": _url("/run", id=created)})

    thread_answers = answers.ThreadAnswers(log)

    def answer(form: _ResumeForm) -> int:
        view = model.view_for(log, form.run)
        if view is not None and view.name == "langgraph":  # the saver stores it; the graph takes it
            return thread_answers.answer(form.run, form.head, form.number, form.value)
        if view is not None:
            raise HTTPException(400, f"a {view.name} run is resumed by its framework, not from the page")
        with log.pinned(form.run) as info:
            if form.number is not None and form.number != info.number:
                raise RunReplacedError(form.run, form.number, info.number, "its page was open")
            if info.head != form.head:
                raise HTTPException(409, f"run {form.run!r} went on to offset {info.head} since offset {form.head}")
            state = log.state_at(form.run, info.head)
        if getattr(state, "status", None) != "paused":
            raise HTTPException(409, f"run {form.run!r} is not paused at offset {form.head}: nothing to answer")
        resumed = Resumed(value=form.value, nodes=list(getattr(state, "paused_nodes", [])))
        # the answer goes to the life it was decided on, or nowhere
        return log.append(form.run, resumed, expected_offset=form.head, run_number=info.number)

    async def resume(request: Request) -> Response:
        form = await write_form(request, "resume", _ResumeForm, "{run, head, value}")
        offset = await anyio.to_thread.run_sync(partial(answer, form))
        return JSONResponse({"run_id": form.run, "offset": offset, "url": _url("/run", id=form.run, at=offset)})

    def error(request: Request, status: int, message: str) -> Response:
        """The error as the asker reads it: JSON for a JSON route, a fragment for the page's
        script, else a page of its own (a fragment's URL opened in the browser, say)."""
        path = request.url.path
        if path.endswith(".json") or path == "/run/find":
            return Response(
                msgspec.json.encode({"status": status, "error": message}), status, media_type="application/json"
            )
        if request.headers.get(_FRAGMENT_HEADER):
            return page("_error.html", status, code=status, message=message)
        back = request.query_params.get("id") if path.startswith("/run/") else None  # the run's page
        return page("error.html", status, code=status, message=message, back=back)

    async def on_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPException):
            return error(request, exc.status_code, str(exc.detail))
        if isinstance(exc, (UnknownRunError, OffsetOutOfRangeError, PrunedError)):
            return error(request, 404, str(exc))
        if isinstance(exc, (RunExistsError, ConflictError)):  # a run deleted and made again while read, say
            return error(request, 409, str(exc))
        if isinstance(exc, (InvalidRunIdError, InvalidArgumentError)):
            return error(request, 400, str(exc))
        if isinstance(exc, EventLogError):
            return error(request, 500, str(exc))
        raise exc

    def one_life(handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
        """`handler`, whose reads of the run it shows are all of one life of it (`EventLog.pinned`):
        of the life `?number=` names, when the page that asks shows one."""

        def pinned(request: Request) -> Response:
            run_id, number = params.run_id(request), params.number(request, "number")
            with log.pinned(run_id) as info:
                if number is not None and number != info.number:
                    raise RunReplacedError(run_id, number, info.number, "its page was open")
                return handler(request)

        return pinned

    reading = threading.Lock()
    held = threading.local()  # `holding`: the whole state a bounded handler read, freed after its answer
    unsent: list[list[Any]] = []  # the state held for the last answer, until it is sent

    def holding(value: Any) -> Any:
        """`value` (a whole state), kept until the answer made from it is sent (`one_at_a_time`).

        The handlers that hold one read nothing long-lived while it is alive (`request.url` is
        parsed into a cache that outlives the request): what outlives a request, allocated among
        a state's objects, would keep the allocator's blocks of that state from going back."""
        held.state.append(value)
        return value

    def one_at_a_time(handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
        """`handler`, a read of a whole state (or two), run one at a time, and the memory it
        freed given back: the server holds at most one long run's state at once, however fast
        j/k asks, and comes back down after it."""

        def bounded(request: Request) -> Response:
            with reading:
                for state in unsent:  # still one state at once: one held for an answer not yet sent is dropped
                    state.clear()
                held.state = []
                unsent[:] = [held.state]
                try:
                    response = handler(request)
                except BaseException:
                    memory.release(log, held.state)
                    raise
            # After the answer is sent: the state is dropped and its memory given back then,
            # not before the page has it (a state of 50,000 messages takes tens of ms to free).
            response.background = BackgroundTask(memory.release, log, held.state)
            return response

        return bounded

    handlers: dict[Any, Callable[..., Any]] = {HTTPException: on_error, EventLogError: on_error}
    routes = [
        Route("/", runs_page),
        Route("/run", one_life(run_view)),
        Route("/run/state", one_at_a_time(one_life(state_fragment))),
        Route("/run/state.json", one_at_a_time(one_life(state_fragment))),
        Route("/run/state/node", one_at_a_time(one_life(node_fragment))),
        Route("/run/diff", one_at_a_time(one_life(diff_fragment))),
        Route("/run/diff.json", one_at_a_time(one_life(diff_fragment))),
        Route("/run/prompt", one_at_a_time(one_life(prompt_fragment))),
        Route("/run/find", one_life(find_event)),
        Route("/stream", stream),
        Mount("/static", StaticFiles(directory=Path(__file__).parent / "static"), name="static"),
    ]
    if allow_writes:
        routes.append(Route("/run/fork", fork, methods=["POST"]))
        routes.append(Route("/run/resume", resume, methods=["POST"]))
    guard = UI(Starlette(routes=routes, exception_handlers=handlers), token=token, loopback=loopback)
    return guard  # `stream` ends its streams when `guard.stop_streams()` is called
