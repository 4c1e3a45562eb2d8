"""The cost brake when a provider reports more than was reserved: the worst ratio, the wait
for the calls in flight, the slow start, and the bound they keep (the ledger alone, then a
run of model steps whose client over-reports)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.to_thread
import pytest

from plandag.brakes.budget import (
    DEFAULT_SLOW_START,
    Budget,
    Reservation,
    over_reservation_warning,
)
from plandag.brakes.clock import VirtualClock
from plandag.compiler import compile_plan
from plandag.executors import ModelAccess
from plandag.models.base import LLMRequest, LLMResponse, Usage
from plandag.models.pricing import DEFAULT_PRICES
from plandag.scheduler import RunLimits, run_plan
from plandag.tools.registry import default_registry


async def settled(budget: Budget, reservation: Reservation, usd: float, tokens: int = 0) -> None:
    """Settle on the event loop, then let the waiters it woke take their turn."""
    budget.settle(reservation, usd, tokens)
    for _ in range(5):
        await anyio.lowlevel.checkpoint()


class Caller:
    """One ``Budget.acquire`` running as a task: ``reservation`` once granted, ``refused``
    once refused, neither while it waits."""

    def __init__(self, budget: Budget, usd: float, holding: Sequence[Reservation] = ()) -> None:
        self.budget, self.usd, self.holding = budget, usd, holding
        self.reservation: Reservation | None = None
        self.refused = False

    async def __call__(self) -> None:
        got = await self.budget.acquire(self.usd, 0, holding=self.holding)
        if got is None:
            self.refused = True
        self.reservation = got

    @property
    def waiting(self) -> bool:
        return self.reservation is None and not self.refused


async def started(*callers: Caller) -> None:
    for _ in range(5):
        await anyio.lowlevel.checkpoint()


# -- the worst ratio --------------------------------------------------------------------------


def test_a_settlement_above_its_reservation_sets_the_worst_ratio() -> None:
    budget = Budget(1.0, 10_000)
    honest = budget.reserve(0.10, 100)
    assert honest is not None
    budget.settle(honest, 0.04, 100)  # at or under the reservation: nothing to report
    assert (budget.worst_ratio, budget.over_reserved, budget.usage_over_reservation) == (
        1.0,
        0,
        None,
    )
    lying = budget.reserve(0.01, 100)
    assert lying is not None
    budget.settle(lying, 0.04, 1000)  # 4x the dollars, 10x the tokens: the worse counts
    assert (budget.worst_ratio, budget.over_reserved) == (10.0, 1)
    assert budget.usage_over_reservation == 10.0
    milder = budget.reserve(0.01, 10)
    assert milder is not None
    budget.settle(milder, 0.02, 20)
    assert (budget.worst_ratio, budget.over_reserved) == (10.0, 2)  # the worst stays


def test_a_release_and_a_charge_without_a_reservation_teach_no_ratio() -> None:
    budget = Budget(1.0, None)
    held = budget.reserve(0.10, 0)
    assert held is not None
    budget.settle(held, 0.0, 0)  # a failed call that reported nothing
    budget.settle(Reservation(0, 0), 0.30, 0)  # a tool that reserved nothing reports a cost
    assert (budget.worst_ratio, budget.over_reserved, budget.usage_settled) == (1.0, 0, False)
    assert budget.spent_usd == pytest.approx(0.30)


def test_after_an_over_report_every_estimate_counts_at_the_worst_ratio() -> None:
    budget = Budget(1.0, None)
    first = budget.reserve(0.05, 0)
    assert first is not None
    budget.settle(first, 0.50, 0)  # 10x
    # $0.50 spent; $0.06 at 10x is $0.60: past the cap even alone
    assert budget.reserve(0.06, 0) is None
    assert budget.refusal(0.06, 0) == (
        "not started: its estimated cost of $0.06, counted at 10x (the most a settled call "
        "reported over its reservation), would take the run past its cost cap of $1 (spent "
        "$0.5, held by running steps $0)"
    )
    assert budget.reserve(0.05, 0) is not None  # $0.50 at 10x fits exactly
    assert budget.reserve(0.0, 0) is not None  # a free attempt while the cap is not passed


def test_the_token_cap_counts_at_the_worst_ratio_too() -> None:
    budget = Budget(None, 10_000)
    first = budget.reserve(0.0, 100)
    assert first is not None
    budget.settle(first, 0.0, 500)  # 5x
    assert budget.reserve(0.0, 1_901) is None  # 500 + 5 x 1,901 > 10,000
    assert budget.reserve(0.0, 1_900) is not None


@pytest.mark.anyio
async def test_at_ratio_one_a_call_without_room_beside_those_held_is_refused_at_once() -> None:
    budget = Budget(1.0, None, slow_start=None)
    held = budget.reserve(0.70, 0)
    assert held is not None
    assert await budget.acquire(0.40, 0) is None  # as before: no waiting for the others


@pytest.mark.anyio
async def test_after_an_over_report_a_call_waits_for_the_calls_in_flight() -> None:
    budget = Budget(1.0, None, slow_start=None)
    taught = budget.reserve(0.01, 0)
    assert taught is not None
    budget.settle(taught, 0.02, 0)  # 2x: $0.02 spent
    first = budget.reserve(0.20, 0)  # may bill $0.40
    second = budget.reserve(0.20, 0)  # $0.40 more: $0.82 exposed
    assert first is not None
    assert second is not None
    fits_after = Caller(budget, 0.15)  # $0.30: $1.12 exposed beside them; alone $0.32
    never_fits = Caller(budget, 0.30)  # $0.60: $1.42 beside them; alone $0.62
    async with anyio.create_task_group() as group:
        group.start_soon(fits_after)
        group.start_soon(never_fits)
        await started(fits_after, never_fits)
        assert fits_after.waiting  # the calls in flight could pass the cap at 2x
        assert never_fits.waiting
        await settled(budget, first, 0.40, 0)  # $0.42 spent, $0.40 still exposed
        assert never_fits.refused  # $0.42 + $0.60 alone is past the cap
        assert fits_after.waiting  # $0.42 + 2 x ($0.20 + $0.15) = $1.12
        await settled(budget, second, 0.10, 0)  # $0.52 spent, nothing in flight
    assert fits_after.reservation == Reservation(150_000_000, 0)  # $0.52 + $0.30 fits
    assert budget.reserved_nanodollars == 150_000_000


# -- the slow start ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_until_a_first_settlement_calls_in_flight_hold_at_most_the_slow_start() -> None:
    budget = Budget(1.0, None)  # the default: 0.15 of the cap, $0.15
    assert budget.slow_start == DEFAULT_SLOW_START == 0.15
    callers = [Caller(budget, 0.05) for _ in range(5)]
    async with anyio.create_task_group() as group:
        for caller in callers:
            group.start_soon(caller)
        await started(*callers)
        granted = [caller for caller in callers if caller.reservation is not None]
        assert len(granted) == 3  # $0.15 held; the other two wait
        assert budget.reserved_usd == pytest.approx(0.15)
        await settled(budget, granted[0].reservation, 0.01)  # type: ignore[arg-type]
        assert budget.usage_settled
    assert all(caller.reservation is not None for caller in callers)
    assert budget.reserved_usd == pytest.approx(0.20)


@pytest.mark.anyio
async def test_a_settlement_without_usage_does_not_end_the_slow_start() -> None:
    budget = Budget(1.0, None)
    first = await budget.acquire(0.10, 0)
    assert first is not None
    waiter = Caller(budget, 0.10)
    async with anyio.create_task_group() as group:
        group.start_soon(waiter)
        await started(waiter)
        assert waiter.waiting
        other = budget.reserve(0.05, 0)  # a fixed estimate is not held back by it
        assert other is not None
        await settled(budget, other, 0.0)  # a call that failed and reported nothing
        assert waiter.waiting
        assert not budget.usage_settled
        await settled(budget, first, 0.02)
    assert waiter.reservation is not None


@pytest.mark.anyio
async def test_a_call_larger_than_the_slow_start_starts_alone() -> None:
    budget = Budget(1.0, None)
    big = await budget.acquire(0.60, 0)
    assert big is not None  # nothing else held: it goes
    small = Caller(budget, 0.01)
    async with anyio.create_task_group() as group:
        group.start_soon(small)
        await started(small)
        assert small.waiting
        await settled(budget, big, 0.30)
    assert small.reservation is not None


@pytest.mark.anyio
async def test_the_slow_start_applies_to_the_token_cap() -> None:
    budget = Budget(None, 1_000, slow_start=0.5)
    first = await budget.acquire(0.0, 400)
    assert first is not None
    assert budget.reserve(0.0, 200) is not None  # a fixed estimate never waits
    waiter = Caller(budget, 0.0)
    waiter_tokens: list[Reservation | None] = []

    async def tokens_call() -> None:
        waiter_tokens.append(await budget.acquire(0.0, 100))  # 700 > 500 held: waits

    async with anyio.create_task_group() as group:
        group.start_soon(tokens_call)
        group.start_soon(waiter)  # asks for nothing of the token cap: goes
        await started(waiter)
        assert waiter_tokens == []
        assert waiter.reservation is not None
        await settled(budget, first, 0.0, 300)
    assert waiter_tokens == [Reservation(0, 100)]


@pytest.mark.anyio
async def test_the_slow_start_off_lets_every_call_start() -> None:
    budget = Budget(1.0, None, slow_start=None)
    for _ in range(10):
        assert await budget.acquire(0.09, 0) is not None
    assert budget.reserve(0.2, 0) is None  # the cap itself still holds


@pytest.mark.anyio
async def test_a_caller_never_waits_for_what_only_waiting_callers_hold() -> None:
    budget = Budget(1.0, None)
    # two steps hold fixed estimates, then each asks for a call during the slow start
    mine = budget.reserve(0.10, 0)
    theirs = budget.reserve(0.10, 0)
    assert mine is not None
    assert theirs is not None
    first, second = Caller(budget, 0.05, [mine]), Caller(budget, 0.05, [theirs])
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(first)
            group.start_soon(second)
            await started(first, second)
            # one waits for the other's hold; the other sees that nothing else can settle
            # and starts (only the slow start held it back)
            assert [first.waiting, second.waiting].count(True) == 1
            going = first if first.reservation is not None else second
            assert going.reservation is not None
            await settled(budget, going.reservation, 0.01)
    assert first.reservation is not None
    assert second.reservation is not None


@pytest.mark.anyio
async def test_with_only_its_own_hold_in_flight_a_call_past_the_ratio_is_refused() -> None:
    budget = Budget(1.0, None)
    taught = budget.reserve(0.01, 0)
    assert taught is not None
    budget.settle(taught, 0.10, 0)  # 10x
    mine = budget.reserve(0.05, 0)  # $0.50 at 10x: $0.60 exposed
    assert mine is not None
    with anyio.fail_after(5):
        assert await budget.acquire(0.05, 0, holding=[mine]) is None  # would wait on itself


@pytest.mark.anyio
async def test_a_cancelled_waiter_holds_nothing() -> None:
    budget = Budget(1.0, None)
    first = await budget.acquire(0.15, 0)
    assert first is not None
    waiter = Caller(budget, 0.05)
    async with anyio.create_task_group() as group:
        group.start_soon(waiter)
        await started(waiter)
        group.cancel_scope.cancel()
    assert waiter.waiting
    assert budget.reserved_usd == pytest.approx(0.15)
    assert budget._waiters_hold == 0


@pytest.mark.anyio
async def test_a_settlement_from_a_worker_thread_wakes_the_waiters() -> None:
    budget = Budget(1.0, None)
    first = await budget.acquire(0.15, 0)
    assert first is not None
    waiter = Caller(budget, 0.05)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(waiter)
            await started(waiter)
            assert waiter.waiting
            await anyio.to_thread.run_sync(budget.settle, first, 0.01, 0)
    assert waiter.reservation is not None


@pytest.mark.parametrize("value", [0, 0.0, -0.1, 1.5, math.nan, math.inf, True, "0.1"])
def test_a_slow_start_outside_zero_to_one_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="slow_start must be a fraction of the caps"):
        Budget(1.0, None, slow_start=value)
    with pytest.raises(ValueError, match="slow_start must be a fraction of the caps"):
        RunLimits(slow_start=value)


def test_run_limits_carry_the_slow_start_to_their_budget_and_their_json() -> None:
    assert RunLimits().budget().slow_start == DEFAULT_SLOW_START
    assert RunLimits(slow_start=None).budget().slow_start is None
    limits = RunLimits(slow_start=0.5)
    assert limits.as_json()["slow_start"] == 0.5
    assert RunLimits.from_json(limits.as_json()) == limits
    assert RunLimits.from_json({}).slow_start == DEFAULT_SLOW_START  # stored before it existed


def test_the_warning_names_the_worst_ratio() -> None:
    assert over_reservation_warning(None) is None
    assert over_reservation_warning(10.0) == (
        "warning: the provider reported more than was reserved (up to 10x a call's "
        "reservation); later calls were counted at 10x, and the spend may pass the cap"
    )


# -- the bound ---------------------------------------------------------------------------------


async def settle_in_order(
    calls: int, usd: float, factor: float, budget: Budget, order: Sequence[int]
) -> float:
    """``calls`` calls of ``usd`` each acquire at once; whatever was granted settles at
    ``factor`` x its reservation, the next one in ``order`` (indices into the granted
    calls, wrapping) after each round of waking; returns the final spend."""
    callers = [Caller(budget, usd) for _ in range(calls)]
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            for caller in callers:
                group.start_soon(caller)
            await started(*callers)
            step = 0
            while True:
                open_ = [
                    caller.reservation
                    for caller in callers
                    if caller.reservation is not None and not caller.reservation.settled
                ]
                if not open_:
                    break
                reservation = open_[order[step % len(order)] % len(open_)]
                await settled(budget, reservation, factor * reservation.nanodollars / 1e9)
                step += 1
    assert not any(caller.waiting for caller in callers)
    return budget.spent_usd


@pytest.mark.anyio
@pytest.mark.parametrize("order", [[0], [-1], [3, 1, 4, 1, 5, 9, 2, 6]])
@pytest.mark.parametrize(("calls", "usd"), [(30, 0.0007), (50, 0.001), (8, 0.004)])
async def test_a_steady_tenfold_over_report_ends_within_one_and_a_half_caps(
    order: list[int], calls: int, usd: float
) -> None:
    budget = Budget(0.05, None)
    spent = await settle_in_order(calls, usd, 10.0, budget, order)
    # the module's bound: max(L x max(f x C, e), C) with L = 10, f = 0.15, e <= f x C
    assert spent <= max(10 * 0.15 * 0.05, 0.05) + 1e-12
    assert budget.usage_over_reservation == 10.0


@pytest.mark.anyio
async def test_without_the_slow_start_the_same_calls_pass_the_bound() -> None:
    spent = await settle_in_order(30, 0.0007, 10.0, Budget(0.05, None, slow_start=None), [0])
    assert spent == pytest.approx(30 * 0.007)  # every call started before any settled


@pytest.mark.anyio
async def test_honest_calls_all_start_once_the_first_has_settled() -> None:
    budget = Budget(0.05, None)
    spent = await settle_in_order(30, 0.0007, 0.5, budget, [0])
    assert spent == pytest.approx(30 * 0.00035)
    assert budget.usage_over_reservation is None


# -- a run of model steps whose provider over-reports ------------------------------------------


class OverReporting:
    """A model client that answers a call only once every call the run can send has been
    sent (every other task is blocked: as with slow replies, all are in flight together)
    and reports ``factor`` times the tokens each call reserved."""

    provider = "anthropic"

    def __init__(self, factor: float) -> None:
        self.factor = factor
        self.in_flight = 0
        self.most_in_flight = 0
        self.wave = anyio.Event()

    async def count_tokens(self, request: LLMRequest) -> int:
        return 50

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        wave = self.wave
        await anyio.wait_all_tasks_blocked()
        wave.set()
        if self.wave is wave:
            self.wave = anyio.Event()  # calls sent from now on make the next wave
        self.in_flight -= 1
        usage = Usage(
            input_tokens=round(self.factor * 50),
            output_tokens=round(self.factor * request.max_tokens),
        )
        return LLMResponse("ok", "end_turn", usage, request.model)

    def stream(self, request: LLMRequest) -> Any:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None


def llm_plan(steps: int) -> dict[str, Any]:
    return {
        "version": 1,
        "goal": "many calls",
        "steps": [
            {"id": n, "tool": "llm", "args": {"prompt": f"Say ok {n}.", "max_tokens": 100}}
            for n in range(1, steps + 1)
        ],
    }


@pytest.mark.anyio
@pytest.mark.parametrize("slow_start", [DEFAULT_SLOW_START, None])
async def test_a_run_reports_the_over_report_and_keeps_the_bound(
    slow_start: float | None,
) -> None:
    client = OverReporting(10.0)
    # 50 counted input tokens at the cache-write price, 100 output tokens: $0.0005625
    price = DEFAULT_PRICES.lookup("claude-haiku-4-5")
    assert price is not None
    reserved = price.cost(Usage(cache_creation_input_tokens=50, output_tokens=100))
    cap = 0.05
    with anyio.fail_after(10):
        result = await run_plan(
            compile_plan(llm_plan(30), default_registry()),
            models=ModelAccess(client, "claude-haiku-4-5"),  # type: ignore[arg-type]
            limits=RunLimits(
                max_cost_usd=cap,
                slow_start=slow_start,
                heartbeat_every=None,
                plan_cost_factor=None,  # the cost cap alone: no stop at 2x the plan's estimate
            ),
            clock=VirtualClock(),
        )
    assert result.usage_over_reservation == 10.0  # 1,500 tokens reported for 150 reserved
    if slow_start is None:
        # every call fits the cap at once, and every one bills ten times its reservation
        assert client.most_in_flight == 30
        assert result.status == "succeeded"
        assert result.spent_usd == pytest.approx(30 * 0.0055)  # 500 in, 1,000 out at 10x
        assert result.spent_usd > 3 * cap
    else:
        assert client.most_in_flight == math.floor(slow_start * cap / reserved) == 13
        assert result.status == "budget_exceeded"
        refused = [record for record in result.steps.values() if record.reason == "budget"]
        assert len(refused) == 30 - 13
        assert result.spent_usd <= max(10 * slow_start * cap, cap) + 1e-12
