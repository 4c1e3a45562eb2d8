"""The offline model's answers: schema-valid, quotes copied from the request's documents,
values read from the quote or left out, plans that compile against the run's tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from plandag.executors.data import quote_data
from plandag.jobs.contracts.fields import CUAD_FIELDS, FieldSpec
from plandag.jobs.contracts.plan import group_prompt, group_schema
from plandag.jobs.research.citations import ANSWER_SCHEMA
from plandag.models import LLMRequest
from plandag.planner.prompt import system_prompt, user_prompt
from plandag.planner.schema import plan_json_schema
from plandag.planner.wire import compile_wire
from plandag.testing.offline import OfflineModel, extract_sentences, subquestions_of
from plandag.tools.registry import default_registry

TEXT = (
    "This Supply Agreement is effective as of March 3, 2021 between Acme Corp and Beta LLC. "
    "The agreement shall be governed by the laws of the State of Delaware. "
    "The initial term of this agreement is 24 months from the effective date. "
    "Either party may terminate this agreement upon thirty days written notice."
)


def ask(model: OfflineModel, prompt: str, schema: Any = None, system: str = "") -> Any:
    text = model(
        LLMRequest(
            model="offline-extractive",
            system=system,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=4096,
            json_schema=schema,
        )
    )
    return json.loads(text) if schema is not None else text


def test_sentences_are_substrings_of_the_text() -> None:
    sentences = extract_sentences(TEXT)
    assert len(sentences) == 4
    assert all(sentence in TEXT for sentence in sentences)


def test_subquestions_come_from_the_question() -> None:
    found = subquestions_of("What is a faction; and why can its causes not be removed?")
    assert [item.text for item in found] == [
        "What is a faction?",
        "Why can its causes not be removed?",
    ]
    assert found[0].query == "faction"
    single = subquestions_of("Where do bees live?")
    assert 2 <= len(single) <= 5


def test_a_research_answer_quotes_its_chunks_word_for_word() -> None:
    chunks = {"chunks": [{"chunk_id": "doc.md#1", "text": TEXT}]}
    prompt = (
        "Answer this subquestion from the chunks in the data only: Which law governs the "
        "agreement? Give each claim with citations.\n" + quote_data("step 2 result", chunks)
    )
    answer = ask(OfflineModel(), prompt, ANSWER_SCHEMA)
    jsonschema.validate(answer, ANSWER_SCHEMA)
    citation = answer["claims"][0]["citations"][0]
    assert citation["chunk_id"] == "doc.md#1"
    assert (
        citation["quote"] == "The agreement shall be governed by the laws of the State of Delaware."
    )


FIELDS = [
    FieldSpec("Effective Date", "The date the contract takes effect", "date", "g"),
    FieldSpec("Renewal Term", "How long a renewal runs", "duration", "g"),
    FieldSpec("Governing Law", "Which state's law governs the contract", "text", "g"),
    FieldSpec("Anti-Assignment", "Whether consent is needed to assign rights", "clause", "g"),
]


def test_contract_fields_quote_the_excerpt_and_read_values_from_the_quote() -> None:
    schema = group_schema(FIELDS)
    prompt = group_prompt(FIELDS) + "\n" + quote_data("data", {"excerpt": TEXT, "part": "1 of 1"})
    answer = ask(OfflineModel(), prompt, schema)
    jsonschema.validate(answer, schema)
    fields = answer["fields"]
    assert fields["Effective Date"] == [
        {
            "quote": "This Supply Agreement is effective as of March 3, 2021 between Acme Corp "
            "and Beta LLC.",
            "value": "2021-03-03",
        }
    ]
    assert fields["Governing Law"][0]["quote"] in TEXT
    assert fields["Governing Law"][0]["value"] is None  # never a value the quote does not hold
    assert fields["Anti-Assignment"] == []  # not in the excerpt: not found
    for items in fields.values():
        for item in items:
            assert item["quote"] in TEXT


def test_cuad_groups_get_schema_valid_answers() -> None:
    schema = group_schema(CUAD_FIELDS[:10])
    prompt = group_prompt(CUAD_FIELDS[:10]) + "\n" + quote_data("data", {"excerpt": TEXT})
    jsonschema.validate(ask(OfflineModel(), prompt, schema), schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]},
        {
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                "count": {"type": "integer", "minimum": 1},
                "flag": {"type": "boolean"},
                "kind": {"enum": ["a", "b"]},
                "note": {"type": ["string", "null"], "maxLength": 20},
            },
            "required": ["items", "count", "flag", "kind", "note"],
            "additionalProperties": False,
        },
        {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
    ],
)
def test_any_schema_gets_a_valid_answer_from_the_data(schema: dict[str, Any]) -> None:
    prompt = "Summarise the contract.\n" + quote_data("step 1 result", TEXT)
    answer = ask(OfflineModel(), prompt, schema)
    jsonschema.validate(answer, schema)
    if schema.get("type") == "object" and "summary" in schema["properties"]:
        assert answer["summary"] in TEXT


def test_a_plan_uses_the_tools_and_the_files_the_task_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text(TEXT)
    registry = default_registry(resolve_installed=False)
    registry.load_file(Path(__file__).resolve().parents[2] / "examples" / "tools" / "text_tools.py")
    task = "Count the words of notes.txt"
    plan = ask(
        OfflineModel(registry),
        user_prompt(task),
        plan_json_schema(registry),
        system_prompt(registry),
    )
    compiled = compile_wire(plan, registry)
    tools = [step.tool for step in compiled.plan.steps]
    assert tools == ["read_file", "word_count", "llm"]
