"""A dynamic run: streamed steps, held effects, replanning a failed subgraph."""

from __future__ import annotations

import collections
from typing import Any

import anyio
import pytest

from plandag.compiler import compile_plan
from plandag.dag.plan import Plan, Step
from plandag.errors import PlanError
from plandag.scheduler import RunLimits, events, run_plan
from plandag.scheduler.result import RunResult, StepErrorInfo
from plandag.scheduler.session import RunSession, StepFailure, open_session
from plandag.tools.base import tool
from plandag.tools.registry import Registry

pytestmark = pytest.mark.anyio

TERMINAL = {"succeeded", "failed", "skipped", "cancelled"}

calls: collections.Counter[str] = collections.Counter()
gates: dict[str, anyio.Event] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()
    gates.clear()


def gate(name: str) -> anyio.Event:
    """The event a ``wait`` step named ``name`` waits for (made on first use)."""
    return gates.setdefault(name, anyio.Event())


@tool
async def echo(value: Any = None) -> Any:
    """Return ``value``, counting the call under ``echo:<value>``."""
    calls[f"echo:{value}"] += 1
    return value


@tool
async def source(value: Any = None) -> Any:
    """Return ``value``, counting the call under ``source``."""
    calls["source"] += 1
    return value


@tool
async def wait(name: str, value: Any = None) -> Any:
    """Wait until the test opens gate ``name``, then return ``value``."""
    calls[f"wait:{name}"] += 1
    await gate(name).wait()
    return value


@tool
async def nap(seconds: float, value: Any = None) -> Any:
    """Sleep ``seconds``, then return ``value``."""
    await anyio.sleep(seconds)
    return value


@tool
async def fail(message: str = "boom") -> Any:
    """Raise ValueError(message)."""
    calls["fail"] += 1
    raise ValueError(message)


@tool
async def fail_later(name: str) -> Any:
    """Wait until the test opens gate ``name``, then raise ValueError."""
    calls[f"fail_later:{name}"] += 1
    await gate(name).wait()
    raise ValueError(f"{name} broke")


@tool(effects="write", idempotent=False)
async def send(value: Any = None) -> Any:
    """A tool with effects: counts its calls."""
    calls[f"send:{value}"] += 1
    return value


REGISTRY = Registry([echo, source, wait, nap, fail, fail_later, send])
EMPTY = Plan(goal="test", steps=[])


def assert_all_terminal(result: RunResult) -> None:
    """Every step ended in exactly one terminal state."""
    assert {record.status for record in result.steps.values()} <= TERMINAL


def kinds(seen: list[events.Event]) -> list[tuple[str, Any]]:
    """Step-level events as (event name, step id or ids), heartbeats left out."""
    out: list[tuple[str, Any]] = []
    for event in seen:
        if isinstance(event, events.StepsAdded):
            out.append(("added", event.step_ids))
        elif isinstance(event, events.StepSuperseded):
            out.append(("superseded", (event.step_id, event.superseded_by)))
        elif isinstance(
            event,
            events.StepStarted
            | events.StepSucceeded
            | events.StepFailed
            | events.StepSkipped
            | events.StepCancelled,
        ):
            out.append((type(event).__name__, event.step_id))
    return out


# -- streaming dispatch -----------------------------------------------------------------------


async def test_streamed_steps_start_as_soon_as_their_inputs_are_ready() -> None:
    seen: list[events.Event] = []
    async with open_session(EMPTY, REGISTRY, observers=[seen.append]) as session:
        session.add({"id": 1, "tool": "wait", "args": {"name": "one", "value": 1}})
        await anyio.sleep(0.01)
        # Step 1 runs before step 2 has even arrived.
        assert session.records[1].status == "running"
        session.add(
            {"id": 2, "tool": "echo", "args": {"value": "<step_1_result>"}, "depends_on": [1]}
        )
        await anyio.sleep(0.01)
        assert session.records[2].status == "pending"
        gate("one").set()
        state = await session.settled()
        assert state.succeeded == (1, 2)
        # Step 3 arrives after 1 and 2 are done: it starts at once.
        session.add(Step(id=3, tool="echo", args={"value": "<step_2_result>"}, depends_on=[2]))
        session.set_output("<step_3_result>")
        session.seal()
        assert session.sealed
    result = session.result()
    assert result.status == "succeeded"
    assert result.output == 1
    assert kinds(seen) == [
        ("added", (1,)),
        ("StepStarted", 1),
        ("added", (2,)),
        ("StepSucceeded", 1),
        ("StepStarted", 2),
        ("StepSucceeded", 2),
        ("added", (3,)),
        ("StepStarted", 3),
        ("StepSucceeded", 3),
    ]
    assert isinstance(seen[0], events.RunStarted)
    assert isinstance(seen[-1], events.RunFinished)
    assert_all_terminal(result)


async def test_time_to_first_tool_with_and_without_streaming() -> None:
    """A planner emits a step every 0.1 s: streamed, the first tool starts at once;
    collected first, it starts once the whole plan (0.3 s) has arrived."""
    steps = [{"id": n, "tool": "echo", "args": {"value": n}} for n in (1, 2, 3)]

    async def planner_stream() -> Any:
        for step in steps:
            await anyio.sleep(0.1)
            yield step

    async with open_session(EMPTY, REGISTRY) as streamed:
        async for step in planner_stream():
            streamed.add(step)
    async with open_session(EMPTY, REGISTRY) as collected:
        collected.add([step async for step in planner_stream()])
    streaming = streamed.result().first_tool_start_s
    whole = collected.result().first_tool_start_s
    assert streaming is not None
    assert whole is not None
    assert 0.1 <= streaming < 0.2
    assert whole >= 0.3
    assert streamed.result().status == collected.result().status == "succeeded"


async def test_a_step_with_effects_waits_for_release() -> None:
    async with open_session(EMPTY, REGISTRY) as session:
        assert session.holding_effects
        session.add({"id": 1, "tool": "send", "args": {"value": "early"}})
        session.add({"id": 2, "tool": "echo", "args": {"value": "free"}})
        session.add({"id": 3, "tool": "echo", "args": {"value": "<step_1_result>"}})
        state = await session.settled()
        assert state.succeeded == (2,)
        assert state.held == (1,)
        assert state.pending == (3,)
        assert calls["send:early"] == 0
        session.seal()
        session.release_effects()
        state = await session.settled()
        assert state.succeeded == (1, 2, 3)
        # After the release, new steps with effects start at once ...
        session.add({"id": 4, "tool": "send", "args": {"value": "late"}})
        assert (await session.settled()).succeeded == (1, 2, 3, 4)
        # ... until effects are held again.
        session.hold_effects()
        session.add({"id": 5, "tool": "send", "args": {"value": "held"}})
        assert (await session.settled()).held == (5,)
        session.release_effects()
    result = session.result()
    assert result.status == "succeeded"
    assert calls["send:early"] == calls["send:late"] == calls["send:held"] == 1


async def test_held_effects_never_released_end_skipped() -> None:
    async with open_session(EMPTY, REGISTRY) as session:
        session.add(
            [
                {"id": 1, "tool": "send", "args": {"value": "x"}},
                {"id": 2, "tool": "echo", "args": {"value": "<step_1_result>"}},
                {"id": 3, "tool": "echo", "args": {"value": 3}},
            ]
        )
    result = session.result()
    assert result.status == "failed"
    assert calls["send:x"] == 0
    assert [(r.id, r.status, r.reason) for r in result.steps.values()] == [
        (1, "skipped", "effects_held"),
        (2, "skipped", "effects_held"),
        (3, "succeeded", None),
    ]
    assert result.steps[1].detail == (
        "never started: its tool has effects, which wait for approval, and the run ended "
        "before they were approved"
    )
    assert result.steps[2].detail == (
        "never started: it waits on a step with effects that was never approved"
    )


async def test_without_holding_effects_start_at_once() -> None:
    async with open_session(EMPTY, REGISTRY, hold_effects=False) as session:
        session.add({"id": 1, "tool": "send", "args": {"value": "now"}})
        assert (await session.settled()).succeeded == (1,)
    assert session.result().status == "succeeded"


async def test_a_compiled_plan_header_runs_at_once_but_holds_its_effects() -> None:
    compiled = compile_plan(
        {
            "steps": [
                {"id": 1, "tool": "echo", "args": {"value": "a"}},
                {"id": 2, "tool": "send", "args": {"value": "<step_1_result>"}},
            ]
        },
        REGISTRY,
    )
    async with open_session(compiled, REGISTRY, run_id="header") as session:
        state = await session.settled()
        assert (state.succeeded, state.held) == ((1,), (2,))
        session.release_effects()
    result = session.result()
    assert result.run_id == "header"
    assert result.status == "succeeded"
    assert result.steps[2].result == "a"


async def test_a_compiled_plan_header_refuses_other_params() -> None:
    compiled = compile_plan({"steps": []}, REGISTRY)
    with pytest.raises(ValueError, match="params were resolved"):
        async with open_session(compiled, REGISTRY, params={"a": 1}):
            pass


# -- bad patches ------------------------------------------------------------------------------


async def test_a_bad_patch_raises_every_diagnostic_and_adds_nothing() -> None:
    seen: list[events.Event] = []
    async with open_session(EMPTY, REGISTRY, observers=[seen.append]) as session:
        session.add(
            [
                {"id": 1, "tool": "echo", "args": {"value": 1}},
                {"id": 2, "tool": "fail", "args": {}},
            ]
        )
        await session.settled()
        before = dict(session.records)
        with pytest.raises(PlanError) as error:
            session.add(
                [
                    {"id": 1, "tool": "echo"},
                    {"id": 3, "tool": "ecko"},
                    {"id": 4, "tool": "echo", "args": {"value": "<step_9_result>"}},
                    {"id": 5, "tool": "echo", "args": {"value": "<step_2_result>"}},
                    {"id": 6, "tool": "echo", "depends_on": [7]},
                    {"id": 7, "tool": "echo", "depends_on": [6]},
                ]
            )
        assert error.value.codes == [
            "duplicate_step_id",
            "unknown_tool",
            "reference_to_missing_step",
            "reference_to_missing_step",
            "cycle",
        ]
        assert [d.step_id for d in error.value.diagnostics if d.severity == "error"] == [
            1,
            3,
            4,
            5,
            6,
        ]
        assert "step 2, which failed" in error.value.diagnostics[4].message
        assert dict(session.records) == before
        assert sorted(session.graph.nodes) == [1, 2]
        assert calls["echo:None"] == 0
    assert [kind for kind in kinds(seen) if kind[0] == "added"] == [("added", (1, 2))]
    assert sorted(session.result().steps) == [1, 2]


async def test_set_output_is_checked() -> None:
    async with open_session(EMPTY, REGISTRY) as session:
        session.add({"id": 1, "tool": "fail"})
        await session.settled()
        with pytest.raises(PlanError) as error:
            session.set_output({"a": "<step_1_result>", "b": "<step_5_result>"})
        assert error.value.codes == ["reference_to_missing_step", "reference_to_missing_step"]
        assert session.output is None


# -- a streamed step whose upstream already ended ------------------------------------------------


async def test_a_step_added_after_its_upstream_failed_is_pruned_then_replanned() -> None:
    """1 fails and 2 runs before 3..6 arrive: 3 (a reference to 1) and 4 (needs 3) are
    added pruned, 5 (needs the running 2) waits, 6 runs. When 2 fails later, 5 is pruned
    and the failure joins 7's detail, as in a plan that arrived whole."""
    seen: list[events.Event] = []
    failed = anyio.Event()

    def on_event(event: events.Event) -> None:
        seen.append(event)
        if isinstance(event, events.StepFailed):
            failed.set()

    async with open_session(EMPTY, REGISTRY, observers=[on_event]) as session:
        session.add(
            [{"id": 1, "tool": "fail"}, {"id": 2, "tool": "fail_later", "args": {"name": "two"}}]
        )
        await failed.wait()
        await anyio.sleep(0.01)
        state = session.state()
        assert (list(state.failed), state.running) == ([1], (2,))
        warnings = session.add(
            [
                {"id": 3, "tool": "echo", "args": {"value": "<step_1_result>"}},
                {"id": 4, "tool": "echo", "args": {"value": "<step_3_result>"}, "depends_on": [3]},
                {"id": 5, "tool": "echo", "depends_on": [2]},
                {"id": 6, "tool": "echo", "args": {"value": 6}},
                {"id": 7, "tool": "echo", "depends_on": [2, 4]},
            ],
            prune_on_ended_parents=True,
        )
        assert [(w.code, w.step_id) for w in warnings] == [("implied_dependency", 3)]
        state = session.state()
        assert state.pruned == (3, 4, 7)
        assert state.needs_replan == (1, 3, 4, 7)
        assert [
            (key, session.records[key].reason, session.records[key].detail) for key in (3, 4, 7)
        ] == [
            (3, "upstream_failed", "upstream 1 failed"),
            (4, "upstream_failed", "upstream 1 failed"),
            (7, "upstream_failed", "upstream 1 failed"),
        ]
        # a step arriving later still, downstream of a pruned one, and of two failures
        session.add({"id": 8, "tool": "echo", "depends_on": [4]}, prune_on_ended_parents=True)
        assert session.records[8].detail == "upstream 1 failed"
        # the output may name the pruned steps (it resolves only if a replan replaces it)
        session.set_output({"four": "<step_4_result>"}, allow_ended=True)
        gate("two").set()
        state = await session.settled()
        assert state.succeeded == (6,)
        assert list(state.failed) == [1, 2]
        assert state.pruned == (3, 4, 5, 7, 8)
        assert session.records[5].detail == "upstream 2 failed"
        assert session.records[7].detail == "upstream 1, 2 failed"  # later failure added
        session.add({"id": 9, "tool": "echo", "depends_on": [5, 7]}, prune_on_ended_parents=True)
        assert session.records[9].detail == "upstream 1, 2 failed"
        # the replan replaces every ended step, as for a plan that arrived whole
        session.add(
            {"id": 10, "tool": "echo", "args": {"value": 10}},
            supersedes=session.state().needs_replan,
        )
        session.set_output({"four": "<step_10_result>"})
    result = session.result()
    assert result.status == "succeeded"
    assert result.output == {"four": 10}
    assert [(r.id, r.status, r.reason, r.superseded_by) for r in result.steps.values()] == [
        (1, "failed", "tool_error", [10]),
        (2, "failed", "tool_error", [10]),
        (3, "skipped", "upstream_failed", [10]),
        (4, "skipped", "upstream_failed", [10]),
        (5, "skipped", "upstream_failed", [10]),
        (6, "succeeded", None, None),
        (7, "skipped", "upstream_failed", [10]),
        (8, "skipped", "upstream_failed", [10]),
        (9, "skipped", "upstream_failed", [10]),
        (10, "succeeded", None, None),
    ]
    assert calls == {"fail": 1, "fail_later:two": 1, "echo:6": 1, "echo:10": 1}
    order = kinds(seen)
    added = order.index(("added", (3, 4, 5, 6, 7)))
    assert order[added : added + 4] == [
        ("added", (3, 4, 5, 6, 7)),
        ("StepSkipped", 3),
        ("StepSkipped", 4),
        ("StepSkipped", 7),
    ]
    assert_all_terminal(result)


async def test_without_the_option_a_step_needing_a_failed_step_is_refused() -> None:
    async with open_session(EMPTY, REGISTRY) as session:
        session.add({"id": 1, "tool": "fail"})
        await session.settled()
        with pytest.raises(PlanError) as error:
            session.add({"id": 2, "tool": "echo", "depends_on": [1]})
        assert error.value.codes == ["unknown_dependency"]
        assert sorted(session.records) == [1]
        session.give_up()
    assert session.result().status == "gave_up"


async def test_a_step_added_after_its_upstream_hit_the_cost_cap_is_pruned_for_the_budget() -> None:
    @tool(cost_estimate_usd=0.4)
    async def priced(value: int) -> int:
        """Costs $0.40."""
        return value

    registry = Registry([priced, echo])
    async with open_session(EMPTY, registry, limits=RunLimits(max_cost_usd=0.5)) as session:
        session.add({"id": 1, "tool": "priced", "args": {"value": 1}})
        await session.settled()
        session.add({"id": 2, "tool": "priced", "args": {"value": 2}})
        await session.settled()
        assert session.records[2].reason == "budget"
        session.add({"id": 3, "tool": "echo", "depends_on": [2]}, prune_on_ended_parents=True)
        session.add({"id": 4, "tool": "echo", "depends_on": [3]}, prune_on_ended_parents=True)
    result = session.result()
    assert result.status == "budget_exceeded"
    detail = "upstream 2 was not started: the cost cap left no room"
    assert [(r.id, r.status, r.reason, r.detail) for r in result.steps.values()][2:] == [
        (3, "skipped", "budget", detail),
        (4, "skipped", "budget", detail),
    ]


async def test_after_a_stop_a_step_needing_a_cancelled_step_ends_with_the_stop() -> None:
    async with open_session(EMPTY, REGISTRY, limits=RunLimits(max_seconds=0.1)) as session:
        session.add({"id": 1, "tool": "nap", "args": {"seconds": 5}})
        state = await session.settled()
        assert state.cancelled == (1,)
        session.add({"id": 2, "tool": "echo", "depends_on": [1]}, prune_on_ended_parents=True)
    result = session.result()
    assert [(r.id, r.status, r.reason) for r in result.steps.values()] == [
        (1, "cancelled", "deadline"),
        (2, "skipped", "deadline"),
    ]


# -- replanning -------------------------------------------------------------------------------


async def test_a_replan_replaces_the_failed_subgraph_while_a_branch_runs() -> None:
    """1 → 2 (fails) → 3 (pruned); 4 is an independent branch, still running while the
    replanner works. The patch 5 → 6 reuses step 1's result and supersedes 2 and 3."""
    seen: list[events.Event] = []
    failed = anyio.Event()
    patched = anyio.Event()

    def on_event(event: events.Event) -> None:
        seen.append(event)
        if isinstance(event, events.StepFailed):
            failed.set()
        if isinstance(event, events.StepSucceeded) and event.step_id == 6:
            patched.set()

    header = Plan(
        goal="replan",
        steps=[
            Step(id=1, tool="source", args={"value": "input"}),
            Step(id=2, tool="fail", args={"message": "bad field path"}, depends_on=[1]),
            Step(id=3, tool="echo", args={"value": "<step_2_result>"}, depends_on=[2]),
            Step(id=4, tool="wait", args={"name": "branch", "value": "branch done"}),
        ],
        output={"fixed": "<step_3_result>", "branch": "<step_4_result>"},
    )
    async with open_session(header, REGISTRY, observers=[on_event]) as session:
        await failed.wait()
        state = session.state()
        assert state.succeeded == (1,)
        assert state.failed == {
            2: StepFailure(
                "tool_error",
                StepErrorInfo("ValueError", "bad field path"),
                "ValueError: bad field path",
            )
        }
        assert state.pruned == (3,)
        assert state.running == (4,)
        assert state.needs_replan == (2, 3)
        # The replanner's patch: new ids, depends on the completed step 1.
        warnings = session.add(
            [
                {"id": 5, "tool": "echo", "args": {"value": "<step_1_result>"}, "depends_on": [1]},
                {"id": 6, "tool": "echo", "args": {"value": "<step_5_result>"}, "depends_on": [5]},
            ],
            supersedes=state.needs_replan,
        )
        assert warnings == ()
        session.set_output({"fixed": "<step_6_result>", "branch": "<step_4_result>"})
        await patched.wait()
        state = session.state()  # 5 and 6 are done; 4 still waits on its gate
        assert state.succeeded == (1, 5, 6)
        assert state.running == (4,)
        assert state.superseded == (2, 3)
        assert state.needs_replan == ()
        gate("branch").set()
        state = await session.settled()
        assert state.succeeded == (1, 4, 5, 6)
    result = session.result()
    assert result.status == "succeeded"
    assert result.output == {"fixed": "input", "branch": "branch done"}
    # Completed steps are never run again.
    assert calls == {"source": 1, "echo:input": 2, "fail": 1, "wait:branch": 1}
    assert result.steps[1].attempts == 1
    assert result.steps[5].result == "input"
    assert (result.steps[2].status, result.steps[2].superseded_by) == ("failed", [5, 6])
    assert (result.steps[3].status, result.steps[3].superseded_by) == ("skipped", [5, 6])
    assert result.steps[1].superseded_by is None
    assert result.to_json_dict()["steps"][1]["superseded_by"] == [5, 6]
    order = kinds(seen)
    assert order.index(("added", (5, 6))) < order.index(("StepSucceeded", 4))
    assert ("superseded", (2, (5, 6))) in order
    assert ("superseded", (3, (5, 6))) in order
    assert_all_terminal(result)


async def test_an_unsuperseded_failure_fails_the_run_and_give_up() -> None:
    async with open_session(EMPTY, REGISTRY) as session:
        session.add({"id": 1, "tool": "fail"})
        state = await session.settled()
        assert list(state.failed) == [1]
    assert session.result().status == "failed"

    async with open_session(EMPTY, REGISTRY) as session:
        session.add({"id": 1, "tool": "fail"})
        await session.settled()
        session.give_up()
    assert session.result().status == "gave_up"


async def test_supersede_checks_its_ids() -> None:
    async with open_session(EMPTY, REGISTRY) as session:
        session.add([{"id": 1, "tool": "echo"}, {"id": 2, "tool": "fail"}])
        await session.settled()
        with pytest.raises(ValueError, match="step 1 is succeeded"):
            session.supersede([1], [2])
        with pytest.raises(ValueError, match="step 9 does not exist"):
            session.supersede([9], [1])
        with pytest.raises(ValueError, match="step 8 does not exist: add it"):
            session.supersede([2], [8])
        with pytest.raises(ValueError, match="at least one new step"):
            session.supersede([2], [])
        with pytest.raises(ValueError, match="step 1 is succeeded"):
            session.add({"id": 3, "tool": "echo"}, supersedes=[1])
        assert sorted(session.records) == [1, 2]
        session.add({"id": 3, "tool": "echo"}, supersedes=[2])
        with pytest.raises(ValueError, match="already superseded by steps 3"):
            session.supersede([2], [3])
    assert session.result().status == "succeeded"


async def test_the_session_is_closed_after_its_block() -> None:
    async with open_session(EMPTY, REGISTRY) as session:
        with pytest.raises(RuntimeError, match="still open"):
            session.result()
    with pytest.raises(RuntimeError, match="closed"):
        session.add({"id": 1, "tool": "echo"})
    assert session.result().status == "succeeded"
    assert session.result().steps == {}
    assert session.result().first_tool_start_s is None


# -- brakes and stops -------------------------------------------------------------------------


async def test_the_deadline_covers_the_whole_session() -> None:
    async with open_session(EMPTY, REGISTRY, limits=RunLimits(max_seconds=0.1)) as session:
        session.add([{"id": 1, "tool": "nap", "args": {"seconds": 5}}, {"id": 2, "tool": "echo"}])
        remaining = session.remaining_s
        assert remaining is not None
        assert 0.0 < remaining <= 0.1
        state = await session.settled()  # returns at the deadline
        assert state.stop_reason == "deadline"
        assert state.cancelled == (1,)
        # Steps arriving after the stop end skipped at once.
        session.add({"id": 3, "tool": "echo", "args": {"value": 3}})
        assert session.records[3].status == "skipped"
    result = session.result()
    assert result.status == "timed_out"
    assert result.stop_reason == "deadline"
    assert [(r.id, r.status, r.reason) for r in result.steps.values()] == [
        (1, "cancelled", "deadline"),
        (2, "succeeded", None),
        (3, "skipped", "deadline"),
    ]
    assert calls["echo:3"] == 0
    assert_all_terminal(result)


async def test_heartbeats_and_a_stall_stop_in_a_session() -> None:
    seen: list[events.Event] = []
    limits = RunLimits(heartbeat_every=0.02, stall_after=0.15, stop_on_stall=True)
    async with open_session(EMPTY, REGISTRY, limits=limits, observers=[seen.append]) as session:
        session.add({"id": 1, "tool": "wait", "args": {"name": "never"}})
        state = await session.settled()  # the stall stops the run
        assert state.stop_reason == "stalled"
    result = session.result()
    assert result.status == "timed_out"
    assert result.stop_reason == "stalled"
    assert (result.steps[1].status, result.steps[1].reason) == ("cancelled", "stalled")
    beats = [event for event in seen if isinstance(event, events.Heartbeat)]
    assert len(beats) >= 2
    assert beats[0].total == 1
    assert beats[0].running_steps == (1,)
    (stall,) = [event for event in seen if isinstance(event, events.Stall)]
    assert stall.stopping


async def test_the_callers_cancellation_interrupts_the_session() -> None:
    with anyio.move_on_after(0.05):
        async with open_session(EMPTY, REGISTRY) as session:
            session.add(
                [
                    {"id": 1, "tool": "nap", "args": {"seconds": 5}},
                    {"id": 2, "tool": "echo", "args": {"value": "<step_1_result>"}},
                    {"id": 3, "tool": "send"},
                ]
            )
            await session.settled()
    result = session.result()
    assert result.status == "interrupted"
    assert [(r.id, r.status, r.reason) for r in result.steps.values()] == [
        (1, "cancelled", "interrupted"),
        (2, "skipped", "interrupted"),
        (3, "skipped", "interrupted"),
    ]


async def test_an_error_in_the_block_interrupts_the_run_and_propagates() -> None:
    opened: list[RunSession] = []

    async def planner() -> None:
        async with open_session(EMPTY, REGISTRY) as session:
            opened.append(session)
            session.add({"id": 1, "tool": "nap", "args": {"seconds": 5}})
            await anyio.sleep(0.01)
            raise KeyError("planner")

    with pytest.raises(KeyError, match="planner"):
        await planner()
    result = opened[0].result()
    assert result.status == "interrupted"
    assert (result.steps[1].status, result.steps[1].reason) == ("cancelled", "interrupted")


async def test_the_cost_cap_is_shared_by_the_whole_session() -> None:
    @tool(cost_estimate_usd=0.4)
    async def priced(value: int) -> int:
        """Costs $0.40."""
        return value

    registry = Registry([priced, echo])
    async with open_session(EMPTY, registry, limits=RunLimits(max_cost_usd=1.0)) as session:
        session.add({"id": 1, "tool": "priced", "args": {"value": 1}})
        await session.settled()
        session.add({"id": 2, "tool": "priced", "args": {"value": 2}})
        await session.settled()
        session.add({"id": 3, "tool": "priced", "args": {"value": 3}})
    result = session.result()
    assert result.status == "budget_exceeded"
    assert [(r.id, r.status, r.reason) for r in result.steps.values()] == [
        (1, "succeeded", None),
        (2, "succeeded", None),
        (3, "skipped", "budget"),
    ]
    assert result.spent_usd == 0.8
    assert session.budget.spent_usd == 0.8


# -- run_plan and a session agree ---------------------------------------------------------------


async def test_a_session_with_every_step_matches_run_plan() -> None:
    document: dict[str, Any] = {
        "steps": [
            {"id": 1, "tool": "echo", "args": {"value": "a"}},
            {"id": 2, "tool": "fail", "depends_on": [1]},
            {"id": 3, "tool": "echo", "args": {"value": "<step_2_result>"}},
            {"id": 4, "tool": "echo", "args": {"value": "<step_1_result>"}},
        ],
        "output": "<step_4_result>",
    }
    plain = await run_plan(compile_plan(document, REGISTRY))
    async with open_session(EMPTY, REGISTRY) as session:
        session.add(document["steps"])
        session.set_output(document["output"])
    dynamic = session.result()
    assert dynamic.status == plain.status == "failed"
    assert dynamic.output == plain.output == "a"
    for step_id in (1, 2, 3, 4):
        mine, theirs = dynamic.steps[step_id], plain.steps[step_id]
        assert (mine.status, mine.reason, mine.detail, mine.result) == (
            theirs.status,
            theirs.reason,
            theirs.detail,
            theirs.result,
        )


async def test_escalate_ends_the_run_escalated_with_its_reason_and_detail() -> None:
    async with open_session(EMPTY, REGISTRY) as session:
        session.add({"id": 1, "tool": "fail"})
        await session.settled()
        assert session.escalate("replan_caps", "3 replans used; step 1 still fails") is True
        assert session.escalate("blocked_intent", "a later reason") is True  # first one kept
        assert session.escalation == ("replan_caps", "3 replans used; step 1 still fails")
    result = session.result()
    assert (result.status, result.escalation, result.escalation_detail) == (
        "escalated",
        "replan_caps",
        "3 replans used; step 1 still fails",
    )
    assert result.to_json_dict()["escalation"] == "replan_caps"


async def test_escalate_in_mode_never_gives_up() -> None:
    async with open_session(EMPTY, REGISTRY, escalate="never") as session:
        session.add({"id": 1, "tool": "fail"})
        await session.settled()
        assert session.escalate("replan_caps", "caps hit") is False
        assert session.escalation is None
    result = session.result()
    assert (result.status, result.escalation, result.escalation_detail) == ("gave_up", None, None)


async def test_escalate_refuses_an_unknown_reason() -> None:
    async with open_session(EMPTY, REGISTRY) as session:
        with pytest.raises(ValueError, match="escalation reason 'tired' is unknown"):
            session.escalate("tired", "no")
    assert session.result().status == "succeeded"


# -- withdrawing steps ----------------------------------------------------------------------


async def test_withdrawn_steps_never_start_and_a_replan_replaces_them() -> None:
    seen: list[events.Event] = []
    async with open_session(EMPTY, REGISTRY, observers=[seen.append]) as session:
        session.add(
            [
                {"id": 1, "tool": "wait", "args": {"name": "one", "value": 1}},
                {"id": 2, "tool": "echo", "args": {"value": "<step_1_result>"}, "depends_on": [1]},
                {"id": 3, "tool": "send", "args": {"value": 3}},
                {"id": 4, "tool": "echo", "args": {"value": 4}},
            ]
        )
        await anyio.sleep(0.01)
        assert session.state().held == (3,)
        dropped = session.withdraw([1, 2, 3, 4], "replanned with a person's instruction")
        assert dropped == (2, 3)  # 1 is running, 4 already succeeded
        gate("one").set()
        state = await session.settled()
        assert (state.succeeded, state.pruned, state.held) == ((1, 4), (2, 3), ())
        session.add(
            {"id": 5, "tool": "echo", "args": {"value": "<step_1_result>"}, "depends_on": [1]},
            supersedes=state.needs_replan,
        )
        session.release_effects()
    result = session.result()
    assert result.status == "succeeded"
    assert (result.steps[2].status, result.steps[2].reason, result.steps[2].detail) == (
        "skipped",
        "replanned",
        "replanned with a person's instruction",
    )
    assert (result.steps[2].superseded_by, result.steps[3].superseded_by) == ([5], [5])
    assert calls == collections.Counter({"wait:one": 1, "echo:4": 1, "echo:1": 1})
    assert ("StepSkipped", 2) in kinds(seen)
    with pytest.raises(RuntimeError, match="the session is closed"):
        session.withdraw([2], "late")


async def test_a_session_on_a_compiled_plan_keeps_the_step_limit_it_was_compiled_with() -> None:
    compiled = compile_plan(
        {"steps": [{"id": 1, "tool": "echo", "args": {"value": 1}}]}, REGISTRY, max_steps=2
    )
    async with open_session(compiled, REGISTRY, hold_effects=False) as session:
        assert session.max_steps == 2
        session.add([{"id": 2, "tool": "echo", "args": {"value": 2}}])
        with pytest.raises(PlanError) as raised:
            session.add([{"id": 3, "tool": "echo", "args": {"value": 3}}])
        assert raised.value.codes == ["too_many_steps"]
        assert raised.value.diagnostics[0].message == (
            "the run would have 3 steps (2 already, 1 new); this run allows at most 2 (max_steps)"
        )
        session.seal()
