"""The user's own tasks for the comparison with ReAct (``plandag bench --tasks``).

A tasks file is JSON Lines: one object per line, each a task with its goal and a check of
the right answer::

    {"id": "rank", "goal": "Rank these movies by rating ...", "expected": "A > B > C"}
    {"id": "total", "goal": "Total the invoice", "params": {"path": "a.xml"}, "expected": 1234.5}
    {"goal": "Find the release year", "check": {"kind": "regex", "pattern": "19[0-9]{2}"}}
    {"goal": "Summarise the orders", "check": {"kind": "jmespath", "expr": "paid > `0`"}}
    {"goal": "Write the report", "check": {"kind": "file_exists", "path": "out/report.md"}}

Fields: ``goal`` (required, the task as both agents get it); exactly one of ``expected`` (the
right answer: any JSON value, compared in JSON's sense) and ``check`` (a check of plandag's
own kinds: ``equals``, ``jmespath``, ``regex``, ``file_exists``, ``not_empty``,
``tolerance``, with that kind's fields, as in a plan's ``check``); ``id`` (default
``line-N``; unique in the file); ``params`` (values given with the task, as ``--param``).
Blank lines are skipped. A line that is not a usable task becomes a :class:`TaskLineError`
(its line number, what is wrong, what to write instead) and the other tasks still run.

**The answer a check sees.** plandag's answer is the plan's output assembled by code (any
JSON value) or the joiner's written answer; ReAct's is its last text. A written answer is
read as the text after its last ``Answer:`` when it has one (else the whole text), stripped
and without a final full stop, then as JSON when it parses (``42``, ``[1, 2]``), else as
the text. ``regex`` checks match the text itself, in full (the kind's rule). A
``file_exists`` check also needs the file to have been written during that agent's run: a
file left by the other agent, or there before, does not count.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from plandag.bench.workloads import Question, Workload
from plandag.checks.base import CheckDefinition
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.tools.registry import Registry

__all__ = [
    "ANSWER_MARKER",
    "TASK_FIELDS",
    "Task",
    "TaskLineError",
    "answer_value",
    "read_tasks",
    "task_registry",
    "task_workloads",
]

TASK_FIELDS = ("id", "goal", "params", "expected", "check")
"""The fields a task line may have."""

ANSWER_MARKER = "Answer:"
"""Where a written answer's value starts (its last occurrence counts)."""

_CHECKS: dict[str, CheckDefinition] = {definition.name: definition for definition in BUILTIN_CHECKS}
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclasses.dataclass(frozen=True)
class Task:
    """One usable line of a tasks file.

    Attributes:
        line: its line number (1-based).
        id: its id (``line-N`` when the line names none).
        goal: the task as both agents get it.
        params: values given with the task.
        check: the check of the right answer: ``{"kind": ..., fields...}`` (``expected``
            becomes ``{"kind": "equals", "value": ...}``).
    """

    line: int
    id: str
    goal: str
    params: Mapping[str, Any]
    check: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class TaskLineError:
    """A line of a tasks file that is not a usable task.

    Attributes:
        line: its line number (1-based).
        message: what is wrong and what to write instead.
    """

    line: int
    message: str

    def format(self, source: str) -> str:
        """``SOURCE:LINE: message``, as compilers print a position."""
        return f"{source}:{self.line}: {self.message}"


def _check_of(item: Mapping[str, Any]) -> Mapping[str, Any] | str:
    """The line's check, or what is wrong with it."""
    kinds = ", ".join(sorted(_CHECKS))
    if ("expected" in item) == ("check" in item):
        return (
            'give exactly one of "expected" (the right answer, any JSON value) and "check" '
            f'(an object with "kind": one of {kinds}, and that kind\'s fields)'
        )
    if "expected" in item:
        return {"kind": "equals", "value": item["expected"]}
    check = item["check"]
    if not isinstance(check, Mapping):
        return f'"check" must be an object with "kind": one of {kinds}'
    kind = check.get("kind")
    definition = _CHECKS.get(kind) if isinstance(kind, str) else None
    if definition is None:
        return f'"check" has kind {kind!r}; use one of {kinds}'
    fields = {key: value for key, value in check.items() if key != "kind"}
    try:
        definition.args_model.model_validate(fields)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc']) or 'check'}: {problem['msg']}"
            for problem in error.errors()
        )
        allowed = ", ".join(definition.args_model.model_fields) or "none"
        return f'"check" of kind {kind}: {problems} (its fields: {allowed})'
    return {"kind": kind, **fields}


def _task(number: int, text: str, seen: set[str]) -> Task | TaskLineError:
    try:
        item = json.loads(text)
    except ValueError as error:
        return TaskLineError(number, f"not JSON ({error}); write one JSON object per line")
    if not isinstance(item, dict):
        return TaskLineError(
            number, f"a {type(item).__name__}, not an object; write one JSON object per line"
        )
    unknown = sorted(set(item) - set(TASK_FIELDS))
    if unknown:
        return TaskLineError(
            number,
            f"unknown field(s) {', '.join(unknown)}; a task has {', '.join(TASK_FIELDS)}",
        )
    goal = item.get("goal")
    if not isinstance(goal, str) or not goal.strip():
        return TaskLineError(number, 'no "goal": give the task as a non-empty string')
    identifier = item.get("id", f"line-{number}")
    if not isinstance(identifier, str) or _ID.fullmatch(identifier) is None:
        return TaskLineError(
            number,
            f'"id" {identifier!r} is not a name: letters, digits, ".", "_" and "-", '
            "at most 64 characters",
        )
    if identifier in seen:
        return TaskLineError(number, f'"id" {identifier!r} is used by an earlier line')
    params = item.get("params", {})
    if not isinstance(params, dict):
        return TaskLineError(number, '"params" must be an object of NAME: value')
    check = _check_of(item)
    if isinstance(check, str):
        return TaskLineError(number, check)
    seen.add(identifier)
    return Task(number, identifier, goal.strip(), params, check)


def read_tasks(path: Path) -> tuple[list[Task], list[TaskLineError]]:
    """Read a tasks file (module docstring).

    Args:
        path: the JSON Lines file.

    Returns:
        The usable tasks in file order, and one :class:`TaskLineError` per unusable line.

    Raises:
        OSError: the file cannot be read.
        UnicodeDecodeError: the file is not UTF-8.
    """
    tasks: list[Task] = []
    errors: list[TaskLineError] = []
    seen: set[str] = set()
    text = path.read_text(encoding="utf-8-sig")
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        found = _task(number, line, seen)
        if isinstance(found, TaskLineError):
            errors.append(found)
        else:
            tasks.append(found)
    return tasks, errors


def task_registry(tools_file: Path | None) -> Registry:
    """The tools both agents use: every ``@tool`` and ``@check`` of ``tools_file`` (tools it
    imports, such as ``from plandag.tools.builtin import read_file``, count as its own),
    with the built-in check kinds; with no file, the check kinds alone (the command adds
    the tools of MCP servers).

    Raises:
        ToolLoadError: the file is missing, fails to import, or defines nothing.
    """
    registry = Registry([], BUILTIN_CHECKS)
    if tools_file is not None:
        registry.load_file(tools_file)
    return registry


def answer_value(answer: Any) -> Any:
    """The value a check sees for an agent's answer (module docstring)."""
    if not isinstance(answer, str):
        return answer
    return _parsed(_answer_text(answer))


def _answer_text(answer: str) -> str:
    marker = answer.rfind(ANSWER_MARKER)
    text = answer[marker + len(ANSWER_MARKER) :] if marker >= 0 else answer
    text = text.strip()
    return text[:-1].rstrip() if text.endswith(".") else text


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


@dataclasses.dataclass
class _FileWatch:
    """A file's state before an agent's run, keyed by task id."""

    before: dict[str, tuple[int, int] | None] = dataclasses.field(default_factory=dict)

    @staticmethod
    def state(path: Path) -> tuple[int, int] | None:
        try:
            stat = path.stat()
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size


def _explain(task: Task, answer: Any, watch: _FileWatch) -> tuple[bool, str]:
    check = dict(task.check)
    kind = str(check.pop("kind"))
    if kind == "regex":
        value: Any = _answer_text(answer) if isinstance(answer, str) else answer
    else:
        value = answer_value(answer)
    outcome = _CHECKS[kind].evaluate(value, check)
    if outcome.status == "pass" and kind == "file_exists":
        path = Path(str(check["path"]))
        if watch.state(path) == watch.before.get(task.id):
            return False, f"file_exists: {path} was not written during this run"
    detail = f"{kind}: {outcome.detail}" if outcome.detail else kind
    return outcome.status == "pass", detail


def task_workloads(tasks: Sequence[Task], registry: Registry) -> list[Workload]:
    """One workload per task, for :func:`plandag.bench.runner.run_bench`: one question
    (its goal and params), the same ``registry`` for both agents, the task's check.

    Args:
        tasks: the usable tasks (:func:`read_tasks`).
        registry: the tools both agents use (:func:`task_registry`).

    Returns:
        The workloads, named by the tasks' ids, in order.
    """
    watch = _FileWatch()

    def prepare(question: Question) -> None:
        task: Task = question.expected
        if task.check.get("kind") == "file_exists":
            watch.before[task.id] = watch.state(Path(str(task.check["path"])))

    def explain(question: Question, answer: Any) -> tuple[bool, str]:
        return _explain(question.expected, answer, watch)

    return [
        Workload(
            name=task.id,
            title=task.goal if len(task.goal) <= 60 else task.goal[:59] + "…",
            questions=(Question(task.goal, task, dict(task.params)),),
            plan_wire=None,
            stored_plan=None,
            make_registry=lambda world: registry,
            write_answer=None,
            check_answer=lambda question, answer: explain(question, answer)[0],
            explain=explain,
            prepare=prepare,
        )
        for task in tasks
    ]
