"""The plan library through the agent, against the local Messages API server (real SDK),
counting the requests it receives: a task type's later runs make none, a routed run makes
exactly one (the routing call) and no planner call, a reused plan that fails its check
brings the planner in and its repair becomes the next version, a repair written after
reading outside content waits for a person."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import plandag
from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.dag.plan import Plan
from plandag.errors import PlanError
from plandag.library import PlanLibrary, task_type_stats
from plandag.library.catalog import LibraryPlan
from plandag.library.routing import parse_routing, routing_schema
from plandag.library.runner import derived_task_type
from plandag.models import AnthropicClient, LLMResponse, UnusableResponseError, Usage
from plandag.planner.agent import Agent, AgentResult
from plandag.scheduler import RunLimits
from plandag.store import Store, open_store
from plandag.testing import MessagesServer
from plandag.tools import tool
from plandag.tools.registry import Registry

MODEL = "claude-sonnet-4-6"


@tool
def lookup(name: str) -> dict[str, Any]:
    """Look a name up; returns its score."""
    return {"name": name, "score": len(name)}


@tool(taint_source=True)
def fetch_score(name: str) -> dict[str, Any]:
    """Fetch a name's score from outside (its result is outside content)."""
    return {"name": name, "score": len(name)}


@tool
def total(a: float, b: float) -> float:
    """Add two scores."""
    return a + b


def registry() -> Registry:
    return Registry([lookup, fetch_score, total], BUILTIN_CHECKS)


def step(
    i: int,
    tool_name: str,
    args: list[str],
    d: list[int],
    checks: list[str] = (),  # type: ignore[assignment]
) -> dict[str, Any]:
    found: dict[str, Any] = {"i": i, "t": tool_name, "a": args, "d": d}
    if checks:
        found["c"] = [{"k": "jmespath", "a": {"expr": f"{expr}"}} for expr in checks]
    return found


def score_plan(tool_name: str = "lookup") -> dict[str, Any]:
    """A plan for 'score a name', its name a param, its score checked below 5."""
    return {
        "g": "Score a name",
        "p": [{"n": "name", "t": "string", "h": "the name to score"}],
        "s": [step(1, tool_name, {"name": "<param.name>"}, [], ["score < `5`"])],
        "o": {"json": '{"score":"<step_1_result.score>"}'},
    }


REPAIR = {
    "g": "Score a name",
    "s": [step(2, "lookup", {"name": "<param.name>"}, [], ["score < `10`"])],
    "o": {"json": '{"score":"<step_2_result.score>"}'},
}


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "runs.sqlite3") as opened:
        yield opened


async def run(
    server: MessagesServer,
    store: Store,
    task: str,
    params: dict[str, Any] | None = None,
    **options: Any,
) -> AgentResult:
    task_type = options.pop("task_type", None)
    client = AnthropicClient(api_key="test", base_url=server.url)
    agent = Agent(
        client,
        MODEL,
        registry(),
        limits=RunLimits(heartbeat_every=None),
        retry=RetryPolicy(retries=0),
        clock=VirtualClock(),
        library=PlanLibrary(store),
        **options,
    )
    try:
        return await agent.run(task, params=params, task_type=task_type)
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_a_task_types_later_runs_make_no_request(
    server: MessagesServer, store: Store
) -> None:
    server.push_json(score_plan(), usage={"input_tokens": 1000, "output_tokens": 100})
    first = await run(server, store, "Score ab", {"name": "ab"}, task_type="score_name")
    assert first.status == "succeeded"
    assert len(server.message_requests) == 1
    assert first.library is not None
    assert (first.library.how, first.library.version) == ("planned", None)
    assert first.library.saved is not None
    assert (first.library.saved.version, first.library.saved.status) == (1, "admitted")
    assert first.library.saved.approved_by == "read-only"

    for name, score in (("xyz", 3), ("abcd", 4)):
        server.clear_requests()
        later = await run(server, store, f"Score {name}", {"name": name}, task_type="score_name")
        assert server.requests == []  # no message, no token count: no model call at all
        assert later.status == "succeeded"
        assert later.answer == {"score": score}
        assert later.llm_calls == ()
        assert later.routing_calls == ()
        assert later.library is not None
        assert (later.library.how, later.library.version, later.library.saved) == (
            "library",
            1,
            None,
        )
        assert later.run.spent_usd == 0.0

    [version] = PlanLibrary(store).versions("score_name")
    assert (version.uses, version.successes, version.success_rate) == (2, 2, 1.0)
    assert version.tools == ("lookup",)
    assert version.params == {"name": {"type": "string", "description": "the name to score"}}
    [figures] = task_type_stats(PlanLibrary(store))
    assert (figures.task_type, figures.runs, figures.no_replan, figures.reused) == (
        "score_name",
        3,
        3,
        2,
    )
    assert figures.planner_calls == 1
    assert figures.spend_usd == pytest.approx(1000 * 3e-6 + 100 * 15e-6)


@pytest.mark.anyio
async def test_params_that_do_not_fit_the_task_type_are_refused_before_anything_runs(
    server: MessagesServer, store: Store
) -> None:
    server.push_json(score_plan())
    await run(server, store, "Score ab", {"name": "ab"}, task_type="score_name")
    server.clear_requests()
    with pytest.raises(PlanError, match="name"):
        await run(server, store, "Score", {"nom": "ab"}, task_type="score_name")
    assert server.requests == []


@pytest.mark.anyio
async def test_without_a_task_type_one_routing_call_picks_the_entry_and_fills_its_params(
    server: MessagesServer, store: Store
) -> None:
    server.push_json(score_plan())
    await run(server, store, "Score ab", {"name": "ab"}, task_type="score_name")
    server.clear_requests()
    server.push_json(
        {"task_type": "score_name", "new": False, "params": {"name": "abcd"}},
        usage={"input_tokens": 400, "output_tokens": 20},
    )
    routed = await run(server, store, "What is the score of abcd?")
    [request] = server.message_requests  # the routing call, and no planner call
    assert request.json["model"] == "claude-haiku-4-5"
    assert "score_name" in request.json["messages"][0]["content"]
    # one variant per task type, with that entry's typed params, and one for a new type
    schema = request.json["output_config"]["format"]["schema"]
    assert schema["required"] == ["route"]
    picked, new = schema["properties"]["route"]["anyOf"]
    assert picked == {
        "type": "object",
        "properties": {
            "task_type": {"const": "score_name"},
            "new": {"const": False},
            "params": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
                "additionalProperties": False,
            },
        },
        "required": ["task_type", "new", "params"],
        "additionalProperties": False,
    }
    assert new["properties"]["new"] == {"const": True}
    assert routed.status == "succeeded"
    assert routed.answer == {"score": 4}
    assert routed.llm_calls == ()
    [call] = routed.routing_calls
    assert call.cost_usd == pytest.approx(400 * 1e-6 + 20 * 5e-6)  # Haiku 4.5: $1/M, $5/M
    assert routed.library is not None
    assert (routed.library.how, routed.library.task_type, routed.library.version) == (
        "routed",
        "score_name",
        1,
    )
    document = routed.to_json_dict()
    assert document["llm_calls"] == []
    assert len(document["routing_calls"]) == 1
    assert document["routing_cost_usd"] == pytest.approx(call.cost_usd)
    assert document["planner_cost_usd"] == 0.0
    [run_row] = [row for row in PlanLibrary(store).task_runs() if row.how == "routed"]
    assert (run_row.routing_calls, run_row.planner_calls) == (1, 0)
    assert run_row.routing_usd == pytest.approx(call.cost_usd)
    assert run_row.spent_usd == pytest.approx(call.cost_usd)


@pytest.mark.anyio
async def test_a_routed_new_task_type_is_planned_and_saved_under_its_name(
    server: MessagesServer, store: Store
) -> None:
    server.push_json(score_plan())
    await run(server, store, "Score ab", {"name": "ab"}, task_type="score_name")
    server.clear_requests()
    server.push_json(
        {
            "task_type": "sum_scores",
            "new": True,
            "params": [{"name": "a", "value": "2"}, {"name": "b", "value": "3"}],
        }
    )
    server.push_json(
        {
            "g": "Add two numbers",
            "p": [{"n": "a", "t": "number"}, {"n": "b", "t": "number"}],
            "s": [step(1, "total", {"a": "<param.a>", "b": "<param.b>"}, [])],
            "o": "<step_1_result>",
        }
    )
    result = await run(server, store, "Add 2 and 3")
    assert [r.json["model"] for r in server.message_requests] == ["claude-haiku-4-5", MODEL]
    assert result.answer == 5.0
    assert result.library is not None
    assert (result.library.how, result.library.task_type) == ("planned", "sum_scores")
    assert result.library.saved is not None
    assert result.library.saved.status == "admitted"
    assert [item.task_type for item in PlanLibrary(store).task_types()] == [
        "score_name",
        "sum_scores",
    ]


@pytest.mark.anyio
async def test_an_unusable_routing_answer_falls_back_to_the_planner_and_saves_nothing(
    server: MessagesServer, store: Store
) -> None:
    server.push_json(score_plan())
    await run(server, store, "Score ab", {"name": "ab"}, task_type="score_name")
    server.clear_requests()
    server.push_json({"task_type": "no_such_type", "new": False, "params": []})
    server.push_json(score_plan())
    result = await run(server, store, "Score abc", {"name": "abc"})
    assert len(server.message_requests) == 2
    assert result.status == "succeeded"
    assert result.library is not None
    assert result.library.how == "planned"
    assert result.library.task_type is None
    assert result.library.routing_error is not None
    assert "'no_such_type' is not in the library" in result.library.routing_error
    assert result.library.not_saved is not None
    assert len(PlanLibrary(store).versions("score_name")) == 1


@pytest.mark.anyio
async def test_a_reused_plan_that_fails_its_check_is_repaired_into_the_next_version(
    server: MessagesServer, store: Store
) -> None:
    server.push_json(score_plan())
    await run(server, store, "Score ab", {"name": "ab"}, task_type="score_name")
    server.clear_requests()
    server.push_json(REPAIR)
    repaired = await run(
        server, store, "Score abcdefg", {"name": "abcdefg"}, task_type="score_name"
    )
    assert len(server.message_requests) == 1  # the replanner, once
    assert repaired.status == "succeeded"
    assert repaired.answer == {"score": 7}
    assert len(repaired.replans) == 1
    assert repaired.library is not None
    assert repaired.library.saved is not None
    assert (repaired.library.saved.version, repaired.library.saved.status) == (2, "admitted")
    library = PlanLibrary(store)
    latest = library.latest("score_name")
    assert latest is not None
    assert latest.version == 2
    assert [item.id for item in latest.plan.steps] == [2]
    assert latest.plan.output == {"score": "<step_2_result.score>"}
    server.clear_requests()
    again = await run(server, store, "Score abcdefgh", {"name": "abcdefgh"}, task_type="score_name")
    assert server.requests == []
    assert again.answer == {"score": 8}
    [figures] = task_type_stats(library)
    assert (figures.runs, figures.no_replan, figures.replans) == (3, 2, 1)
    assert figures.replans_per_run == pytest.approx(1 / 3)


@pytest.mark.anyio
async def test_a_repair_written_after_reading_outside_content_waits_for_a_person(
    server: MessagesServer, store: Store
) -> None:
    server.push_json(score_plan("fetch_score"))
    await run(server, store, "Score ab", {"name": "ab"}, task_type="score_name")
    server.clear_requests()
    server.push_json(REPAIR)  # shown the failing step's outside content
    repaired = await run(
        server, store, "Score abcdefg", {"name": "abcdefg"}, task_type="score_name"
    )
    assert repaired.status == "succeeded"
    assert repaired.tainted_steps == (2,)
    assert repaired.library is not None
    assert repaired.library.saved is not None
    assert (repaired.library.saved.version, repaired.library.saved.status) == (2, "pending")
    assert "step 2 was written by a model that had read outside content" in (
        repaired.library.saved.reason or ""
    )
    library = PlanLibrary(store)
    latest = library.latest("score_name")
    assert latest is not None
    assert latest.version == 1
    approved = library.approve("score_name", who="ana")
    assert (approved.version, approved.status, approved.approved_by) == (2, "admitted", "ana")
    latest = library.latest("score_name")
    assert latest is not None
    assert latest.version == 2


@pytest.mark.anyio
async def test_the_first_plan_of_a_new_task_type_is_not_saved_when_the_run_fails(
    server: MessagesServer, store: Store
) -> None:
    server.push_json(score_plan())
    result = await run(
        server,
        store,
        "Score abcdefg",
        {"name": "abcdefg"},
        task_type="score_name",
        max_replans=0,
        escalate="never",
    )
    assert result.status == "gave_up"
    assert result.library is not None
    assert result.library.saved is None
    assert result.library.not_saved == "the run ended gave_up"
    assert PlanLibrary(store).versions("score_name") == []
    [row] = PlanLibrary(store).task_runs()
    assert (row.task_type, row.status, row.escalated) == ("score_name", "gave_up", False)


@pytest.mark.anyio
async def test_an_empty_library_makes_no_routing_call_and_saves_the_plan_under_a_derived_name(
    server: MessagesServer, store: Store
) -> None:
    server.push_json(score_plan())
    result = await run(server, store, "Score ab", {"name": "ab"})
    assert len(server.message_requests) == 1  # the planner; nothing to route to
    assert result.routing_calls == ()
    assert result.library is not None
    assert result.library.task_type == "score_name-8215c3db"
    assert result.library.derived is True
    assert result.library.saved is not None
    assert (result.library.saved.version, result.library.saved.status) == (1, "admitted")
    [entry] = PlanLibrary(store).task_types()
    assert (entry.task_type, entry.latest, entry.tools) == ("score_name-8215c3db", 1, ("lookup",))

    # a later plain run of a task of the same shape: 1 routing call, 0 planner calls
    server.clear_requests()
    server.push_json({"task_type": "score_name-8215c3db", "new": False, "params": {"name": "xyz"}})
    later = await run(server, store, "What is the score of xyz?")
    assert len(server.message_requests) == 1
    assert len(later.routing_calls) == 1
    assert later.llm_calls == ()
    assert later.answer == {"score": 3}
    assert later.library is not None
    assert (later.library.how, later.library.task_type, later.library.derived) == (
        "routed",
        "score_name-8215c3db",
        False,
    )


def test_the_derived_name_is_words_of_the_goal_and_a_hash_of_the_plan_shape() -> None:
    plan = Plan.model_validate(
        {
            "goal": "Score a name",
            "params": {"name": {"type": "string"}},
            "steps": [{"id": 1, "tool": "lookup", "args": {"name": "<param.name>"}}],
        }
    )
    assert derived_task_type("Score ab", plan) == "score_name-8215c3db"
    # the task's words when the plan has no goal; accents folded, short and common words out
    bare = plan.model_copy(update={"goal": None})
    assert derived_task_type("Somme des crédits de l'année 2025 à Paris", bare) == (
        "somme_des_credits_de-8215c3db"
    )
    assert derived_task_type("??? 42", bare) == "task-8215c3db"
    # the same words with another plan shape: another name
    other = plan.model_copy(update={"params": {}})
    assert derived_task_type("Score ab", other) == "score_name-" + sha256_prefix([["lookup"], []])


def sha256_prefix(shape: list[list[str]]) -> str:
    return hashlib.sha256(json.dumps(shape).encode("utf-8")).hexdigest()[:8]


@pytest.mark.anyio
async def test_an_agent_without_a_library_calls_on_alert_for_a_repaired_unknown_tool(
    server: MessagesServer,
) -> None:
    wrong = score_plan()
    wrong["s"] = [step(1, "lookup_fast", {"name": "<param.name>"}, [])]
    server.push_json(wrong)
    server.push_json(score_plan())
    received: list[dict[str, Any]] = []
    client = AnthropicClient(api_key="test", base_url=server.url)
    agent = plandag.Agent(  # the Python API's face: a plain function as the hook
        client,
        MODEL,
        registry(),
        limits=RunLimits(heartbeat_every=None),
        clock=VirtualClock(),
        on_alert=received.append,
    )
    try:
        result = await agent.run("Score ab", params={"name": "ab"})
    finally:
        await client.aclose()
    assert result.status == "succeeded"
    assert [item.code for item in result.alerts] == ["unknown_tool"]
    assert [(item["code"], item["name"]) for item in received] == [("unknown_tool", "lookup_fast")]
    assert result.to_json_dict()["alerts"][0]["code"] == "unknown_tool"
    assert result.library is None


def test_the_routing_schema_types_each_entrys_params_and_the_answer_is_read_typed() -> None:
    entry = LibraryPlan(
        task_type="invoice_total",
        version=1,
        plan=Plan(steps=[]),
        plan_hash="0" * 64,
        params={
            "input": {"type": "string"},
            "limit": {"type": "integer", "default": 3},
            "fields": {"type": "array"},
        },
        tools=("read_file",),
        goal="total of an invoice",
        status="admitted",
        reason=None,
        source_run=None,
        approved_by="auto",
        approved_at=0.0,
        created=0.0,
    )
    [picked, _] = routing_schema([entry])["properties"]["route"]["anyOf"]
    params = picked["properties"]["params"]
    assert params["properties"] == {
        "input": {"type": "string"},
        "limit": {"type": "integer"},
        "fields": {
            "type": "object",
            "properties": {"json": {"type": "string"}},
            "required": ["json"],
            "additionalProperties": False,
        },
    }
    assert params["required"] == ["input", "fields"]

    def answer(value: Any) -> LLMResponse:
        return LLMResponse(text=json.dumps(value), stop_reason="end_turn", usage=Usage(), model="m")

    choice = parse_routing(
        answer(
            {
                "route": {
                    "task_type": "invoice_total",
                    "new": False,
                    "params": {"input": "a.xml", "limit": None, "fields": {"json": '["vNF"]'}},
                }
            }
        ),
        [entry],
    )
    assert choice.params == {"input": "a.xml", "fields": ["vNF"]}
    new = parse_routing(
        answer({"task_type": "vat_total", "new": True, "params": [{"name": "x", "value": "1"}]}),
        [entry],
    )
    assert (new.new, new.params) == (True, {"x": "1"})
    with pytest.raises(UnusableResponseError, match="JSON text is not JSON"):
        parse_routing(
            answer(
                {"task_type": "invoice_total", "new": False, "params": {"fields": {"json": "["}}}
            ),
            [entry],
        )


@pytest.mark.anyio
async def test_an_offline_models_plan_is_never_kept(store: Store, tmp_path: Path) -> None:
    from plandag.executors import ModelAccess
    from plandag.testing.offline import offline_client
    from plandag.tools.registry import default_registry

    (tmp_path / "notes.txt").write_text("Bees make honey in summer.\n")
    tools = default_registry()
    client = offline_client(tools)
    agent = Agent(
        client,
        "offline-extractive",
        tools,
        limits=RunLimits(max_seconds=60, heartbeat_every=None),
        write_boundary=[tmp_path],
        read_only=True,
        library=PlanLibrary(store),
        models=ModelAccess(client, "offline-extractive", registry=tools),
    )
    try:
        result = await agent.run(f"Summarise {tmp_path / 'notes.txt'}", task_type="summary")
    finally:
        await client.aclose()
    assert result.status == "succeeded", result
    assert result.library is not None
    assert result.library.saved is None
    assert "offline model made this plan" in (result.library.not_saved or "")
    assert PlanLibrary(store).task_types() == []
