"""The fields a contract extraction asks for: the 41 CUAD v1 categories, or the user's own.

**CUAD** (Hendrycks, Burns, Chen, Ball, "CUAD: An Expert-Annotated NLP Dataset for Legal
Contract Review", NeurIPS 2021; The Atticus Project, CC BY 4.0) labels 41 categories. Their
names here are CUAD's own, spelled exactly as in its ``master_clauses.csv`` (and in the keys
of a labels file such as ``cuad_labels.jsonl``); their descriptions follow CUAD's category
descriptions. The answer categories have a type of their own (``Document Name`` and
``Governing Law`` ``text``, ``Parties`` ``parties``, the three dates ``date``, ``Renewal
Term`` and ``Notice Period To Terminate Renewal`` ``duration``); the other 33 are clause
categories (``clause``: the passages are the evidence, the answer is ``Yes`` or ``No``, as in
CUAD's labels).

**A fields file** (``--fields FIELDS.toml``) lists the user's own fields::

    [[field]]
    name = "Term"
    description = "How long the contract runs from its start"
    type = "duration"
    group = "dates"        # optional: fields of one group are asked in one model call

Types (:data:`FIELD_TYPES`): ``text``, ``date`` (ISO 8601), ``parties`` (names with roles),
``duration`` (months or days), ``number``, ``yes_no`` and ``clause``. A file that is not
valid TOML, or whose fields break these rules, raises :class:`FieldsError` naming the file,
the line (for syntax) or the field, and what to write instead.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final, Literal

from plandag.errors import InputError

__all__ = [
    "CUAD_FIELDS",
    "DEFAULT_GROUP_SIZE",
    "FIELD_TYPES",
    "FieldSpec",
    "FieldType",
    "FieldsError",
    "field_groups",
    "load_fields",
    "parse_fields",
]

FieldType = Literal["text", "date", "parties", "duration", "number", "yes_no", "clause"]

FIELD_TYPES: Final[dict[str, str]] = {
    "text": "a short text answer (a name, a jurisdiction)",
    "date": "a calendar date, normalised to ISO 8601 (YYYY-MM-DD)",
    "parties": "the parties, each a name with its role",
    "duration": "a length of time, normalised to whole months or days",
    "number": "a number (an amount, a count)",
    "yes_no": "Yes or No, with the passage that shows it",
    "clause": "the passages that make up a clause; the answer is Yes when one is found",
}
"""Each field type and what its values are."""

DEFAULT_GROUP_SIZE: Final = 8
"""Fields asked in one model call when a fields file gives no groups."""

_FIELD_KEYS: Final = frozenset({"name", "description", "type", "group"})


class FieldsError(InputError):
    """A fields file (``--fields FIELDS.toml``) that cannot be used; the message says what,
    where (the file, the line or the field) and what to write instead."""


@dataclasses.dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field to extract.

    Attributes:
        name: the field's name, the key of the record's ``fields``.
        description: what it is, as the model is told.
        type: one of :data:`FIELD_TYPES`.
        group: fields of one group are asked in one model call per chunk.
    """

    name: str
    description: str
    type: FieldType
    group: str

    def as_dict(self) -> dict[str, str]:
        """``{"name", "description", "type"}``, as a step's arguments carry it."""
        return {"name": self.name, "description": self.description, "type": self.type}


def _cuad(group: str, rows: Iterable[tuple[str, FieldType, str]]) -> list[FieldSpec]:
    return [FieldSpec(name, description, kind, group) for name, kind, description in rows]


CUAD_FIELDS: Final[tuple[FieldSpec, ...]] = tuple(
    _cuad(
        "basics",
        [
            ("Document Name", "text", "The name of the contract (its title)."),
            ("Parties", "parties", "The two or more parties who signed the contract."),
            ("Agreement Date", "date", "The date of the contract."),
            ("Effective Date", "date", "The date when the contract is effective."),
            (
                "Expiration Date",
                "date",
                "On what date will the contract's initial term expire?",
            ),
            (
                "Renewal Term",
                "duration",
                "What is the renewal term after the initial term expires? This includes "
                "automatic extensions and unilateral extensions with prior notice.",
            ),
            (
                "Notice Period To Terminate Renewal",
                "duration",
                "What is the notice period required to terminate renewal?",
            ),
            (
                "Governing Law",
                "text",
                "Which state/country's law governs the interpretation of the contract? "
                "The value is the jurisdiction's name.",
            ),
        ],
    )
    + _cuad(
        "competition",
        [
            (
                "Most Favored Nation",
                "clause",
                "Is there a clause that if a third party gets better terms on the licensing "
                "or sale of technology/goods/services described in the contract, the buyer "
                "of such technology/goods/services under the contract shall be entitled to "
                "those better terms?",
            ),
            (
                "Competitive Restriction Exception",
                "clause",
                "This category includes the exceptions or carveouts to Non-Compete, "
                "Exclusivity and No-Solicit of Customers.",
            ),
            (
                "Non-Compete",
                "clause",
                "Is there a restriction on the ability of a party to compete with the "
                "counterparty or operate in a certain geography or business or technology "
                "sector?",
            ),
            (
                "Exclusivity",
                "clause",
                "Is there an exclusive dealing commitment with the counterparty? This "
                "includes a commitment to procure all requirements from one party of certain "
                "technology, goods, or services or a prohibition on licensing or selling "
                "technology, goods or services to third parties, or a prohibition on "
                "collaborating or working with other parties, whether during the contract or "
                "after the contract ends (or both).",
            ),
            (
                "No-Solicit Of Customers",
                "clause",
                "Is a party restricted from contracting or soliciting customers or partners "
                "of the counterparty, whether during the contract or after the contract ends "
                "(or both)?",
            ),
            (
                "No-Solicit Of Employees",
                "clause",
                "Is there a restriction on a party's soliciting or hiring employees and/or "
                "contractors from the counterparty, whether during the contract or after the "
                "contract ends (or both)?",
            ),
            (
                "Non-Disparagement",
                "clause",
                "Is there a requirement on a party not to disparage the counterparty?",
            ),
        ],
    )
    + _cuad(
        "commerce",
        [
            (
                "Termination For Convenience",
                "clause",
                "Can a party terminate this contract without cause (solely by giving a "
                "notice and allowing a waiting period to expire)?",
            ),
            (
                "Rofr/Rofo/Rofn",
                "clause",
                "Is there a clause granting one party a right of first refusal, right of "
                "first offer or right of first negotiation to purchase, license, market, or "
                "distribute equity interest, technology, assets, products or services?",
            ),
            (
                "Change Of Control",
                "clause",
                "Does one party have the right to terminate or is consent or notice required "
                "of the counterparty if such party undergoes a change of control, such as a "
                "merger, stock sale, transfer of all or substantially all of its assets or "
                "business, or assignment by operation of law?",
            ),
            (
                "Anti-Assignment",
                "clause",
                "Is consent or notice required of a party if the contract is assigned to a "
                "third party?",
            ),
            (
                "Revenue/Profit Sharing",
                "clause",
                "Is one party required to share revenue or profit with the counterparty for "
                "any technology, goods, or services?",
            ),
            (
                "Price Restrictions",
                "clause",
                "Is there a restriction on the ability of a party to raise or reduce prices "
                "of technology, goods, or services provided?",
            ),
            (
                "Minimum Commitment",
                "clause",
                "Is there a minimum order size or minimum amount or units per-time period "
                "that one party must buy from the counterparty under the contract?",
            ),
            (
                "Volume Restriction",
                "clause",
                "Is there a fee increase or consent requirement, etc. if one party's use of "
                "the product/services exceeds certain threshold?",
            ),
        ],
    )
    + _cuad(
        "licensing",
        [
            (
                "Ip Ownership Assignment",
                "clause",
                "Does intellectual property created by one party become the property of the "
                "counterparty, either per the terms of the contract or upon the occurrence "
                "of certain events?",
            ),
            (
                "Joint Ip Ownership",
                "clause",
                "Is there any clause providing for joint or shared ownership of intellectual "
                "property between the parties to the contract?",
            ),
            (
                "License Grant",
                "clause",
                "Does the contract contain a license granted by one party to its counterparty?",
            ),
            (
                "Non-Transferable License",
                "clause",
                "Does the contract limit the ability of a party to transfer the license "
                "being granted to a third party?",
            ),
            (
                "Affiliate License-Licensor",
                "clause",
                "Does the contract contain a license grant by affiliates of the licensor or "
                "that includes intellectual property of affiliates of the licensor?",
            ),
            (
                "Affiliate License-Licensee",
                "clause",
                "Does the contract contain a license grant to a licensee (incl. "
                "sublicensor) and the affiliates of such licensee/sublicensor?",
            ),
            (
                "Unlimited/All-You-Can-Eat-License",
                "clause",
                'Is there a clause granting one party an "enterprise," "all you can eat" or '
                "unlimited usage license?",
            ),
            (
                "Irrevocable Or Perpetual License",
                "clause",
                "Does the contract contain a license grant that is irrevocable or perpetual?",
            ),
            (
                "Source Code Escrow",
                "clause",
                "Is one party required to deposit its source code into escrow with a third "
                "party, which can be released to the counterparty upon the occurrence of "
                "certain events (bankruptcy, insolvency, etc.)?",
            ),
        ],
    )
    + _cuad(
        "liability",
        [
            (
                "Post-Termination Services",
                "clause",
                "Is a party subject to obligations after the termination or expiration of a "
                "contract, including any post-termination transition, payment, transfer of "
                "IP, wind-down, last-buy, or similar commitments?",
            ),
            (
                "Audit Rights",
                "clause",
                "Does a party have the right to audit the books, records, or physical "
                "locations of the counterparty to ensure compliance with the contract?",
            ),
            (
                "Uncapped Liability",
                "clause",
                "Is a party's liability uncapped upon the breach of its obligation in the "
                "contract? This also includes uncapped liability for a particular type of "
                "breach such as IP infringement or breach of confidentiality obligation.",
            ),
            (
                "Cap On Liability",
                "clause",
                "Does the contract include a cap on liability upon the breach of a party's "
                "obligation? This includes time limitation for the counterparty to bring "
                "claims or maximum amount for recovery.",
            ),
            (
                "Liquidated Damages",
                "clause",
                "Does the contract contain a clause that would award either party liquidated "
                "damages for breach or a fee upon the termination of a contract "
                "(termination fee)?",
            ),
            (
                "Warranty Duration",
                "clause",
                "What is the duration of any warranty against defects or errors in "
                "technology, products, or services provided under the contract?",
            ),
            (
                "Insurance",
                "clause",
                "Is there a requirement for insurance that must be maintained by one party "
                "for the benefit of the counterparty?",
            ),
            (
                "Covenant Not To Sue",
                "clause",
                "Is a party restricted from contesting the validity of the counterparty's "
                "ownership of intellectual property or otherwise bringing a claim against "
                "the counterparty for matters unrelated to the contract?",
            ),
            (
                "Third Party Beneficiary",
                "clause",
                "Is there a non-contracting party who is a beneficiary to some or all of the "
                "clauses in the contract and therefore can enforce its rights against a "
                "contracting party?",
            ),
        ],
    )
)
"""The 41 CUAD v1 categories in CUAD's order, in five groups of 7 to 9 (one model call per
group and chunk): ``basics`` (the answer categories), ``competition``, ``commerce``,
``licensing``, ``liability``."""


def field_groups(fields: Sequence[FieldSpec]) -> list[list[FieldSpec]]:
    """The fields by group, groups in the order they first appear, fields in given order."""
    groups: dict[str, list[FieldSpec]] = {}
    for spec in fields:
        groups.setdefault(spec.group, []).append(spec)
    return list(groups.values())


def load_fields(spec: str | Path | None) -> tuple[FieldSpec, ...]:
    """The fields for ``--fields``: ``cuad`` (or None) → :data:`CUAD_FIELDS`; a path → the
    fields of that TOML file (see :func:`parse_fields`).

    Raises:
        FieldsError: the file cannot be read, is not TOML, or its fields are unusable.
    """
    if spec is None or str(spec) == "cuad":
        return CUAD_FIELDS
    path = Path(spec)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FieldsError(
            f"--fields {path}: no such file; give cuad (the 41 CUAD categories) or a "
            "FIELDS.toml file"
        ) from None
    except OSError as error:
        raise FieldsError(f"--fields {path}: cannot read it ({error.strerror or error})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise FieldsError(
            f"{path}: not UTF-8 text (byte {error.start}); save the fields file as UTF-8"
        ) from None
    return parse_fields(text, str(path))


def parse_fields(text: str, source: str = "FIELDS.toml") -> tuple[FieldSpec, ...]:
    """The fields of a fields file's text.

    Args:
        text: TOML with one ``[[field]]`` table per field: ``name`` (unique, case
            ignored), ``description`` (what the model is told), ``type`` (one of
            :data:`FIELD_TYPES`) and optionally ``group`` (fields of one group are asked
            in one model call; without groups, every :data:`DEFAULT_GROUP_SIZE` fields
            make a group).
        source: the file's name, for messages.

    Returns:
        The fields in file order.

    Raises:
        FieldsError: not TOML (with the line and column), no ``[[field]]``, another
            top-level key, or a field with a missing, empty, unknown or duplicated key.
    """
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise FieldsError(
            f"{source}: not valid TOML: {error}; each field is a [[field]] table with "
            'name = "...", description = "..." and type = "..."'
        ) from None
    others = sorted(set(document) - {"field"})
    if others:
        raise FieldsError(
            f"{source}: unknown top-level key(s) {', '.join(others)}; the file holds only "
            '[[field]] tables (name = "...", description = "...", type = "...")'
        )
    tables = document.get("field")
    if not isinstance(tables, list) or not tables:
        raise FieldsError(
            f"{source}: no [[field]] table; write one per field, e.g. "
            '[[field]] / name = "Term" / description = "How long the contract runs" / '
            'type = "duration"'
        )
    fields: list[FieldSpec] = []
    seen: dict[str, int] = {}
    for number, table in enumerate(tables, start=1):
        fields.append(_field(table, number, source, seen))
    if not any(isinstance(t, dict) and "group" in t for t in tables):
        fields = [
            dataclasses.replace(spec, group=f"fields {index // DEFAULT_GROUP_SIZE + 1}")
            for index, spec in enumerate(fields)
        ]
    return tuple(fields)


def _field(table: Any, number: int, source: str, seen: dict[str, int]) -> FieldSpec:
    where = f"{source}: field {number}"
    if not isinstance(table, dict):
        raise FieldsError(
            f"{where} is not a table; write it as [[field]] with name, description, type"
        )
    name = table.get("name")
    if isinstance(name, str) and name.strip():
        where += f" ({name.strip()!r})"
    unknown = sorted(set(table) - _FIELD_KEYS)
    if unknown:
        raise FieldsError(
            f"{where}: unknown key(s) {', '.join(unknown)}; a field has name, description, "
            "type and optionally group"
        )
    for key in ("name", "description", "type"):
        value = table.get(key)
        if value is None:
            raise FieldsError(f'{where}: {key} is missing; add {key} = "..."')
        if not isinstance(value, str) or not value.strip():
            raise FieldsError(f"{where}: {key} must be a non-empty string, not {value!r}")
    kind = table["type"].strip()
    if kind not in FIELD_TYPES:
        raise FieldsError(
            f"{where}: type {kind!r} is not one of {', '.join(FIELD_TYPES)}; pick the one "
            "closest to the values you want"
        )
    group = table.get("group", "fields")
    if not isinstance(group, str) or not group.strip():
        raise FieldsError(f"{where}: group must be a non-empty string, not {group!r}")
    clean = " ".join(table["name"].split())
    earlier = seen.get(clean.casefold())
    if earlier is not None:
        raise FieldsError(
            f"{where}: the name is already used by field {earlier} (names are compared "
            "ignoring case); give each field its own name"
        )
    seen[clean.casefold()] = number
    return FieldSpec(clean, " ".join(table["description"].split()), kind, group.strip())
