"""The simulated model: one local Messages API server plays a correct model for both agents
(docs/testing.md).

**Latency.** :class:`~plandag.testing.MessagesServer` makes every answer, to either agent,
take ``ttft_s`` seconds to the first token plus output tokens at ``tokens_per_second``
(tokens counted as characters / 4). Lookups take a log-normal time, drawn once per run and
query so that both agents meet the same latencies in the same run.

**Calibration** (:meth:`BenchSettings.calibrated`) to the LLMCompiler paper's
Movie-Recommendation figures (Kim et al., ICML 2024, Table 1 and the latency breakdown of
section 5): ReAct 20.5 s per question; LLMCompiler's planner 1.88 s and final answer
1.62 s; search latency mean 0.61 s and the slowest of eight 1.13 s on average. With ``P``
the output tokens of the ``movie8`` plan (wire format) and ``J`` those of the joiner's
answer, as this simulator writes them:

* ``tokens_per_second = (P - J) / (1.88 - 1.62)`` and ``ttft_s = 1.62 - J / tokens_per_second``
  (the planner call takes 1.88 s, the final answer 1.62 s);
* the search latency is log-normal with mean 0.61 s and the shape ``sigma`` whose expected
  maximum of eight draws is 1.13 s (solved numerically: ``E[max of n] / mean`` depends on
  ``sigma`` only);
* ReAct's thought length (tokens written before each tool call and before the answer) is
  the one that makes ReAct's nine turns plus eight mean searches take 20.5 s.

Every setting can be overridden (:meth:`BenchSettings.with_overrides`); ``time_scale``
multiplies every latency (``--quick``: 0.05) so tests run in seconds.

**Content** (:class:`SimulatedModel`): a responder reads each request and answers as a
correct model would. A planner request (plandag's system prompt, structured output) gets
the workload's plan in the wire format; a joiner request gets ``finish`` with the written
answer computed from the step results quoted in the prompt (``replan`` when a step
failed); a replanner request gets a patch that re-issues the failed, pruned and cancelled
steps under new ids (it cannot repair a tool broken on purpose, so the caps end the run); a
ReAct request (``tools`` in the body) gets the next tool call or the answer, from the
observations in the conversation (:meth:`~plandag.bench.workloads.Workload.next_move`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
import statistics
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from plandag.bench.workloads import (
    MOVIE8,
    MOVIES,
    AnswerMove,
    Question,
    ToolMove,
    Workload,
    World,
)
from plandag.executors.data import parse_data_blocks
from plandag.planner.joiner import JOIN_SYSTEM_PROMPT
from plandag.planner.schema import wrap_json_text
from plandag.testing import MessagesServer, ScriptedResponse, estimate_tokens, system_text

__all__ = [
    "INPUT_TOKEN_RATIO_TARGET",
    "PAPER",
    "BenchSettings",
    "SimulatedModel",
    "expected_max_ratio",
    "lognormal_sigma",
    "thought_text",
]

PAPER: Mapping[str, float] = {
    "react_s": 20.5,
    "planner_s": 1.88,
    "joiner_s": 1.62,
    "search_mean_s": 0.61,
    "search_max8_s": 1.13,
    "speedup": 3.7,
    "input_token_ratio": 6.7,
}
"""The LLMCompiler paper's Movie-Recommendation figures the defaults are calibrated to
(seconds; ``speedup`` and ``input_token_ratio`` are LLMCompiler vs ReAct)."""

INPUT_TOKEN_RATIO_TARGET = 6.0
"""The bench's own target for movie8's input tokens, ReAct over plandag, without prompt
caching: the paper's 6.7x less room for the typed plan schema. The structured-output
schemas are input like the prompt (the simulated server bills them, as the API does), so
the ratio counts them; their own cost is reported beside it
(:meth:`plandag.bench.runner.BenchReport.schema_line`)."""

_INTEGRATION_POINTS = 4000


def expected_max_ratio(sigma: float, n: int) -> float:
    """``E[max of n log-normal draws] / mean`` for shape ``sigma`` (independent of ``mu``).

    Midpoint rule over the uniform quantile ``u``: ``E[max] = ∫ Q(u) n u^(n-1) du``.

    Args:
        sigma: the log-normal shape (>= 0).
        n: the number of draws (>= 1).

    Returns:
        The ratio (1.0 for ``sigma = 0``).
    """
    normal = statistics.NormalDist()
    total = 0.0
    for index in range(_INTEGRATION_POINTS):
        u = (index + 0.5) / _INTEGRATION_POINTS
        total += math.exp(sigma * normal.inv_cdf(u) - sigma * sigma / 2) * n * u ** (n - 1)
    return total / _INTEGRATION_POINTS


def lognormal_sigma(mean: float, expected_max: float, n: int) -> float:
    """The log-normal shape whose ``n`` draws have ``expected_max`` as expected maximum.

    Args:
        mean: the mean of one draw, seconds (> 0).
        expected_max: the expected maximum of ``n`` draws, seconds (>= mean).
        n: draws (>= 2).

    Returns:
        ``sigma`` (bisection to 1e-6).

    Raises:
        ValueError: ``expected_max`` < ``mean`` or out of reach (sigma above 3).
    """
    target = expected_max / mean
    if target < 1.0:
        raise ValueError(f"expected maximum {expected_max} is below the mean {mean}")
    low, high = 0.0, 3.0
    if expected_max_ratio(high, n) < target:
        raise ValueError(f"no log-normal shape up to 3 gives max/mean {target:.3f} for n={n}")
    while high - low > 1e-6:
        middle = (low + high) / 2
        if expected_max_ratio(middle, n) < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def thought_text(step: int, tokens: int) -> str:
    """ReAct's thought before a move: about ``tokens`` tokens (4 characters each)."""
    head = f"Thought {step}: from what I have read so far, the next move is clear."
    filler = " I keep each result I read in mind and look up what is still missing."
    text = head + filler * (max(0, tokens * 4 - len(head)) // len(filler) + 1)
    return text[: max(len(head), tokens * 4)]


@dataclasses.dataclass(frozen=True)
class BenchSettings:
    """Every knob of a simulated benchmark run (printed with the results).

    Attributes:
        ttft_s: the model's time to first token, seconds (before ``time_scale``).
        tokens_per_second: the model's output pace (before ``time_scale``).
        thought_tokens: tokens ReAct writes as its thought in each turn.
        search_mean_s: mean lookup latency, seconds (before ``time_scale``).
        search_sigma: shape of the log-normal lookup latency.
        observation_chars: characters of abstract in each lookup result.
        time_scale: multiplies every latency (1.0 calibrated; ``--quick`` 0.05).
        seed: seeds the lookup latencies (run ``k`` of a workload draws from
            ``seed``, the run number and the query).
        model: the model name sent (and priced).
        chunk_chars: characters per streamed delta.
    """

    ttft_s: float
    tokens_per_second: float
    thought_tokens: int
    search_mean_s: float = PAPER["search_mean_s"]
    search_sigma: float = 0.0
    observation_chars: int = 600
    time_scale: float = 1.0
    seed: int = 0
    model: str = "claude-sonnet-4-6"
    chunk_chars: int = 16

    @classmethod
    def calibrated(cls, *, observation_chars: int = 600, **overrides: Any) -> BenchSettings:
        """Settings derived from :data:`PAPER` (module docstring), then ``overrides``.

        Args:
            observation_chars: abstract characters per lookup (the ReAct turns' input).
            overrides: any field, replacing the derived value.

        Raises:
            ValueError: an unknown field, or figures that give no positive pace.
        """
        plan_tokens = estimate_tokens(_compact(MOVIE8.plan_wire))
        join_tokens = estimate_tokens(_compact(_join_json(_movie_answer())))
        rate = (plan_tokens - join_tokens) / (PAPER["planner_s"] - PAPER["joiner_s"])
        if rate <= 0:
            raise ValueError("the plan must be longer than the answer to derive a pace")
        ttft = PAPER["joiner_s"] - join_tokens / rate
        sigma = lognormal_sigma(PAPER["search_mean_s"], PAPER["search_max8_s"], 8)
        # ReAct: 8 turns calling search, then the answer; each with a thought.
        question = MOVIE8.questions[0]
        moves_tokens = 0.0
        observations: list[tuple[str, Mapping[str, Any], Any]] = []
        for _ in range(9):
            move = MOVIE8.next_move(question, observations)
            if isinstance(move, ToolMove):
                moves_tokens += len(_compact(move.input)) / 4
                query = str(move.input["query"])
                observations.append((move.tool, move.input, {"name": query, **MOVIES[query]}))
            else:
                moves_tokens += len(move.text) / 4
        searches = 8 * PAPER["search_mean_s"]
        thought = ((PAPER["react_s"] - searches - 9 * ttft) * rate - moves_tokens) / 9
        derived: dict[str, Any] = {
            "ttft_s": round(ttft, 4),
            "tokens_per_second": round(rate, 2),
            "thought_tokens": max(0, round(thought)),
            "search_mean_s": PAPER["search_mean_s"],
            "search_sigma": round(sigma, 4),
            "observation_chars": observation_chars,
        }
        unknown = set(overrides) - {field.name for field in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown settings: {', '.join(sorted(unknown))}")
        derived.update(overrides)
        return cls(**derived)

    def with_overrides(self, overrides: Mapping[str, Any]) -> BenchSettings:
        """These settings with ``overrides`` (field name → value, None ignored).

        Raises:
            ValueError: an unknown field.
        """
        names = {field.name for field in dataclasses.fields(self)}
        unknown = set(overrides) - names
        if unknown:
            raise ValueError(
                f"unknown settings: {', '.join(sorted(unknown))} "
                f"(known: {', '.join(sorted(names))})"
            )
        given = {key: value for key, value in overrides.items() if value is not None}
        return dataclasses.replace(self, **given)

    @property
    def search_mu(self) -> float:
        """``mu`` of the log-normal lookup latency: ``ln(mean) - sigma² / 2``."""
        return math.log(self.search_mean_s) - self.search_sigma**2 / 2

    def lookup_latency(self, run: int, query: str) -> float:
        """Seconds lookup ``query`` takes in run ``run`` (scaled; same for both agents)."""
        rng = random.Random(f"{self.seed}:{run}:{query}")
        return rng.lognormvariate(self.search_mu, self.search_sigma) * self.time_scale

    def world(self, run: int, *, broken: bool = False) -> World:
        """The tools' world for run ``run``."""
        return World(
            latency=lambda query: self.lookup_latency(run, query),
            observation_chars=self.observation_chars,
            broken=broken,
            typical_seconds=self.search_mean_s * self.time_scale,
        )

    def rows(self) -> list[tuple[str, str]]:
        """Every setting as ``(name, value)`` text, with the scaled latencies."""
        rows = [(field.name, str(getattr(self, field.name))) for field in dataclasses.fields(self)]
        rows.append(("effective ttft_s", f"{self.ttft_s * self.time_scale:.4f}"))
        rows.append(
            ("effective tokens_per_second", f"{self.tokens_per_second / self.time_scale:.1f}")
        )
        rows.append(("effective search_mean_s", f"{self.search_mean_s * self.time_scale:.4f}"))
        return rows


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _join_json(answer: str) -> dict[str, Any]:
    return {"decision": {"action": "finish", "answer": answer}}


def _movie_answer() -> str:
    assert MOVIE8.write_answer is not None
    results = {i: {"name": t, **MOVIES[t]} for i, t in enumerate(MOVIES, start=1)}
    return MOVIE8.write_answer(results)


_STEP_LABEL = re.compile(r"step (\d+) (result|error)")
_REFERENCE = re.compile(r"<step_(\d+)_result")
_FAILED_DEPENDENCY = re.compile(r"depends_on names step (\d+), which failed")


class SimulatedModel:
    """A :class:`MessagesServer` answering like a correct model (module docstring).

    Args:
        settings: latency and content settings.

    Set :attr:`workload` and :attr:`question` before each agent run. Use as a context
    manager; :attr:`url` is the ``base_url`` for the SDK.

    Attributes:
        server: the underlying server (its ``requests`` record every call).
        workload: the workload being run.
        question: the question being asked.
    """

    def __init__(self, settings: BenchSettings) -> None:
        self.settings = settings
        self.workload: Workload | None = None
        self.question: Question | None = None
        self.server = MessagesServer(
            ttft=settings.ttft_s * settings.time_scale,
            tokens_per_second=settings.tokens_per_second / settings.time_scale,
            chunk_chars=settings.chunk_chars,
            default=self.respond,
        )

    def __enter__(self) -> SimulatedModel:
        self.server.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.server.stop()

    @property
    def url(self) -> str:
        """The server's base URL."""
        return self.server.url

    def respond(self, body: dict[str, Any]) -> ScriptedResponse:
        """The reply a correct model gives to the request ``body``.

        Raises:
            RuntimeError: no workload or question set.
        """
        workload, question = self.workload, self.question
        if workload is None or question is None:
            raise RuntimeError("set SimulatedModel.workload and .question before a run")
        if body.get("tools"):
            return self._react(workload, question, body)
        if system_text(body).startswith(JOIN_SYSTEM_PROMPT[:30]):
            return self._join(workload, body)
        first = _text(body["messages"][0].get("content", ""))
        if "Every step of the run so far" in first:
            return self._replan(body)
        if workload.plan_wire is None:
            raise RuntimeError(f"workload {workload.name} has no plan for a planner request")
        return ScriptedResponse.json(workload.plan_wire)

    def _react(
        self, workload: Workload, question: Question, body: dict[str, Any]
    ) -> ScriptedResponse:
        calls: dict[str, tuple[str, Mapping[str, Any]]] = {}
        observations: list[tuple[str, Mapping[str, Any], Any]] = []
        for message in body["messages"]:
            content = message.get("content")
            if not isinstance(content, list):
                continue
            for block in content:
                if block.get("type") == "tool_use":
                    calls[block["id"]] = (block["name"], block.get("input", {}))
                elif block.get("type") == "tool_result":
                    name, given = calls[block["tool_use_id"]]
                    shown = parse_data_blocks(_text(block.get("content", "")))
                    value: Any = shown[0].value if shown else None
                    if block.get("is_error"):
                        value = {"error": value}
                    observations.append((name, given, value))
        move = workload.next_move(question, observations)
        thought = thought_text(len(observations) + 1, self.settings.thought_tokens)
        if isinstance(move, AnswerMove):
            return ScriptedResponse.text(f"{thought}\n{move.text}")
        return ScriptedResponse.tool_use(move.tool, dict(move.input), text=thought)

    def _join(self, workload: Workload, body: dict[str, Any]) -> ScriptedResponse:
        prompt = _text(body["messages"][-1]["content"])
        results: dict[int, Any] = {}
        failed: list[int] = []
        for block in parse_data_blocks(prompt):
            match = _STEP_LABEL.fullmatch(block.label)
            if match is None:
                continue
            if match.group(2) == "error":
                failed.append(int(match.group(1)))
            else:
                results[int(match.group(1))] = block.value
        if failed or workload.write_answer is None:
            reason = (
                f"steps {', '.join(map(str, failed))} did not succeed" if failed else "no answer"
            )
            return ScriptedResponse.json({"decision": {"action": "replan", "reason": reason}})
        return ScriptedResponse.json(_join_json(workload.write_answer(results)))

    def _replan(self, body: dict[str, Any]) -> ScriptedResponse:
        prompt = _text(body["messages"][0]["content"])
        blocks = parse_data_blocks(prompt)
        listing = next(block.value for block in blocks if block.label == "plan steps")
        output = next((block.value for block in blocks if block.label == "current output"), None)
        next_id = max(item["i"] for item in listing) + 1
        # A repair (the last patch did not compile): the steps it depended on that failed
        # meanwhile are redone too.
        repair = _text(body["messages"][-1]["content"]) if len(body["messages"]) > 1 else ""
        also = {int(found) for found in _FAILED_DEPENDENCY.findall(repair)}
        redo = [
            item
            for item in listing
            if item["state"] in ("failed", "pruned", "cancelled") or item["i"] in also
        ]
        renumber: dict[int, int] = {}
        for item in redo:
            renumber[item["i"]] = next_id
            next_id += 1

        def rewrite(value: Any) -> Any:
            if isinstance(value, str):
                return _REFERENCE.sub(
                    lambda match: (
                        f"<step_{renumber.get(int(match.group(1)), int(match.group(1)))}_result"
                    ),
                    value,
                )
            if isinstance(value, dict):
                return {key: rewrite(item) for key, item in value.items()}
            if isinstance(value, list):
                return [rewrite(item) for item in value]
            return value

        steps = []
        for item in redo:
            step = {key: value for key, value in item.items() if key != "state"}
            step["i"] = renumber[item["i"]]
            step["d"] = [renumber.get(parent, parent) for parent in item["d"]]
            step["a"] = rewrite(item["a"])
            steps.append(step)
        patch: dict[str, Any] = {"g": "Redo the failed part", "s": steps}
        if output is not None:
            patch["o"] = wrap_json_text(rewrite(output))
        return ScriptedResponse.json(patch)


def _text(content: Any) -> str:
    """A message content's text (text blocks and tool results joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            _text(block.get("text") or block.get("content") or "")
            for block in content
            if isinstance(block, dict)
        )
    return ""
