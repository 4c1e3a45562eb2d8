"""What is called when a run escalates: a command, an HTTP POST, a Python callback
(ARCHITECTURE.md, "People in the loop").

Each gets the case (:mod:`plandag.escalation.context`) as JSON:

* **command** (setting ``escalation_command``): the argv runs with no shell, the case on
  its standard input (UTF-8 JSON); it must end within ``timeout_s`` seconds (setting
  ``escalation_timeout``, 10 s) with exit status 0, or it is killed / reported failed;
* **URL** (setting ``escalation_url``): one ``POST`` with the case as its JSON body
  (``Content-Type: application/json``), no redirects followed, within ``timeout_s``; a
  2xx answer is success. The HTTP allow-list applies (setting ``http_allow``,
  :func:`plandag.allowlist.host_allowed`): a URL whose host it does not list is
  refused before any connection, and the refusal says which setting to change;
* **callback** (``on_escalation=`` of :func:`plandag.run_plan`,
  :class:`~plandag.planner.agent.Agent` and the durable API): called with the case as a
  dict; it may be a coroutine function.

:class:`EscalationHooks` is the :class:`~plandag.scheduler.services.EscalationHook` that
:func:`plandag.scheduler.run_plan` is handed (:meth:`EscalationHooks.run_escalated`), and
the :class:`~plandag.planner.services.AgentEscalationHook` and
:class:`~plandag.planner.alerts.AlertHooks` that :class:`~plandag.planner.agent.Agent` is
handed (:meth:`EscalationHooks.agent_escalated`, :meth:`EscalationHooks.notify`).

A hook that fails never changes the run's outcome (it is escalated, and its case is in the
store): each hook's :class:`HookOutcome` is returned, and the durable layer records it as
an ``escalation_hook`` event of the run.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.abc

from plandag.allowlist import host_allowed

if TYPE_CHECKING:
    from plandag.compiler.compiled import CompiledPlan
    from plandag.dag.plan import Plan
    from plandag.scheduler.result import RunResult

__all__ = [
    "DEFAULT_HOOK_TIMEOUT_S",
    "EscalationCallback",
    "EscalationHooks",
    "HookOutcome",
    "as_hooks",
]

DEFAULT_HOOK_TIMEOUT_S = 10.0
"""Seconds the command or the POST may take (setting ``escalation_timeout``)."""

EscalationCallback = Callable[[dict[str, Any]], Any]
"""``callback(context)``: a function or coroutine function taking the case."""

_OUTPUT_CHARS = 500


@dataclasses.dataclass(frozen=True, slots=True)
class HookOutcome:
    """How one hook went.

    Attributes:
        kind: ``command``, ``url`` or ``callback``.
        ok: it ran and succeeded (exit status 0, a 2xx answer, no exception).
        detail: what happened, in a line (the refusal, the error, the status).
    """

    kind: Literal["command", "url", "callback"]
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        """``{"kind", "ok", "detail"}``."""
        return {"kind": self.kind, "ok": self.ok, "detail": self.detail}


@dataclasses.dataclass(frozen=True)
class EscalationHooks:
    """The hooks called when a run escalates (module docstring).

    Attributes:
        command: the argv of the command, or None.
        url: the URL that receives the POST, or None.
        http_allow: host globs the URL's host must match (setting ``http_allow``); None
            or empty: no host is allowed, so a URL is refused.
        callback: the Python callback, or None.
        timeout_s: seconds the command or the POST may take (> 0).

    Raises:
        ValueError: ``timeout_s`` <= 0, or an empty ``command``.
    """

    command: Sequence[str] | None = None
    url: str | None = None
    http_allow: Sequence[str] | None = None
    callback: EscalationCallback | None = None
    timeout_s: float = DEFAULT_HOOK_TIMEOUT_S

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds, not {self.timeout_s}")
        if self.command is not None and not list(self.command):
            raise ValueError("command is empty: give the program and its arguments")

    @classmethod
    def from_settings(
        cls, settings: Mapping[str, Any], callback: EscalationCallback | None = None
    ) -> EscalationHooks:
        """The hooks of the effective settings (``escalation_command``, split like a
        shell line with :func:`shlex.split`; ``escalation_url``; ``http_allow``;
        ``escalation_timeout``) and an optional callback.

        Raises:
            ValueError: ``escalation_command`` is not a valid shell-like line.
        """
        line = settings["escalation_command"]
        try:
            command = shlex.split(line) if line else None
        except ValueError as error:
            raise ValueError(f"escalation_command {line!r}: {error}") from error
        return cls(
            command=command or None,
            url=settings["escalation_url"] or None,
            http_allow=settings["http_allow"],
            callback=callback,
            timeout_s=float(settings["escalation_timeout"]),
        )

    @property
    def empty(self) -> bool:
        """No hook is set."""
        return self.command is None and self.url is None and self.callback is None

    async def run_escalated(self, result: RunResult, compiled: CompiledPlan) -> list[HookOutcome]:
        """Call the hooks with the case of a run of :func:`plandag.run_plan` that ended
        ``escalated`` (:func:`~plandag.escalation.run_context`, command ``run_plan``): the
        :class:`~plandag.scheduler.services.EscalationHook` the scheduler calls.

        Args:
            result: the run's result.
            compiled: the plan it ran.

        Returns:
            As :meth:`notify`.
        """
        from plandag.escalation.context import run_context

        return await self.notify(
            run_context(
                result,
                goal=compiled.plan.goal or None,
                plans=[compiled.plan],
                params=compiled.params,
                command="run_plan",
            )
        )

    async def agent_escalated(
        self,
        result: RunResult,
        *,
        goal: str,
        plans: Sequence[Plan],
        params: Mapping[str, Any] | None,
    ) -> list[HookOutcome]:
        """Call the hooks with the case of a run of
        :class:`~plandag.planner.agent.Agent` that ended ``escalated``
        (:func:`~plandag.escalation.run_context`, command ``Agent``): the
        :class:`~plandag.planner.services.AgentEscalationHook` the agent calls.

        Args:
            result: the run's result.
            goal: the run's goal.
            plans: every plan version of the run, oldest first.
            params: the run's param values, or None.

        Returns:
            As :meth:`notify`.
        """
        from plandag.escalation.context import run_context

        return await self.notify(
            run_context(result, goal=goal, plans=plans, params=params, command="Agent")
        )

    async def notify(self, context: Mapping[str, Any]) -> list[HookOutcome]:
        """Call every hook that is set, in the order command, URL, callback; never raises
        for a hook's failure.

        Args:
            context: the case (JSON-safe).

        Returns:
            One :class:`HookOutcome` per hook called.
        """
        outcomes: list[HookOutcome] = []
        payload = json.dumps(context, ensure_ascii=False).encode("utf-8")
        if self.command is not None:
            outcomes.append(await self._run_command(payload))
        if self.url is not None:
            outcomes.append(await self._post(payload))
        if self.callback is not None:
            outcomes.append(await self._call(dict(context)))
        return outcomes

    async def _run_command(self, payload: bytes) -> HookOutcome:
        assert self.command is not None
        argv = list(self.command)
        try:
            with anyio.fail_after(self.timeout_s):
                returncode, errors = await _exchange(argv, payload)
        except TimeoutError:
            return HookOutcome(
                "command",
                False,
                f"escalation_command {argv[0]} did not end within {self.timeout_s:g} s and "
                "was stopped; make it quicker or raise escalation_timeout",
            )
        except OSError as error:
            return HookOutcome(
                "command",
                False,
                f"escalation_command {argv[0]} could not start ({error.strerror or error}); "
                "check the program's path in escalation_command",
            )
        if returncode != 0:
            errors = errors.strip()[:_OUTPUT_CHARS]
            return HookOutcome(
                "command",
                False,
                f"escalation_command {argv[0]} exited with status {returncode}"
                + (f": {errors}" if errors else ""),
            )
        return HookOutcome("command", True, f"escalation_command {argv[0]} exited with status 0")

    async def _post(self, payload: bytes) -> HookOutcome:
        import httpx  # here, not at the top: a run that escalates nowhere starts without it

        assert self.url is not None
        url = self.url
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as error:
            return HookOutcome("url", False, f"escalation_url {url!r} is not a URL ({error})")
        if parsed.scheme not in ("http", "https") or not parsed.host:
            return HookOutcome(
                "url", False, f"escalation_url {url!r} is not an absolute http(s) URL"
            )
        patterns = list(self.http_allow or [])
        if not host_allowed(parsed, patterns):
            host = parsed.host if parsed.port is None else f"{parsed.host}:{parsed.port}"
            listed = ", ".join(patterns) if patterns else "nothing"
            return HookOutcome(
                "url",
                False,
                f"escalation_url refused: host {host} is not in http_allow (which allows "
                f"{listed}); nothing was sent. Add it to http_allow in plandag.toml or "
                f'[tool.plandag] (http_allow = ["{host}"]) to send escalations there',
            )
        try:
            async with httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s), follow_redirects=False
            ) as client:
                with anyio.fail_after(self.timeout_s):
                    response = await client.post(
                        parsed, content=payload, headers={"Content-Type": "application/json"}
                    )
        except (httpx.HTTPError, TimeoutError) as error:
            return HookOutcome(
                "url",
                False,
                f"escalation_url POST to {parsed.host} failed: {type(error).__name__}: {error}",
            )
        if not response.is_success:
            return HookOutcome(
                "url",
                False,
                f"escalation_url POST to {parsed.host} answered {response.status_code}",
            )
        return HookOutcome(
            "url", True, f"escalation_url POST to {parsed.host} answered {response.status_code}"
        )

    async def _call(self, context: dict[str, Any]) -> HookOutcome:
        assert self.callback is not None
        try:
            answer = self.callback(context)
            if inspect.isawaitable(answer):
                await answer
        except Exception as error:
            return HookOutcome(
                "callback", False, f"on_escalation raised {type(error).__name__}: {error}"
            )
        return HookOutcome("callback", True, "on_escalation returned")


def as_hooks(value: EscalationHooks | EscalationCallback | None) -> EscalationHooks | None:
    """``on_escalation`` as hooks: a callable becomes ``EscalationHooks(callback=...)``."""
    if value is None or isinstance(value, EscalationHooks):
        return value
    return EscalationHooks(callback=value)


async def _exchange(argv: list[str], payload: bytes) -> tuple[int, str]:
    """Run ``argv`` with ``payload`` on its standard input; return its exit status and its
    standard error (decoded, errors replaced). A program that exits or closes its input
    before reading all of ``payload`` is not an error here: its exit status says how it
    went. The process is killed if the caller's cancel scope ends first."""
    errors = bytearray()
    async with await anyio.open_process(argv) as process:
        assert process.stdin is not None
        assert process.stderr is not None
        assert process.stdout is not None
        stdout, stderr = process.stdout, process.stderr

        async def drain(stream: anyio.abc.ByteReceiveStream, keep: bool) -> None:
            async for chunk in stream:
                if keep and len(errors) < 4 * _OUTPUT_CHARS:
                    errors.extend(chunk)

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(drain, stdout, False)
                group.start_soon(drain, stderr, True)
                try:
                    await process.stdin.send(payload)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass  # it stopped reading: its exit status tells the rest
                finally:
                    await process.stdin.aclose()
                returncode = await process.wait()
        except BaseException:
            with anyio.CancelScope(shield=True):
                process.kill()
                await process.wait()
            raise
    return returncode, errors.decode("utf-8", "replace")
