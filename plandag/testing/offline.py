"""The offline model: schema-valid answers built from the request's own documents, for trying
plandag on one's own data without a key (``--offline``, ``--provider offline``;
docs/testing.md, "The offline model").

:class:`OfflineModel` is a responder for :class:`plandag.models.offline.OfflineClient` (in
the process, no server) that answers every request a plandag run sends:

* **the planner** (a request under the planner's system prompt):

  - a research question (the research job's trusted context): the research plan of
    :func:`plandag.jobs.research.scripted.research_plan`, with subquestions cut from the
    question itself (its clauses; the search query of each is its content words);
  - a replan of a research run: a new synthesis over the answers that stand;
  - any other task: a small plan over the registry it is given: ``read_file`` of each file
    the task names that exists, the effect-free tools of the user's whose name or
    description shares words with the task (their string arguments given the file's text,
    else the task), and an ``llm`` step answering the task from those results; the plan is
    compiled against the registry before it is sent, and a plan that does not compile
    falls back to a random instance of the schema (:func:`~plandag.testing.random_instance`);

* **an answer with citations** (a research answer, the citation schema): each claim quotes,
  word for word, the sentence of the chunks given as data that best matches the prompt
  (BM25 over the chunks' sentences), with the chunk's id, so the ``citations_supported``
  check finds every quote in its chunk; the synthesis reuses the first claim of each answer;
* **contract fields** (the ``fields`` schema of ``extract contracts``): per field, the
  excerpt's sentence that best matches the field's name and description, when it holds a
  word of the name and shares at least two words with them (for a date, a length of time or
  a number: one shared word and the value written in it), else an empty list: not found; its
  value is read from the
  sentence only (a written date, a length of time, a number), else null where the schema
  allows it, else the field is left empty: never a value the quote does not hold;
* **the plan library's routing call**: a new task type (``offline_`` and the task's first
  content words), never a saved plan: the offline model cannot tell whether one does the
  task;
* **any other schema**: an instance of the schema whose strings are sentences of the
  data (or of the prompt when no data came), numbers written in them when the bounds
  allow, else a random instance of the schema;
* **free text** (an ``llm`` step without a schema, an ``agent`` step, which gets its answer
  at once: the offline model calls no tool): the three sentences of the data that best match
  the prompt, each in quotes, or :data:`NO_DOCUMENT` when the request carries no data.

Every answer is an extract of the documents, not a model's words: the client names the
model ``offline-extractive`` in every record, and the answers say so where they have prose
(a synthesis's answer starts ``Extracts (offline, no model): ``).
"""

from __future__ import annotations

import datetime
import json
import math
import random
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from plandag.executors.data import parse_data_blocks
from plandag.jobs.research.scripted import Subquestion, research_plan
from plandag.models.base import LLMRequest
from plandag.models.offline import OfflineClient
from plandag.testing.schema_model import UnsupportedSchemaError, random_instance

if TYPE_CHECKING:
    from plandag.tools.registry import Registry

__all__ = [
    "EXTRACT_PREFIX",
    "NO_DOCUMENT",
    "OfflineModel",
    "extract_sentences",
    "offline_client",
    "subquestions_of",
]

EXTRACT_PREFIX: Final = "Extracts (offline, no model): "
"""How every prose answer of the offline model starts."""

NO_DOCUMENT: Final = "no document was given to extract an answer from."
"""The offline answer to a free-text request that carries no data."""

_PLANNER_ROLE: Final = "You are the planner of plandag"
_ROUTING_MARK: Final = "You route a task to a saved plan."
_RESEARCH_MARK: Final = "You plan research over a corpus of documents."
_REPLAN_MARKS: Final = ("Write a patch, not a new plan", "Plan again from the goal")
_SYNTHESIS_MARK: Final = "Answer the question from the subquestion answers"
_SUBQUESTION_MARK: Final = "Answer this subquestion from the chunks in the data only:"
_MAX_QUOTE_CHARS: Final = 400
_CLAIMS_PER_ANSWER: Final = 2
_BUILTIN_TOOLS: Final = frozenset(
    {"llm", "agent", "read_file", "write_json", "http_get", "http_post", "json_select"}
)

_STOPWORDS: Final = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "give",
        "each",
        "claim",
    ]
)
_WORD: Final = re.compile(r"[^\W_]+", re.UNICODE)
_SENTENCE_END: Final = re.compile(r"(?<=[.;:?!])\s+|\n\s*\n")


# -- words and sentences -------------------------------------------------------------------


def _terms(text: str) -> list[str]:
    """The content words of ``text``, lower-cased (no stop words, no one-letter words)."""
    return [
        word
        for word in (match.lower() for match in _WORD.findall(text))
        if len(word) > 1 and word not in _STOPWORDS and not word.isdigit()
    ]


def _stems(text: str) -> list[str]:
    """The content words of ``text`` with a plural or verb ending cut (``-ing``, ``-ed``,
    ``-es``, keeping at least four letters; ``-s``, keeping three), so ``governing``,
    ``governed`` and ``governs`` match."""
    found = []
    for word in _terms(text):
        for suffix, keep in (("ing", 4), ("ed", 4), ("es", 4), ("s", 3)):
            if word.endswith(suffix) and len(word) - len(suffix) >= keep:
                word = word[: -len(suffix)]
                break
        found.append(word)
    return found


def extract_sentences(text: str, min_words: int = 3) -> list[str]:
    """The sentences of ``text``, each exactly as it is written there (a substring of
    ``text``), in order.

    A sentence ends at ``.``, ``;``, ``:``, ``?`` or ``!`` followed by white space, or at a
    blank line; one longer than 400 characters keeps its first words up to that length (still
    a substring). Sentences of fewer than ``min_words`` words are left out.

    Args:
        text: any text.
        min_words: the fewest words a sentence keeps.

    Returns:
        The sentences, stripped of surrounding white space.
    """
    found: list[str] = []
    start = 0
    for match in [*_SENTENCE_END.finditer(text), None]:
        end = match.start() if match is not None else len(text)
        sentence = text[start:end].strip()
        if match is not None:
            start = match.end()
        if len(sentence) > _MAX_QUOTE_CHARS:
            cut = sentence.rfind(" ", 0, _MAX_QUOTE_CHARS)
            sentence = sentence[: cut if cut > 0 else _MAX_QUOTE_CHARS].rstrip()
        if len(sentence.split()) >= min_words:
            found.append(sentence)
    return found


def _ranked(query: str, passages: Sequence[str]) -> list[tuple[float, int]]:
    """``(score, index)`` of each passage sharing a word with ``query``, best first: BM25
    (k1 1.2, b 0.75) over the passages' content words; ties keep the passages' order."""
    words = set(_stems(query))
    if not words or not passages:
        return []
    bags = [Counter(_stems(passage)) for passage in passages]
    mean = sum(sum(bag.values()) for bag in bags) / len(bags) or 1.0
    counts = Counter(word for bag in bags for word in bag if word in words)
    scored = []
    for index, bag in enumerate(bags):
        length = sum(bag.values())
        score = 0.0
        for word in words & bag.keys():
            idf = math.log(1 + (len(bags) - counts[word] + 0.5) / (counts[word] + 0.5))
            tf = bag[word]
            score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / mean))
        if score > 0:
            scored.append((score, index))
    return sorted(scored, key=lambda item: (-item[0], item[1]))


_GENERIC: Final = frozenset({"non", "party", "parti", "agreement", "contract", "term"})
"""Words of field names that every contract writes (not telling of a field)."""


def _names(name: str, passage: str) -> bool:
    """Whether ``passage`` holds a word of the field ``name`` (or a word one of them starts,
    of five letters or more: ``assign`` for ``Assignment``)."""
    words = set(_stems(passage)) - _GENERIC
    for stem in set(_stems(name)) - _GENERIC:
        if stem in words or any(
            len(short) >= 5 and long.startswith(short)
            for word in words
            for short, long in ((word, stem), (stem, word))
        ):
            return True
    return False


def _shared(query: str, passage: str) -> int:
    """How many distinct content words ``query`` and ``passage`` share."""
    return len(set(_stems(query)) & set(_stems(passage)))


# -- reading a request ---------------------------------------------------------------------


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return ""


def _first_user_text(request: LLMRequest) -> str:
    for message in request.messages:
        if message["role"] == "user":
            return _content_text(message["content"])
    return ""


def _blocks(text: str) -> list[Any]:
    try:
        return [block.value for block in parse_data_blocks(text)]
    except ValueError:
        return []


def _instruction(text: str) -> str:
    """``text`` without its data blocks (what a step's prompt says)."""
    return re.sub(r"<data [^>]*>\n[^\n]*\n</data>", " ", text)


def _task_of(user: str) -> str:
    """The task of a planning request (the text under ``Task:``)."""
    if user.startswith("Task:\n"):
        return user[len("Task:\n") :].split("\n\n", 1)[0].strip()
    return user.strip()


def _routed_task(user: str) -> str:
    """The task of the plan library's routing request (the JSON line after ``Task
    (data):``), else the whole text."""
    head, found, rest = user.partition("Task (data):\n")
    if found:
        try:
            task = json.loads(rest.split("\n", 1)[0])
        except ValueError:
            return rest
        return task if isinstance(task, str) else rest
    return head


def _texts(value: Any) -> list[str]:
    """Every string inside ``value`` (a data block's value), in order."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [text for item in value.values() for text in _texts(item)]
    if isinstance(value, list):
        return [text for item in value for text in _texts(item)]
    return []


# -- research ------------------------------------------------------------------------------


def subquestions_of(question: str) -> list[Subquestion]:
    """The subquestions of a research plan, cut from the question's own words.

    The question is split into its clauses (at ``?``, ``;``, ``, and``, `` and why`` ...);
    each clause with a content word is a subquestion, at most five. A question
    of one clause gives two: the question, and what the documents say of its three most
    telling words. Each search query is the clause's content words; the retry query adds
    the question's other words.

    Args:
        question: the research question.

    Returns:
        2 to 5 subquestions.
    """
    question = " ".join(question.split())
    clauses = [
        re.sub(r"^(?:and|but|or)\s+", "", part.strip(" ,;?."), flags=re.IGNORECASE)
        for part in re.split(
            r"\?\s*|;\s*|,\s*(?:and|but|or)\s+|\s+and\s+(?=(?:how|why|what|when|where|who|which)\b)",
            question,
            flags=re.IGNORECASE,
        )
    ]
    words = _terms(question)
    found: list[Subquestion] = []
    for clause in clauses:
        terms = _terms(clause)
        if not terms or len(found) == 5:
            continue
        text = clause[0].upper() + clause[1:] + "?"
        rest = [word for word in words if word not in terms]
        found.append(Subquestion(text, " ".join(terms), " ".join([*terms, *rest][:12])))
    if len(found) < 2:
        top = [word for word, _ in Counter(words).most_common(3)] or ["documents"]
        if not found:
            found.append(Subquestion(question, " ".join(words) or question, " ".join(top)))
        found.append(
            Subquestion(
                f"What do the documents say about {' '.join(top)}?",
                " ".join(top),
                " ".join(words[:12]) or " ".join(top),
            )
        )
    return found


def _chunks(blocks: Iterable[Any]) -> list[Mapping[str, Any]]:
    chunks: list[Mapping[str, Any]] = []
    for value in blocks:
        if isinstance(value, Mapping) and isinstance(value.get("chunks"), list):
            chunks.extend(item for item in value["chunks"] if isinstance(item, Mapping))
    return chunks


def _answer(question: str, chunks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Claims quoting the chunks' sentences that best match ``question`` (at most two, from
    different chunks when they can be)."""
    candidates: list[tuple[str, str]] = []
    for chunk in chunks:
        for sentence in extract_sentences(str(chunk.get("text", "")), min_words=6):
            candidates.append((str(chunk.get("chunk_id")), sentence))
    if not candidates:
        for chunk in chunks:
            for sentence in extract_sentences(str(chunk.get("text", ""))):
                candidates.append((str(chunk.get("chunk_id")), sentence))
    ranked = [index for _, index in _ranked(question, [text for _, text in candidates])]
    order = ranked + [index for index in range(len(candidates)) if index not in set(ranked)]
    chosen: list[tuple[str, str]] = []
    for index in order:
        chunk_id, sentence = candidates[index]
        if all(chunk_id != used for used, _ in chosen):
            chosen.append((chunk_id, sentence))
        if len(chosen) == _CLAIMS_PER_ANSWER:
            break
    return {
        "claims": [
            {
                "claim": f"The document says: {sentence}",
                "citations": [{"chunk_id": chunk_id, "quote": sentence}],
            }
            for chunk_id, sentence in chosen
        ]
    }


def _synthesis(blocks: Iterable[Any]) -> dict[str, Any]:
    claims: list[Any] = []
    for value in blocks:
        answers = value.get("answers") if isinstance(value, Mapping) else None
        for answer in answers if isinstance(answers, list) else []:
            found = answer.get("claims") if isinstance(answer, Mapping) else None
            if isinstance(found, list) and found and isinstance(found[0], Mapping):
                claims.append(found[0])
    quotes = " ".join(
        f"\u201c{citation.get('quote', '')}\u201d"
        for claim in claims
        for citation in (claim.get("citations") or [])[:1]
        if isinstance(citation, Mapping)
    )
    return {"answer": EXTRACT_PREFIX + (quotes or "no passage was found."), "claims": claims}


def _research_patch(task: str, user: str) -> dict[str, Any]:
    """A replan of a research run: one synthesis over the answer steps that succeeded."""
    found = re.search(r"must be greater than (\d+)", user)
    step_id = int(found.group(1)) + 1 if found else 1000
    answers = [
        int(number)
        for number, block in re.findall(
            r"step (\d+) \(llm\) succeeded:\n(<data [^>]*>\n[^\n]*\n</data>)", user
        )
        if any(isinstance(value, Mapping) and "claims" in value for value in _blocks(block))
        and not any(isinstance(value, Mapping) and "answer" in value for value in _blocks(block))
    ]
    references = [f"<step_{number}_result>" for number in answers]
    step = {
        "i": step_id,
        "t": "llm",
        "a": {
            "prompt": f"{_SYNTHESIS_MARK} in the data only: {task} Cite only quotes that "
            "appear in those answers, with their chunk_id.",
            "data": {"json": json.dumps({"answers": references})},
            "schema": "<param.synthesis_schema>",
            "max_tokens": 1000,
        },
        "d": answers,
        "c": [{"k": "synthesis_citations", "a": {"answers": references}}],
        "n": "synthesis",
    }
    return {"g": task, "s": [step], "o": f"<step_{step_id}_result>"}


# -- contracts -----------------------------------------------------------------------------

_FIELD_LINE: Final = re.compile(
    r"^- (['\"])(?P<name>.+?)\1 \((?P<type>\w+):(?P<rest>.*)$", re.MULTILINE
)
_MONTHS: Final = {
    name.lower(): number
    for number in range(1, 13)
    for name in (
        datetime.date(2000, number, 1).strftime("%B"),
        datetime.date(2000, number, 1).strftime("%b"),
    )
}
_DATE_FORMS: Final = (
    re.compile(r"\b(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})\b"),
    re.compile(
        r"\b(?P<month>[A-Za-z]{3,9})\.?\s+(?P<d>\d{1,2})(?:st|nd|rd|th)?,?\s+(?P<y>\d{4})\b"
    ),
    re.compile(
        r"\b(?P<d>\d{1,2})(?:st|nd|rd|th)?\s+(?:day\s+of\s+)?(?P<month>[A-Za-z]{3,9}),?\s+(?P<y>\d{4})\b"
    ),
)
_DURATION: Final = re.compile(
    r"\b(?P<n>\d{1,4})\s*(?:\(\w+\)\s*)?(?P<unit>years?|months?|weeks?|days?)\b", re.IGNORECASE
)
_NUMBER: Final = re.compile(
    r"(?<![\w.])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w.])|(?<![\w.,])\d+(?:\.\d+)?(?![\w,])"
)


_VALUE_TYPES: Final = frozenset({"date", "duration", "number"})
"""Field types whose value must be written in the quote: a sentence sharing one word with the
field and holding such a value is taken."""


def _date_in(text: str) -> str | None:
    for form in _DATE_FORMS:
        for match in form.finditer(text):
            groups = match.groupdict()
            month = (
                _MONTHS.get(groups["month"].lower()) if groups.get("month") else int(groups["m"])
            )
            if month is None:
                continue
            try:
                day = datetime.date(int(groups["y"]), month, int(groups["d"]))
            except ValueError:
                continue
            return day.isoformat()
    return None


def _duration_in(text: str) -> dict[str, int] | None:
    match = _DURATION.search(text)
    if match is None:
        return None
    number, unit = int(match["n"]), match["unit"].lower()
    if unit.startswith("year"):
        return {"months": 12 * number}
    if unit.startswith("month"):
        return {"months": number}
    return {"days": number * (7 if unit.startswith("week") else 1)}


def _number_in(text: str) -> float | int | None:
    match = _NUMBER.search(text)
    if match is None:
        return None
    written = match.group(0).replace(",", "")
    return float(written) if "." in written else int(written)


def _field_value(kind: str, sentence: str) -> tuple[bool, Any]:
    """``(found, value)`` of a field of type ``kind`` read from ``sentence``: found False
    when the type needs a value the sentence does not write."""
    if kind == "date":
        value = _date_in(sentence)
        return value is not None, value
    if kind == "duration":
        duration = _duration_in(sentence)
        return duration is not None, duration
    if kind == "number":
        number = _number_in(sentence)
        return number is not None, number
    if kind == "yes_no":
        return True, "Yes"
    return True, None  # clause, text, parties: the passage is the evidence


def _contract_fields(schema: Mapping[str, Any], prompt: str, excerpt: str) -> dict[str, Any]:
    specs = {
        match["name"]: (match["type"], match["rest"]) for match in _FIELD_LINE.finditer(prompt)
    }
    fields_schema = (schema.get("properties") or {}).get("fields") or {}
    names = list(
        (fields_schema.get("properties") or {}) if isinstance(fields_schema, Mapping) else []
    )
    sentences = extract_sentences(excerpt, min_words=5)
    answers: dict[str, Any] = {}
    for name in names:
        kind, description = specs.get(name, ("clause", ""))
        query = f"{name} {description}"
        items: list[dict[str, Any]] = []
        least = 1 if kind in _VALUE_TYPES else 2
        for _, index in _ranked(query, sentences)[:8]:
            sentence = sentences[index]
            if _shared(query, sentence) < least or (
                kind not in _VALUE_TYPES and not _names(name, sentence)
            ):
                continue
            found, value = _field_value(kind, sentence)
            if found:
                items.append({"quote": sentence, "value": value})
                break
        answers[name] = items
    return {"fields": answers}


# -- any schema ----------------------------------------------------------------------------


class _Filler:
    """An instance of a schema whose strings are the given sentences (in turn) and whose
    numbers are written in them when the bounds allow; an array leaves out an item it could
    not read from the sentences (a number none of them writes) unless ``minItems`` needs
    it."""

    def __init__(self, root: Mapping[str, Any], sentences: Sequence[str]) -> None:
        self.root = root
        self.sentences = list(sentences) or ["(offline: no text was given)"]
        self.used = 0
        self.grounded = True  # False once a value was not read from the data
        definitions = root.get("$defs") or root.get("definitions") or {}
        self.definitions: Mapping[str, Any] = (
            definitions if isinstance(definitions, Mapping) else {}
        )

    def _sentence(self) -> str:
        sentence = self.sentences[self.used % len(self.sentences)]
        self.used += 1
        return sentence

    def value(self, schema: Any, depth: int = 0) -> Any:
        if depth > 12:
            raise UnsupportedSchemaError("too deep")
        if schema is True or schema == {}:
            return self._sentence()
        if not isinstance(schema, Mapping):
            raise UnsupportedSchemaError(f"not a schema: {schema!r}")
        reference = schema.get("$ref")
        if isinstance(reference, str):
            target = (
                self.root
                if reference == "#"
                else self.definitions.get(reference.rsplit("/", 1)[-1])
            )
            if target is None:
                raise UnsupportedSchemaError(f"unresolvable $ref {reference!r}")
            return self.value(target, depth + 1)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return schema["enum"][0]
        choices = schema.get("anyOf") or schema.get("oneOf")
        if isinstance(choices, list) and choices:
            for choice in choices:
                if not (isinstance(choice, Mapping) and choice.get("type") == "null"):
                    return self.value(choice, depth + 1)
            return None
        parts = schema.get("allOf")
        if isinstance(parts, list) and len(parts) == 1:
            return self.value(parts[0], depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = [item for item in kind if item != "null"] or ["null"]
            kind = kinds[0]
        if kind is None:
            kind = "object" if "properties" in schema else "string"
        if kind == "object":
            properties = schema.get("properties") or {}
            required = schema.get("required") or list(properties)
            return {
                name: self.value(properties.get(name, {}), depth + 1)
                for name in properties
                if name in required
            }
        if kind == "array":
            least = int(schema.get("minItems", 0))
            most = int(schema.get("maxItems", max(least, 1)))
            items: list[Any] = []
            for _ in range(max(least, min(most, 1))):
                grounded = self.grounded
                self.grounded = True
                item = self.value(schema.get("items", {}), depth + 1)
                if self.grounded or len(items) < least:
                    items.append(item)
                self.grounded = grounded and (self.grounded or len(items) >= least)
            return items
        if kind == "string":
            if "pattern" in schema or "format" in schema:
                raise UnsupportedSchemaError("a pattern or format")
            text = self._sentence()
            limit = schema.get("maxLength")
            if isinstance(limit, int) and len(text) > limit:
                cut = text.rfind(" ", 0, limit + 1)
                text = text[: cut if cut > 0 else limit].rstrip()
            if len(text) < int(schema.get("minLength", 0)):
                raise UnsupportedSchemaError("a string too short")
            return text
        if kind in ("integer", "number"):
            for sentence in self.sentences:
                number = _number_in(sentence)
                if (
                    number is not None
                    and (kind == "number" or isinstance(number, int))
                    and _within(number, schema)
                ):
                    return number
            self.grounded = False  # no number of the data fits: the schema's least
            low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
            return (
                int(low) + (1 if "exclusiveMinimum" in schema else 0) if kind == "integer" else low
            )
        if kind == "boolean":
            return False
        if kind == "null":
            return None
        raise UnsupportedSchemaError(f"type {kind!r}")


def _within(number: float, schema: Mapping[str, Any]) -> bool:
    low, high = schema.get("minimum"), schema.get("maximum")
    above, below = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    return (
        (low is None or number >= low)
        and (high is None or number <= high)
        and (above is None or number > above)
        and (below is None or number < below)
    )


def _valid(value: Any, schema: Mapping[str, Any]) -> bool:
    import jsonschema

    try:
        validator: Any = jsonschema.Draft202012Validator(schema)
        return not any(True for _ in validator.iter_errors(value))
    except (jsonschema.SchemaError, TypeError, ValueError):
        return False


# -- the responder -------------------------------------------------------------------------


class OfflineModel:
    """Answers every request of a plandag run from the request's own documents (the module
    docstring says how, per kind of request).

    Args:
        registry: the run's tools, for the plans of ``run`` and ``plan``; None: the default
            registry.
        seed: the seed of the random schema instances a request falls back to.

    Attributes:
        answered: requests answered, by kind (``plan``, ``research_plan``, ``replan``,
            ``route``, ``answer``, ``synthesis``, ``contract``, ``schema``,
            ``schema_random``, ``text``).
    """

    def __init__(self, registry: Registry | None = None, *, seed: int = 0) -> None:
        self.registry = registry
        self.seed = seed
        self.answered: Counter[str] = Counter()

    def __call__(self, request: LLMRequest) -> str:
        """The answer's text for ``request`` (JSON text when it has a schema)."""
        kind, value = self._answer(request)
        self.answered[kind] += 1
        if request.json_schema is None and isinstance(value, str):
            return value
        return json.dumps(value, ensure_ascii=False)

    def _answer(self, request: LLMRequest) -> tuple[str, Any]:
        user = _first_user_text(request)
        schema = request.json_schema
        if _PLANNER_ROLE in request.system:
            everything = "\n".join(_content_text(m["content"]) for m in request.messages)
            task = _task_of(user)
            research = _RESEARCH_MARK in everything or (
                any(mark in user for mark in _REPLAN_MARKS) and "synthesis" in user
            )
            if any(mark in user for mark in _REPLAN_MARKS):
                if research:
                    return "replan", _research_patch(task, user)
                return "replan", self._schema_answer(schema, user)[1]
            if research:
                return "research_plan", research_plan(task, subquestions_of(task))
            return self._plan(task, schema)
        if request.system.startswith(_ROUTING_MARK):
            words = _terms(_routed_task(user))[:4] or ["task"]
            name = "offline_" + "_".join(re.sub(r"\W", "", word) or "w" for word in words)
            return "route", {"route": {"task_type": name, "new": True, "params": []}}
        blocks = _blocks(user)
        prompt = _instruction(user)
        if schema is not None and _cites(schema):
            if _SYNTHESIS_MARK in user:
                return "synthesis", _synthesis(blocks)
            question = prompt.split(_SUBQUESTION_MARK, 1)[-1]
            return "answer", _answer(question, _chunks(blocks))
        if schema is not None and _asks_fields(schema) and _FIELD_LINE.search(prompt):
            excerpt = "\n".join(_texts(blocks))
            return "contract", _contract_fields(schema, prompt, excerpt)
        if schema is not None:
            return self._schema_answer(schema, user)
        if not _texts(blocks):
            return "text", EXTRACT_PREFIX + NO_DOCUMENT
        sentences = self._best_sentences(prompt, blocks, 3)
        return "text", EXTRACT_PREFIX + " ".join(f"\u201c{item}\u201d" for item in sentences)

    def _best_sentences(self, prompt: str, blocks: Sequence[Any], count: int) -> list[str]:
        sentences = [s for text in _texts(blocks) for s in extract_sentences(text)]
        if not sentences:
            return extract_sentences(prompt, min_words=1)[:count] or ["no text was given."]
        ranked = [index for _, index in _ranked(prompt, sentences)]
        order = ranked + [index for index in range(len(sentences)) if index not in set(ranked)]
        return [sentences[index] for index in order[:count]]

    def _schema_answer(self, schema: Mapping[str, Any] | None, user: str) -> tuple[str, Any]:
        if schema is None:
            return "text", EXTRACT_PREFIX
        blocks = _blocks(user)
        sentences = self._best_sentences(_instruction(user), blocks, 8)
        try:
            value = _Filler(schema, sentences).value(schema)
        except UnsupportedSchemaError:
            value = None
        else:
            if _valid(value, schema):
                return "schema", value
        return "schema_random", random_instance(schema, random.Random(self.seed))

    def _plan(self, task: str, schema: Mapping[str, Any] | None) -> tuple[str, Any]:
        from plandag.planner.wire import compile_wire
        from plandag.tools.registry import default_registry

        registry = self.registry if self.registry is not None else default_registry()
        for plan in (_task_plan(task, registry), _task_plan(task, registry, tools=False)):
            if plan is None:
                continue
            try:
                compile_wire(plan, registry)
            except Exception:
                continue
            return "plan", plan
        if schema is None:
            return "plan", {"g": task, "s": []}
        return "schema_random", random_instance(schema, random.Random(self.seed))


def _cites(schema: Mapping[str, Any]) -> bool:
    """Whether ``schema`` asks for claims with citations (a research answer or synthesis)."""
    claims = (schema.get("properties") or {}).get("claims")
    items = claims.get("items") if isinstance(claims, Mapping) else None
    return isinstance(items, Mapping) and "citations" in (items.get("properties") or {})


def _asks_fields(schema: Mapping[str, Any]) -> bool:
    fields = (schema.get("properties") or {}).get("fields")
    return isinstance(fields, Mapping) and isinstance(fields.get("properties"), Mapping)


_PATH: Final = re.compile(r"[\w./~-]+\.[A-Za-z0-9]{1,5}\b")


def _task_plan(task: str, registry: Registry, *, tools: bool = True) -> dict[str, Any] | None:
    """A plan for ``task`` over ``registry`` (the module docstring), in the wire format."""
    steps: list[dict[str, Any]] = []
    sources: list[int] = []
    if "read_file" in registry.tools:
        for found in dict.fromkeys(_PATH.findall(task)):
            path = Path(found).expanduser()
            if path.is_file() and len(sources) < 5:
                steps.append({"i": len(steps) + 1, "t": "read_file", "a": {"path": found}, "d": []})
                sources.append(len(steps))
    text = f"<step_{sources[0]}_result>" if sources else task
    results: list[int] = []
    if tools:
        for name in _matching_tools(task, registry):
            arguments = _string_arguments(registry, name, text)
            if arguments is None:
                continue
            steps.append({"i": len(steps) + 1, "t": name, "a": arguments, "d": sources[:1]})
            results.append(len(steps))
    if "llm" in registry.tools:
        data = [f"<step_{i}_result>" for i in [*sources, *results]]
        asked: dict[str, Any] = {"prompt": task, "max_tokens": 1024}
        if len(data) == 1:
            asked["data"] = data[0]
        elif data:
            asked["data"] = {"json": json.dumps(data)}
        steps.append({"i": len(steps) + 1, "t": "llm", "a": asked, "d": [*sources, *results]})
    if not steps:
        return None
    if results and "llm" not in registry.tools:
        output: Any = {"json": json.dumps({f"step_{i}": f"<step_{i}_result>" for i in results})}
    else:
        output = f"<step_{len(steps)}_result>"
    return {"g": task, "s": steps, "o": output}


def _matching_tools(task: str, registry: Registry) -> list[str]:
    """The user's effect-free tools whose name or description shares a word with the task,
    best first, at most three."""
    names = [
        name
        for name, item in registry.tools.items()
        if name not in _BUILTIN_TOOLS
        and item.effects == "none"
        and item.reads is None
        and not item.egress
    ]
    passages = [f"{name.replace('_', ' ')} {registry.tools[name].description}" for name in names]
    return [names[index] for _, index in _ranked(task, passages)[:3]]


def _string_arguments(registry: Registry, name: str, text: str) -> dict[str, Any] | None:
    """Each required argument of tool ``name`` given ``text``, when all of them take a
    string; None otherwise."""
    schema = registry.tools[name].json_schema()
    properties = schema.get("properties") or {}
    arguments: dict[str, Any] = {}
    for argument in schema.get("required") or []:
        if (properties.get(argument) or {}).get("type") != "string":
            return None
        arguments[argument] = text
    return arguments or None


def offline_client(registry: Registry | None = None) -> OfflineClient:
    """The offline model's client: :class:`~plandag.models.offline.OfflineClient` answered
    by an :class:`OfflineModel` of ``registry`` (its model is ``offline-extractive``)."""
    return OfflineClient(OfflineModel(registry))
