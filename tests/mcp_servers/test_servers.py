"""Real MCP servers (the official SDK's ``MCPServer``), over stdio and over streamable HTTP on
127.0.0.1: their tools become plan tools with their input schemas; calls validate, time out,
return structured or text content and fail on ``isError``; a server that crashes or hangs is
down for the rest of the run; servers stop when the run ends."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pydantic
import pytest

from plandag.config import McpServerSpec, McpToolPolicy
from plandag.errors import (
    DependencyDownError,
    PermanentStepError,
    StepTimeoutError,
    ToolLoadError,
    TransientStepError,
)
from plandag.tools.base import Tool
from plandag.tools.mcp import McpServers, open_mcp_servers
from plandag.tools.registry import default_registry

from .conftest import all_gone, http_server, process_alive, stdio_command

pytestmark = pytest.mark.slow


@pytest.fixture(params=["stdio", "http"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[McpServerSpec]:
    """The test server, over each transport (it hangs for 3 s when asked to)."""
    if request.param == "stdio":
        yield McpServerSpec(command=stdio_command("--hang", "3"), cwd=str(tmp_path))
    else:
        with http_server(tmp_path, "--hang", "3") as url:
            yield McpServerSpec(url=url)


def refusal(specs: list[McpServerSpec]) -> str:
    """The message of the ToolLoadError that starting ``specs`` raises."""
    with pytest.raises(ToolLoadError) as caught, open_mcp_servers(specs):
        pass
    return str(caught.value)


def by_name(servers: McpServers) -> dict[str, Tool]:
    return {item.name: item for item in servers.tools}


def test_the_tools_of_a_server_become_plan_tools(spec: McpServerSpec, tmp_path: Path) -> None:
    with open_mcp_servers([spec]) as servers:
        tools = by_name(servers)
        assert sorted(tools) == [
            "weather_crash",
            "weather_echo",
            "weather_fail",
            "weather_flaky",
            "weather_hang",
            "weather_lookup",
            "weather_record",
            "weather_slow",
            "weather_steal",
        ]
        lookup = tools["weather_lookup"]
        schema = lookup.json_schema()
        assert schema["properties"]["city"]["type"] == "string"
        assert schema["required"] == ["city"]
        assert lookup.description == "The forecast of a city."
        assert lookup.origin is not None
        assert "MCP server weather" in lookup.origin
        # the safe default: annotations are not trusted unless the person says so
        assert (lookup.effects, lookup.egress, lookup.taint_source, lookup.idempotent) == (
            "irreversible",
            True,
            True,
            False,
        )
        assert lookup.schema_sha256 is not None
        assert len(lookup.schema_sha256) == 64
        assert servers.specs[0].name == "weather"  # the name the server gives itself
        registry = default_registry()
        assert servers.register(registry)[0] == "weather_lookup"
        assert registry.mcp_servers == list(servers.specs)


def test_calls_return_structured_or_text_content(spec: McpServerSpec, tmp_path: Path) -> None:
    with open_mcp_servers([spec]) as servers:
        tools = by_name(servers)

        async def calls() -> list[Any]:
            return [
                await tools["weather_lookup"].invoke({"city": "Lyon", "days": 2}),
                await tools["weather_echo"].invoke({"text": "bonjour"}),
                await tools["weather_record"].invoke({"line": "one"}),
            ]

        assert anyio.run(calls) == [
            {"city": "Lyon", "days": 2, "temperature": 6},
            "bonjour",
            "recorded one",
        ]
    assert (tmp_path / "record.log").read_text() == "one\n"


def test_arguments_are_validated_before_anything_is_sent(
    spec: McpServerSpec, tmp_path: Path
) -> None:
    with open_mcp_servers([spec]) as servers:
        record = by_name(servers)["weather_record"]
        for wrong in ({"line": 3}, {}, {"line": "x", "other": 1}):
            with pytest.raises(pydantic.ValidationError):
                anyio.run(record.invoke, wrong)
    assert not (tmp_path / "record.log").exists()


def test_is_error_fails_the_step_permanently_unless_the_server_says_retry(
    spec: McpServerSpec,
) -> None:
    with open_mcp_servers([spec]) as servers:
        tools = by_name(servers)
        with pytest.raises(PermanentStepError, match="tool 'fail' failed: the tank is empty"):
            anyio.run(tools["weather_fail"].invoke, {"message": "the tank is empty"})
        with pytest.raises(TransientStepError, match="retryable"):
            anyio.run(tools["weather_flaky"].invoke, {"message": "busy"})
        # the server is up: the failures were the tools'
        assert anyio.run(tools["weather_echo"].invoke, {"text": "up"}) == "up"


def test_a_slow_call_times_out_and_the_server_stays_up(spec: McpServerSpec) -> None:
    with open_mcp_servers([spec], default_timeout=1.0, check_timeout=5.0) as servers:
        tools = by_name(servers)
        with pytest.raises(StepTimeoutError, match=r"within its timeout of 1 s \(the server still"):
            anyio.run(tools["weather_slow"].invoke, {"seconds": 10})
        assert anyio.run(tools["weather_echo"].invoke, {"text": "still up"}) == "still up"


def test_a_hung_server_is_down_for_the_rest_of_the_run(spec: McpServerSpec) -> None:
    with open_mcp_servers([spec], default_timeout=1.0, check_timeout=1.0) as servers:
        tools = by_name(servers)
        with pytest.raises(StepTimeoutError, match="it is hung, and down for the rest of the run"):
            anyio.run(tools["weather_hang"].invoke, {})
        with pytest.raises(DependencyDownError, match="hung") as caught:
            anyio.run(tools["weather_echo"].invoke, {"text": "x"})
        assert caught.value.reason == "dependency_down"  # failed at once, nothing sent


def test_a_server_that_crashes_mid_call_is_down(spec: McpServerSpec) -> None:
    with open_mcp_servers([spec], default_timeout=10.0, check_timeout=2.0) as servers:
        tools = by_name(servers)
        with pytest.raises(TransientStepError) as caught:
            anyio.run(tools["weather_crash"].invoke, {})
        assert caught.value.reason in ("mcp_server_down", "timeout"), caught.value
        with pytest.raises(DependencyDownError, match="down for the rest of the run"):
            anyio.run(tools["weather_echo"].invoke, {"text": "x"})


def test_a_crashed_stdio_server_s_last_words_are_in_the_message(tmp_path: Path) -> None:
    spec = McpServerSpec(command=stdio_command(), cwd=str(tmp_path))
    with open_mcp_servers([spec]) as servers:
        crash = by_name(servers)["weather_crash"]
        with pytest.raises(TransientStepError, match="crashing now") as caught:
            anyio.run(crash.invoke, {})
        assert caught.value.reason == "mcp_server_down"


@pytest.mark.anyio
async def test_servers_start_once_and_stop_with_the_block(tmp_path: Path) -> None:
    specs = [
        McpServerSpec(name="one", command=stdio_command(), cwd=str(tmp_path)),
        McpServerSpec(name="two", command=stdio_command("--name", "other"), cwd=str(tmp_path)),
    ]
    async with McpServers(specs) as servers:
        tools = by_name(servers)
        assert "one_echo" in tools
        assert "two_echo" in tools
        assert await tools["two_echo"].invoke({"text": "hi"}) == "hi"
        pids = [int(line) for line in (tmp_path / "pids.log").read_text().split()]
        assert len(pids) == 2
        assert all(process_alive(pid) for pid in pids)
    assert await anyio.to_thread.run_sync(all_gone, pids)


def test_the_person_s_declarations_and_trusted_annotations_apply(tmp_path: Path) -> None:
    spec = McpServerSpec(
        name="wx",
        command=stdio_command(),
        cwd=str(tmp_path),
        trust_annotations=True,
        tools={"echo": McpToolPolicy(effects="none", egress=False, taint_source=False)},
    )
    with open_mcp_servers([spec]) as servers:
        tools = by_name(servers)
        lookup, record, echo, fail = (
            tools["wx_lookup"],
            tools["wx_record"],
            tools["wx_echo"],
            tools["wx_fail"],
        )
        assert (lookup.effects, lookup.egress, lookup.taint_source) == ("none", False, False)
        assert (record.effects, record.egress) == ("write", True)
        assert (echo.effects, echo.egress, echo.taint_source) == ("none", False, False)
        assert fail.effects == "irreversible"
        untrusted = McpServerSpec(name="wx", command=stdio_command(), cwd=str(tmp_path))
    with open_mcp_servers([untrusted]) as plain:
        # what a tool counts as is part of its definition's hash
        assert by_name(plain)["wx_lookup"].schema_sha256 != lookup.schema_sha256


def test_names_that_clash_are_refused_naming_both(tmp_path: Path) -> None:
    twice = [
        McpServerSpec(command=stdio_command(), cwd=str(tmp_path)),
        McpServerSpec(command=stdio_command("--name", "weather"), cwd=str(tmp_path)),
    ]
    assert "two MCP servers are both named 'weather'" in refusal(twice)
    folding = [
        McpServerSpec(name="a-b", command=stdio_command(), cwd=str(tmp_path)),
        McpServerSpec(name="a_b", command=stdio_command(), cwd=str(tmp_path)),
    ]
    assert "a-b/lookup and a_b/lookup both become the plan tool a_b_lookup" in refusal(folding)
    registry = default_registry()
    clashing = McpServerSpec(name="read", command=stdio_command(), cwd=str(tmp_path))
    with open_mcp_servers([clashing]) as servers:
        registry.add_tool(
            Tool(
                name="read_echo",
                description="",
                function=print,
                args_model=servers.tools[0].args_model,
                result_type=Any,
            )
        )
        with pytest.raises(ToolLoadError, match="read_echo of MCP server read"):
            servers.register(registry)
        assert "read_lookup" not in registry.tools  # nothing added


def test_a_server_that_does_not_start_says_why(tmp_path: Path) -> None:
    missing = McpServerSpec(name="gone", command=("no-such-program-here",), cwd=str(tmp_path))
    assert re.search(r"MCP server gone \(.*\) did not start: ", refusal([missing]))
    silent = McpServerSpec(
        name="silent",
        command=(stdio_command()[0], "-c", "import time; time.sleep(30)"),
        cwd=str(tmp_path),
        startup_timeout=1.0,
    )
    assert "within 1 s (startup_timeout)" in refusal([silent])
    assert "did not start" in refusal([McpServerSpec(url="http://127.0.0.1:9/mcp")])


def test_a_call_may_take_60_s_unless_configured(tmp_path: Path) -> None:
    plain = McpServerSpec(name="plain", command=stdio_command(), cwd=str(tmp_path))
    configured = McpServerSpec(
        name="set",
        command=stdio_command(),
        cwd=str(tmp_path),
        timeout=7.0,
        tools={"echo": McpToolPolicy(timeout=2.0)},
    )
    with open_mcp_servers([plain, configured]) as servers:
        assert servers.policies["plain_lookup"].timeout == 60.0
        assert servers.policies["set_lookup"].timeout == 7.0  # the server's table
        assert servers.policies["set_echo"].timeout == 2.0  # the tool's own
    with open_mcp_servers([plain], default_timeout=3.0) as servers:  # the mcp_timeout setting
        assert servers.policies["plain_lookup"].timeout == 3.0
