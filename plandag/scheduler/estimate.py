"""A plan's estimate of cost and time, before it runs (ARCHITECTURE.md, "Brakes": "each plan
carries its own estimate of cost and time").

Per step:

* **time**: the tool's duration measured in the run store (the median of its latest
  :data:`MEASURED_LATEST_STEPS` succeeded steps, once it has succeeded in
  :data:`MEASURED_MIN_RUNS` distinct runs; see
  :meth:`plandag.store.Store.tool_durations`), else the ``typical_seconds`` the tool declares,
  else unknown;
* **cost**: the tool's ``estimate`` of the step's arguments when it declares one (a model
  call: its prompt and ``max_tokens`` at its model's price; the tokens priced by the run's
  model when that model has no price); else its ``cost_estimate_usd``; else a model-backed
  tool's ``tokens_estimate`` priced by the run's model (``tokens_cost``); else $0 for a tool without
  effects; a tool with effects, no cost estimate and no time estimate at all (a user's tool
  that declares nothing) has an unknown cost (it may charge for what it does).

The plan's cost is the sum of its steps' costs; its time is the critical path of the steps'
durations (:func:`plandag.dag.graph.critical_path`), or, when longer, the sum of its inline
steps' durations (``inline=True`` tools run on the event loop one at a time, so a wide plan
of them takes at least that long). Model calls the run makes around its
steps (:class:`ModelCallEstimate`: the planner's own calls, the joiner's) add their time, and
their cost when one is given. A model-backed step is priced with the run's model
(``tokens_cost``: the planner's own price table). One step without an estimate makes the
plan's time unknown (and its cost, when that step's cost is unknown): the estimate says
which steps, and only the absolute caps apply to the run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import operator
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, Literal

from plandag.compiler.compiled import CompiledPlan, CompiledStep
from plandag.dag.graph import longest_path, parents_first_among

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "MEASURED_LATEST_STEPS",
    "MEASURED_MIN_RUNS",
    "ModelCallEstimate",
    "PlanEstimate",
    "StepEstimate",
    "estimate_plan",
    "estimate_steps",
]

MEASURED_MIN_RUNS = 5
"""A tool's measured median replaces its declared ``typical_seconds`` once it has succeeded
in this many distinct runs of the store."""

MEASURED_LATEST_STEPS = 1000
"""A tool's measured duration is the median of this many of its latest succeeded steps (in
the order they ended): the estimate follows a tool whose latency drifts, and reading it costs
the same however many runs the store holds."""

TimeSource = Literal["measured", "declared"]

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
"""``json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)``."""


@dataclasses.dataclass(frozen=True, slots=True)
class StepEstimate:
    """One step's estimate.

    Attributes:
        step_id: the step.
        tool: its tool's name.
        cost_usd: US dollars, or None when unknown.
        seconds: seconds, or None when unknown.
        source: where ``seconds`` came from: ``measured`` (the run store's median),
            ``declared`` (the tool's ``typical_seconds``), or None when unknown.
    """

    step_id: int
    tool: str
    cost_usd: float | None
    seconds: float | None
    source: TimeSource | None


_Figures = tuple[str, float | None, float | None, TimeSource | None]
"""A step's ``(tool, cost_usd, seconds, source)``, as :class:`StepEstimate` holds them."""


class _StepEstimates(Mapping[int, StepEstimate]):
    """Each step's :class:`StepEstimate` by id, made when one is read from the step's
    figures: the steps of a tool without an estimate function share one tuple of figures,
    so that estimating a plan makes no object per step (the store's and the trace's texts
    are written from the figures).

    Args:
        figures: each step's :data:`_Figures` by id.
    """

    __slots__ = ("figures",)

    def __init__(self, figures: dict[int, _Figures]) -> None:
        self.figures = figures

    def __getitem__(self, step_id: int) -> StepEstimate:
        return StepEstimate(step_id, *self.figures[step_id])

    def __iter__(self) -> Iterator[int]:
        return iter(self.figures)

    def __len__(self) -> int:
        return len(self.figures)

    def __contains__(self, step_id: object) -> bool:
        return step_id in self.figures

    def __repr__(self) -> str:
        return repr(dict(self.items()))


def _step_figures(steps: Mapping[int, StepEstimate]) -> dict[int, _Figures]:
    """Each step's figures of ``steps`` (a plan estimate's), read without making a
    :class:`StepEstimate` when they are :class:`_StepEstimates`."""
    if type(steps) is _StepEstimates:
        return steps.figures
    return {
        step_id: (item.tool, item.cost_usd, item.seconds, item.source)
        for step_id, item in steps.items()
    }


@dataclasses.dataclass(frozen=True, slots=True)
class ModelCallEstimate:
    """A model call the run makes beside its steps (the planner's own call, the joiner's).

    Attributes:
        label: what the call is (``planner``, ``joiner``), shown after the critical path.
        seconds: seconds it takes; added to the plan's time.
        cost_usd: US dollars (tokens x price) added to the plan's cost, or None for a call
            whose cost the plan's cost does not count.
    """

    label: str
    seconds: float
    cost_usd: float | None = None


@dataclasses.dataclass(frozen=True)
class PlanEstimate:
    """What a plan is expected to cost and take.

    Attributes:
        cost_usd: US dollars: the sum of the steps' costs (and of the model calls' given
            ones); None when a step's cost is unknown.
        seconds: the critical path of the steps' durations plus the model calls', seconds;
            None when a step has no time estimate.
        critical_path: the step ids on the critical path, in order (empty when ``seconds``
            is None or the plan has no steps).
        critical_path_seconds: the critical path's length, seconds.
        inline_seconds: the sum of the inline steps' durations, seconds (the time they
            hold the event loop, one at a time); ``seconds`` is at least this.
        inline_steps: how many inline steps that sum counts.
        unknown: steps with no time estimate (their tool declares no ``typical_seconds``
            and was never measured), sorted.
        unknown_cost: steps whose cost is unknown, sorted.
        calls: the model calls counted beside the steps, in order.
        steps: each step's estimate by id.
    """

    cost_usd: float | None
    seconds: float | None
    critical_path: tuple[int, ...] = ()
    critical_path_seconds: float = 0.0
    inline_seconds: float = 0.0
    inline_steps: int = 0
    unknown: tuple[int, ...] = ()
    unknown_cost: tuple[int, ...] = ()
    calls: tuple[ModelCallEstimate, ...] = ()
    steps: Mapping[int, StepEstimate] = dataclasses.field(default_factory=dict)

    @property
    def known(self) -> bool:
        """Both the cost and the time are known."""
        return self.cost_usd is not None and self.seconds is not None

    def step_seconds(self) -> dict[int, float | None]:
        """Each step's estimated seconds by id (None where unknown), read without making a
        :class:`StepEstimate` per step."""
        return {step_id: figures[2] for step_id, figures in _step_figures(self.steps).items()}

    def distinct_seconds(self) -> set[float | None]:
        """The distinct figures among the steps' estimated seconds (None for unknown)."""
        return set(map(operator.itemgetter(2), _step_figures(self.steps).values()))

    def covers(self, step_ids: AbstractSet[int]) -> bool:
        """Every step of ``step_ids`` has an estimate here (known or not)."""
        return _step_figures(self.steps).keys() >= step_ids

    def path_text(self) -> str:
        """The critical path as ``1 -> 3 -> 4`` (model calls after it by label)."""
        parts = [str(step_id) for step_id in self.critical_path]
        parts.extend(call.label for call in self.calls)
        return " -> ".join(parts)

    def describe(self) -> str:
        """One line for a person: ``estimated cost $0.0123, time 4.2 s (critical path 1 ->
        3 -> 4)``; with unknowns, ``estimated cost $0.0000, time unknown: steps 3, 5 have no
        estimate``."""
        missing = ", ".join(map(str, self.unknown))
        noun = "step" if len(self.unknown) == 1 else "steps"
        verb = "has" if len(self.unknown) == 1 else "have"
        if self.cost_usd is None and self.seconds is None:
            return f"estimated cost and time unknown: {noun} {missing} {verb} no estimate"
        cost = (
            f"estimated cost ${self.cost_usd:.4f}"
            if self.cost_usd is not None
            else (
                "estimated cost unknown ("
                + ", ".join(map(str, self.unknown_cost))
                + " may charge and declare no cost)"
            )
        )
        if self.seconds is None:
            return f"{cost}, time unknown: {noun} {missing} {verb} no estimate"
        path = self.path_text()
        notes = []
        if self.inline_steps and self.inline_seconds > self.critical_path_seconds:
            notes.append(f"{self.inline_steps} inline steps, one at a time")
        if path:
            notes.append(f"critical path {path}")
        return f"{cost}, time {_seconds(self.seconds)} s" + (
            f" ({'; '.join(notes)})" if notes else ""
        )

    def as_json(self) -> dict[str, Any]:
        """The estimate as stored with the plan version (``plan_version.estimate``):
        ``{"cost_usd", "seconds", "critical_path", "inline_seconds", "unknown",
        "unknown_cost", "calls", "steps"}``, numbers in US dollars and seconds, None where
        unknown."""
        return {**self._head_json(), "steps": self._steps_json()}

    def json_text(self) -> str:
        """``json.dumps(self.as_json(), ensure_ascii=False, separators=(",", ":"),
        allow_nan=False)``, made with each distinct step entry written once (the steps of a
        plan mostly share their tool and figures).

        Raises:
            ValueError: a figure is NaN or an infinity (as ``json.dumps`` raises it).
        """
        head = _encode(self._head_json())
        written: dict[tuple[Any, ...], str] = {}
        # the same tuple of figures (shared by the steps of a tool, _StepEstimates) has the
        # same text: looked up by identity first (the tuples live as long as the loop)
        same: dict[int, str] = {}
        parts: list[str] = []
        for step_id, figures in sorted(_step_figures(self.steps).items()):
            entry = same.get(id(figures))
            if entry is None:
                tool, cost, seconds, source = figures
                # with the types, and a zero's text: what == does not tell apart is written
                # otherwise (0 and 0.0, 0.0 and -0.0, 1 and True)
                key = (
                    *(tool, type(tool), source),
                    *(cost, type(cost), cost == 0 and str(cost)),
                    *(seconds, type(seconds), seconds == 0 and str(seconds)),
                )
                entry = written.get(key)
                if entry is None:
                    entry = written[key] = _encode(
                        {"tool": tool, "cost_usd": cost, "seconds": seconds, "source": source}
                    )
                same[id(figures)] = entry
            parts.append(f'"{step_id}":{entry}')
        # "steps" is the last key of as_json's object
        return f'{head[:-1]},"steps":{{{",".join(parts)}}}}}'

    def _head_json(self) -> dict[str, Any]:
        """:meth:`as_json` but its ``steps``."""
        return {
            "cost_usd": self.cost_usd,
            "seconds": self.seconds,
            "critical_path": list(self.critical_path),
            "inline_seconds": self.inline_seconds,
            "unknown": list(self.unknown),
            "unknown_cost": list(self.unknown_cost),
            "calls": [
                {"label": call.label, "cost_usd": call.cost_usd, "seconds": call.seconds}
                for call in self.calls
            ],
        }

    def _steps_json(self) -> dict[str, Any]:
        """:meth:`as_json`'s ``steps``."""
        return {
            str(step_id): {"tool": tool, "cost_usd": cost, "seconds": seconds, "source": source}
            for step_id, (tool, cost, seconds, source) in sorted(_step_figures(self.steps).items())
        }

    def with_calls(self, calls: Sequence[ModelCallEstimate]) -> PlanEstimate:
        """This estimate with ``calls`` added (their costs and seconds too)."""
        if not calls:
            return self
        cost = self.cost_usd
        for call in calls:
            if cost is not None and call.cost_usd is not None:
                cost += call.cost_usd
        seconds = self.seconds
        if seconds is not None:
            seconds += sum(call.seconds for call in calls)
        return dataclasses.replace(
            self, cost_usd=cost, seconds=seconds, calls=(*self.calls, *calls)
        )


def _seconds(value: float) -> str:
    return f"{value:.3g}" if value < 1000 else f"{value:.0f}"


def _step_estimate(
    compiled_step: CompiledStep,
    measured: Mapping[str, float],
    tokens_cost: Callable[[int], float | None] | None,
    executor_model: str | None = None,
) -> StepEstimate:
    tool = compiled_step.tool
    seconds: float | None
    source: TimeSource | None
    if tool.name in measured:
        seconds, source = float(measured[tool.name]), "measured"
    elif tool.typical_seconds is not None:
        seconds, source = tool.typical_seconds, "declared"
    else:
        seconds, source = None, None
    cost: float | None
    if tool.estimate is not None:
        args = compiled_step.step.args
        if executor_model and not args.get("model") and "model" in tool.args_model.model_fields:
            args = {**args, "model": executor_model}  # the run's default for model steps
        usd, tokens = tool.estimate(args)
        if usd is None:  # the step names no priced model: priced with the run's model
            usd = tokens_cost(tokens) if tokens_cost is not None else None
        cost = usd
    elif tool.cost_estimate_usd:
        cost = tool.cost_estimate_usd
    elif tool.tokens_estimate:
        cost = tokens_cost(tool.tokens_estimate) if tokens_cost is not None else None
    elif tool.effects == "none" or seconds is not None:
        cost = 0.0
    else:
        cost = None
    return StepEstimate(compiled_step.id, tool.name, cost, seconds, source)


def estimate_steps(
    steps: Mapping[int, CompiledStep],
    graph: nx.DiGraph | None = None,
    *,
    measured: Mapping[str, float] | None = None,
    tokens_cost: Callable[[int], float | None] | None = None,
    done: Collection[int] = (),
    calls: Sequence[ModelCallEstimate] = (),
    executor_model: str | None = None,
) -> PlanEstimate:
    """Estimate the steps ``steps`` (a plan's, or a replan patch's) of dependency graph
    ``graph``.

    Args:
        steps: the compiled steps by id.
        graph: their dependencies (edges parent -> child); nodes outside ``steps`` are
            left out (a patch's parents that already ran). None: each step's ``parents``.
        measured: seconds per tool name measured in the run store
            (:meth:`plandag.store.Store.tool_durations`); replaces declared figures.
        tokens_cost: US dollars of a number of tokens on the run's model (None: unpriced),
            for model-backed tools that declare ``tokens_estimate`` and no cost estimate.
        done: steps that already succeeded (a resumed run): they count $0 and 0 s.
        calls: model calls the run makes beside the steps (module docstring).
        executor_model: the model the run's ``llm`` and ``agent`` steps use when they name
            none (``ModelAccess.model``), given to their ``estimate`` as ``model``.

    Returns:
        The :class:`PlanEstimate`.
    """
    known_measured = measured or {}
    finished = set(done)
    per_step: dict[int, _Figures] = {}
    # the figures of a tool without an estimate function hold for each of its steps (they
    # do not depend on a step's args), by the tool object's identity (alive in the loop)
    by_tool: dict[int, _Figures] = {}
    for step_id, compiled_step in steps.items():
        tool = compiled_step.tool
        if step_id in finished:
            per_step[step_id] = (tool.name, 0.0, 0.0, None)
        elif tool.estimate is None and (shared := by_tool.get(id(tool))) is not None:
            per_step[step_id] = shared
        else:
            item = _step_estimate(compiled_step, known_measured, tokens_cost, executor_model)
            figures = per_step[step_id] = (item.tool, item.cost_usd, item.seconds, item.source)
            if tool.estimate is None:
                by_tool[id(tool)] = figures
    unknown = tuple(sorted(key for key, item in per_step.items() if item[2] is None))
    unknown_cost = tuple(sorted(key for key, item in per_step.items() if item[1] is None))
    cost: float | None = None
    if not unknown_cost:
        cost = math.fsum(item[1] or 0.0 for item in per_step.values())
    seconds: float | None = None
    path: tuple[int, ...] = ()
    inline_seconds = path_seconds = 0.0
    inline_count = 0
    if not unknown:
        found = parents_first_among(
            {node: steps[node].parents for node in per_step}
            if graph is None
            else {
                node: list(graph.predecessors(node)) if node in graph else [] for node in per_step
            }
        )
        if found is None:
            raise ValueError("the steps' dependencies form a cycle; a compiled plan has none")
        order, parents = found
        nodes, seconds = longest_path(
            order, parents.__getitem__, lambda node: per_step[node][2] or 0.0
        )
        path = tuple(nodes)
        inline = [
            per_step[step_id][2] or 0.0
            for step_id, compiled_step in steps.items()
            if step_id not in finished
            and compiled_step.tool.inline
            and not compiled_step.tool.is_async
        ]
        inline_seconds = math.fsum(inline)
        inline_count = len(inline)
        path_seconds = seconds
        seconds = max(seconds, inline_seconds)
    estimate = PlanEstimate(
        cost_usd=cost,
        seconds=seconds,
        critical_path=path,
        critical_path_seconds=path_seconds,
        inline_seconds=inline_seconds,
        inline_steps=inline_count,
        unknown=unknown,
        unknown_cost=unknown_cost,
        steps=_StepEstimates(per_step),
    )
    return estimate.with_calls(calls)


def estimate_plan(
    compiled: CompiledPlan,
    *,
    measured: Mapping[str, float] | None = None,
    tokens_cost: Callable[[int], float | None] | None = None,
    done: Collection[int] = (),
    calls: Sequence[ModelCallEstimate] = (),
    executor_model: str | None = None,
) -> PlanEstimate:
    """Estimate a compiled plan: :func:`estimate_steps` over its steps and their parents
    (arguments as there)."""
    return estimate_steps(
        compiled.steps,
        None,
        measured=measured,
        tokens_cost=tokens_cost,
        done=done,
        calls=calls,
        executor_model=executor_model,
    )
