"""The benchmark's workloads, each with a checkable right answer.

Four shapes from the LLMCompiler paper (Kim et al., *An LLM Compiler for Parallel Function
Calling*, ICML 2024) and from plandag's own use:

=============  ==========================================================================
``compare2``   HotpotQA-style: two independent lookups, then a comparison written by the
               joiner (the plan has no output).
``movie8``     Movie-Recommendation-style: eight independent lookups, then a ranking
               written by the joiner.
``parallelqa`` ParallelQA-style: four lookups feeding arithmetic, a DAG of depth 3
               (lookups → two sums → a division); the output is assembled by code.
``nfe``        NF-e batch: the stored extract plan (``plandag/extract/nfe/plan.json``)
               over three sample invoices shipped in ``plandag/bench/data``: no model
               call at all for plandag; ReAct reads each file and writes the record.
=============  ==========================================================================

Lookups are local tools (:func:`search_tool`) whose latency and observation size come from
a :class:`World`: the runner draws each lookup's latency once per run (the same for both
agents) and pads each observation to ``observation_chars`` characters of abstract. The
data are made up, so a real model must use the tools to answer.

A workload's :class:`Question` carries its right answer; :meth:`Workload.check` accepts an
answer only when it is right (the plan's output as code assembled it, or a written answer
ending in ``Answer: ...``). A broken world (``World(broken=True)``) breaks a tool on purpose
(the lookups fail; for NF-e, a field path of the stored plan no longer matches) for the
second evaluation set: plandag must replan up to its cap and fail, never report success.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import anyio
from lxml import etree

from plandag.checks.builtins import BUILTIN_CHECKS
from plandag.dag.plan import Plan
from plandag.dag.references import resolve_value
from plandag.errors import PermanentStepError
from plandag.planner.wire import from_wire
from plandag.tools.base import Tool, tool
from plandag.tools.registry import Registry, default_registry

__all__ = [
    "WORKLOADS",
    "AnswerMove",
    "Question",
    "ToolMove",
    "Workload",
    "World",
    "data_files",
    "search_tool",
    "written_answer_field",
]

ANSWER_PATTERN = re.compile(r"Answer:\s*(.+)", re.DOTALL)
"""Where a written answer starts: the text after ``Answer:``."""


@dataclasses.dataclass(frozen=True)
class World:
    """How the tools behave in one run.

    Attributes:
        latency: seconds a lookup of a query takes (the same query, the same seconds for
            both agents in a run).
        observation_chars: characters of abstract padded into each lookup's result.
        broken: break a tool on purpose (lookups raise; NF-e: a path no longer matches).
        typical_seconds: what the lookup tool declares as its typical duration (the
            latency's mean), seconds; a plan's time estimate adds it along its critical path.
    """

    latency: Callable[[str], float] = lambda query: 0.0
    observation_chars: int = 0
    broken: bool = False
    typical_seconds: float = 0.001


@dataclasses.dataclass(frozen=True)
class Question:
    """One question of a workload.

    Attributes:
        goal: the task as both agents get it.
        expected: the right answer (a name, a list of titles, a number, or NF-e fields).
        params: values given with the task (NF-e: the file to read).
    """

    goal: str
    expected: Any
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ToolMove:
    """A ReAct turn that calls ``tool`` with ``input``."""

    tool: str
    input: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class AnswerMove:
    """A ReAct turn that answers with ``text``."""

    text: str


Move = ToolMove | AnswerMove


def _abstract(key: str, chars: int) -> str:
    """``chars`` characters of deterministic filler about ``key`` (an observation's bulk)."""
    if chars <= 0:
        return ""
    sentence = f"{key} is described at length in the reference work, with sources. "
    return (sentence * (chars // len(sentence) + 1))[:chars]


def search_tool(table: Mapping[str, Mapping[str, Any]], world: World, what: str) -> Tool:
    """A local lookup tool named ``search`` over ``table``.

    Args:
        table: records by their exact name.
        world: latency per query, observation size, broken or not.
        what: what the table holds, for the description (``people``, ``movies``).

    Returns:
        An async tool ``search(query: str) -> dict``: the record of ``query`` plus an
        ``abstract`` of ``world.observation_chars`` characters, after ``world.latency(query)``
        seconds.

    Raises:
        PermanentStepError: from the tool: no record named ``query`` (reason
            ``not_found``), or the world is broken (reason ``unavailable``).
    """

    async def search(query: str) -> dict[str, Any]:
        await anyio.sleep(world.latency(query))
        if world.broken:
            raise PermanentStepError(
                "the search service answered 410 Gone (broken on purpose)", reason="unavailable"
            )
        record = table.get(query)
        if record is None:
            raise PermanentStepError(
                f"no entry named {query!r}; names are exact", reason="not_found"
            )
        return {"name": query, **record, "abstract": _abstract(query, world.observation_chars)}

    search.__doc__ = (
        f"Look up one of the {what} by its exact name; returns its record (name, facts, abstract)."
    )
    return tool(typical_seconds=world.typical_seconds)(search)


@tool(inline=True, typical_seconds=0.001)  # a sum of a few numbers: microseconds
def sum_numbers(values: list[float]) -> float:
    """Add a list of numbers; returns the sum."""
    return float(sum(values))


@tool(inline=True, typical_seconds=0.001)  # one division: microseconds
def divide(a: float, b: float, digits: int = 2) -> float:
    """Divide a by b; returns the quotient rounded to ``digits`` decimals."""
    if b == 0:
        raise PermanentStepError("division by zero", reason="invalid_argument")
    return round(a / b, digits)


def written_answer_field(answer: Any) -> str | None:
    """The text after ``Answer:`` in a written answer (first line only), or None."""
    if not isinstance(answer, str):
        return None
    match = ANSWER_PATTERN.search(answer)
    if match is None:
        return None
    return match.group(1).strip().splitlines()[0].strip().rstrip(".")


@dataclasses.dataclass(frozen=True)
class Workload:
    """A benchmark task for both agents.

    Attributes:
        name: the CLI name (``movie8``...).
        title: a short description for the tables.
        questions: the questions of one run (NF-e: one per document).
        plan_wire: the plan a correct planner writes, in the wire format (None when the
            workload runs a stored plan).
        stored_plan: a stored plan run with no planning call (NF-e), else None.
        make_registry: the tools and checks both agents use, in a world.
        write_answer: the written answer a correct model gives from the step results by
            step id (the joiner's, and ReAct's last turn), for plans without output.
        react_moves: ReAct's next move for a question from the observations so far
            (``(tool, input, result)``); None derives it from ``plan_wire``.
        check_answer: whether an answer is right for a question.
        explain: whether an answer is right and what its check found, in one line (the
            user's tasks, ``plandag bench --tasks``); None: :attr:`check_answer` alone.
        prepare: called before each agent's run of a question (the user's tasks note the
            state of a file their check looks for), or None.
    """

    name: str
    title: str
    questions: tuple[Question, ...]
    plan_wire: Mapping[str, Any] | None
    stored_plan: Callable[[World], Plan] | None
    make_registry: Callable[[World], Registry]
    write_answer: Callable[[Mapping[int, Any]], str] | None
    check_answer: Callable[[Question, Any], bool]
    react_moves: Callable[[Question, Sequence[tuple[str, Mapping[str, Any], Any]]], Move] | None = (
        None
    )
    explain: Callable[[Question, Any], tuple[bool, str]] | None = None
    prepare: Callable[[Question], None] | None = None

    @property
    def plan(self) -> Plan | None:
        """``plan_wire`` as a :class:`Plan`, or None."""
        return from_wire(self.plan_wire) if self.plan_wire is not None else None

    def check(self, question: Question, answer: Any) -> bool:
        """Whether ``answer`` is the right answer to ``question`` (never raises)."""
        return self.verdict(question, answer)[0]

    def verdict(self, question: Question, answer: Any) -> tuple[bool, str]:
        """Whether ``answer`` is right, and what the check found (``right``, ``wrong``, or
        :attr:`explain`'s line); never raises."""
        try:
            if self.explain is not None:
                right, detail = self.explain(question, answer)
                return bool(right), detail
            right = bool(self.check_answer(question, answer))
        except Exception as error:
            return False, f"the check raised {type(error).__name__}: {error}"
        return right, "right" if right else "wrong"

    def next_move(
        self, question: Question, observations: Sequence[tuple[str, Mapping[str, Any], Any]]
    ) -> Move:
        """What a correct ReAct model does next, given the observations so far.

        Derived from the plan: its steps one at a time in id order, each argument
        resolved from the observations (what the model read); then the answer: the plan's
        output resolved (``Answer: VALUE``) or :attr:`write_answer`. An observation that
        is an error (a dict with ``error``) is retried once, then the model answers that
        it could not find out.
        """
        if self.react_moves is not None:
            return self.react_moves(question, observations)
        plan = self.plan
        assert plan is not None
        errors = [result for _, _, result in observations if _is_error(result)]
        if errors:
            if len(errors) >= 2:
                return AnswerMove("Answer: unknown (the tool kept failing)")
            tool_name, tool_input, _ = observations[-1]
            return ToolMove(tool_name, tool_input)
        results = {
            step.id: observations[i][2] for i, step in enumerate(plan.steps[: len(observations)])
        }
        if len(observations) < len(plan.steps):
            step = plan.steps[len(observations)]
            args = resolve_value(dict(step.args), results.__getitem__, question.params)
            return ToolMove(step.tool, args)
        if plan.output is not None:
            value = resolve_value(plan.output, results.__getitem__, question.params)
            return AnswerMove(f"Answer: {json.dumps(value, ensure_ascii=False)}")
        assert self.write_answer is not None
        return AnswerMove(self.write_answer(results))


def _is_error(result: Any) -> bool:
    return isinstance(result, Mapping) and set(result) == {"error"}


# -- compare2: HotpotQA-style ----------------------------------------------------------------

PEOPLE: dict[str, dict[str, Any]] = {
    "Marta Lindqvist": {"born": 1931, "occupation": "architect", "country": "Sweden"},
    "Oskar Brandvold": {"born": 1948, "occupation": "composer", "country": "Norway"},
}


def _compare_answer(results: Mapping[int, Any]) -> str:
    first, second = results[1], results[2]
    older = first if first["born"] <= second["born"] else second
    return (
        f"{first['name']} was born in {first['born']} and {second['name']} in "
        f"{second['born']}.\nAnswer: {older['name']}"
    )


def _check_name(question: Question, answer: Any) -> bool:
    return bool(written_answer_field(answer) == question.expected)


COMPARE2 = Workload(
    name="compare2",
    title="2-way comparison (HotpotQA-style)",
    questions=(
        Question(
            "Who was born first, Marta Lindqvist or Oskar Brandvold? Look both up with "
            "search. End your answer with 'Answer: NAME'.",
            "Marta Lindqvist",
        ),
    ),
    plan_wire={
        "g": "Who was born first, Marta Lindqvist or Oskar Brandvold",
        "s": [
            {"i": 1, "t": "search", "a": {"query": "Marta Lindqvist"}, "d": []},
            {"i": 2, "t": "search", "a": {"query": "Oskar Brandvold"}, "d": []},
        ],
    },
    stored_plan=None,
    make_registry=lambda world: Registry([search_tool(PEOPLE, world, "people")], BUILTIN_CHECKS),
    write_answer=_compare_answer,
    check_answer=_check_name,
)

# -- movie8: Movie-Recommendation-style ------------------------------------------------------

MOVIES: dict[str, dict[str, Any]] = {
    "The Salt Harbour": {"year": 1994, "rating": 8.1, "genres": ["drama"]},
    "Nightjar Protocol": {"year": 2003, "rating": 7.4, "genres": ["thriller"]},
    "Copper Orchard": {"year": 1979, "rating": 8.6, "genres": ["drama", "history"]},
    "A Lantern for Mira": {"year": 2011, "rating": 6.9, "genres": ["family"]},
    "Glass Meridian": {"year": 1988, "rating": 7.9, "genres": ["science fiction"]},
    "The Quiet Ferryman": {"year": 2016, "rating": 8.3, "genres": ["drama"]},
    "Paper Comets": {"year": 1999, "rating": 7.1, "genres": ["comedy"]},
    "Under Vesper Hill": {"year": 2007, "rating": 7.7, "genres": ["mystery"]},
}
MOVIE_TITLES = tuple(MOVIES)
MOVIE_RANKING = tuple(sorted(MOVIE_TITLES, key=lambda title: (-MOVIES[title]["rating"], title)))


def _ranking_answer(results: Mapping[int, Any]) -> str:
    found = sorted(results.values(), key=lambda record: (-record["rating"], record["name"]))
    lines = [f"{record['name']}: {record['rating']}" for record in found]
    return "Ratings: " + "; ".join(lines) + "\nAnswer: " + " > ".join(r["name"] for r in found)


def _check_ranking(question: Question, answer: Any) -> bool:
    field = written_answer_field(answer)
    if field is None:
        return False
    return tuple(part.strip() for part in field.split(">")) == tuple(question.expected)


MOVIE8 = Workload(
    name="movie8",
    title="8-way fan-out (Movie-Recommendation-style)",
    questions=(
        Question(
            "Rank these eight movies by rating, highest first: "
            + ", ".join(MOVIE_TITLES)
            + ". Look each one up with search. End your answer with "
            "'Answer: TITLE > TITLE > ...'.",
            MOVIE_RANKING,
        ),
    ),
    plan_wire={
        "g": "Rank eight movies by rating",
        "s": [
            {"i": i, "t": "search", "a": {"query": title}, "d": []}
            for i, title in enumerate(MOVIE_TITLES, start=1)
        ],
    },
    stored_plan=None,
    make_registry=lambda world: Registry([search_tool(MOVIES, world, "movies")], BUILTIN_CHECKS),
    write_answer=_ranking_answer,
    check_answer=_check_ranking,
)

# -- parallelqa: lookups feeding arithmetic, depth 3 -----------------------------------------

REGIONS: dict[str, dict[str, Any]] = {
    "Aldermoor": {"population": 412_000, "area_km2": 1_830.0},
    "Brisket Vale": {"population": 96_500, "area_km2": 742.5},
    "Corran Reach": {"population": 1_254_000, "area_km2": 3_115.0},
    "Dunmere": {"population": 58_200, "area_km2": 1_206.0},
}
REGION_NAMES = tuple(REGIONS)
DENSITY = round(
    sum(r["population"] for r in REGIONS.values()) / sum(r["area_km2"] for r in REGIONS.values()),
    2,
)


def _refs(field: str) -> list[str]:
    return [f"<step_{i}_result.{field}>" for i in range(1, 5)]


def _check_number(question: Question, answer: Any) -> bool:
    if isinstance(answer, bool):
        return False
    if isinstance(answer, int | float):
        return abs(float(answer) - float(question.expected)) <= 0.005
    field = written_answer_field(answer)
    return field is not None and abs(float(field) - float(question.expected)) <= 0.005


PARALLELQA = Workload(
    name="parallelqa",
    title="lookups feeding arithmetic, depth 3 (ParallelQA-style)",
    questions=(
        Question(
            "What is the population density, in people per km² rounded to 2 decimals, of "
            "the regions " + ", ".join(REGION_NAMES) + " taken together (their total "
            "population divided by their total area)? Look each region up with search and "
            "use the math tools. End your answer with 'Answer: NUMBER'.",
            DENSITY,
        ),
    ),
    plan_wire={
        "g": "Population density of four regions together",
        "s": [
            *(
                {"i": i, "t": "search", "a": {"query": name}, "d": []}
                for i, name in enumerate(REGION_NAMES, start=1)
            ),
            {
                "i": 5,
                "t": "sum_numbers",
                "a": {"values": _refs("population")},
                "d": [1, 2, 3, 4],
            },
            {"i": 6, "t": "sum_numbers", "a": {"values": _refs("area_km2")}, "d": [1, 2, 3, 4]},
            {
                "i": 7,
                "t": "divide",
                "a": {"a": "<step_5_result>", "b": "<step_6_result>", "digits": 2},
                "d": [5, 6],
            },
        ],
        "o": "<step_7_result>",
    },
    stored_plan=None,
    make_registry=lambda world: Registry(
        [search_tool(REGIONS, world, "regions"), sum_numbers, divide], BUILTIN_CHECKS
    ),
    write_answer=None,
    check_answer=_check_number,
)

# -- nfe: the stored extract plan over sample invoices ---------------------------------------

NFE_NAMESPACES = {"nfe": "http://www.portalfiscal.inf.br/nfe"}
NFE_FIELDS = {
    "chNFe": "string(//nfe:infNFe/@Id)",
    "CNPJ": "string(//nfe:emit/nfe:CNPJ)",
    "vNF": "string(//nfe:total/nfe:ICMSTot/nfe:vNF)",
}
BROKEN_VNF_PATH = "nfe:total/nfe:ICMSTot/nfe:vNFe"
"""The field path of the broken NF-e world: vNF under a name the layout does not have."""


def data_files() -> tuple[Path, ...]:
    """The sample invoices shipped in ``plandag/bench/data`` (sorted by name)."""
    folder = Path(str(resources.files("plandag.bench").joinpath("data")))
    return tuple(sorted(folder.glob("*.xml")))


def _nfe_fields(xml_text: str) -> dict[str, str]:
    """What a correct model reads from an invoice: the key, emitter CNPJ and vNF."""
    root = etree.fromstring(xml_text.encode("utf-8"))
    fields = {
        name: str(root.xpath(path, namespaces=NFE_NAMESPACES)) for name, path in NFE_FIELDS.items()
    }
    fields["chNFe"] = fields["chNFe"].removeprefix("NFe")
    return fields


def _nfe_expected(path: Path) -> dict[str, str]:
    return _nfe_fields(path.read_bytes().decode("utf-8-sig"))


def _nfe_moves(
    question: Question, observations: Sequence[tuple[str, Mapping[str, Any], Any]]
) -> Move:
    if not observations:
        return ToolMove("read_file", {"path": question.params["input"]})
    result = observations[-1][2]
    if not isinstance(result, str):
        return AnswerMove("Answer: unknown (the file could not be read)")
    fields = _nfe_fields(result.lstrip("\ufeff"))
    return AnswerMove(
        "The invoice's key, emitter and total, read from the XML.\nAnswer: "
        + json.dumps(fields, ensure_ascii=False)
    )


def _check_nfe(question: Question, answer: Any) -> bool:
    expected = question.expected
    if isinstance(answer, Mapping):  # plandag: the checked record
        return (
            answer.get("status") == "ok"
            and answer["ide"]["chNFe"] == expected["chNFe"]
            and answer["emit"]["CNPJ"] == expected["CNPJ"]
            and answer["total"]["vNF"] == expected["vNF"]
        )
    field = written_answer_field(answer)
    if field is None:
        return False
    given = json.loads(field)
    return all(given.get(name) == value for name, value in expected.items())


def _nfe_plan(world: World) -> Plan:
    from plandag.extract.nfe import load_plan_text

    document = json.loads(load_plan_text())
    if world.broken:
        for step in document["steps"]:
            paths = step["args"].get("paths")
            if isinstance(paths, dict) and "vNF" in paths:
                paths["vNF"] = BROKEN_VNF_PATH
    return Plan.model_validate(document)


def _nfe_questions() -> tuple[Question, ...]:
    return tuple(
        Question(
            f"Extract the NF-e invoice in {path.name}: its access key (chNFe, 44 digits), "
            "the emitter's CNPJ and the total vNF, as written in the XML. End your answer "
            'with \'Answer: {"chNFe": ..., "CNPJ": ..., "vNF": ...}\' (JSON strings).',
            _nfe_expected(path),
            {"input": str(path), "index": 0},
        )
        for path in data_files()
    )


NFE = Workload(
    name="nfe",
    title="NF-e batch: stored extract plan vs ReAct (3 invoices)",
    questions=_nfe_questions(),
    plan_wire=None,
    stored_plan=_nfe_plan,
    make_registry=lambda world: default_registry(),
    write_answer=None,
    check_answer=_check_nfe,
    react_moves=_nfe_moves,
)

WORKLOADS: dict[str, Workload] = {
    workload.name: workload for workload in (COMPARE2, MOVIE8, PARALLELQA, NFE)
}
"""Every workload by name, in the order the benchmark runs them."""
