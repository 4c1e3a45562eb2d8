"""The contract stand-in models: the perfect one answers with the labelled clauses of each
excerpt in the schema the request carries; the adversarial one alters a set share of those
answers, the same ones whatever order the requests come in."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from plandag.jobs.contracts.fields import CUAD_FIELDS, field_groups
from plandag.jobs.contracts.plan import group_prompt, group_schema
from plandag.testing import (
    ALTERATION_KINDS,
    AdversarialContractsModel,
    MessagesServer,
    PerfectContractsModel,
)
from plandag.testing.contracts import request_schema

_REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def labels() -> Path:
    given = os.environ.get("PLANDAG_SHARED_CONTRACTS")
    candidates = [Path(given)] if given else []
    candidates += [_REPO.parent / "shared/data/contracts", Path("/work/shared/data/contracts")]
    found = next((path for path in candidates if (path / "cuad_labels.jsonl").is_file()), None)
    if found is None:
        pytest.skip("the shared contracts are not here (set PLANDAG_SHARED_CONTRACTS)")
    return found / "cuad_labels.jsonl"


GROUPS = field_groups(CUAD_FIELDS)


def ask(model: PerfectContractsModel, file_part: str, schema: Any = None) -> dict[str, Any]:
    """Every group of one whole contract asked of ``model``: ``{field: items}``."""
    contract = next(c for c in model.contracts if file_part in c.file)
    answers: dict[str, Any] = {}
    for group in GROUPS:
        reply = model.answer(contract.text, 0, schema or group_schema(group), group_prompt(group))
        answers.update(reply["fields"])
    return answers


def test_the_perfect_model_quotes_the_labelled_clauses_with_values_read_from_them(
    labels: Path,
) -> None:
    model = PerfectContractsModel(labels)
    answers = ask(model, "Freecook")
    assert answers["Agreement Date"] == [{"quote": "January 11, 2018", "value": "2018-01-11"}]
    assert answers["Governing Law"] == []
    license_a, _ = answers["License Grant"]
    assert license_a["value"] is None
    assert license_a["quote"].startswith("Client further agrees that Company may use")
    parties = answers["Parties"]
    assert [item["value"] for item in parties] == [
        {"name": "FreeCook", "role": "Client"},
        {"name": "Mitchell's Web Advance, PLC", "role": "Company"},
    ]
    assert parties[0]["quote"] == parties[1]["quote"]
    assert parties[0]["quote"].startswith("FreeCook (hereinafter referred to as")
    # a passage that does not write the label's date: null where the schema allows it
    scout = ask(model, "SCOUTCAM")
    assert [item["value"] for item in scout["Expiration Date"]] == [None]
    assert [item["value"] for item in scout["Effective Date"]] == ["2019-04-01", None]
    trans = ask(model, "TRANSMONTAIGNE")
    assert [item["value"] for item in trans["Agreement Date"]] == ["2019-08"]
    assert [item["value"] for item in trans["Expiration Date"]] == ["until terminated"]


def test_without_null_in_the_schema_the_value_is_the_labels(labels: Path) -> None:
    model = PerfectContractsModel(labels)
    strict = {
        "type": "object",
        "properties": {
            "fields": {
                "type": "object",
                "properties": {
                    "Expiration Date": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "quote": {"type": "string"},
                                "value": {"type": "string"},
                                "note": {"type": ["string", "null"]},
                            },
                            "required": ["quote", "value", "note"],
                            "additionalProperties": False,
                        },
                    }
                },
                "required": ["Expiration Date"],
                "additionalProperties": False,
            }
        },
        "required": ["fields"],
        "additionalProperties": False,
    }
    contract = next(c for c in model.contracts if "SCOUTCAM" in c.file)
    reply = model.answer(contract.text, 0, strict, "")
    (item,) = reply["fields"]["Expiration Date"]
    # the date computed from the term, as a model must give some string; every required key
    assert item["value"] == "2020-04-01"
    assert item["note"] is None


def test_the_schema_is_read_where_the_request_carries_it() -> None:
    schema = {"type": "object", "properties": {"fields": {"type": "object"}}}
    anthropic = {"output_config": {"format": {"type": "json_schema", "schema": schema}}}
    openai = {
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}
    }
    prompt = {
        "messages": [{"role": "user", "content": "Reply ... JSON Schema:\n" + json.dumps(schema)}]
    }
    for body in (anthropic, openai, prompt):
        assert request_schema(body) == schema
    assert request_schema({"messages": [{"role": "user", "content": "Hello"}]}) is None


def test_the_perfect_model_answers_through_the_local_server(labels: Path) -> None:
    from plandag.executors.llm import build_request
    from plandag.models import AnthropicClient

    model = PerfectContractsModel(labels)
    contract = next(c for c in model.contracts if "GRIDIRON" in c.file)
    group = GROUPS[0]
    request = build_request(
        group_prompt(group),
        {"excerpt": contract.text, "part": "1 of 1", "characters": f"0 to {len(contract.text)}"},
        group_schema(group),
        "claude-haiku-4-5",
        4096,
    )

    async def call() -> str:
        client = AnthropicClient(api_key="local", base_url=server.url)
        try:
            return (await client.complete(request)).text
        finally:
            await client.aclose()

    import anyio

    with MessagesServer(default=model) as server:
        reply = json.loads(anyio.run(call))
    assert reply["fields"]["Governing Law"][0]["value"] == "Colorado"
    assert model.calls == {contract.file: 1}


def test_share_zero_alters_nothing_and_share_one_everything(labels: Path) -> None:
    perfect = ask(PerfectContractsModel(labels), "ADURO")
    untouched = AdversarialContractsModel(labels, share=0.0)
    assert ask(untouched, "ADURO") == perfect
    assert untouched.alterations == []
    everything = AdversarialContractsModel(labels, share=1.0)
    altered = ask(everything, "ADURO")
    assert len(everything.alterations) == sum(len(items) for items in perfect.values())
    assert altered != perfect
    assert {a.kind for a in everything.alterations} == set(ALTERATION_KINDS)


def test_the_same_seed_alters_the_same_answers_in_any_order(labels: Path) -> None:
    def run(seed: int, order: list[str]) -> set[tuple[str, str, str, str]]:
        model = AdversarialContractsModel(labels, share=0.5, seed=seed)
        for part in order:
            ask(model, part)
        return {(a.file, a.field, a.kind, a.quote) for a in model.alterations}

    forward = run(7, ["ADURO", "SCOUTCAM", "Freecook"])
    assert forward == run(7, ["Freecook", "SCOUTCAM", "ADURO"])
    assert forward != run(8, ["ADURO", "SCOUTCAM", "Freecook"])


def test_each_alteration_is_what_it_says(labels: Path) -> None:
    model = AdversarialContractsModel(labels, share=1.0, seed=1)
    for part in ("ADURO", "SCOUTCAM", "GRIDIRON", "Zto", "TRANSMONTAIGNE"):
        ask(model, part)
    texts = {c.file: c.text for c in model.contracts}
    flat = {file: " ".join(text.split()) for file, text in texts.items()}
    seen = set()
    for alteration in model.alterations:
        seen.add(alteration.kind)
        quote = " ".join(alteration.quote.split())
        if alteration.kind == "changed_value":
            assert alteration.type not in ("clause", "yes_no")
            assert alteration.quote == alteration.original_quote
            assert alteration.value != alteration.original_value
            assert "Atlantis" in json.dumps(alteration.value) or alteration.type != "text"
        elif alteration.kind == "fabricated_quote":
            assert quote.casefold() not in flat[alteration.file].casefold()
        elif alteration.kind == "generic_quote":
            assert alteration.type in ("clause", "yes_no")
            assert 1 <= len(alteration.quote.split()) <= 2
            assert quote in flat[alteration.file]
        else:
            assert quote in flat[alteration.file]
            assert quote != " ".join(alteration.original_quote.split())
            assert alteration.offsets is not None
    assert seen == set(ALTERATION_KINDS)


def test_bad_settings_are_refused(labels: Path) -> None:
    with pytest.raises(ValueError, match="share must be in"):
        AdversarialContractsModel(labels, share=1.5)
    with pytest.raises(ValueError, match="kinds must be among"):
        AdversarialContractsModel(labels, kinds=("paraphrase",))
