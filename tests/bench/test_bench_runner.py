"""Both agents on every workload against the simulated model; the two evaluation sets;
the calibration; the report."""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from plandag.bench.runner import (
    BenchReport,
    RunRecord,
    run_bench,
    run_plandag,
    run_react,
    schema_tokens,
    serial_seconds,
    write_chart,
)
from plandag.bench.simulator import (
    INPUT_TOKEN_RATIO_TARGET,
    PAPER,
    BenchSettings,
    SimulatedModel,
    expected_max_ratio,
    thought_text,
)
from plandag.bench.workloads import MOVIE8, WORKLOADS
from plandag.models import AnthropicClient, LLMClient
from plandag.models.schemas import prepare_schema
from plandag.planner.joiner import JOIN_SCHEMA
from plandag.planner.schema import plan_json_schema
from plandag.testing import estimate_tokens, schema_text

pytestmark = pytest.mark.anyio

TINY = 0.01  # every latency x0.01: the calibrated movie8 ReAct run takes ~0.2 s


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def settings() -> BenchSettings:
    return BenchSettings.calibrated(time_scale=TINY)


@pytest.fixture
def simulator(settings: BenchSettings) -> Iterator[SimulatedModel]:
    with SimulatedModel(settings) as running:
        yield running


@pytest.fixture
async def client(simulator: SimulatedModel) -> AsyncIterator[AnthropicClient]:
    made = AnthropicClient(api_key="simulated", base_url=simulator.url)
    yield made
    await made.aclose()


def test_calibration_reproduces_the_papers_figures() -> None:
    settings = BenchSettings.calibrated()
    plan_tokens = estimate_tokens(json.dumps(MOVIE8.plan_wire, separators=(",", ":")))
    planner_s = settings.ttft_s + plan_tokens / settings.tokens_per_second
    assert planner_s == pytest.approx(PAPER["planner_s"], abs=0.005)
    assert expected_max_ratio(settings.search_sigma, 8) * PAPER["search_mean_s"] == (
        pytest.approx(PAPER["search_max8_s"], abs=0.002)
    )
    assert (settings.ttft_s, settings.tokens_per_second, settings.thought_tokens) == (
        0.8706,
        130.77,
        97,
    )
    assert settings.search_sigma == pytest.approx(0.4835, abs=1e-4)
    draws = [settings.lookup_latency(run, "q") for run in range(4000)]
    assert statistics.mean(draws) == pytest.approx(0.61, rel=0.03)
    assert settings.lookup_latency(3, "Heat") == settings.lookup_latency(3, "Heat")
    assert len(thought_text(1, 96)) == 384


def test_overrides() -> None:
    settings = BenchSettings.calibrated().with_overrides({"ttft_s": 0.5, "seed": None})
    assert (settings.ttft_s, settings.seed) == (0.5, 0)
    with pytest.raises(ValueError, match="unknown settings: nope"):
        settings.with_overrides({"nope": 1})
    rows = dict(settings.with_overrides({"time_scale": 0.5}).rows())
    assert rows["effective ttft_s"] == "0.2500"


async def test_both_agents_answer_every_workload_right(settings: BenchSettings) -> None:
    report = await run_bench(list(WORKLOADS), 1, settings)
    by = {(record.workload, record.agent): record for record in report.records}
    assert all(record.success for record in report.records)
    calls = {key: record.llm_calls for key, record in by.items()}
    assert calls == {
        ("compare2", "plandag"): 2,  # planner + joiner
        ("compare2", "react"): 3,  # 2 lookups + answer
        ("movie8", "plandag"): 2,
        ("movie8", "react"): 9,  # 8 lookups + answer
        ("parallelqa", "plandag"): 1,  # output by code: no joiner
        ("parallelqa", "react"): 8,  # 4 lookups + 3 arithmetic + answer
        ("nfe", "plandag"): 0,  # the stored plan: no model call
        ("nfe", "react"): 6,  # read + answer, per invoice
    }
    assert by["nfe", "plandag"].input_tokens == 0
    assert by["movie8", "react"].input_tokens > 4 * by["movie8", "plandag"].input_tokens
    assert by["movie8", "plandag"].wall_s < by["movie8", "react"].wall_s
    rows = report.table_rows()
    assert rows[0][:5] == ["workload", "agent", "success", "median wall s", "speed-up"]
    assert [row[:3] for row in rows[1:3]] == [
        ["compare2", "plandag", "100%"],
        ["compare2", "react", "100%"],
    ]


async def test_set_1_the_world_as_expected_one_planning_call_never_again(
    simulator: SimulatedModel, client: AnthropicClient, settings: BenchSettings
) -> None:
    for name in ("compare2", "movie8", "parallelqa"):
        workload = WORKLOADS[name]
        simulator.workload = workload
        simulator.question = workload.questions[0]
        simulator.server.clear_requests()
        record, [result] = await run_plandag(workload, client, settings, settings.world(0))
        assert record.success, name
        assert result.status == "succeeded"
        assert result.plan is not None
        assert len(result.plan.records) == 1  # the planner, exactly once
        assert result.replans == ()
        planner_requests = [
            request
            for request in simulator.server.message_requests
            if request.system_text.startswith("You are the planner")
        ]
        assert len(planner_requests) == 1, name
        assert record.ideal_s is not None
        assert record.ideal_s > 0


async def test_set_1_nfe_needs_no_model_call(
    simulator: SimulatedModel, client: AnthropicClient, settings: BenchSettings
) -> None:
    record, results = await run_plandag(WORKLOADS["nfe"], client, settings, settings.world(0))
    assert record.success
    assert [result.status for result in results] == ["succeeded"] * 3
    assert simulator.server.message_requests == []
    assert [result.answer["total"]["vNF"] for result in results] == ["203.51", "9.06", "516.00"]


@pytest.mark.parametrize("name", ["compare2", "movie8", "parallelqa", "nfe"])
async def test_set_2_a_broken_tool_replans_up_to_the_cap_and_escalates_with_the_state(
    name: str, simulator: SimulatedModel, client: AnthropicClient, settings: BenchSettings
) -> None:
    workload = WORKLOADS[name]
    simulator.workload = workload

    def ask(question: object) -> None:
        simulator.question = workload.questions[0]

    record, results = await run_plandag(
        workload, client, settings, settings.world(0, broken=True), on_question=ask, stream=True
    )
    assert not record.success
    for result in results:
        # handed to a person: the search tool goes down after 3 failures in a row (its later
        # steps fail at once, dependency_down) and the replan caps end the run: 2 replans
        # in a row of one failed part complete nothing of it, or, when independent lookups
        # fail in separate replans (each its own part), the run's 3 replans are used; the
        # NF-e plan's repairs keep failing the same check: a blocked intent
        assert result.status == "escalated"
        if name == "nfe":
            assert (result.gave_up, result.run.escalation) == ("blocked_intent", "blocked_intent")
            assert len(result.replans) == 2
        else:
            assert result.run.escalation == "replan_caps"
            assert (result.gave_up, len(result.replans)) in {("no_progress", 2), ("max_replans", 3)}
        assert result.answer is None  # never an invented result
        failed = [step for step in result.run.steps.values() if step.status == "failed"]
        assert failed
        reasons = {step.reason for step in failed}
        if name == "nfe":
            assert reasons == {"check_failed"}
        else:
            assert "unavailable" in reasons
            assert reasons <= {"unavailable", "dependency_down"}
            assert [down.dependency.name for down in result.run.dependencies_down] == ["search"]
        planning = len(result.plan.records) if result.plan is not None else 0
        assert planning == (0 if name == "nfe" else 1)


async def test_set_2_with_streaming_never_reports_success(
    simulator: SimulatedModel, client: AnthropicClient, settings: BenchSettings
) -> None:
    workload = WORKLOADS["movie8"]
    simulator.workload = workload
    simulator.question = workload.questions[0]
    record, [result] = await run_plandag(
        workload, client, settings, settings.world(1, broken=True), stream=True
    )
    assert not record.success
    # a step written after its upstream already failed is pruned, never a compile error:
    # the replans run to a replan cap, as without streaming
    assert result.plan_did_not_compile is False
    assert result.status == "escalated"
    assert (result.gave_up, len(result.replans)) in {("no_progress", 2), ("max_replans", 3)}
    assert result.answer is None


async def test_react_in_a_broken_world_answers_unknown(
    simulator: SimulatedModel, client: AnthropicClient, settings: BenchSettings
) -> None:
    workload = WORKLOADS["compare2"]
    simulator.workload = workload
    simulator.question = workload.questions[0]
    record, [result] = await run_react(workload, client, settings, settings.world(0, broken=True))
    assert not record.success
    assert result.answer is not None
    assert result.answer.endswith("Answer: unknown (the tool kept failing)")
    assert [step.error for step in result.steps] == [
        "PermanentStepError: the search service answered 410 Gone (broken on purpose)"
    ] * 2


def record(workload: str, agent: str, wall: float, ideal: float | None = None) -> RunRecord:
    return RunRecord(
        workload=workload,
        agent=agent,  # type: ignore[arg-type]
        run=0,
        success=True,
        statuses=("succeeded",),
        wall_s=wall,
        llm_calls=2,
        input_tokens=2000 if agent == "plandag" else 13400,
        output_tokens=100,
        cost_usd=0.01,
        ideal_s=ideal,
    )


def test_report_targets_and_markdown(tmp_path: Path) -> None:
    report = BenchReport(
        BenchSettings.calibrated(),
        ["movie8"],
        [record("movie8", "plandag", 5.0, 4.8), record("movie8", "react", 20.0)],
    )
    assert report.speedup("movie8") == 4.0
    assert report.input_token_ratio("movie8") == 6.7
    assert report.target_lines() == [
        "movie8 speed-up 4.00x (target >= 3.7x): met",
        "movie8 input tokens ReAct / plandag 6.70x without prompt caching (target >= 6.0x; "
        "the paper's mark 6.7x): met",
        "movie8 structured-output schemas: 745 tokens per planning call (the plan schema: "
        "1 tool(s), 6 check kinds) and 101 per joiner call, counted in the input tokens "
        "above; without them, input tokens ReAct / plandag would be 11.61x",
        "movie8: plandag wall / ideal 1.042 (target <= 1.10): met",
    ]
    text = report.markdown(chart="bench.png")
    assert (
        "| movie8 | plandag | 100% | 5.000 | 4.00x | 2 | 2000 | 100 | 0.0100 | 0 | 4.800 | 1.042 |"
        in text
    )
    assert "![wall time and tokens per workload](bench.png)" in text
    assert "| ttft_s | 0.8706 |" in text
    pytest.importorskip("matplotlib")
    assert write_chart(report, tmp_path / "bench.png") is None
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_missed_ideal_target_says_what_the_steps_take_one_at_a_time() -> None:
    questions = len(WORKLOADS["nfe"].questions)  # 3 invoices
    plandag = dataclasses.replace(
        record("nfe", "plandag", 0.006, 0.0015), llm_calls=0, steps_s=0.0018
    )
    report = BenchReport(
        BenchSettings.calibrated(), ["nfe"], [plandag, record("nfe", "react", 11.5)]
    )
    assert questions == 3
    assert report.target_lines() == [
        "nfe: plandag wall / ideal 4.000 (target <= 1.10): NOT met (ideal 0.5 ms per "
        "question; plandag's overhead 1.5 ms per question; the steps' own durations add up "
        "to 0.60 ms per question, 1.20x the ideal: steps that compute on the event loop run "
        "one at a time)"
    ]
    assert report.summary("nfe", "plandag").steps_s == 0.0018
    assert report.summary("nfe", "react").steps_s is None


async def test_run_plandag_records_the_steps_durations(settings: BenchSettings) -> None:
    record, results = await run_plandag(
        WORKLOADS["nfe"],
        cast(LLMClient, SimpleNamespace(provider="anthropic")),  # never called
        settings,
        settings.world(0),
    )
    assert record.success
    assert record.steps_s == sum(serial_seconds(result) for result in results)
    assert record.ideal_s is not None
    assert record.ideal_s < record.steps_s  # five selections side by side on the critical path
    for result in results:
        assert serial_seconds(result) == sum(
            step.duration_s or 0.0 for step in result.run.steps.values()
        )


async def test_movie8_input_tokens_react_over_plandag_with_the_schemas_counted(
    client: AnthropicClient, simulator: SimulatedModel, settings: BenchSettings
) -> None:
    """A benchmark figure (token counts, never wall time): the ReAct baseline takes 16,947
    input tokens (its thoughts sized by the calibration to the movie8 plan's output
    tokens). plandag's count includes the structured-output schemas its requests carry,
    billed as the API bills them: without them it is at least 6.0x smaller (the bench's
    own target, INPUT_TOKEN_RATIO_TARGET); with them, at least 5.0x."""
    simulator.workload = MOVIE8
    simulator.question = MOVIE8.questions[0]
    react, _ = await run_react(MOVIE8, client, settings, settings.world(0))
    plandag, _ = await run_plandag(MOVIE8, client, settings, settings.world(0))
    assert react.success
    assert plandag.success
    assert react.input_tokens == 16_947
    plan, join = schema_tokens(MOVIE8.make_registry(settings.world(0)))

    registry = MOVIE8.make_registry(settings.world(0))
    schemas = [
        request.body["output_config"]["format"]["schema"]
        for request in simulator.server.message_requests
        if "output_config" in request.body
    ]
    assert schemas == [
        prepare_schema(plan_json_schema(registry), "anthropic").schema,
        prepare_schema(JOIN_SCHEMA, "anthropic").schema,
    ]
    assert [estimate_tokens(schema_text(schema)) for schema in schemas] == [plan, join]
    assert react.input_tokens / (plandag.input_tokens - plan - join) >= INPUT_TOKEN_RATIO_TARGET
    assert react.input_tokens / plandag.input_tokens >= 5.0


async def test_with_prompt_caching_both_agents_run_again_and_the_cost_is_side_by_side(
    settings: BenchSettings,
) -> None:
    report = await run_bench(["movie8"], 1, settings, prompt_cache=True)
    kinds = [(record.agent, record.prompt_cache) for record in report.records]
    assert kinds == [("plandag", False), ("react", False), ("plandag", True), ("react", True)]
    react = report.summary("movie8", "react", prompt_cache=True)
    # ReAct resends its conversation: from the turn it passes 1024 tokens it reads it back
    assert react.cache_read_tokens > 0
    assert react.cache_write_tokens > 0
    assert react.cost_usd < report.summary("movie8", "react").cost_usd
    # the planner's fixed prefix (the plan schema, then the system prompt) passes the 1024
    # tokens a Sonnet cache needs: the one plan of the run writes it
    plandag_cached = report.summary("movie8", "plandag", prompt_cache=True)
    assert plandag_cached.cache_write_tokens >= 1024
    assert plandag_cached.cache_read_tokens == 0
    rows = report.cache_rows()
    assert rows[0][:4] == ["workload", "agent", "cost $ (no cache)", "cost $ (cache on)"]
    assert [row[:2] for row in rows[1:]] == [["movie8", "plandag"], ["movie8", "react"]]
    off, on = report.cost_ratio("movie8"), report.cost_ratio("movie8", prompt_cache=True)
    assert off is not None
    assert on is not None
    assert rows[1][6:] == [f"{off:.2f}x", f"{on:.2f}x"]
    assert (
        f"movie8 billed cost ReAct / plandag {off:.2f}x without prompt caching, "
        f"{on:.2f}x with prompt caching on for both agents"
    ) in report.target_lines()
    assert "## Billed cost with prompt caching" in report.markdown()
