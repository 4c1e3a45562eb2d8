"""Fields: the 41 CUAD categories by default, or the user's own from a TOML file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plandag.jobs.contracts.fields import (
    CUAD_FIELDS,
    FieldsError,
    FieldSpec,
    field_groups,
    load_fields,
    parse_fields,
)


def test_the_cuad_fields_are_the_label_keys_in_order(contracts_dir: Path) -> None:
    with (contracts_dir / "cuad_labels.jsonl").open(encoding="utf-8") as handle:
        labels = [json.loads(line) for line in handle]
    for label in labels:
        assert [spec.name for spec in CUAD_FIELDS] == list(label["labels"])
    assert len(CUAD_FIELDS) == 41
    types = {spec.name: spec.type for spec in CUAD_FIELDS if spec.type != "clause"}
    assert types == {
        "Document Name": "text",
        "Parties": "parties",
        "Agreement Date": "date",
        "Effective Date": "date",
        "Expiration Date": "date",
        "Renewal Term": "duration",
        "Notice Period To Terminate Renewal": "duration",
        "Governing Law": "text",
    }
    assert [len(group) for group in field_groups(CUAD_FIELDS)] == [8, 7, 8, 9, 9]


def test_cuad_is_the_default_and_the_word_cuad_selects_it() -> None:
    assert load_fields(None) is CUAD_FIELDS
    assert load_fields("cuad") is CUAD_FIELDS


def test_a_fields_file_gives_the_users_fields(tmp_path: Path) -> None:
    path = tmp_path / "fields.toml"
    path.write_text(
        '[[field]]\nname = "Prazo"\ndescription = "Duração do contrato"\ntype = "duration"\n'
        'group = "datas"\n\n[[field]]\nname = "Foro"\ndescription = "Comarca eleita"\n'
        'type = "text"\n',
        encoding="utf-8",
    )
    assert load_fields(path) == (
        FieldSpec("Prazo", "Duração do contrato", "duration", "datas"),
        FieldSpec("Foro", "Comarca eleita", "text", "fields"),
    )


def test_without_groups_every_eight_fields_make_a_group() -> None:
    text = "".join(
        f'[[field]]\nname = "F{n}"\ndescription = "d"\ntype = "text"\n' for n in range(10)
    )
    assert [len(group) for group in field_groups(parse_fields(text))] == [8, 2]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[[field]]\nname = "A"\ndescription = \n',
            "FIELDS.toml: not valid TOML: Invalid value \\(at line 3, column 15\\)",
        ),
        ("title = 'x'\n", "unknown top-level key\\(s\\) title"),
        ("", "no \\[\\[field\\]\\] table"),
        ('[[field]]\nname = "A"\ntype = "text"\n', "field 1 \\('A'\\): description is missing"),
        (
            '[[field]]\nname = "A"\ndescription = "d"\ntype = "money"\n',
            "field 1 \\('A'\\): type 'money' is not one of text, date, parties",
        ),
        (
            '[[field]]\nname = "A"\ndescription = "d"\ntype = "text"\nkind = "x"\n',
            "unknown key\\(s\\) kind",
        ),
        (
            '[[field]]\nname = "Term"\ndescription = "d"\ntype = "text"\n'
            '[[field]]\nname = "term"\ndescription = "d"\ntype = "date"\n',
            "field 2 \\('term'\\): the name is already used by field 1",
        ),
        ('[[field]]\nname = 3\ndescription = "d"\ntype = "text"\n', "name must be a non-empty"),
        ("field = 3\n", "no \\[\\[field\\]\\] table"),
    ],
)
def test_a_bad_fields_file_says_what_where_and_what_to_do(text: str, message: str) -> None:
    with pytest.raises(FieldsError, match=message):
        parse_fields(text)


def test_a_missing_fields_file_names_the_choices(tmp_path: Path) -> None:
    with pytest.raises(FieldsError, match="no such file; give cuad"):
        load_fields(tmp_path / "nope.toml")
