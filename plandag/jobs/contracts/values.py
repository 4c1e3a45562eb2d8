"""Values normalised by type: dates ISO 8601, parties as names with roles, durations in
months or days.

The model is asked for normalised values; plandag normalises again in code and refuses what
it cannot read (:class:`InvalidValue`), so a normalised value in a record always has its
type's shape:

* ``date``: ``"YYYY-MM-DD"`` (ISO 8601). Read: ISO dates (a time after them ignored);
  ``April 1, 2019``, ``1st April 2019``, ``Apr. 1 2019``, ``the 1st day of April, 2019``;
  Portuguese ``1º de abril de 2019``; numeric ``D/M/Y`` or ``M/D/Y`` (``/``, ``-`` or
  ``.``, two-digit years in 2000-2068 or 1969-1999 as POSIX ``strptime`` reads them) only
  when the order is not ambiguous (one of the first two numbers is above 12, or both are
  equal). Dates known only in part, and terms with no end date, have these forms:

  - **known to the month** ``"YYYY-MM"`` (ISO 8601's reduced precision): ``August 2019``,
    ``agosto de 2019``, ``August __, 2019``, ``[●] de agosto de 2019``, ``2019-08``, and
    CUAD's ``08/[]/2019`` (a blank day: ``[]``, ``[ ]``, ``[●]``, underscores, ``x``);
  - **known to the year** ``"YYYY"``: ``2019``, ``[]/[]/2019``, ``____, 2019``;
  - **no end** ``"perpetual"`` (:data:`PERPETUAL`): ``perpetual``, ``in perpetuity``,
    ``indefinite``, ``indefinitely``, ``an indefinite term``, ``no fixed term``,
    ``prazo indeterminado``, ``perpétuo``;
  - **until a party ends it** ``"until terminated"`` (:data:`UNTIL_TERMINATED`):
    ``until terminated``, ``until terminated by the Parties``, ``until either party
    terminates it``, ``até a rescisão``.

  ``Smarch 3, 2020``, ``2019-02-30`` and ``4/1/19`` (ambiguous) are refused.
* ``parties``: ``{"name", "role"}``; a string ``Name ("Role")`` is split at the
  parentheses; quotes around the role and ``the`` before it are dropped; a list gives
  several parties.
* ``duration``: ``{"months": n}`` or ``{"days": n}`` (whole numbers): years are 12 months,
  weeks 7 days; read from ``{"years": 1}``, ``"one (1) year"``, ``"30 (thirty) days"``,
  ``"30 days"``, ``"6 meses"``, ``"90 dias"``, ``"2 anos"``; a term with no end is
  ``"perpetual"`` or ``"until terminated"``, as for dates.
* ``number``: an int or float; strings such as ``1,250.50`` or ``1.250,50`` are read.
* ``yes_no``: ``"Yes"`` or ``"No"`` (also from true/false, sim/não).
* ``text``: the string with its whitespace runs made single spaces.
* ``clause``: the quote itself (the document's text at its offsets).

A value that cannot be normalised is not thrown away with its evidence: the merge keeps it
as given, marked ``value_normalized: false``, when its quote holds it
(:mod:`~plandag.jobs.contracts.grounding`).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "PERPETUAL",
    "UNTIL_TERMINATED",
    "InvalidValue",
    "normalize_date",
    "normalize_duration",
    "normalize_number",
    "normalize_parties",
    "normalize_value",
    "normalize_yes_no",
]


class InvalidValue(ValueError):
    """A value that cannot be normalised to its field's type; the message says why."""


_MONTHS: dict[str, int] = {}
for _number, _names in enumerate(
    [
        ("january", "jan", "janeiro"),
        ("february", "feb", "fevereiro", "fev"),
        ("march", "mar", "março", "marco"),
        ("april", "apr", "abril", "abr"),
        ("may", "maio", "mai"),
        ("june", "jun", "junho"),
        ("july", "jul", "julho"),
        ("august", "aug", "agosto", "ago"),
        ("september", "sep", "sept", "setembro", "set"),
        ("october", "oct", "outubro", "out"),
        ("november", "nov", "novembro"),
        ("december", "dec", "dezembro", "dez"),
    ],
    start=1,
):
    for _name in _names:
        _MONTHS[_name] = _number

PERPETUAL: Final = "perpetual"
"""The normalised form of a term with no end date (a ``date`` or a ``duration``)."""

UNTIL_TERMINATED: Final = "until terminated"
"""The normalised form of a term that runs until a party ends it (a ``date`` or a
``duration``)."""

_PERPETUAL_WORDS = re.compile(
    r"^(?:(?:for\s+|in\s+|an?\s+|of\s+|por\s+|de\s+)*(?:perpetual(?:ly)?|perpetuity|"
    r"indefinite(?:ly)?|perp[ée]tu[oa]|(?:prazo\s+)?indeterminado)(?:\s+(?:term|period|"
    r"duration|prazo))?|no\s+fixed\s+(?:term|end(?:\s+date)?)|without\s+(?:an?\s+)?"
    r"(?:fixed\s+)?(?:end|expiration)(?:\s+date)?)$"
)
_UNTIL_TERMINATED_WORDS = re.compile(
    r"^(?:until|till|unless\s+and\s+until)\b.*\bterminat\w*(?:\b.*)?$|"
    r"^at[ée]\s+(?:a|que)\b.*\b(?:rescis[ãa]o|rescindid[oa]|resilid[oa]|denunciad[oa])\b.*$"
)

_MONTH = r"(?P<month>[a-zç]{3,9})\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th|º|°|o)?"
_YEAR = r"(?P<year>\d{4})"
_BLANK = r"(?:\[\s*[●•]?\s*\]|_+|●+|•+|x{1,2}|\?+)"
_DATE_FORMS = [
    re.compile(rf"^{_YEAR}-(?P<m>\d{{1,2}})-(?P<d>\d{{1,2}})(?:[t ].*)?$"),
    re.compile(rf"^{_MONTH}\s+{_DAY},?\s*{_YEAR}$"),
    re.compile(
        rf"^(?:the\s+)?{_DAY}\s+(?:day\s+of\s+|de\s+|of\s+)?{_MONTH},?\s+(?:de\s+)?{_YEAR}$"
    ),
]
_MONTH_FORMS = [
    re.compile(rf"^{_YEAR}-(?P<m>\d{{1,2}})$"),
    re.compile(rf"^{_MONTH}(?:\s+{_BLANK})?,?\s+(?:de\s+)?{_YEAR}$"),
    re.compile(
        rf"^(?:the\s+)?{_BLANK}\s+(?:day\s+of\s+|de\s+|of\s+)?{_MONTH},?\s+(?:de\s+)?{_YEAR}$"
    ),
]
_YEAR_FORMS = [
    re.compile(rf"^{_YEAR}$"),
    re.compile(rf"^{_BLANK}(?:\s*[/.-]?\s*{_BLANK})*\s*[,/.-]?\s*{_YEAR}$"),
]
_NUMERIC_DATE = re.compile(
    rf"^(?P<a>\d{{1,2}}|{_BLANK})[/.-](?P<b>\d{{1,2}}|{_BLANK})[/.-](?P<y>\d{{2}}|\d{{4}})$"
)


def _make_date(year: int, month: int, day: int, given: str) -> str:
    try:
        return datetime.date(year, month, day).isoformat()
    except ValueError:
        raise InvalidValue(f"{given!r} is not a calendar date") from None


def _month_of(name: str, given: str) -> int:
    month = _MONTHS.get(name)
    if month is None:
        raise InvalidValue(f"{given!r}: {name!r} is not a month name")
    return month


def _year_month(year: int, month: int, given: str) -> str:
    if not 1 <= month <= 12:
        raise InvalidValue(f"{given!r}: {month} is not a month")
    return f"{year:04d}-{month:02d}"


def _end_form(text: str) -> str | None:
    """:data:`PERPETUAL` or :data:`UNTIL_TERMINATED` when ``text`` (lower case, single
    spaces, no final full stop) says so, else None."""
    if _PERPETUAL_WORDS.match(text):
        return PERPETUAL
    if _UNTIL_TERMINATED_WORDS.match(text):
        return UNTIL_TERMINATED
    return None


def normalize_date(value: Any) -> str:
    """``value`` as an ISO 8601 date ``YYYY-MM-DD``, or one of the partial and open-ended
    forms ``YYYY-MM``, ``YYYY``, ``"perpetual"`` and ``"until terminated"`` (forms read:
    see the module docstring).

    Raises:
        InvalidValue: not a string, not a date, or a numeric date whose day/month order is
            ambiguous.
    """
    if not isinstance(value, str) or not value.strip():
        raise InvalidValue(f"a date must be text such as 2019-04-01, not {value!r}")
    given = value
    text = " ".join(value.strip().lower().split())
    end = _end_form(text.rstrip("."))
    if end is not None:
        return end
    for form in _DATE_FORMS:
        found = form.match(text)
        if found is None:
            continue
        groups = found.groupdict()
        if groups.get("m") is not None:
            return _make_date(int(groups["year"]), int(groups["m"]), int(groups["d"]), given)
        month = _month_of(groups["month"], given)
        return _make_date(int(groups["year"]), month, int(groups["day"]), given)
    for form in _MONTH_FORMS:
        found = form.match(text)
        if found is not None:
            groups = found.groupdict()
            if groups.get("m") is not None:
                return _year_month(int(groups["year"]), int(groups["m"]), given)
            return _year_month(int(groups["year"]), _month_of(groups["month"], given), given)
    for form in _YEAR_FORMS:
        found = form.match(text)
        if found is not None:
            return found["year"]
    found = _NUMERIC_DATE.match(text)
    if found is not None:
        year = int(found["y"])
        if len(found["y"]) == 2:
            year += 2000 if year < 69 else 1900
        known = [int(part) for part in (found["a"], found["b"]) if part.isdigit()]
        if not known:
            return f"{year:04d}"
        if len(known) == 1:  # a blank day: the number given is the month
            return _year_month(year, known[0], given)
        first, second = known
        if first > 12 >= second:
            return _make_date(year, second, first, given)
        if second > 12 >= first or first == second:
            return _make_date(year, first, second, given)
        raise InvalidValue(
            f"{given!r} is ambiguous (day/month or month/day); the value must be YYYY-MM-DD"
        )
    raise InvalidValue(f"{given!r} is not a date; the value must be YYYY-MM-DD")


_ROLE_SUFFIX = re.compile(r"^(?P<name>.*?)[\s,]*\((?P<role>[^()]*)\)\s*$", re.DOTALL)
_ROLE_TRIM = " \t\n\"'“”‘’«»,;:."


def _clean(text: str) -> str:
    return " ".join(text.split())


def _role(text: Any) -> str | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise InvalidValue(f"a party's role must be text, not {text!r}")
    role = _clean(text).strip(_ROLE_TRIM)
    for prefix in ("hereinafter referred to as ", "hereinafter ", "referred to as ", "the "):
        if role.lower().startswith(prefix):
            role = role[len(prefix) :].strip(_ROLE_TRIM)
    return role or None


def _party(value: Any) -> dict[str, str | None]:
    if isinstance(value, str):
        found = _ROLE_SUFFIX.match(value.strip())
        name, role = (found["name"], found["role"]) if found else (value, None)
    elif isinstance(value, Mapping):
        name, role = value.get("name"), value.get("role")
    else:
        raise InvalidValue(f'a party must be {{"name", "role"}} or text, not {value!r}')
    if not isinstance(name, str) or not _clean(name).strip(_ROLE_TRIM):
        raise InvalidValue(f"a party needs a name, not {name!r}")
    return {"name": _clean(name).strip(" \t\n,;:"), "role": _role(role)}


def normalize_parties(value: Any) -> list[dict[str, str | None]]:
    """``value`` as a list of parties ``{"name", "role"}`` (role None when not given).

    Raises:
        InvalidValue: a party without a name, or not a mapping, string or list of them.
    """
    items = value if isinstance(value, list) else [value]
    if not items:
        raise InvalidValue("no party given")
    return [_party(item) for item in items]


_WORD_NUMBERS: dict[str, int] = {
    word: number
    for number, words in enumerate(
        [
            ("zero",),
            ("one", "a", "an", "um", "uma"),
            ("two", "dois", "duas"),
            ("three", "três", "tres"),
            ("four", "quatro"),
            ("five", "cinco"),
            ("six", "seis"),
            ("seven", "sete"),
            ("eight", "oito"),
            ("nine", "nove"),
            ("ten", "dez"),
            ("eleven", "onze"),
            ("twelve", "doze"),
        ]
    )
    for word in words
} | {
    "fifteen": 15,
    "quinze": 15,
    "eighteen": 18,
    "twenty": 20,
    "vinte": 20,
    "twenty-four": 24,
    "thirty": 30,
    "trinta": 30,
    "forty-five": 45,
    "sixty": 60,
    "sessenta": 60,
    "ninety": 90,
    "noventa": 90,
    "hundred": 100,
    "cem": 100,
}
_UNITS: dict[str, tuple[str, int]] = {}
for _unit, _key, _factor in (
    (("year", "years", "ano", "anos"), "months", 12),
    (("month", "months", "mês", "mes", "meses"), "months", 1),
    (("week", "weeks", "semana", "semanas"), "days", 7),
    (("day", "days", "dia", "dias"), "days", 1),
):
    for _name in _unit:
        _UNITS[_name] = (_key, _factor)
_DURATION = re.compile(
    r"(?P<count>\d+(?:\.\d+)?|[a-zçêã]+(?:-[a-z]+)?)\s*"
    r"(?:\(\s*(?:(?P<digits>\d+)|[a-zçêãéíô]+(?:[\s-][a-zçêãéíô]+)*)\s*\)\s*)?"
    r"(?:(?:calendar|business|full|consecutive|successive|corridos|úteis|uteis)\s+)?"
    r"(?P<unit>years?|months?|weeks?|days?|anos?|m[eê]s|meses|semanas?|dias?)\b"
)


def normalize_duration(value: Any) -> dict[str, int] | str:
    """``value`` as ``{"months": n}`` or ``{"days": n}`` (years → 12 months, weeks → 7 days),
    or :data:`PERPETUAL` / :data:`UNTIL_TERMINATED` for a term with no end.

    Raises:
        InvalidValue: no count with a unit in it, a fractional count, or a count below 0.
    """
    if isinstance(value, Mapping):
        known = [key for key in ("years", "months", "weeks", "days") if value.get(key) is not None]
        if len(known) != 1:
            raise InvalidValue(
                f'a duration must be {{"months": n}} or {{"days": n}}, not {value!r}'
            )
        key = known[0]
        count = value[key]
        if isinstance(count, bool) or not isinstance(count, int | float):
            raise InvalidValue(f"a duration's count must be a number, not {count!r}")
        unit, factor = _UNITS[key]
        return _whole(unit, count * factor, value)
    if not isinstance(value, str):
        raise InvalidValue(
            f'a duration must be {{"months": n}}, {{"days": n}} or text, not {value!r}'
        )
    end = _end_form(" ".join(value.lower().split()).rstrip("."))
    if end is not None:
        return end
    found = _DURATION.search(" ".join(value.lower().split()))
    if found is None:
        raise InvalidValue(f"{value!r} names no count of years, months, weeks or days")
    raw = found["digits"] or found["count"]
    number: float
    if re.fullmatch(r"\d+(?:\.\d+)?", raw):
        number = float(raw)
    elif raw in _WORD_NUMBERS:
        number = _WORD_NUMBERS[raw]
    else:
        raise InvalidValue(f"{value!r}: {raw!r} is not a number")
    unit_word = found["unit"]
    unit, factor = _UNITS.get(unit_word) or _UNITS[unit_word.replace("ê", "e")]
    return _whole(unit, number * factor, value)


def _whole(unit: str, count: float, given: Any) -> dict[str, int]:
    if count < 0 or count != int(count):
        raise InvalidValue(f"{given!r} is not a whole number of {unit}")
    return {unit: int(count)}


def normalize_number(value: Any) -> int | float:
    """``value`` as a number; text with thousands separators (``1,250.50``, ``1.250,50``)
    and a currency sign is read.

    Raises:
        InvalidValue: no number in it.
    """
    if isinstance(value, bool):
        raise InvalidValue(f"{value!r} is not a number")
    if isinstance(value, int | float):
        return value
    if not isinstance(value, str):
        raise InvalidValue(f"{value!r} is not a number")
    digits = re.sub(r"[^\d.,-]", "", value)
    if re.fullmatch(r"-?\d{1,3}(,\d{3})*(\.\d+)?", digits):
        digits = digits.replace(",", "")
    elif re.fullmatch(r"-?\d{1,3}(\.\d{3})*(,\d+)?", digits):
        digits = digits.replace(".", "").replace(",", ".")
    try:
        number = float(digits)
    except ValueError:
        raise InvalidValue(f"{value!r} is not a number") from None
    return int(number) if number.is_integer() and "." not in digits else number


def normalize_yes_no(value: Any) -> str:
    """``value`` as ``"Yes"`` or ``"No"``.

    Raises:
        InvalidValue: anything else.
    """
    words = {"yes": "Yes", "true": "Yes", "sim": "Yes", "no": "No", "false": "No", "não": "No"}
    key = str(value).strip().lower() if isinstance(value, str | bool) else None
    if key in words:
        return words[key]
    raise InvalidValue(f'{value!r} is not "Yes" or "No"')


def normalize_value(kind: str, value: Any, quote: str) -> Any:
    """The value of a field of type ``kind`` normalised (see the module's docstring).

    Args:
        kind: the field's type.
        value: the model's value (absent values are None).
        quote: the located quote (the document's text at its offsets), the value of a
            ``clause`` field.

    Returns:
        The normalised value.

    Raises:
        InvalidValue: the value cannot be normalised to ``kind``.
    """
    if kind == "clause":
        return quote
    if kind == "date":
        return normalize_date(value)
    if kind == "parties":
        return normalize_parties(value)
    if kind == "duration":
        return normalize_duration(value)
    if kind == "number":
        return normalize_number(value)
    if kind == "yes_no":
        return normalize_yes_no(value)
    if value is None:
        raise InvalidValue("no value given")
    text = _clean(value if isinstance(value, str) else str(value))
    if not text:
        raise InvalidValue("an empty value")
    return text
