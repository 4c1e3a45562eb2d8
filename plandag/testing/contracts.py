"""Stand-in models for contract extraction: a perfect one built from CUAD-shaped labels, and
an adversarial one that alters a set share of the perfect one's answers.

Both are responders for the local provider servers (:class:`~plandag.testing.MessagesServer`
and :class:`~plandag.testing.ChatCompletionsServer`, ``default=model``), so the requests of
``plandag extract contracts`` reach them through the official SDKs, in any order::

    from plandag.testing import MessagesServer, PerfectContractsModel

    model = PerfectContractsModel(Path("shared/data/contracts/cuad_labels.jsonl"))
    with MessagesServer(default=model) as server:
        ...  # extract contracts with base_url=server.url

**What a request is read for**: the request's data block (``{"excerpt", "part",
"characters": "START to END"}``) gives the excerpt and where it starts; the contract is the
labelled one whose text holds that excerpt there (another gets empty lists). The reply's
schema is the one the request carries (Anthropic ``output_config.format.schema``, OpenAI
``response_format.json_schema.schema``, else the one written in the prompt after ``JSON
Schema:``): the reply has one list per field of its ``fields`` object, and each item's
``value`` takes the shape the item schema allows (null only where the schema allows null).
A field's type is read from the prompt's field list (``- 'Name' (type: ...)``), else from
CUAD's categories by name.

**The perfect model** answers each field with the labelled clauses of that category that lie
in the excerpt (labels joined with ``<omitted>`` as their spans), quoting the excerpt's own
text, with the value a careful model gives, read from the passage it quotes:

* ``clause``: null; ``yes_no``: ``"Yes"``;
* ``date``: the label's date (CUAD's ``M/D/YY``) as ``YYYY-MM-DD``, ``08/[]/2019`` as
  ``2019-08``, ``perpetual`` as ``"until terminated"`` when the passage says so, else
  ``"perpetual"``; when the passage does not write that date (a date computed from a term,
  a passage that only says when the contract takes effect) the value is null where the
  schema allows it, else the label's date;
* ``text``: the label's answer when the passage holds it (case and spacing aside), else null
  where allowed, else the answer; ``duration`` and ``number`` likewise, read from the
  label's answer;
* ``parties``: the label's answer lists the parties (``Name ("Role"); ...``); each is quoted
  with the passage that names it and gives its role, passages close together (and the
  labelled sentences just after them, such as ``each a "Party"``) quoted as one, one item
  per party: ``{"name": the name as the passage writes it, "role": the role}``.

**The adversarial model** gives the same answers except a set ``share`` of the items, each
chosen by a hash of (``seed``, contract, field, quote, value), so the choice does not depend
on the order requests arrive in. A chosen item is altered in one of the ways
(:data:`ALTERATION_KINDS`) that apply to its field:

* ``changed_value`` (every type but ``clause`` and ``yes_no``): the genuine quote with a
  value it does not hold: a date three years later, ``"Atlantis"`` for a text, ``Atlantis
  Holdings, Inc.`` for a party, a duration five months longer, a number ten times larger
  plus seven (each checked not to be written in the quote);
* ``fabricated_quote``: a quote that is in no document (``not`` put after its third word,
  or words added at its end), with the same value;
* ``generic_quote`` (``clause`` and ``yes_no``): the passage's first one or two words;
* ``shifted_offsets``: the passage's window moved by 1 to 12 characters in the excerpt
  (still the document's text), and ``start``/``end`` offsets that are off by some
  characters added to the item when its schema allows more keys.

Every alteration is recorded in :attr:`AdversarialContractsModel.alterations`
(:class:`Alteration`), so a test or a benchmark knows what should have been refused.

The labels are shaped like the CUAD v1 labels of the shared contracts (The Atticus Project,
CUAD v1, CC BY 4.0): ``{"file", "labels": {CATEGORY: {"clauses": [...], "answer": ...}}}``
per line; the contracts are the files they name, in the labels file's folder.
"""

from __future__ import annotations

import calendar
import dataclasses
import hashlib
import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from plandag.testing.script import ScriptedResponse

__all__ = [
    "ALTERATION_KINDS",
    "AdversarialContractsModel",
    "Alteration",
    "LabelledContract",
    "PerfectContractsModel",
    "read_labelled_contracts",
    "request_schema",
]

ALTERATION_KINDS: Final = ("changed_value", "fabricated_quote", "generic_quote", "shifted_offsets")
"""The ways :class:`AdversarialContractsModel` alters an answer (module docstring)."""

_CHANGED_TEXT: Final = "Atlantis"
_CHANGED_PARTY: Final = "Atlantis Holdings, Inc."


@dataclasses.dataclass(frozen=True, slots=True)
class LabelledContract:
    """One contract with its labels.

    Attributes:
        file: its file name, as the labels write it.
        text: its text (UTF-8).
        labels: ``{CATEGORY: {"clauses": [...], "answer": ...}}``.
    """

    file: str
    text: str
    labels: Mapping[str, Mapping[str, Any]]


def read_labelled_contracts(labels: Path, folder: Path | None = None) -> list[LabelledContract]:
    """The contracts a CUAD-shaped labels file names, with their labels.

    Args:
        labels: the labels file (JSON Lines).
        folder: where the contracts are (default: the labels file's folder).

    Raises:
        OSError: the labels file or a contract cannot be read.
        ValueError: a line is not JSON.
    """
    where = labels.parent if folder is None else folder
    contracts = []
    for line in labels.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            text = (where / row["file"]).read_text(encoding="utf-8")
            contracts.append(LabelledContract(row["file"], text, row["labels"]))
    return contracts


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return ""


def _first_user_text(body: Mapping[str, Any]) -> str:
    for message in body.get("messages") or []:
        if isinstance(message, dict) and message.get("role") == "user":
            return _message_text(message.get("content"))
    return ""


def request_schema(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JSON Schema a request asks its reply to follow: Anthropic's
    ``output_config.format.schema`` (or ``output_format.schema``), OpenAI's
    ``response_format.json_schema.schema``, else the schema written in the first user
    message after ``JSON Schema:``; None when there is none."""
    for path in (("output_config", "format", "schema"), ("output_format", "schema")):
        found: Any = body
        for key in path:
            found = found.get(key) if isinstance(found, Mapping) else None
        if isinstance(found, Mapping):
            return found
    response_format = body.get("response_format")
    if isinstance(response_format, Mapping):
        wrapped = response_format.get("json_schema")
        inner = wrapped.get("schema") if isinstance(wrapped, Mapping) else None
        if isinstance(inner, Mapping):
            return inner
    text = _first_user_text(body)
    if "JSON Schema:\n" in text:
        try:
            schema = json.loads(text.rsplit("JSON Schema:\n", 1)[1])
        except ValueError:
            return None
        return schema if isinstance(schema, Mapping) else None
    return None


# -- reading what the request asks --------------------------------------------------------


_FIELD_LINE: Final = re.compile(r"^- (['\"])(?P<name>.+?)\1 \((?P<type>\w+):", re.MULTILINE)


def _field_types(prompt: str) -> dict[str, str]:
    types = {match["name"]: match["type"] for match in _FIELD_LINE.finditer(prompt)}
    if types:
        return types
    from plandag.jobs.contracts.fields import CUAD_FIELDS

    return {spec.name: spec.type for spec in CUAD_FIELDS}


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    reference = schema.get("$ref")
    if isinstance(reference, str) and reference.startswith("#/"):
        found: Any = root
        for part in reference[2:].split("/"):
            found = found.get(part) if isinstance(found, Mapping) else None
        if isinstance(found, Mapping):
            return found
    return schema


def _branches(schema: Mapping[str, Any], root: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    schema = _resolve(schema, root)
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return [_resolve(branch, root) for branch in schema[key] if isinstance(branch, Mapping)]
    return [schema]


def _types(schema: Mapping[str, Any], root: Mapping[str, Any]) -> set[str]:
    types: set[str] = set()
    for branch in _branches(schema, root):
        kind = branch.get("type")
        if isinstance(kind, str):
            types.add(kind)
        elif isinstance(kind, list):
            types.update(str(item) for item in kind)
        elif "enum" in branch:
            types.update("null" if item is None else "string" for item in branch["enum"])
        elif "properties" in branch:
            types.add("object")
    return types


def _conform(value: Any, schema: Mapping[str, Any], root: Mapping[str, Any]) -> Any:
    """``value`` shaped for ``schema``: an object gets null for each required key it lacks
    and loses the keys the schema does not allow (strict schemas require every key)."""
    if not isinstance(value, dict):
        return value
    branch = next(
        (b for b in _branches(schema, root) if "properties" in b or b.get("type") == "object"),
        None,
    )
    if branch is None:
        return value
    properties = branch.get("properties") or {}
    shaped = {
        key: _conform(item, properties[key], root) if key in properties else item
        for key, item in value.items()
        if key in properties or branch.get("additionalProperties", True) is not False
    }
    for key in branch.get("required") or []:
        shaped.setdefault(key, None)
    return shaped


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    type: str
    item_schema: Mapping[str, Any]
    root: Mapping[str, Any]

    @property
    def value_schema(self) -> Mapping[str, Any]:
        item = _resolve(self.item_schema, self.root)
        properties = item.get("properties") or {}
        value = properties.get("value")
        return value if isinstance(value, Mapping) else {}

    @property
    def allows_null(self) -> bool:
        return "null" in _types(self.value_schema, self.root)

    @property
    def allows_more_keys(self) -> bool:
        item = _resolve(self.item_schema, self.root)
        return item.get("additionalProperties", True) is not False

    def item(self, quote: str, value: Any, **more: Any) -> dict[str, Any]:
        shaped = _conform({"quote": quote, "value": value, **more}, self.item_schema, self.root)
        assert isinstance(shaped, dict)
        return shaped


def _fields_of(schema: Mapping[str, Any], prompt: str) -> list[_Field]:
    root = schema
    fields_schema = _resolve((schema.get("properties") or {}).get("fields") or {}, root)
    properties = fields_schema.get("properties") or {}
    names = list(properties) or list(fields_schema.get("required") or [])
    types = _field_types(prompt)
    found = []
    for name in names:
        array = _resolve(properties.get(name) or {}, root)
        found_items = array.get("items")
        items: Mapping[str, Any] = found_items if isinstance(found_items, Mapping) else {}
        kind = types.get(name)
        if kind is None:
            value = ((_resolve(items, root).get("properties") or {}).get("value")) or {}
            kind = "clause" if _types(value, root) == {"null"} else "text"
        found.append(_Field(name, kind, items, root))
    return found


# -- finding and writing -----------------------------------------------------------------------


def _search(text: str, passage: str, start: int = 0) -> tuple[int, int] | None:
    """Where ``passage`` is in ``text`` from ``start``, its whitespace runs matching any
    whitespace and its letters either case; None when it is not there."""
    words = passage.split()
    if not words:
        return None
    pattern = re.compile(r"\s+".join(re.escape(word) for word in words), re.IGNORECASE)
    found = pattern.search(text, start)
    return None if found is None else (found.start(), found.end())


def _flat(text: str) -> str:
    return " ".join(text.casefold().split())


def _loose(text: str) -> str:
    return "".join(character for character in text.casefold() if character.isalnum())


def _spans(clauses: Iterable[Any]) -> list[str]:
    spans = []
    for clause in clauses:
        for span in str(clause).split("<omitted>"):
            if span.strip():
                spans.append(span.strip())
    return spans


_LABEL_DATE: Final = re.compile(r"(\d{1,2})/(\d{1,2})/(\d{2}|\d{4})")
_LABEL_MONTH: Final = re.compile(r"(\d{1,2})/\[\s*\]/(\d{4})")


def _year(text: str) -> int:
    year = int(text)
    if len(text) == 2:
        year += 2000 if year < 69 else 1900
    return year


def _date_forms(year: int, month: int, day: int | None) -> list[str]:
    """How a contract may write a date (or a month when ``day`` is None), flattened."""
    name = calendar.month_name[month]
    short = calendar.month_abbr[month]
    if day is None:
        return [
            _flat(form) for form in (f"{name} {year}", f"{name} __, {year}", f"{name} [ ], {year}")
        ]
    forms = [
        f"{name} {day}, {year}",
        f"{name} {day},{year}",
        f"{name} {day} {year}",
        f"{short}. {day}, {year}",
        f"{day} {name} {year}",
        f"{day} {name}, {year}",
        f"{month}/{day}/{year}",
        f"{month}/{day}/{year % 100:02d}",
        f"{month:02d}/{day:02d}/{year}",
        f"{year}-{month:02d}-{day:02d}",
    ]
    for suffix in ("st", "nd", "rd", "th"):
        forms.append(f"{day}{suffix} day of {name}, {year}")
        forms.append(f"{day}{suffix} day of {name} {year}")
    return [_flat(form) for form in forms]


def _written(forms: Iterable[str], passage: str) -> bool:
    flat = _flat(passage)
    return any(form in flat for form in forms)


_UNTIL_TERMINATED: Final = re.compile(r"\buntil\b[^.;]*\bterminat", re.IGNORECASE)
_PERPETUAL: Final = re.compile(r"\b(?:perpetu\w*|indefinite\w*)\b", re.IGNORECASE)


def _date_value(answer: str, passage: str) -> tuple[Any, bool]:
    """The date value for ``passage`` from the label's ``answer``, and whether the passage
    writes it."""
    text = answer.strip()
    if text.lower() == "perpetual":
        if _UNTIL_TERMINATED.search(passage):
            return "until terminated", True
        return "perpetual", _PERPETUAL.search(passage) is not None
    found = _LABEL_DATE.fullmatch(text)
    if found is not None:
        month, day, year = int(found[1]), int(found[2]), _year(found[3])
        try:
            iso = f"{year:04d}-{month:02d}-{day:02d}"
            calendar.weekday(year, month, day)
        except ValueError:
            return None, False
        return iso, _written(_date_forms(year, month, day), passage)
    found = _LABEL_MONTH.fullmatch(text)
    if found is not None:
        month, year = int(found[1]), int(found[2])
        if 1 <= month <= 12:
            return f"{year:04d}-{month:02d}", _written(_date_forms(year, month, None), passage)
    return None, False


_DURATION_LABEL: Final = re.compile(r"(\d+)\s*(year|month|week|day)s?", re.IGNORECASE)


def _duration_value(answer: str, passage: str) -> tuple[Any, bool]:
    text = answer.strip()
    if text.lower() == "perpetual":
        return "perpetual", _PERPETUAL.search(passage) is not None
    found = _DURATION_LABEL.search(text)
    if found is None:
        return None, False
    count, unit = int(found[1]), found[2].lower()
    value = (
        {"months": count * 12}
        if unit == "year"
        else {"months": count}
        if unit == "month"
        else {"days": count * 7}
        if unit == "week"
        else {"days": count}
    )
    held = re.search(rf"\b{count}\b[^.;]{{0,20}}\b{unit}", passage, re.IGNORECASE) is not None
    return value, held


_PARTY: Final = re.compile(r"([^;()]+?)\s*\(\s*[\"“]([^\"”]+)[\"”]\s*\)")


def _party_passages(
    excerpt: str, answer: str, clauses: Sequence[str]
) -> list[tuple[int, int, list[dict[str, Any]]]]:
    """The passages of ``excerpt`` naming the label's parties, each with its parties."""
    placed: list[tuple[int, int, dict[str, Any]]] = []
    for name, role in _PARTY.findall(answer):
        name = name.strip()
        written = next((c for c in clauses if _loose(c) == _loose(name)), None)
        where = _search(excerpt, written or name)
        if where is None:
            written = next((c for c in clauses if _loose(c).startswith(_loose(name))), None)
            where = None if written is None else _search(excerpt, written)
        if where is None:
            continue
        start, end = where
        as_written = excerpt[start:end]
        after = excerpt.find(role, end, end + 400)
        before = excerpt.rfind(role, max(0, start - 150), start)
        if after >= 0 and (before < 0 or after - end <= start - before):
            end = after + len(role)
        elif before >= 0:
            start = before
        while end < len(excerpt) and excerpt[end] in "\"”')" and end - start < 2000:
            end += 1
        placed.append((start, end, {"name": as_written, "role": role}))
    placed.sort(key=lambda item: item[0])
    passages: list[tuple[int, int, list[dict[str, Any]]]] = []
    for start, end, party in placed:
        if passages and start - passages[-1][1] <= 250:
            first, last, parties = passages[-1]
            passages[-1] = (first, max(last, end), [*parties, party])
        else:
            passages.append((start, end, [party]))
    # the labelled sentences just after a passage (each "a Party", collectively "Parties")
    for index, (start, end, parties) in enumerate(passages):
        for clause in clauses:
            if _search(excerpt[start:end], clause) is not None:
                continue
            where = _search(excerpt, clause, end)
            if where is not None and where[0] <= end + 300:
                end = max(end, where[1])
        passages[index] = (start, end, parties)
    return passages


def _digest(*parts: Any) -> int:
    joined = "\x1f".join(json.dumps(part, sort_keys=True, default=str) for part in parts)
    return int.from_bytes(hashlib.sha256(joined.encode("utf-8")).digest()[:8], "big")


class PerfectContractsModel:
    """A stand-in model that answers ``extract contracts`` requests with the labelled clauses
    (see the module's docstring).

    Args:
        labels: a CUAD-shaped labels file.
        folder: where the contracts are (default: the labels file's folder).

    Attributes:
        contracts: the labelled contracts.
        calls: requests answered, by contract file (``""`` for an excerpt of none).

    Raises:
        OSError: the labels file or a contract cannot be read.
    """

    def __init__(self, labels: Path, *, folder: Path | None = None) -> None:
        self.contracts = read_labelled_contracts(labels, folder)
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()

    def contract_of(self, excerpt: str, start: int) -> LabelledContract | None:
        """The labelled contract whose text holds ``excerpt`` at ``start``."""
        for contract in self.contracts:
            if contract.text[start : start + len(excerpt)] == excerpt:
                return contract
        return None

    def answer_field(
        self, contract: LabelledContract, excerpt: str, start: int, field: _Field
    ) -> list[dict[str, Any]]:
        """The perfect items of one field for one excerpt starting at ``start``."""
        label = contract.labels.get(field.name)
        if not isinstance(label, Mapping):
            return []
        clauses = _spans(label.get("clauses") or [])
        answer = str(label.get("answer") or "")
        items: list[dict[str, Any]] = []
        if field.type == "parties":
            for first, last, parties in _party_passages(excerpt, answer, clauses):
                for party in parties:
                    items.append(field.item(excerpt[first:last], party))
            if items or not clauses:
                return items
        for clause in clauses:
            where = _search(excerpt, clause)
            if where is None:
                continue
            quote = excerpt[where[0] : where[1]]
            value, held = self._value(field.type, answer, quote)
            if field.type == "parties":
                value, held = {"name": quote, "role": None}, True
            if not held and field.allows_null:
                value = None
            if field.type == "clause":
                value = None
            items.append(field.item(quote, value))
        return items

    @staticmethod
    def _value(kind: str, answer: str, quote: str) -> tuple[Any, bool]:
        if kind == "clause":
            return None, True
        if kind == "yes_no":
            return "Yes", True
        if kind == "date":
            return _date_value(answer, quote)
        if kind == "duration":
            return _duration_value(answer, quote)
        if kind == "number":
            digits = re.sub(r"[^\d.]", "", answer)
            return (float(digits) if digits else None), bool(digits) and digits in quote
        value = answer or quote
        return value, _flat(value) in _flat(quote)

    def answer(self, excerpt: str, start: int, schema: Mapping[str, Any], prompt: str = "") -> Any:
        """The reply's JSON for one excerpt starting at ``start``, in ``schema``'s shape
        (``{"fields": {name: [items]}}``)."""
        fields = _fields_of(schema, prompt)
        contract = self.contract_of(excerpt, start)
        reply: dict[str, list[dict[str, Any]]] = {}
        for field in fields:
            items = [] if contract is None else self.answer_field(contract, excerpt, start, field)
            reply[field.name] = self.alter(contract, excerpt, start, field, items)
        return {"fields": reply}

    def alter(
        self,
        contract: LabelledContract | None,
        excerpt: str,
        start: int,
        field: _Field,
        items: list[dict[str, Any]],
    ) -> list[dict[str, Any]]:
        """The items as sent: the perfect model sends them as they are."""
        return items

    def __call__(self, body: dict[str, Any]) -> ScriptedResponse:
        """The reply to one request body (Messages API or chat completions)."""
        from plandag.executors.data import parse_data_blocks

        text = _first_user_text(body)
        blocks = [b for b in parse_data_blocks(text) if b.attributes.get("label") == "data"]
        schema = request_schema(body)
        if not blocks or schema is None or not isinstance(blocks[0].value, Mapping):
            return ScriptedResponse.text("This stand-in answers extract contracts only.")
        data = blocks[0].value
        excerpt = str(data.get("excerpt", ""))
        start = int(str(data.get("characters", "0")).partition(" to ")[0])
        contract = self.contract_of(excerpt, start)
        with self._lock:
            key = "" if contract is None else contract.file
            self.calls[key] = self.calls.get(key, 0) + 1
        return ScriptedResponse.json(self.answer(excerpt, start, schema, text))


@dataclasses.dataclass(frozen=True, slots=True)
class Alteration:
    """One answer the adversarial model altered.

    Attributes:
        file: the contract.
        field: the field's name; ``type`` its type.
        kind: one of :data:`ALTERATION_KINDS`.
        quote: the quote sent; ``value`` the value sent.
        original_quote: the perfect model's quote; ``original_value`` its value.
        offsets: the ``[start, end)`` offsets claimed in the item (``shifted_offsets``), or
            None.
    """

    file: str
    field: str
    type: str
    kind: str
    quote: str
    value: Any
    original_quote: str
    original_value: Any
    offsets: tuple[int, int] | None = None


class AdversarialContractsModel(PerfectContractsModel):
    """The perfect model with a set share of its items altered (module docstring).

    Args:
        labels: a CUAD-shaped labels file.
        share: the share of items altered, in [0, 1].
        seed: picks which items and how (the same seed alters the same items).
        kinds: the alterations used (default all of :data:`ALTERATION_KINDS`).
        folder: where the contracts are (default: the labels file's folder).

    Attributes:
        alterations: every alteration made, in the order made.

    Raises:
        ValueError: ``share`` outside [0, 1], or an unknown kind.
    """

    def __init__(
        self,
        labels: Path,
        *,
        share: float = 0.3,
        seed: int = 0,
        kinds: Sequence[str] = ALTERATION_KINDS,
        folder: Path | None = None,
    ) -> None:
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"share must be in [0, 1], not {share}")
        unknown = sorted(set(kinds) - set(ALTERATION_KINDS))
        if unknown or not kinds:
            raise ValueError(f"kinds must be among {', '.join(ALTERATION_KINDS)}, not {unknown}")
        super().__init__(labels, folder=folder)
        self.share = share
        self.seed = seed
        self.kinds = tuple(kinds)
        self.alterations: list[Alteration] = []
        self._altering = threading.Lock()

    def alter(
        self,
        contract: LabelledContract | None,
        excerpt: str,
        start: int,
        field: _Field,
        items: list[dict[str, Any]],
    ) -> list[dict[str, Any]]:
        """The items with the chosen ones altered (module docstring)."""
        if contract is None:
            return items
        sent = []
        for item in items:
            quote, value = str(item["quote"]), item.get("value")
            draw = _digest(self.seed, contract.file, field.name, quote, value)
            if (draw % 1_000_000) / 1_000_000 >= self.share:
                sent.append(item)
                continue
            usable = [kind for kind in self.kinds if self._applies(kind, field)]
            if not usable:
                sent.append(item)
                continue
            kind = usable[(draw // 1_000_000) % len(usable)]
            altered, offsets = self._altered(kind, field, excerpt, start, quote, value, draw)
            sent.append(altered)
            with self._altering:
                self.alterations.append(
                    Alteration(
                        contract.file,
                        field.name,
                        field.type,
                        kind,
                        str(altered["quote"]),
                        altered.get("value"),
                        quote,
                        value,
                        offsets,
                    )
                )
        return sent

    @staticmethod
    def _applies(kind: str, field: _Field) -> bool:
        if kind == "changed_value":
            return field.type not in ("clause", "yes_no")
        if kind == "generic_quote":
            return field.type in ("clause", "yes_no")
        return True

    def _altered(
        self,
        kind: str,
        field: _Field,
        excerpt: str,
        start: int,
        quote: str,
        value: Any,
        draw: int,
    ) -> tuple[dict[str, Any], tuple[int, int] | None]:
        if kind == "changed_value":
            return field.item(quote, _changed(field.type, value, quote)), None
        if kind == "fabricated_quote":
            return field.item(_fabricated(quote, excerpt), value), None
        if kind == "generic_quote":
            words = quote.split()
            return field.item(" ".join(words[: 1 + draw % 2]), value), None
        where = _search(excerpt, quote) or (0, len(quote))
        shift = 1 + (draw >> 8) % 12
        if (draw >> 4) % 2 and where[0] >= shift:
            shift = -shift
        first = min(max(0, where[0] + shift), len(excerpt))
        last = min(max(first, where[1] + shift), len(excerpt))
        claimed = (start + where[0] + 7, start + where[1] + 7)
        more = {"start": claimed[0], "end": claimed[1]} if field.allows_more_keys else {}
        return field.item(excerpt[first:last], value, **more), claimed if more else None


def _changed(kind: str, value: Any, quote: str) -> Any:
    """A value of type ``kind`` that ``quote`` does not write (module docstring)."""
    flat = _flat(quote)
    if kind == "date":
        if isinstance(value, str) and re.fullmatch(r"\d{4}(?:-\d\d){0,2}", value):
            year = int(value[:4]) + 3
            while str(year) in flat:
                year += 1
            return f"{year}{value[4:]}"
        year = 2031
        while str(year) in flat:
            year += 1
        return f"{year}-07-15"
    if kind == "parties":
        role = value.get("role") if isinstance(value, Mapping) else None
        return {"name": _CHANGED_PARTY, "role": role}
    if kind == "duration":
        unit, count = "months", 12
        if isinstance(value, Mapping):
            unit = "days" if "days" in value and value["days"] is not None else "months"
            count = int(value.get(unit) or 12)
        count += 5
        while re.search(rf"\b{count}\b", flat):
            count += 1
        return {unit: count}
    if kind == "number":
        number = float(value) if isinstance(value, int | float) else 1.0
        changed = number * 10 + 7
        while re.search(rf"\b{int(changed)}\b", flat):
            changed += 1
        return changed
    return _CHANGED_TEXT


def _fabricated(quote: str, excerpt: str) -> str:
    """``quote`` changed so that the excerpt does not hold it (module docstring)."""
    words = quote.split()
    candidates = []
    if len(words) >= 4:
        candidates.append(" ".join([*words[:3], "not", *words[3:]]))
    candidates.append(quote.rstrip(".") + " and its affiliates")
    candidates.append(quote + " (as amended by the parties in writing)")
    for candidate in candidates:
        if _search(excerpt, candidate) is None:
            return candidate
    return "This clause was written by no one: " + quote
