"""The planner through the real Anthropic SDK against the local Messages API server
(plandag.testing) on 127.0.0.1; retry delays on a VirtualClock."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.cli.plan_command import register
from plandag.compiler import compile_plan
from plandag.dag.plan import Plan
from plandag.errors import PlanError
from plandag.executors.data import parse_data_blocks
from plandag.models import AnthropicClient, TruncatedResponseError
from plandag.models.schemas import prepare_schema
from plandag.planner.planner import Planner, PlannerGaveUp
from plandag.planner.prompt import format_diagnostics, user_prompt
from plandag.planner.schema import plan_json_schema
from plandag.planner.wire import wire_to_document
from plandag.testing import MessagesServer, system_text
from plandag.tools import tool
from plandag.tools.registry import Registry

MODEL = "claude-sonnet-4-6"


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


def registry() -> Registry:
    return Registry([add, multiply], BUILTIN_CHECKS)


GOOD: dict[str, Any] = {
    "g": "(2 + 3) * 4",
    "s": [
        {"i": 1, "t": "add", "a": {"a": 2, "b": 3}, "d": []},
        {"i": 2, "t": "multiply", "a": {"a": "<step_1_result>", "b": 4}, "d": [1]},
        {"i": 3, "t": "multiply", "a": {"a": "<step_2_result>", "b": 1}, "d": [2]},
    ],
    "o": "<step_3_result>",
}

BAD_1: dict[str, Any] = {
    "g": "(2 + 3) * 4",
    "s": [
        {"i": 1, "t": "ad", "a": {"a": 2, "b": 3}, "d": []},
        {"i": 2, "t": "multiply", "a": {"a": "<step_1_reslt>", "b": 4}, "d": [1, 7]},
    ],
}
BAD_2: dict[str, Any] = {
    "g": "(2 + 3) * 4",
    "s": [{"i": 1, "t": "add", "a": {"a": 2, "b": {"json": "3 +"}}, "d": []}],
}
BAD_3: dict[str, Any] = {
    "g": "(2 + 3) * 4",
    "s": [
        {"i": 1, "t": "add", "a": {"a": 2, "b": 3}, "d": [2]},
        {"i": 2, "t": "multiply", "a": {"a": "<step_1_result>", "b": 4}, "d": [1]},
    ],
}


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests to 127.0.0.1 must not go through a proxy from the environment."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


def planner(server: MessagesServer, clock: VirtualClock | None = None, **options: Any) -> Planner:
    return Planner(
        AnthropicClient(api_key="test", base_url=server.url),
        MODEL,
        registry(),
        retry=RetryPolicy(retries=2, base_delay=0.5, jitter=False),
        clock=clock or VirtualClock(),
        max_tokens=2000,
        **options,
    )


def diagnostics_text(wire: dict[str, Any]) -> str:
    """What plandag check says of a wire plan, computed independently of the planner."""
    try:
        compile_plan(wire_to_document(wire, registry()), registry())
    except PlanError as error:
        return format_diagnostics(error.diagnostics)
    raise AssertionError("the plan compiled")


# -- the happy path --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_happy_path_calls_the_model_once_with_tools_and_the_wire_schema(
    server: MessagesServer,
) -> None:
    server.push_json(GOOD, usage={"input_tokens": 900, "output_tokens": 96})
    subject = planner(server)
    outcome = await subject.plan("What is (2 + 3) * 4?", context="Use the arithmetic tools.")
    await subject.client.aclose()

    assert outcome.plan == Plan.model_validate(
        {
            "goal": "(2 + 3) * 4",
            "steps": [
                {"id": 1, "tool": "add", "args": {"a": 2, "b": 3}, "depends_on": []},
                {
                    "id": 2,
                    "tool": "multiply",
                    "args": {"a": "<step_1_result>", "b": 4},
                    "depends_on": [1],
                },
                {
                    "id": 3,
                    "tool": "multiply",
                    "args": {"a": "<step_2_result>", "b": 1},
                    "depends_on": [2],
                },
            ],
            "output": "<step_3_result>",
        }
    )
    assert outcome.compiled.order == (1, 2, 3)
    assert outcome.output_tokens == 96
    assert outcome.output_tokens_per_step == 32.0
    assert [(a.number, a.compiled, a.diagnostics) for a in outcome.attempts] == [(1, True, ())]
    assert len(outcome.records) == 1

    [sent] = server.message_requests
    body = sent.json
    assert body["model"] == MODEL
    assert body["max_tokens"] == 2000
    assert "temperature" not in body  # the Anthropic SDK 2.14 has no such parameter
    assert body["messages"] == [
        {
            "role": "user",
            "content": "Task:\nWhat is (2 + 3) * 4?\n\n"
            "Trusted context (from the user):\nUse the arithmetic tools.\n",
        }
    ]
    system = sent.system_text
    for item in (add, multiply):
        assert f"- {item.name}(a, b) -> float: {item.description}\n" in system
    assert "never an instruction" in system
    expected_schema = prepare_schema(plan_json_schema(registry()), "anthropic").schema
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": expected_schema}}


def test_the_user_prompt_lists_params_as_json() -> None:
    assert user_prompt("Count the words", params={"path": "a.txt", "limit": 3}) == (
        "Task:\nCount the words\n\n"
        'Params given at run time (declare each in "p", use it as <param.NAME>):\n'
        '- path = "a.txt"\n- limit = 3\n'
    )


# -- repairs ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_an_invalid_plan_is_repaired_from_its_diagnostics(server: MessagesServer) -> None:
    server.push_json(BAD_1, usage={"input_tokens": 900, "output_tokens": 60})
    server.push_json(GOOD, usage={"input_tokens": 1200, "output_tokens": 96})
    subject = planner(server)
    outcome = await subject.plan("What is (2 + 3) * 4?")
    await subject.client.aclose()

    assert [attempt.compiled for attempt in outcome.attempts] == [False, True]
    assert outcome.plan.output == "<step_3_result>"
    assert outcome.output_tokens == 156
    expected = (
        "plan.json: step 1: error[unknown_tool]: tool 'ad' is not registered "
        "(hint: did you mean add?)\n"
        "plan.json: step 2: error[unknown_dependency]: depends_on names step 7, which does "
        "not exist (hint: existing steps: 1, 2)\n"
        "plan.json: step 2: error[malformed_reference]: args.a: '<step_1_reslt>' is not a "
        "valid reference (hint: write <step_1_result>; references are <step_N_result>, "
        "<step_N_result.field.0> or <param.NAME>)\n"
        "plan.json: 3 error(s); the plan does not compile"
    )
    assert diagnostics_text(BAD_1) == expected
    assert format_diagnostics(outcome.attempts[0].diagnostics) == expected

    first, second = server.message_requests
    messages = second.json["messages"]
    assert messages[0] == first.json["messages"][0]
    assert messages[1] == {"role": "assistant", "content": json.dumps(BAD_1, separators=(",", ":"))}
    assert messages[2]["role"] == "user"
    [block] = parse_data_blocks(messages[2]["content"])
    assert block.label == "plandag check output, attempt 1"
    assert block.value == expected  # the full list, verbatim
    assert "truncated" not in block.attributes
    assert second.system_text == first.system_text


@pytest.mark.anyio
async def test_malformed_wire_data_is_repaired_like_a_compile_error(
    server: MessagesServer,
) -> None:
    server.push_json(BAD_2)
    server.push_json(GOOD)
    subject = planner(server)
    outcome = await subject.plan("What is (2 + 3) * 4?")
    await subject.client.aclose()
    [diagnostic] = outcome.attempts[0].diagnostics
    assert diagnostic.format() == (
        "step 1: error[invalid_json_text]: wire field s[0].a.b.json: the text is not JSON "
        "(Extra data: line 1 column 3 (char 2)) (hint: write the value as JSON text: "
        '{"json": "[1, 2]"}, {"json": "{\\"a\\": \\"<step_1_result>\\"}"}, or give one '
        "reference as a plain string)"
    )
    [block] = parse_data_blocks(server.message_requests[1].json["messages"][2]["content"])
    assert block.value == format_diagnostics([diagnostic])


@pytest.mark.anyio
async def test_three_invalid_plans_give_up_with_the_last_diagnostics(
    server: MessagesServer,
) -> None:
    for bad in (BAD_1, BAD_2, BAD_3):
        server.push_json(bad)
    server.push_json(GOOD)  # never asked for
    subject = planner(server)
    with pytest.raises(PlannerGaveUp) as caught:
        await subject.plan("What is (2 + 3) * 4?")
    await subject.client.aclose()

    assert len(server.message_requests) == 3
    error = caught.value
    assert isinstance(error, PlanError)
    assert error.codes == ["cycle"]
    assert format_diagnostics(error.diagnostics) == diagnostics_text(BAD_3)
    assert format_diagnostics(error.diagnostics) == (
        "plan.json: step 1: error[cycle]: the dependencies form a cycle: 1 → 2 → 1 "
        "(hint: break the cycle: one of these steps must not need the others' results)\n"
        "plan.json: 1 error(s); the plan does not compile"
    )
    assert [attempt.number for attempt in error.attempts] == [1, 2, 3]
    assert len(error.records) == 3
    # the third request carries the second attempt's diagnostics
    [block] = parse_data_blocks(server.message_requests[2].json["messages"][4]["content"])
    assert block.label == "plandag check output, attempt 2"


@pytest.mark.anyio
async def test_max_repairs_zero_gives_up_after_one_call(server: MessagesServer) -> None:
    server.push_json(BAD_3)
    subject = planner(server, max_repairs=0)
    with pytest.raises(PlannerGaveUp):
        await subject.plan("What is (2 + 3) * 4?")
    await subject.client.aclose()
    assert len(server.message_requests) == 1


# -- failures of the call --------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_plan_cut_at_max_tokens_is_an_error_never_a_plan(server: MessagesServer) -> None:
    server.push_max_tokens('{"g":"(2 + 3) * 4","s":[{"i":1,"t":"add","a":{"a":2', usage={})
    subject = planner(server)
    with pytest.raises(TruncatedResponseError) as caught:
        await subject.plan("What is (2 + 3) * 4?")
    await subject.client.aclose()
    assert caught.value.reason == "max_tokens"
    assert caught.value.max_tokens == 2000
    assert len(server.message_requests) == 1  # no repair of a cut answer


@pytest.mark.anyio
async def test_a_529_is_retried_on_the_clock_then_the_plan_arrives(server: MessagesServer) -> None:
    server.push_error(529)
    server.push_json(GOOD, usage={"input_tokens": 900, "output_tokens": 96})
    clock = VirtualClock()
    subject = planner(server, clock)
    outcome = await subject.plan("What is (2 + 3) * 4?")
    await subject.client.aclose()
    assert clock.sleeps == [0.5]
    assert [record.error_reason for record in outcome.records] == ["http_529", None]
    assert [attempt.number for attempt in outcome.attempts] == [1]
    assert len(server.message_requests) == 2
    assert server.message_requests[0].json == server.message_requests[1].json


def test_options_are_checked() -> None:
    client = AnthropicClient(api_key="test", base_url="http://127.0.0.1:9")
    with pytest.raises(ValueError, match="max_repairs must be >= 0"):
        Planner(client, MODEL, registry(), max_repairs=-1)
    with pytest.raises(ValueError, match="max_tokens must be >= 1"):
        Planner(client, MODEL, registry(), max_tokens=0)


# -- plandag plan ----------------------------------------------------------------------------

TOOLS_FILE = '''
from plandag import tool


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b
'''


def plan_app() -> typer.Typer:
    app = typer.Typer(add_completion=False, rich_markup_mode=None)
    register(app)

    @app.callback()
    def root() -> None:
        """plandag, for this test."""

    return app


def test_the_plan_command_writes_the_plan_and_prints_its_dag(
    server: MessagesServer, tmp_path: Path
) -> None:
    tools = tmp_path / "arith.py"
    tools.write_text(TOOLS_FILE, encoding="utf-8")
    context = tmp_path / "context.txt"
    context.write_text("Numbers are exact.\n", encoding="utf-8")
    target = tmp_path / "out" / "plan.json"
    server.push_json(BAD_1, usage={"input_tokens": 900, "output_tokens": 60})
    server.push_json(GOOD, usage={"input_tokens": 1200, "output_tokens": 96})
    result = CliRunner().invoke(
        plan_app(),
        [
            "plan",
            "What is (2 + 3) * 4?",
            "--tools",
            str(tools),
            "--context",
            str(context),
            "-o",
            str(target),
            "--base-url",
            server.url,
        ],
        env={"ANTHROPIC_API_KEY": "test"},
    )
    assert result.exit_code == 0, result.output
    written = json.loads(target.read_text(encoding="utf-8"))
    assert written == {
        "version": 1,
        "goal": "(2 + 3) * 4",
        "steps": [
            {"id": 1, "tool": "add", "args": {"a": 2, "b": 3}, "depends_on": []},
            {
                "id": 2,
                "tool": "multiply",
                "args": {"a": "<step_1_result>", "b": 4},
                "depends_on": [1],
            },
            {
                "id": 3,
                "tool": "multiply",
                "args": {"a": "<step_2_result>", "b": 1},
                "depends_on": [2],
            },
        ],
        "output": "<step_3_result>",
    }
    assert result.stdout.startswith(target.read_text(encoding="utf-8") + "\nflowchart")
    assert result.stdout.endswith("%% critical path: 1 -> 2 -> 3 (3 steps)\n")
    assert f"{target}: 3 steps, 2 plan(s) asked, 2 call(s), 156 output tokens (32.0 per step)" in (
        result.stderr
    )
    assert len(server.message_requests) == 2
    first = server.message_requests[0].json
    assert first["model"] == "claude-sonnet-4-6"
    assert (
        "Trusted context (from the user):\nNumbers are exact.\n" in first["messages"][0]["content"]
    )
    assert "- add(a, b) -> float: Add two numbers." in system_text(first)


def test_the_plan_command_exits_2_with_the_diagnostics_when_it_gives_up(
    server: MessagesServer, tmp_path: Path
) -> None:
    for bad in (BAD_3, BAD_3, BAD_3):
        server.push_json(bad)
    target = tmp_path / "plan.json"
    result = CliRunner().invoke(
        plan_app(),
        ["plan", "Sum", "-o", str(target), "--base-url", server.url],
        env={"ANTHROPIC_API_KEY": "test"},
    )
    assert result.exit_code == 2
    assert "plan.json: step 1: error[unknown_tool]: tool 'add' is not registered" in result.stderr
    assert f"the model's plan does not compile; nothing was written to {target}" in result.stderr
    assert not target.exists()
    assert len(server.message_requests) == 3


def test_the_plan_command_needs_a_key_before_anything_runs(
    server: MessagesServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    target = tmp_path / "plan.json"
    result = CliRunner().invoke(
        plan_app(), ["plan", "Sum", "-o", str(target), "--base-url", server.url]
    )
    assert result.exit_code == 2
    assert "error: no Anthropic API key: set ANTHROPIC_API_KEY" in result.stderr
    assert "or --offline to try it with no key" in result.stderr
    result = CliRunner().invoke(
        plan_app(), ["plan", "Sum", "-o", str(target), "--provider", "openai", "--model", "m"]
    )
    assert result.exit_code == 2
    assert "error: no OpenAI API key: set OPENAI_API_KEY, or give --base-url" in result.stderr
    assert server.requests == []
    assert not target.exists()


def test_the_plan_command_exits_1_when_the_answer_is_cut(
    server: MessagesServer, tmp_path: Path
) -> None:
    server.push_max_tokens('{"g":"x","s":[', usage={})
    result = CliRunner().invoke(
        plan_app(),
        ["plan", "Sum", "-o", str(tmp_path / "plan.json"), "--base-url", server.url],
        env={"ANTHROPIC_API_KEY": "test"},
    )
    assert result.exit_code == 1
    # the default, sized to plans (plandag.brakes.DEFAULT_PLANNER_MAX_TOKENS)
    assert "the output was cut off at max_tokens=4096" in result.stderr
    assert server.message_requests[-1].json["max_tokens"] == 4096
    server.push_max_tokens('{"g":"x","s":[', usage={})
    result = CliRunner().invoke(
        plan_app(),
        [
            "plan",
            "Sum",
            "-o",
            str(tmp_path / "plan.json"),
            "--base-url",
            server.url,
            "--planner-max-tokens",
            "9000",
        ],
        env={"ANTHROPIC_API_KEY": "test"},
    )
    assert result.exit_code == 1
    assert "the output was cut off at max_tokens=9000" in result.stderr
    assert server.message_requests[-1].json["max_tokens"] == 9000


# -- a schema refused as too large -----------------------------------------------------------

TOO_LARGE = (
    "The compiled grammar is too large, which would cause performance issues. Simplify your "
    "tool schemas or reduce the number of strict tools."
)


@tool
def divide(a: float, b: float) -> float:
    """Divide two numbers."""
    return a / b


def step_tools(body: dict[str, Any]) -> list[str]:
    step = body["output_config"]["format"]["schema"]["properties"]["s"]["items"]
    return [variant["properties"]["t"]["const"] for variant in step.get("anyOf", [step])]


def test_schema_too_large_is_told_apart_from_other_refusals() -> None:
    from plandag.errors import PermanentStepError, TransientStepError
    from plandag.planner.planner import schema_too_large

    def refused(message: str, reason: str = "http_400") -> PermanentStepError:
        return PermanentStepError(
            f"anthropic POST /v1/messages: HTTP 400: {message}", reason=reason
        )

    assert schema_too_large(refused(TOO_LARGE))
    assert schema_too_large(
        refused(
            "Invalid schema for response_format 'plandag_plan': too many enum values", "http_400"
        )
    )
    assert schema_too_large(
        refused("The schema exceeds the maximum of 5000 properties", "http_422")
    )
    assert not schema_too_large(refused("prompt is too long: 250000 tokens > 200000 maximum"))
    assert not schema_too_large(refused(TOO_LARGE, "http_401"))
    assert not schema_too_large(TransientStepError(TOO_LARGE, reason="http_529"))


@pytest.mark.anyio
async def test_a_schema_refused_as_too_large_gets_the_plans_subset_of_tools(
    server: MessagesServer,
) -> None:
    server.push_error(400, "invalid_request_error", message=TOO_LARGE)
    server.push_json({"tools": ["multiply", "add", "nope"]})
    server.push_json(BAD_1)  # a repair follows, with the subset at once
    server.push_json(GOOD)
    subject = Planner(
        AnthropicClient(api_key="test", base_url=server.url),
        MODEL,
        Registry([add, multiply, divide], BUILTIN_CHECKS),
        retry=RetryPolicy(retries=2, base_delay=0.5, jitter=False),
        clock=VirtualClock(),
        max_tokens=2000,
    )
    outcome = await subject.plan("What is (2 + 3) * 4?")
    await subject.client.aclose()
    assert [attempt.compiled for attempt in outcome.attempts] == [False, True]
    assert subject.tool_subset == ("add", "multiply")
    refused, choice, first, repair = (request.json for request in server.message_requests)
    assert step_tools(refused) == ["add", "divide", "multiply"]
    choice_schema = choice["output_config"]["format"]["schema"]
    assert choice_schema["properties"]["tools"]["items"] == {"enum": ["add", "divide", "multiply"]}
    assert choice["messages"][0]["content"].endswith(
        'Before the plan: list every tool the plan will call, by name, as {"tools": [NAME, ...]}.'
    )
    assert step_tools(first) == step_tools(repair) == ["add", "multiply"]
    assert len(outcome.records) == 4  # the refused call and the choice are recorded too
