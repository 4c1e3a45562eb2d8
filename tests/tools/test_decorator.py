"""@tool (plandag/tools/base.py): options, defaults, args schema, where each kind of tool runs."""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import pytest
from pydantic import ValidationError

from plandag.errors import PermanentStepError, StepTimeoutError, ToolDefinitionError
from plandag.tools import Tool, ToolContext, tool


def run(item: Tool, args: dict[str, Any], ctx: ToolContext | None = None) -> Any:
    async def main() -> Any:
        return await item.invoke(args, ctx)

    return anyio.run(main)


def test_bare_decorator_defaults() -> None:
    @tool
    def add(a: int, b: int = 2) -> int:
        """Add two integers.

        More text that is not part of the description.
        """
        return a + b

    assert isinstance(add, Tool)
    assert add.name == "add"
    assert add.description == "Add two integers."
    assert add.effects == "none"
    assert add.idempotent is True
    assert add.writes is None
    assert add.timeout is None
    assert add.max_concurrency is None
    assert add.inline is False
    assert add.result_type is int
    assert add(1) == 3
    assert run(add, {"a": 1}) == 3


def test_options() -> None:
    @tool(
        name="save",
        description="Save it.",
        effects="write",
        writes="target",
        timeout=5.0,
        max_concurrency=2,
    )
    def save_function(target: str, text: str) -> None:
        """Ignored docstring."""

    assert save_function.name == "save"
    assert save_function.description == "Save it."
    assert save_function.effects == "write"
    assert save_function.writes == "target"
    assert save_function.timeout == 5.0
    assert save_function.max_concurrency == 2
    assert save_function.write_targets({"target": "out/a.txt", "text": "x"}) == ["out/a.txt"]


@pytest.mark.parametrize(
    ("effects", "idempotent"), [("none", True), ("write", False), ("irreversible", False)]
)
def test_idempotent_default_follows_effects(effects: Any, idempotent: bool) -> None:
    @tool(effects=effects)
    def act(x: int) -> int:
        return x

    assert act.idempotent is idempotent


def test_idempotent_override() -> None:
    @tool(effects="write", idempotent=True)
    def put(key: str) -> None: ...

    @tool(idempotent=False)
    def draw() -> int:
        return 4

    assert put.idempotent is True
    assert draw.idempotent is False


def test_context_excluded_from_args_schema() -> None:
    @tool
    def who(name: str, ctx: ToolContext) -> str:
        return f"{name}@{ctx.idempotency_key}#{ctx.attempt}"

    schema = who.json_schema()
    assert schema["properties"] == {"name": {"title": "Name", "type": "string"}}
    assert schema["required"] == ["name"]
    assert schema["additionalProperties"] is False
    assert who.takes_context is True
    assert run(who, {"name": "a"}, ToolContext(run_id="r1", step_id=3, attempt=2)) == "a@r1:3#2"
    with pytest.raises(ValidationError):
        run(who, {"name": "a", "ctx": None})


def test_args_validated() -> None:
    @tool
    def double(n: int) -> int:
        return n * 2

    assert run(double, {"n": "21"}) == 42
    with pytest.raises(ValidationError):
        run(double, {"n": "many"})
    with pytest.raises(ValidationError):
        run(double, {})
    with pytest.raises(ValidationError):
        run(double, {"n": 1, "extra": 2})


def test_argument_named_like_a_model_attribute() -> None:
    @tool
    def dump(json: str, copy: bool = False) -> str:
        return json * (2 if copy else 1)

    assert run(dump, {"json": "ab", "copy": True}) == "abab"
    assert sorted(dump.json_schema()["properties"]) == ["copy", "json"]


def test_missing_type_hint() -> None:
    def untyped(a, b: int) -> int:  # type: ignore[no-untyped-def]
        return b

    with pytest.raises(ToolDefinitionError) as caught:
        tool(untyped)
    assert str(caught.value) == (
        "tool untyped: argument 'a' has no type hint; add one so plans can be checked against it"
    )


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f(*a: int) -> int: ...", "tool f: *args and **kwargs are not allowed"),
        ("def f(a: int, /) -> int: ...", "tool f: argument 'a' is positional-only"),
    ],
)
def test_signatures_refused(source: str, message: str) -> None:
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    with pytest.raises(ToolDefinitionError) as caught:
        tool(namespace["f"])
    assert str(caught.value).startswith(message)


def test_bad_options() -> None:
    def f(path: str) -> None: ...

    with pytest.raises(ToolDefinitionError):
        tool(effects="sometimes")(f)  # type: ignore[call-overload]
    with pytest.raises(ToolDefinitionError):
        tool(timeout=0)(f)
    with pytest.raises(ToolDefinitionError):
        tool(max_concurrency=0)(f)
    with pytest.raises(ToolDefinitionError) as caught:
        tool(writes="target")(f)
    assert str(caught.value) == "tool f: writes='target' names no argument of the tool"


def test_inline_refused_for_async() -> None:
    async def f() -> None: ...

    with pytest.raises(ToolDefinitionError):
        tool(inline=True)(f)


def test_sync_tool_runs_in_worker_thread() -> None:
    @tool
    def where() -> int:
        return threading.get_ident()

    async def main() -> tuple[int, int]:
        return threading.get_ident(), await where.invoke({})

    loop_thread, tool_thread = anyio.run(main)
    assert tool_thread != loop_thread


def test_inline_sync_tool_runs_on_loop_thread() -> None:
    @tool(inline=True)
    def where() -> int:
        return threading.get_ident()

    async def main() -> tuple[int, int]:
        return threading.get_ident(), await where.invoke({})

    loop_thread, tool_thread = anyio.run(main)
    assert tool_thread == loop_thread


def test_async_tool_awaited_on_loop() -> None:
    @tool
    async def where(delay: float = 0.0) -> int:
        await anyio.sleep(delay)
        return threading.get_ident()

    assert where.is_async is True

    async def main() -> tuple[int, int]:
        return threading.get_ident(), await where.invoke({"delay": 0.001})

    loop_thread, tool_thread = anyio.run(main)
    assert tool_thread == loop_thread


def test_decorating_twice_refused() -> None:
    @tool
    def once() -> int:
        return 1

    with pytest.raises(ToolDefinitionError) as caught:
        tool(once)
    assert str(caught.value) == "once is already a tool; apply @tool once"


def test_untrusted_content_declarations() -> None:
    def send(url: str, body: str = "") -> str:
        return url

    plain = tool(send)
    assert (plain.egress, plain.taint_source, plain.reaches, plain.reads) == (
        False,
        False,
        None,
        None,
    )
    declared = tool(egress=True, taint_source=True, reaches="url")(send)
    assert (declared.egress, declared.taint_source, declared.reaches) == (True, True, "url")
    with pytest.raises(ToolDefinitionError) as caught:
        tool(reaches="url")(send)
    assert "reaches='url' needs egress=True" in str(caught.value)
    with pytest.raises(ToolDefinitionError) as caught:
        tool(egress=True, reaches="address")(send)
    assert "reaches='address' names no argument" in str(caught.value)
    with pytest.raises(ToolDefinitionError) as caught:
        tool(taint_source=True, reads="path")(send)
    assert "reads='path' names no argument" in str(caught.value)


def test_inline_tool_called_without_awaiting_gives_what_invoke_gives() -> None:
    @tool(inline=True)
    def double(n: int) -> int:
        return 2 * n

    assert double.invoke_inline({"n": "4"}) == 8
    assert run(double, {"n": "4"}) == 8
    with pytest.raises(ValidationError):
        double.invoke_inline({"n": "four"})


def test_inline_tool_raising_system_exit_fails_with_tool_exit() -> None:
    @tool(inline=True)
    def leaves() -> int:
        raise SystemExit(3)

    with pytest.raises(PermanentStepError) as raised:
        leaves.invoke_inline({})
    assert raised.value.reason == "tool_exit"
    assert str(raised.value) == (
        "tool leaves raised SystemExit(3); a tool must return or raise an Exception"
    )
    assert isinstance(raised.value.__cause__, SystemExit)


def test_inline_tool_that_blocked_past_its_timeout_has_its_result_discarded() -> None:
    @tool(inline=True, timeout=0.001)
    def sleeps() -> int:
        time.sleep(0.01)
        return 1

    with pytest.raises(StepTimeoutError, match="tool sleeps blocked the event loop for"):
        sleeps.invoke_inline({})


@pytest.mark.parametrize("timeout", [0.001, None])
def test_an_async_tool_that_blocked_past_its_timeout_has_its_result_discarded(
    timeout: float | None,
) -> None:
    @tool(timeout=timeout)
    async def blocks() -> int:
        time.sleep(0.01)  # noqa: ASYNC251 - blocks the event loop, as the test needs
        return 1

    @tool(inline=True, timeout=timeout)
    def sleeps() -> int:
        time.sleep(0.01)
        return 1

    if timeout is None:  # no limit to pass: the results are kept
        assert anyio.run(blocks.invoke, {}) == 1
        assert sleeps.invoke_inline({}) == 1
        return
    with pytest.raises(StepTimeoutError, match="tool blocks blocked the event loop for"):
        anyio.run(blocks.invoke, {})


def test_only_inline_sync_tools_are_called_without_awaiting() -> None:
    @tool
    def threaded() -> int:
        return 1

    with pytest.raises(ValueError, match="tool threaded is not an inline sync tool"):
        threaded.invoke_inline({})
