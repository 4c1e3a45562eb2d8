"""The console's web app: Starlette routes, Jinja2 pages rendered on the server, and
server-sent events for what changes while a page is open (docs/console.md).

Pages (every one behind the access token, :class:`~plandag.serve.security.TokenMiddleware`;
every one but ``/name`` asks for the person's name first; every form carries the CSRF
value and every POST is refused without it):

* ``/conversations``: the conversations, and a new one's composer (message, the ``Plan``
  box, Send). ``/conversations/ID``: its turns, the decision card of the plan waiting for
  a decision (approve, per-step approve / edit / reject, reject with feedback), the
  composer. Live: ``/conversations/ID/events`` sends ``turns`` (the turns and card, HTML)
  and ``state`` (``{"busy", "armed", "can_arm"}`` JSON: the box follows it).
* ``/runs``: the runs with their progress, live (``/runs/events`` sends ``runs``, the
  table's rows). ``/runs/ID``: its DAG, Gantt chart, steps and checks, spend, decisions,
  open escalation with resume / approve / abandon, approve / reject for a run awaiting
  approval, and an ``extract`` batch's summary;
  live (``/runs/ID/events`` sends ``run``).
* ``/inbox``: the open escalations, each with resume (an instruction), approve (when a
  step's outcome was unknown) and abandon (a reason).

A stream sends an event only when what it shows changed (the store is read every
``poll_s`` seconds) and closes after ``stream_s`` seconds; the browser's ``EventSource``
reconnects by itself. The pages' only script is ``/static/console.js``, the few lines that
apply those events (to the element whose ``data-events`` names the stream) and submit the
box's change; the Content-Security-Policy lets no inline script run
(:mod:`plandag.serve.security`).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import secrets
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

import anyio
import jinja2
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from plandag.conversation import Conversation, PlanModeError
from plandag.errors import InputError
from plandag.runs.options import ran_offline
from plandag.serve.console import Console, ConsoleConfig, ConsoleError
from plandag.serve.runs import TRACE_SVG_CSS, run_rows, run_view
from plandag.serve.security import (
    SecurityHeadersMiddleware,
    Session,
    SessionSigner,
    TokenMiddleware,
    check_csrf,
    host_patterns,
    valid_name,
)

__all__ = ["create_app"]

_TEMPLATES = Path(__file__).parent / "templates"
_STATIC = Path(__file__).parent / "static"


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.filters["when"] = _when
    # `row is offline`: the run's model answers are the offline model's extracts
    environment.tests["offline"] = lambda row: ran_offline(row.options)
    return environment


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _text(form: FormData, name: str) -> str:
    """A text field as the person typed it: browsers send a textarea's line breaks as CRLF
    (HTML, "textarea" element, form submission), turned back into the LF it has on screen."""
    value = form.get(name, "")
    return value.replace("\r\n", "\n") if isinstance(value, str) else ""


def _safe_next(target: str | None) -> str:
    """A local path to go back to after the name page (never another site)."""
    if not target:
        return "/conversations"
    parsed = urlparse(target)
    if parsed.scheme or parsed.netloc or not target.startswith("/") or target.startswith("//"):
        return "/conversations"
    return target


class _Pages:
    """The routes' handlers, sharing the console, the templates and the session signer."""

    def __init__(self, console: Console, signer: SessionSigner) -> None:
        self.console = console
        self.signer = signer
        self.templates = _environment()

    # -- plumbing ---------------------------------------------------------------------------

    def render(self, name: str, request: Request, session: Session, **values: Any) -> str:
        return self.templates.get_template(name).render(
            request=request, session=session, csrf=session.csrf, **values
        )

    def page(
        self, name: str, request: Request, session: Session, status_code: int = 200, **values: Any
    ) -> HTMLResponse:
        return HTMLResponse(self.render(name, request, session, **values), status_code=status_code)

    def person(self, request: Request) -> Session | Response:
        """The request's session with a name, or the redirect to the name page."""
        session = self.signer.session(request)
        if session is not None and session.name is not None:
            return session
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        if request.method != "GET":
            target = request.headers.get("referer", "") or "/conversations"
            target = urlparse(target).path or "/conversations"
        return RedirectResponse(f"/name?next={quote(_safe_next(target))}", status_code=303)

    async def form(self, request: Request, session: Session) -> FormData:
        """The submitted form, after its CSRF value is checked (403 otherwise)."""
        form = await request.form()
        if not check_csrf(session, form):
            raise HTTPException(
                403,
                "this form's CSRF token is missing or wrong (an old page, or a form sent from "
                "another site); reload the page and send it again",
            )
        return form

    def problem(self, request: Request, session: Session, message: str, status: int) -> Response:
        return self.page("problem.html", request, session, status_code=status, message=message)

    def stream(
        self, request: Request, render: Callable[[], Mapping[str, str]], seen: Mapping[str, str]
    ) -> EventSourceResponse:
        """Server-sent events: each named part of ``render()`` sent when it changed (the
        parts whose digest the page gave in ``seen`` count as sent)."""
        config = self.console.config

        async def events() -> AsyncIterator[dict[str, str]]:
            last: dict[str, str] = {}
            deadline = anyio.current_time() + config.stream_s
            first = True
            while anyio.current_time() < deadline:
                current = render()
                for name, data in current.items():
                    if first and seen.get(name) == _digest(data):
                        last[name] = data
                    if last.get(name) != data:
                        yield {"event": name, "data": data}
                last, first = dict(current), False
                await anyio.sleep(config.poll_s)

        return EventSourceResponse(events(), ping=15)

    # -- the name ---------------------------------------------------------------------------

    async def name_page(self, request: Request) -> Response:
        session = self.signer.session(request) or Session(secrets.token_urlsafe(32))
        response: Response
        if request.method == "GET":
            response = self.page(
                "name.html", request, session, next=_safe_next(request.query_params.get("next"))
            )
            self.signer.set(response, session)
            return response
        form = await self.form(request, session)
        name = valid_name(_text(form, "name"))
        target = _safe_next(_text(form, "next"))
        if name is None:
            return self.page(
                "name.html",
                request,
                session,
                status_code=400,
                next=target,
                message="Give your name (1 to 80 characters): it is recorded with every "
                "decision you take here.",
            )
        response = RedirectResponse(target, status_code=303)
        self.signer.set(response, Session(session.csrf, name))
        return response

    # -- conversations ------------------------------------------------------------------------

    async def home(self, request: Request) -> Response:
        return RedirectResponse("/conversations", status_code=303)

    async def conversations(self, request: Request) -> Response:
        session = self.person(request)
        if isinstance(session, Response):
            return session
        if request.method == "POST":
            form = await self.form(request, session)
            try:
                conversation_id = self.console.send(
                    None, _text(form, "text"), plan=self._plan_box(form)
                )
            except (ConsoleError, PlanModeError) as error:
                return self.problem(request, session, str(error), 400)
            return RedirectResponse(f"/conversations/{conversation_id}", status_code=303)
        listed = self.console.conversations.list()
        return self.page("conversations.html", request, session, conversations=listed)

    @staticmethod
    def _plan_box(form: FormData) -> bool | None:
        """The Plan box as sent: None when it was disabled (its companion field absent)."""
        if "plan_box" not in form:
            return None
        return form.get("plan") == "on"

    def _conversation_parts(
        self, request: Request, session: Session, conversation: Conversation
    ) -> dict[str, str]:
        console = self.console
        busy = conversation.id in console.busy
        card, card_error = None, None
        try:
            card = console.pending_card(conversation)
        except ConsoleError as error:
            card_error = str(error)
        runs: dict[str, Any] = {}
        for turn in conversation.turns:
            if turn.origin == "pipeline" and turn.text.startswith("run "):
                run_id = turn.text.split()[1]
                with contextlib.suppress(InputError):
                    runs[run_id] = console.store.run(run_id).status
        turns = self.render(
            "_turns.html",
            request,
            session,
            conversation=conversation,
            busy=busy,
            error=console.errors.get(conversation.id) or card_error,
            card=card,
            runs=runs,
        )
        state = {
            "busy": busy,
            "armed": conversation.is_armed(console.now()),
            "can_arm": conversation.origin == "person",
        }
        return {"turns": turns, "state": json.dumps(state)}

    def _load(self, conversation_id: str) -> Conversation:
        try:
            return self.console.load(conversation_id)
        except ConsoleError as error:
            message = str(error)
            if message.startswith("no conversation "):
                message = (
                    f"no conversation {conversation_id!r} in this console's store; "
                    "/conversations lists them"
                )
            raise HTTPException(404, message) from error

    async def conversation(self, request: Request) -> Response:
        session = self.person(request)
        if isinstance(session, Response):
            return session
        conversation = self._load(request.path_params["id"])
        parts = self._conversation_parts(request, session, conversation)
        return self.page(
            "conversation.html",
            request,
            session,
            conversation=conversation,
            live=parts["turns"],
            live_digest=_digest(parts["turns"]),
            state=json.loads(parts["state"]),
        )

    async def conversation_events(self, request: Request) -> Response:
        session = self.person(request)
        if isinstance(session, Response):
            return session
        conversation_id = request.path_params["id"]
        self._load(conversation_id)

        def render() -> dict[str, str]:
            return self._conversation_parts(request, session, self.console.load(conversation_id))

        return self.stream(request, render, {"turns": request.query_params.get("v", "")})

    async def send(self, request: Request) -> Response:
        session = self.person(request)
        if isinstance(session, Response):
            return session
        form = await self.form(request, session)
        conversation_id = request.path_params["id"]
        self._load(conversation_id)
        try:
            self.console.send(conversation_id, _text(form, "text"), plan=self._plan_box(form))
        except (ConsoleError, PlanModeError) as error:
            return self.problem(request, session, str(error), 400)
        return RedirectResponse(f"/conversations/{conversation_id}", status_code=303)

    async def mode(self, request: Request) -> Response:
        session = self.person(request)
        if isinstance(session, Response):
            return session
        form = await self.form(request, session)
        conversation_id = request.path_params["id"]
        self._load(conversation_id)
        plan = self._plan_box(form)
        if plan is not None:
            try:
                self.console.set_mode(conversation_id, plan)
            except PlanModeError as error:
                return self.problem(request, session, str(error), 400)
        return RedirectResponse(f"/conversations/{conversation_id}", status_code=303)

    async def decide(self, request: Request) -> Response:
        session = self.person(request)
        if isinstance(session, Response):
            return session
        assert session.name is not None
        form = await self.form(request, session)
        conversation_id = request.path_params["id"]
        conversation = self._load(conversation_id)
        action = form.get("action")
        if action not in ("approve", "reject"):
            return self.problem(request, session, "choose approve or reject", 400)
        reject_steps: list[int] = []
        edit_steps: dict[int, dict[str, Any]] = {}
        if action == "approve":
            try:
                reject_steps, edit_steps = self._step_choices(form, conversation)
            except ConsoleError as error:
                return self.problem(request, session, str(error), 400)
        try:
            self.console.decide(
                conversation_id,
                approved=action == "approve",
                plan_hash=_text(form, "hash"),
                who=session.name,
                feedback=_text(form, "feedback") if action == "reject" else "",
                reject_steps=reject_steps,
                edit_steps=edit_steps,
            )
        except ConsoleError as error:
            return self.problem(request, session, str(error), 400)
        return RedirectResponse(f"/conversations/{conversation_id}", status_code=303)

    @staticmethod
    def _step_choices(
        form: FormData, conversation: Conversation
    ) -> tuple[list[int], dict[int, dict[str, Any]]]:
        """Per-step choices of the card's form: ``step_N`` (approve, reject or edit) and,
        for edit, ``args_N`` (the step's arguments as a JSON object)."""
        pending = conversation.pending
        if pending is None:
            return [], {}
        plan = conversation.turns[pending.turn].plan
        reject: list[int] = []
        edits: dict[int, dict[str, Any]] = {}
        for step in plan.steps:
            choice = form.get(f"step_{step.id}", "approve")
            if choice == "reject":
                reject.append(step.id)
            elif choice == "edit":
                text = str(form.get(f"args_{step.id}", ""))
                try:
                    value = json.loads(text)
                except RecursionError as error:
                    raise ConsoleError(
                        f"step {step.id}: the edited arguments are not JSON (nested too "
                        'deeply); write a JSON object such as {"path": "out/b.json"}'
                    ) from error
                except ValueError as error:
                    raise ConsoleError(
                        f"step {step.id}: the edited arguments are not JSON ({error}); write "
                        'a JSON object such as {"path": "out/b.json"}'
                    ) from error
                if not isinstance(value, dict):
                    raise ConsoleError(
                        f"step {step.id}: the edited arguments must be a JSON object of "
                        "argument names and values"
                    )
                if value != step.args:
                    edits[step.id] = value
            elif choice != "approve":
                raise ConsoleError(f"step {step.id}: choose approve, edit or reject")
        return reject, edits

    # -- runs and the inbox ---------------------------------------------------------------------

    def _runs_rows(self, request: Request, session: Session) -> str:
        return self.render("_runs_rows.html", request, session, runs=run_rows(self.console.store))

    async def runs(self, request: Request) -> Response:
        session = self.person(request)
        if isinstance(session, Response):
            return session
        rows = self._runs_rows(request, session)
        return self.page("runs.html", request, session, rows=rows, rows_digest=_digest(rows))

    async def runs_events(self, request: Request) -> Response:
        session = self.person(request)
        if isinstance(session, Response):
            return session
        return self.stream(
            request,
            lambda: {"runs": self._runs_rows(request, session)},
            {"runs": request.query_params.get("v", "")},
        )

    def _run_live(self, request: Request, session: Session, run_id: str) -> str:
        return self.render(
            "_run_live.html", request, session, view=run_view(self.console.store, run_id)
        )

    def _run_id(self, text: str) -> str:
        try:
            return self.console.store.resolve_run_id(text)
        except InputError as error:
            raise HTTPException(404, str(error)) from error

    async def run(self, request: Request) -> Response:
        session = self.person(request)
        if isinstance(session, Response):
            return session
        run_id = self._run_id(request.path_params["id"])
        live = self._run_live(request, session, run_id)
        return self.page(
            "run.html",
            request,
            session,
            view=run_view(self.console.store, run_id),
            live=live,
            live_digest=_digest(live),
            notice=self.console.notices.get(run_id),
            trace_css=TRACE_SVG_CSS,
        )

    async def run_events(self, request: Request) -> Response:
        session = self.person(request)
        if isinstance(session, Response):
            return session
        run_id = self._run_id(request.path_params["id"])
        return self.stream(
            request,
            lambda: {"run": self._run_live(request, session, run_id)},
            {"run": request.query_params.get("v", "")},
        )

    async def run_decide(self, request: Request) -> Response:
        session = self.person(request)
        if isinstance(session, Response):
            return session
        assert session.name is not None
        form = await self.form(request, session)
        run_id = self._run_id(request.path_params["id"])
        action = form.get("action")
        if action not in ("approve", "reject"):
            return self.problem(request, session, "choose approve or reject", 400)
        try:
            self.console.decide_run(
                run_id,
                approved=action == "approve",
                who=session.name,
                plan_hash=_text(form, "hash"),
                feedback=_text(form, "feedback"),
            )
        except ConsoleError as error:
            return self.problem(request, session, str(error), 400)
        return RedirectResponse(f"/runs/{run_id}", status_code=303)

    async def inbox(self, request: Request) -> Response:
        session = self.person(request)
        if isinstance(session, Response):
            return session
        store = self.console.store
        items = []
        for case in store.escalations():
            versions = store.plan_versions(case.run_id)
            row = store.run(case.run_id)
            items.append(
                {
                    "case": case,
                    "row": row,
                    "actions": case.context.get("actions") or {},
                    "plan_hash": versions[-1].hash if versions else "",
                    "notice": self.console.notices.get(case.run_id),
                }
            )
        crashed = [
            {"row": row, "notice": self.console.notices.get(row.run_id)}
            for row in store.crashed_runs()
        ]
        return self.page("inbox.html", request, session, items=items, crashed=crashed)

    async def inbox_action(self, request: Request) -> Response:
        session = self.person(request)
        if isinstance(session, Response):
            return session
        assert session.name is not None
        form = await self.form(request, session)
        run_id = self._run_id(request.path_params["id"])
        action = request.path_params["action"]
        try:
            if action == "abandon":
                self.console.abandon(run_id, who=session.name, reason=_text(form, "reason"))
            elif action == "resume":
                self.console.resume(
                    run_id, who=session.name, instruction=_text(form, "instruction")
                )
            elif action == "approve":
                self.console.approve_escalated(
                    run_id, who=session.name, plan_hash=_text(form, "hash")
                )
            else:
                raise HTTPException(404, f"no inbox action {action!r}")
        except ConsoleError as error:
            return self.problem(request, session, str(error), 400)
        target = _safe_next(_text(form, "next") or "/inbox")
        return RedirectResponse(target, status_code=303)


def create_app(
    config: ConsoleConfig,
    token: str,
    *,
    secret: str | None = None,
    allowed_hosts: Sequence[str] = (),
) -> Starlette:
    """The console's ASGI app.

    Args:
        config: how the console works (store, registry, planner...).
        token: the access token every request must carry (:func:`plandag.serve.new_token`).
        secret: the key that signs session cookies (default: random, made now).
        allowed_hosts: host names the console answers to besides 127.0.0.1, localhost and
            [::1] (``plandag serve`` gives ``--host`` and each ``--allow-host``); a request
            whose ``Host`` names another gets 400 (:func:`~plandag.serve.security.host_patterns`).

    Returns:
        A Starlette app; its lifespan opens the run store and the background task group
        (use ``with TestClient(app)`` or run it with uvicorn). Every response carries
        :data:`~plandag.serve.security.SECURITY_HEADERS`.

    Raises:
        ValueError: a name of ``allowed_hosts`` that no ``Host`` header could match.
    """
    hosts = host_patterns(allowed_hosts)
    console = Console(config)
    pages = _Pages(console, SessionSigner(secret))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with console:
            yield

    routes = [
        Route("/", pages.home),
        Route("/name", pages.name_page, methods=["GET", "POST"]),
        Route("/conversations", pages.conversations, methods=["GET", "POST"]),
        Route("/conversations/{id}", pages.conversation),
        Route("/conversations/{id}/events", pages.conversation_events),
        Route("/conversations/{id}/send", pages.send, methods=["POST"]),
        Route("/conversations/{id}/mode", pages.mode, methods=["POST"]),
        Route("/conversations/{id}/decide", pages.decide, methods=["POST"]),
        Route("/runs", pages.runs),
        Route("/runs/events", pages.runs_events),
        Route("/runs/{id}", pages.run),
        Route("/runs/{id}/events", pages.run_events),
        Route("/runs/{id}/decide", pages.run_decide, methods=["POST"]),
        Route("/inbox", pages.inbox),
        Route("/inbox/{id}/{action}", pages.inbox_action, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=_STATIC), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.console = console
    # the last added runs first: headers on every response, then the Host, then the token
    app.add_middleware(TokenMiddleware, token=token)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=hosts, www_redirect=False)
    app.add_middleware(SecurityHeadersMiddleware)
    return app
