"""Ready steps that start together (the roots, a resumed run's ready steps, the children one
success makes ready) start highest bottom level first: the longest remaining path to the
end of the plan, each step weighing its seconds in the run's plan estimate (1 without one),
equal levels in plan order. Under a concurrency limit this order decides who gets a slot
first, and so the makespan; what runs stays the same."""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plandag import RunLimits, compile_plan, run_plan, tool
from plandag.compiler.compiled import CompiledPlan
from plandag.scheduler import events
from plandag.scheduler.estimate import estimate_plan
from plandag.scheduler.session import open_session
from plandag.tools.registry import Registry


class FakeTime:
    """Virtual time for steps of ``work``: each waits until the driver of :func:`timed`
    moves the time to its end (no wall clock is read)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.ends: list[tuple[float, int, anyio.Event]] = []
        self.starts: dict[int, float] = {}


time_now = FakeTime()
tasks_of: dict[int, object] = {}
"""The task that ran each step (the task itself: a freed task's id may be reused)."""
gate = anyio.Event()


@tool
async def work(step: int, seconds: float) -> int:
    """Takes ``seconds`` of virtual time (:class:`FakeTime`)."""
    done = anyio.Event()
    time_now.starts[step] = time_now.now
    heapq.heappush(time_now.ends, (time_now.now + seconds, step, done))
    await done.wait()
    return step


@tool
async def instant(step: int) -> int:
    """Records the task it runs in; never suspends."""
    tasks_of[step] = asyncio.current_task()
    return step


@tool
async def slow(step: int) -> int:
    """Never suspends; its estimate says it takes long (``measured`` below)."""
    return step


@tool
async def gated(step: int) -> int:
    """Waits (at most 5 s) until the test opens the gate."""
    with anyio.fail_after(5):
        await gate.wait()
    return step


REGISTRY = Registry([work, instant, slow, gated])


def setup_function() -> None:
    global time_now, gate
    time_now = FakeTime()
    tasks_of.clear()
    gate = anyio.Event()


def plan(steps: Sequence[Mapping[str, Any]]) -> CompiledPlan:
    return compile_plan({"steps": list(steps)}, REGISTRY)


def started_order(seen: Sequence[events.Event]) -> list[int]:
    return [event.step_id for event in seen if isinstance(event, events.StepStarted)]


async def timed(compiled: CompiledPlan, **options: Any) -> Any:
    """Run ``compiled`` (tools ``work``) in virtual time: whenever every task is blocked,
    the step ending first ends and the time moves to its end. Bounded: 10 s, 1,000 ends."""
    result: Any = None

    async def run() -> None:
        nonlocal result
        result = await run_plan(compiled, **options)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(run)
            for _ in range(1000):
                await anyio.wait_all_tasks_blocked()
                if result is not None or not time_now.ends:
                    break
                end, _, done = heapq.heappop(time_now.ends)
                time_now.now = max(time_now.now, end)
                done.set()
    assert result is not None, "the run did not end"
    return result


# Four single steps first in plan order, then a chain of three whose root comes last.
SINGLES_THEN_CHAIN = [
    *({"id": n, "tool": "work", "args": {"step": n, "seconds": 1.0}} for n in (1, 2, 3, 4)),
    {"id": 5, "tool": "work", "args": {"step": 5, "seconds": 1.0}},
    {"id": 6, "tool": "work", "args": {"step": 6, "seconds": 1.0}, "depends_on": [5]},
    {"id": 7, "tool": "work", "args": {"step": 7, "seconds": 1.0}, "depends_on": [6]},
]


def test_one_slot_goes_to_the_root_of_the_longest_chain_first() -> None:
    seen: list[events.Event] = []
    result = anyio.run(
        lambda: timed(plan(SINGLES_THEN_CHAIN), max_concurrency=1, observers=[seen.append])
    )
    assert result.status == "succeeded"
    # the chain's root (level 3) first, then the singles (level 1) in plan order
    assert min(time_now.starts, key=lambda step: (time_now.starts[step], step)) == 5
    roots = [step for step in started_order(seen) if step in (1, 2, 3, 4, 5)]
    assert roots == [5, 1, 2, 3, 4]
    # one slot: the steps run one after another, whatever the order
    assert max(time_now.starts.values()) == 6.0


def test_two_slots_finish_sooner_with_the_chain_first() -> None:
    """Plan order would run 1, 2, then 3, 4, then the chain alone: 5 time units. The chain
    first overlaps it with the singles: 4 (the chain's 3 plus a single left over)."""
    result = anyio.run(lambda: timed(plan(SINGLES_THEN_CHAIN), max_concurrency=2))
    assert result.status == "succeeded"
    ends = {step: time_now.starts[step] + 1.0 for step in time_now.starts}
    assert max(ends.values()) == 4.0
    assert time_now.starts[5] == 0.0


def bottom_levels_by_hand(steps: Mapping[int, Sequence[int]]) -> dict[int, int]:
    """Unit-weight bottom levels of a DAG given as each step's parents, by recursion."""
    children: dict[int, list[int]] = {step: [] for step in steps}
    for step, parents in steps.items():
        for parent in parents:
            children[parent].append(step)
    levels: dict[int, int] = {}

    def level(step: int) -> int:
        if step not in levels:
            levels[step] = 1 + max((level(child) for child in children[step]), default=0)
        return levels[step]

    for step in steps:
        level(step)
    return levels


@st.composite
def dags(draw: st.DrawFn) -> dict[int, list[int]]:
    size = draw(st.integers(1, 12))
    parents: dict[int, list[int]] = {}
    for step in range(1, size + 1):
        earlier = list(range(1, step))
        parents[step] = (
            sorted(draw(st.sets(st.sampled_from(earlier), max_size=3))) if earlier else []
        )
    return parents


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags())
def test_roots_start_highest_bottom_level_first_ties_in_plan_order(
    parents: dict[int, list[int]],
) -> None:
    compiled = plan(
        [
            {"id": step, "tool": "instant", "args": {"step": step}, "depends_on": of}
            for step, of in parents.items()
        ]
    )
    seen: list[events.Event] = []
    result = anyio.run(lambda: run_plan(compiled, observers=[seen.append]))
    assert result.status == "succeeded"
    levels = bottom_levels_by_hand(parents)
    roots = [step for step in compiled.order if not parents[step]]
    position = {step: index for index, step in enumerate(compiled.order)}
    started_roots = [step for step in started_order(seen) if not parents[step]]
    assert started_roots == sorted(roots, key=lambda step: (-levels[step], position[step]))
    assert sorted(started_order(seen)) == sorted(parents)  # every step started once


# A branch of three quick steps first in plan order, then one step estimated at 10 s.
QUICK_BRANCH_THEN_SLOW = [
    {"id": 1, "tool": "instant", "args": {"step": 1}},
    {"id": 2, "tool": "instant", "args": {"step": 2}, "depends_on": [1]},
    {"id": 3, "tool": "instant", "args": {"step": 3}, "depends_on": [2]},
    {"id": 4, "tool": "slow", "args": {"step": 4}},
]


def first_started(compiled: CompiledPlan, **options: Any) -> int:
    seen: list[events.Event] = []
    result = anyio.run(
        lambda: run_plan(compiled, max_concurrency=1, observers=[seen.append], **options)
    )
    assert result.status == "succeeded"
    return started_order(seen)[0]


def test_without_an_estimate_the_longer_branch_in_steps_goes_first() -> None:
    assert first_started(plan(QUICK_BRANCH_THEN_SLOW)) == 1


def test_with_an_estimate_the_longer_step_in_seconds_goes_first() -> None:
    compiled = plan(QUICK_BRANCH_THEN_SLOW)
    estimate = estimate_plan(compiled, measured={"instant": 0.1, "slow": 10.0})
    assert first_started(compiled, plan_estimate=estimate) == 4
    # the same when the plan-relative limits are lifted: the given estimate still weighs
    lifted = RunLimits(plan_cost_factor=None, plan_time_factor=None)
    assert first_started(compiled, plan_estimate=estimate, limits=lifted) == 4
    # measured durations in the store give the run's own estimate the same figures
    assert first_started(compiled, tool_durations={"instant": 0.1, "slow": 10.0}) == 4


def test_an_estimate_with_equal_figures_keeps_the_order_in_steps() -> None:
    compiled = plan(QUICK_BRANCH_THEN_SLOW)
    estimate = estimate_plan(compiled, measured={"instant": 2.0, "slow": 2.0})
    assert first_started(compiled, plan_estimate=estimate) == 1


# Step 1 makes 2, 3 and 4 ready at once: 4 heads a chain of three, 3 one of two, 2 is alone.
FAN_OUT = [
    {"id": 1, "tool": "instant", "args": {"step": 1}},
    {"id": 2, "tool": "instant", "args": {"step": 2}, "depends_on": [1]},
    {"id": 3, "tool": "instant", "args": {"step": 3}, "depends_on": [1]},
    {"id": 4, "tool": "instant", "args": {"step": 4}, "depends_on": [1]},
    {"id": 5, "tool": "instant", "args": {"step": 5}, "depends_on": [3]},
    {"id": 6, "tool": "instant", "args": {"step": 6}, "depends_on": [4]},
    {"id": 7, "tool": "instant", "args": {"step": 7}, "depends_on": [6]},
]


def test_the_child_continued_in_the_same_task_is_the_highest_the_rest_in_order() -> None:
    seen: list[events.Event] = []
    result = anyio.run(lambda: run_plan(plan(FAN_OUT), observers=[seen.append]))
    assert result.status == "succeeded"
    assert tasks_of[4] is tasks_of[1]  # continued in the task that ran step 1
    # 4's chain at once, then 3 (and its child), then 2; none of them suspends
    assert started_order(seen) == [1, 4, 6, 7, 3, 5, 2]


def test_under_a_limit_the_children_ask_for_slots_highest_first() -> None:
    seen: list[events.Event] = []
    result = anyio.run(lambda: run_plan(plan(FAN_OUT), max_concurrency=1, observers=[seen.append]))
    assert result.status == "succeeded"
    assert [step for step in started_order(seen) if step in (2, 3, 4)] == [4, 3, 2]


def test_a_resumed_run_starts_its_ready_steps_highest_first() -> None:
    seen: list[events.Event] = []
    result = anyio.run(
        lambda: run_plan(
            plan(FAN_OUT), completed={1: 1}, max_concurrency=1, observers=[seen.append]
        )
    )
    assert result.status == "succeeded"
    assert result.steps[1].status == "succeeded"
    assert [step for step in started_order(seen) if step in (2, 3, 4)] == [4, 3, 2]


def test_a_session_orders_by_the_steps_it_holds_once_steps_are_added() -> None:
    """Two roots make the levels be worked out at the start (step 2 first: it has
    children); steps added under step 4 while step 2 runs make 4 the highest of 2's
    children when 2 succeeds."""
    steps = [
        {"id": 1, "tool": "instant", "args": {"step": 1}},
        {"id": 2, "tool": "gated", "args": {"step": 2}},
        {"id": 3, "tool": "instant", "args": {"step": 3}, "depends_on": [2]},
        {"id": 4, "tool": "instant", "args": {"step": 4}, "depends_on": [2]},
    ]
    seen: list[events.Event] = []

    async def main() -> Any:
        async with open_session(
            plan(steps), REGISTRY, observers=[seen.append], max_concurrency=1
        ) as session:
            await anyio.wait_all_tasks_blocked()  # step 2 waits at the gate
            session.add(
                [
                    {"id": 20, "tool": "instant", "args": {"step": 20}, "depends_on": [4]},
                    {"id": 21, "tool": "instant", "args": {"step": 21}, "depends_on": [20]},
                ]
            )
            gate.set()
            with anyio.fail_after(5):
                await session.settled()
        return session.result()

    result = anyio.run(main)
    assert result.status == "succeeded"
    assert started_order(seen)[0] == 2  # level 2 beside 1's 1 at the start
    assert [step for step in started_order(seen) if step in (3, 4)] == [4, 3]


def test_after_a_step_that_waited_the_highest_child_goes_on_before_its_siblings() -> None:
    """Step 1 waits while another root runs: when it succeeds, its task goes on with the
    highest child at once (the loop already had its turns), before the sibling queued."""
    steps = [
        {"id": 1, "tool": "gated", "args": {"step": 1}},
        {"id": 2, "tool": "instant", "args": {"step": 2}, "depends_on": [1]},
        {"id": 3, "tool": "instant", "args": {"step": 3}, "depends_on": [1]},
        {"id": 4, "tool": "instant", "args": {"step": 4}, "depends_on": [3]},
        {"id": 10, "tool": "instant", "args": {"step": 10}},
    ]
    seen: list[events.Event] = []

    async def main() -> Any:
        result: Any = None

        async def run() -> None:
            nonlocal result
            result = await run_plan(plan(steps), observers=[seen.append])

        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(run)
                await anyio.wait_all_tasks_blocked()  # 10 ran; 1 waits at the gate
                await anyio.sleep(0.02)  # longer than a task runs steps without yielding
                gate.set()
        return result

    result = anyio.run(main)
    assert result.status == "succeeded"
    assert [step for step in started_order(seen) if step in (2, 3, 4)] == [3, 4, 2]
