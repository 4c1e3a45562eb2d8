"""Secrets kept out of the run store, and put back from the environment on resume.

The store keeps what a run needs to be resumed (params, plans, results) but never a secret:
every JSON value the store writes is **sealed** first (:func:`seal`), and every text column
and blob is masked at the connection (:class:`SecretMaskingConnection`):

* a string that holds the value of a secret environment variable (``*_API_KEY``,
  ``*_TOKEN``, ``*_SECRET``, ``*_PASSWORD``, 8 characters or more;
  :func:`plandag.trace.redact.environment_secrets`) keeps the variable's *name* instead:
  the whole value as ``{"$env": "NAME"}``, a longer text as ``{"$env_text": ["Bearer ",
  {"$env": "NAME"}]}``. :func:`unseal` puts the value back from the environment when
  ``resume`` or ``approve`` reads the run again;
* any other credential (a string or number under a secret-named key such as
  ``Authorization`` or ``x-api-key``, unless it holds a plan reference such as
  ``"Bearer <param.token>"``, whose literal text only the text rules mask; such a
  ``name: value`` pair inside text, as in a response body; a ``Bearer`` token, an
  ``sk-...`` key, a JSON Web Token, the password of a URL, ``http://user:[secret]@host/``;
  :func:`plandag.trace.redact.scrub_secrets`) cannot be put back from anywhere and is
  stored as ``[secret]``; a resumed step sends ``[secret]``. Give such
  credentials through a secret environment variable (``--param token=$MY_TOKEN``) to keep
  runs resumable;
* a mapping of the plan or a result that happens to have the shape of a sealed value (one
  key ``$env``, ``$env_text`` or ``$literal``) is stored as ``{"$literal": {...}}``, so
  text written by a model can never be turned into a secret by :func:`unseal`.

Only variables with a secret-looking name are ever read back; the environment's other
variables never enter a run this way.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from plandag.dag.references import REFERENCE_PATTERN
from plandag.errors import InputError
from plandag.surrogates import escape_json_text, escape_text, has_surrogates
from plandag.trace.redact import (
    CASE_LOOKALIKES,
    LONG_TEXT,
    SECRET_MASK,
    environment_secrets,
    holds_url_password,
    is_secret_environment_name,
    is_secret_key,
    lowered_text,
    scrub_secret_text,
    scrub_secret_values,
    word_finder,
)

__all__ = [
    "ScrubbedText",
    "SecretMaskingConnection",
    "may_need_sealing_by_rules",
    "scrubbed_text",
    "seal",
    "sealed_json",
    "sealed_store_json_text",
    "sealed_store_text",
    "unseal",
]

_ENV = "$env"
_ENV_TEXT = "$env_text"
_LITERAL = "$literal"
_MARKERS = frozenset({_ENV, _ENV_TEXT, _LITERAL})


_is_secret_key = functools.lru_cache(maxsize=4096)(is_secret_key)
"""is_secret_key, remembered: records repeat the same few hundred keys."""


class _Sealer:
    def __init__(self, environment: Mapping[str, str]) -> None:
        self.environment = environment
        self.is_secret_key = _is_secret_key

    def text(self, text: str) -> Any:
        found = [value for value in self.environment if value in text]
        if not found:
            return scrub_secret_text(text)
        if text in self.environment:
            return {_ENV: self.environment[text]}
        parts: list[Any] = [text]
        for value in found:  # longest first: a longer value is never split by a shorter
            pieces: list[Any] = []
            for part in parts:
                if not isinstance(part, str):
                    pieces.append(part)
                    continue
                chunks = part.split(value)
                for index, chunk in enumerate(chunks):
                    if index:
                        pieces.append({_ENV: self.environment[value]})
                    if chunk:
                        pieces.append(chunk)
            parts = pieces
        return {_ENV_TEXT: [scrub_secret_text(p) if isinstance(p, str) else p for p in parts]}

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            sealed = {
                key: self.field(key, item) if isinstance(key, str) else self.value(item)
                for key, item in value.items()
            }
            if len(sealed) == 1 and next(iter(sealed)) in _MARKERS:
                return {_LITERAL: sealed}
            return sealed
        if isinstance(value, list | tuple):
            return [self.item(item) for item in value]
        return value

    def field(self, key: str, item: Any) -> Any:
        # Only a scalar under a secret-named key is a credential: a mapping or a list there
        # (a plan's ``params: {"token": {"type": "string"}}``) is walked like any other.
        if item is None or isinstance(item, Mapping | list | tuple) or not self.is_secret_key(key):
            return self.value(item)
        sealed = self.value(item)
        if isinstance(sealed, Mapping) and set(sealed) & {_ENV, _ENV_TEXT}:
            return sealed  # from the environment: restorable, and holds no secret
        if isinstance(sealed, str) and REFERENCE_PATTERN.search(sealed):
            return sealed  # a plan's template ("Bearer <param.token>"), text rules applied
        return SECRET_MASK

    def item(self, item: Any) -> Any:
        if (
            isinstance(item, list | tuple)
            and len(item) == 2
            and isinstance(item[0], str)
            and item[1] is not None
            and self.is_secret_key(item[0])
        ):  # a header pair: ("Authorization", "Bearer ...")
            return [item[0], self.field(item[0], item[1])]
        return self.value(item)


def seal(value: Any, environment: Mapping[str, str] | None = None) -> Any:
    """A copy of ``value`` that holds no secret, from which :func:`unseal` rebuilds it.

    Args:
        value: JSON-like data (mappings, lists, tuples, strings, numbers, booleans, None).
        environment: ``{secret value: variable name}`` (default: the process's,
            :func:`plandag.trace.redact.environment_secrets`).

    Returns:
        The sealed copy (rules in the module docstring); tuples become lists.
    """
    return _Sealer(environment_secrets() if environment is None else environment).value(value)


# Every rule of seal() needs one of these words in the JSON text of what it changes: a
# secret-named key or a ``name: value`` pair names an api key, authorization, a token, a
# secret, a password or passwd, or a cookie; a credential by its form holds ``sk-``, ``eyJ``,
# ``Bearer`` or ``Basic``; a marker mapping holds ``$env`` or ``$literal``. Found in any
# case, as the rules find them. (A URL's password, the one rule without a word, is looked
# for by its own pattern: plandag.trace.redact.holds_url_password.)
_SEALING_WORDS = (
    "sk-",
    "eyj",
    "bearer",
    "basic",
    "apikey",
    "api_key",
    "api-key",
    "authorization",
    "token",
    "secret",
    "passw",
    "$env",
    "$literal",
)
# The words by a shorter text each holds, found first (a single character is found at
# memchr's speed): a text without "api" holds no spelling of an api key, without "$" no
# marker, without "j" no JSON Web Token's "eyJ".
_GUARDS = {
    "apikey": "api",
    "api_key": "api",
    "api-key": "api",
    "eyj": "j",
    "$env": "$",
    "$literal": "$",
}
_GUARDED: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    (guard, tuple(word for word in _SEALING_WORDS if _GUARDS.get(word, word) == guard))
    for guard in dict.fromkeys(_GUARDS.get(word, word) for word in _SEALING_WORDS)
)
# A cookie is sealed only as a key named ``cookie``/``set-cookie``, as the name of a header
# pair (``["Cookie", value]``) or as ``cookie: value`` / ``cookie=value`` in text: the word
# followed by quotes and blanks (a tab is ``\t`` in JSON) and then ``:``, ``=`` or the ``,``
# that ends a pair's name. Product names such as "COOKIES" need no sealing.
_COOKIE_PAIR = re.compile(r"(?i)cookie(?:\\?['\"]|[ \t]|\\t)*[:=,]")


def may_need_sealing_by_rules(text: str) -> bool:
    """Whether a rule of :func:`seal` other than the environment's secret values may change
    the value whose JSON text is ``text``: it holds one of ``_SEALING_WORDS``, a URL with a
    password, or a cookie pair (in any case, as :func:`~plandag.trace.redact.may_hold_word`
    finds them: one lowering of the text for every word, each word looked for only where its
    guard is). The answer depends on ``text`` alone, so another process (a batch's worker)
    may give it; :func:`sealed_store_json_text` takes it."""
    if any(letter in text for letter in CASE_LOOKALIKES):
        return True
    if len(text) >= LONG_TEXT:  # a plan's text, say: its words looked for once with the trace
        held = word_finder(text)
        if any(held(guard) and any(map(held, words)) for guard, words in _GUARDED):
            return True
        lowered = lowered_text(text)
    else:
        lowered = text.lower()
        for guard, words in _GUARDED:
            if guard in lowered and any(word in lowered for word in words):
                return True
    if _holds_cookie_pair(text, lowered):
        return True
    return holds_url_password(text)  # matches in JSON text exactly as in its strings


def _holds_cookie_pair(text: str, lowered: str) -> bool:
    """Whether :data:`_COOKIE_PAIR` matches somewhere in ``text``, a text without
    :data:`~plandag.trace.redact.CASE_LOOKALIKES`; ``lowered``: ``text.lower()``.

    Without those letters, ``lowered`` has a character for each of ``text``'s (U+0130 is the
    only one lowered to two) and every match starts where ``lowered`` holds ``cookie`` (the
    only other letter a case-insensitive match takes for one of its letters, the Kelvin
    sign, is lowered to ``k``): the expression is tried at those places alone, not searched
    for through the whole text ("COOKIES" in a product's name, say).
    """
    start = lowered.find("cookie")
    while start >= 0:
        if _COOKIE_PAIR.match(text, start) is not None:
            return True
        start = lowered.find("cookie", start + 1)
    return False


_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
"""``json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)``, with
its encoder made once."""


@functools.lru_cache(maxsize=8)
def _secret_forms(secrets: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The JSON forms (inside the quotes) of the ``secrets``, and the secrets JSON writes
    otherwise than as they are (holding a quote, a backslash or a control character)."""
    forms = tuple(json.dumps(secret, ensure_ascii=False)[1:-1] for secret in secrets)
    return forms, tuple(
        secret for secret, form in zip(secrets, forms, strict=True) if form != secret
    )


def _holds_secret_json(text: str, secrets: Iterable[str]) -> bool:
    """Whether ``text`` holds the JSON form of one of the ``secrets``."""
    return any(form in text for form in _secret_forms(tuple(secrets))[0])


def _holds_escaped_secret(text: str, secrets: Iterable[str]) -> bool:
    """Whether ``text`` holds, as it is, one of the ``secrets`` that JSON writes otherwise
    (so a secret outside the JSON text's strings; the masking connection would mask it)."""
    return any(secret in text for secret in _secret_forms(tuple(secrets))[1])


def _may_need_sealing(text: str, secrets: Iterable[str]) -> bool:
    """Whether :func:`seal` may change the value whose JSON text is ``text``: a rule may
    (:func:`may_need_sealing_by_rules`), or it holds the JSON form of one of the
    ``secrets``."""
    return may_need_sealing_by_rules(text) or _holds_secret_json(text, secrets)


def sealed_json(
    value: Any, environment: Mapping[str, str] | None = None, *, text: str | None = None
) -> str:
    """The JSON text of :func:`seal` of ``value`` (compact, UTF-8 kept, no NaN), made
    without walking ``value`` in the usual case.

    The text of ``value`` is made first (``json.dumps``, in C); when it holds none of the
    words any sealing rule needs (``_SEALING_WORDS``, in any case) nor the JSON form of any secret
    value of the environment, sealing would change nothing and that text is the answer.
    Otherwise ``value`` is sealed as :func:`seal` does and dumped. Either way the result is
    ``json.dumps(seal(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False)``,
    with any lone surrogate in its strings escaped
    (:func:`plandag.surrogates.escape_json_text`: UTF-8 can encode it).

    Args:
        value: JSON data (mappings with string keys, lists, tuples, strings, numbers,
            booleans, None).
        environment: ``{secret value: variable name}`` (default: the process's).
        text: ``json.dumps(value, ensure_ascii=False, separators=(",", ":"),
            allow_nan=False)`` when the caller has it already (it is not made again), or
            None.

    Raises:
        TypeError, ValueError: ``value`` is not JSON data (an object, NaN or infinity).
    """
    secrets = environment_secrets() if environment is None else environment
    return _sealed_json(value, secrets, text)[0]


def _sealed_json(value: Any, secrets: Mapping[str, str], text: str | None) -> tuple[str, bool]:
    """:func:`sealed_json`'s text, and whether it is the text of ``value`` itself (no
    sealing rule applied: ``_may_need_sealing`` said no)."""
    if text is None:
        text = _encode(value)
    if not _may_need_sealing(text, secrets):
        return escape_json_text(text), True
    sealed = _Sealer(secrets).value(value)
    dumped = _encode(sealed)
    return escape_json_text(dumped), False


class ScrubbedText(str):
    """A text that :func:`~plandag.trace.redact.scrub_secret_values` leaves as it is while
    the environment's secret values are :attr:`environment`: the
    :class:`SecretMaskingConnection` binds it without scanning it again as long as they
    are (and masks it as any other text once they changed).

    Attributes:
        environment: the secret values it was checked against, longest first (the keys of
            :func:`~plandag.trace.redact.environment_secrets`).
    """

    environment: tuple[str, ...] = ()


def sealed_store_text(value: Any, *, text: str | None = None) -> str:
    """:func:`sealed_json` of ``value`` under the process's environment, for a column of the
    run store: the same text, as a :class:`ScrubbedText` when sealing changed nothing and
    the text holds nothing the store's connection masks, so it is not scanned twice.

    Why that holds: sealing changed nothing, so the text holds no secret value's JSON form
    and, lowered, none of ``_SEALING_WORDS``, among them ``sk-``, ``eyj``, ``bearer`` and
    ``basic``, nor a letter only a case-insensitive pattern folds to ASCII, nor a URL with a
    password; then :func:`~plandag.trace.redact.scrub_secret_values` finds no key, no JSON
    Web Token, no ``Bearer``/``Basic`` credential and no URL password in it, and a secret
    value only where it is written
    as it is, which is looked for here (a value holding a quote, a backslash or a control
    character is written otherwise in JSON).

    Args:
        value: JSON data.
        text: ``json.dumps(value, ensure_ascii=False, separators=(",", ":"),
            allow_nan=False)`` when the caller has it already, or None.

    Raises:
        TypeError, ValueError: ``value`` is not JSON data (an object, NaN or infinity).
    """
    secrets = environment_secrets()
    environment = tuple(secrets)
    forms, escaped = _secret_forms(environment)  # looked up once for both tests below
    if text is None:
        text = _encode(value)
    if may_need_sealing_by_rules(text) or (forms and any(form in text for form in forms)):
        return escape_json_text(_encode(_Sealer(secrets).value(value)))  # as _sealed_json
    sealed = escape_json_text(text)
    if escaped and any(secret in sealed for secret in escaped):
        return sealed
    scrubbed = ScrubbedText(sealed)
    scrubbed.environment = environment
    return scrubbed


def sealed_store_json_text(text: str, rules: bool, secrets: Mapping[str, str] | None = None) -> str:
    """:func:`sealed_store_text` of the JSON value whose compact text is ``text``, the value
    decoded only when sealing may change it.

    Args:
        text: ``json.dumps(value, ensure_ascii=False, separators=(",", ":"),
            allow_nan=False)`` of JSON data.
        rules: :func:`may_need_sealing_by_rules` of ``text`` (made where the text was, a
            batch's worker; False only when no rule applies).
        secrets: :func:`~plandag.trace.redact.environment_secrets` when the caller read them
            for several texts at once, else None (read here).

    Returns:
        The same text as ``sealed_store_text(json.loads(text), text=text)``, a
        :class:`ScrubbedText` under the same conditions.

    Raises:
        ValueError: ``text`` is not JSON.
    """
    secrets = environment_secrets() if secrets is None else secrets
    if rules or _holds_secret_json(text, secrets):
        return sealed_store_text(json.loads(text), text=text)
    sealed = escape_json_text(text)
    if _holds_escaped_secret(sealed, secrets):
        return sealed
    scrubbed = ScrubbedText(sealed)
    scrubbed.environment = tuple(secrets)
    return scrubbed


def scrubbed_text(text: str, secrets: Mapping[str, str] | None = None) -> str:
    """``text`` as :class:`SecretMaskingConnection` binds it (credential values masked,
    lone surrogates escaped), as a :class:`ScrubbedText` checked against ``secrets`` (the
    environment's, :func:`~plandag.trace.redact.environment_secrets`, when None): for a
    text bound many times (a batch's id on each of its rows), scanned once."""
    environment = tuple(environment_secrets() if secrets is None else secrets)
    masked = _masked_item(text, environment)
    checked = ScrubbedText(masked)
    checked.environment = environment
    return checked


def unseal(value: Any, environ: Mapping[str, str] | None = None, *, run_id: str = "") -> Any:
    """``value`` as it was before :func:`seal`, secrets read back from the environment.

    Args:
        value: data read from the store.
        environ: the environment (default ``os.environ``).
        run_id: the run, named in the error.

    Returns:
        A copy with each ``{"$env": NAME}`` replaced by the variable's value, each
        ``{"$env_text": [...]}`` joined into its text and each ``{"$literal": {...}}``
        unwrapped. Masked credentials stay ``[secret]``.

    Raises:
        InputError: a sealed value names a variable that is not set now, or a name that
            is not a secret's (never read).
    """
    source = os.environ if environ is None else environ

    def walk(item: Any) -> Any:
        if isinstance(item, Mapping):
            if len(item) == 1:
                ((key, inner),) = item.items()
                if key == _ENV and isinstance(inner, str):
                    return variable(inner)
                if key == _ENV_TEXT and isinstance(inner, list):
                    return "".join(str(walk(part)) for part in inner)
                if key == _LITERAL and isinstance(inner, Mapping):
                    return {name: walk(part) for name, part in inner.items()}
            return {name: walk(part) for name, part in item.items()}
        if isinstance(item, list):
            return [walk(part) for part in item]
        return item

    def variable(name: str) -> str:
        where = f"run {run_id}: " if run_id else ""
        if not is_secret_environment_name(name):
            raise InputError(
                f"{where}the store names the environment variable {name!r}, which is not a "
                "secret's name (*_API_KEY, *_TOKEN, *_SECRET, *_PASSWORD); it is not read"
            )
        if name not in source:
            raise InputError(
                f"{where}the run used the secret in the environment variable {name}, which "
                f"the store does not keep; set {name} to the same value and run the "
                "command again"
            )
        return source[name]

    return walk(value)


class SecretMaskingConnection(sqlite3.Connection):
    """A SQLite connection that masks credentials in every text value bound to a statement.

    The last line of defence of the run store: whatever a writer forgot to seal (a step's
    detail, an error message, a goal typed with a key in it, text other parts of plandag
    add later) reaches the database with secret values masked
    (:func:`plandag.trace.redact.scrub_secret_values`: the environment's secret values,
    ``sk-...`` keys, JSON Web Tokens, ``Bearer``/``Basic`` credentials, passwords in
    URLs), and with lone surrogates escaped (:mod:`plandag.surrogates`), so no text makes
    a write fail: a JSON object or array text as JSON (:func:`~plandag.surrogates.
    escape_json_text`, its strings escaped), any other text as text. Statements are run
    through :meth:`execute` and :meth:`executemany`; the environment is read once per
    statement.
    """

    _environment: tuple[str, ...] | None = None
    _known: dict[str, str]

    def _checked(self) -> tuple[tuple[str, ...], dict[str, str]]:
        """The environment's secret values now, and the texts this connection bound under
        them (forgotten when they change)."""
        environment = tuple(environment_secrets())
        if environment != self._environment:
            self._environment = environment
            self._known = {}
        return environment, self._known

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        """``sqlite3.Connection.execute`` with text parameters masked."""
        environment, known = self._checked()
        if (
            type(parameters) is list
            and len(parameters) > 8  # a statement of many rows
            and _bound_as_they_are((parameters,), environment, known)
        ):
            return super().execute(sql, parameters)
        return super().execute(sql, _masked(parameters, environment, known))

    def execute_values(self, sql: str, rows: Sequence[tuple[Any, ...]], /) -> sqlite3.Cursor:
        """:meth:`execute` of ``sql``, a statement of ``len(rows)`` rows of values, bound to
        the rows' parameters one after the other: the texts are checked a column of the
        rows at a time (a column of numbers is passed over without looking at each), before
        the rows are put one after the other; masked row by row when one would change."""
        environment, known = self._checked()
        if not _bound_as_they_are(rows, environment, known, rows=True):
            rows = [_masked(row, environment, known) for row in rows]
        return super().execute(sql, [item for row in rows for item in row])

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
        """``sqlite3.Connection.executemany`` with text parameters masked."""
        environment, known = self._checked()
        if (
            type(parameters) is list
            and len(parameters) > 1
            and _bound_as_they_are(parameters, environment, known, rows=True)
        ):
            return super().executemany(sql, parameters)
        return super().executemany(sql, (_masked(row, environment, known) for row in parameters))


if (type(None), sqlite3.PrepareProtocol) not in sqlite3.adapters:
    # None is bound as NULL either way. With no adapter registered for it, the sqlite3
    # module looks for one on every None it binds, through attribute look-ups that fail
    # and format an error (~3,500 instructions a None, CPython 3.11); through this one,
    # which returns it as it is, ~1,400. An adapter registered before is kept.
    sqlite3.register_adapter(type(None), cast("Callable[[None], None]", {}.get))


def _as_it_is(text: ScrubbedText) -> ScrubbedText:
    """The adapter of :class:`ScrubbedText` for the sqlite3 module: the text itself (bound
    as text, as any str subclass is)."""
    return text


if (ScrubbedText, sqlite3.PrepareProtocol) not in sqlite3.adapters:
    # The sqlite3 module looks for an adapter on every str subclass it binds, as on None
    # (~1,100 instructions more than this one's call, CPython 3.11); a ScrubbedText is bound
    # as the same text either way. An adapter registered before is kept.
    sqlite3.register_adapter(ScrubbedText, _as_it_is)


_KNOWN_TEXTS = 4096
"""The most texts a :class:`SecretMaskingConnection` remembers having bound (then it forgets
them all at once)."""
_KNOWN_CHARACTERS = 512
"""Texts longer than this are masked at every binding, never remembered."""


_NOT_TEXT: frozenset[type[Any]] = frozenset({int, float, bool, type(None), bytes})
"""Parameter types that are never text (bound as they are)."""


def _masked(parameters: Any, environment: tuple[str, ...], known: dict[str, str]) -> Any:
    """``parameters`` with every text masked (:func:`_masked_item`); a sequence comes back
    as it is when no text changed. ``known``: texts bound lately under ``environment`` and
    what they were bound as (a run's id, a step's state, a tool's name recur on every row)."""
    kind = type(parameters)
    if kind is not tuple and kind is not list and isinstance(parameters, Mapping):
        return {key: _masked_item(item, environment) for key, item in parameters.items()}
    changed: list[Any] | None = None
    index = -1
    not_text = _NOT_TEXT
    for item in parameters:
        index += 1
        kind = type(item)
        if kind in not_text:
            continue
        if kind is ScrubbedText:
            if item.environment == environment:
                continue  # checked against these very secrets (sealed_store_text), and escaped
        elif kind is not str and not isinstance(item, str):
            continue
        bound = known.get(item)
        if bound is None:
            bound = _remembered(item, environment, known)
        if bound is not item:
            if changed is None:
                changed = list(parameters)
            changed[index] = bound
    return parameters if changed is None else changed


def _remembered(text: str, environment: tuple[str, ...], known: dict[str, str]) -> str:
    """:func:`_masked_item` of ``text``, remembered in ``known`` (when it is not long)."""
    bound: str = _masked_item(text, environment)
    if len(text) <= _KNOWN_CHARACTERS:
        if len(known) >= _KNOWN_TEXTS:
            known.clear()
        known[text] = bound
    return bound


_PLAIN_KINDS: frozenset[type[Any]] = _NOT_TEXT | {str, ScrubbedText}
"""Parameter types :func:`_bound_as_they_are` looks at (any other: the row by row pass)."""


def _bound_as_they_are(
    parameters: Sequence[Any],
    environment: tuple[str, ...],
    known: dict[str, str],
    *,
    rows: bool = False,
) -> bool:
    """Whether :func:`_masked` leaves every parameter as it is: ``parameters`` is one
    statement's (``rows`` False; a sequence in ``parameters[0]``) or rows of parameters
    (``rows`` True; each a tuple). Looked at a column at a time (a statement's parameters
    as one): its parameters' types and its distinct texts are gathered in C, and each
    distinct text is masked once (or found in ``known``). False as soon as a text would be
    changed, or a parameter is of another type than :data:`_PLAIN_KINDS` (a str subclass
    other than :class:`ScrubbedText`, a mapping of named parameters), or a row is not a
    tuple of the first row's length: the caller then masks row by row. A
    :class:`ScrubbedText` checked against ``environment`` is left as it is, as
    :func:`_masked` leaves it; one checked against other secrets is looked at as a text."""
    if rows:
        if set(map(type, parameters)) != {tuple}:  # (a mapping would give its keys)
            return False
        try:
            columns: Iterable[Sequence[Any]] = list(zip(*parameters, strict=True))
        except ValueError:  # a row of another length
            return False
    else:
        columns = parameters
    not_text = _NOT_TEXT
    plain = _PLAIN_KINDS
    for column in columns:
        kinds = set(map(type, column))
        if kinds <= not_text:
            continue
        if not kinds <= plain:
            return False
        if ScrubbedText in kinds:  # those checked against these very secrets: as _masked
            column = [
                item
                for item in column
                if type(item) is not ScrubbedText or item.environment != environment
            ]
        for text in set(column):  # (equal texts are masked alike: any one of them stays)
            if type(text) is not str and type(text) is not ScrubbedText:
                continue
            bound = known.get(text)
            if bound is None:
                bound = _remembered(text, environment, known)
            if bound != text:
                return False
    return True


def _masked_item(item: Any, environment: tuple[str, ...]) -> Any:
    if not isinstance(item, str):
        return item
    if type(item) is ScrubbedText and item.environment == environment:
        return item  # checked against these very secrets (sealed_store_text), and escaped
    item = scrub_secret_values(item, environment)
    if has_surrogates(item):
        return _escaped_column(item)
    return item


def _escaped_column(text: str) -> str:
    """``text`` with its lone surrogates escaped: as JSON when it is the text of a JSON
    object or array (a JSON column a writer dumped without escaping), else as text."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            json.loads(text)
        except ValueError:
            pass
        else:
            return escape_json_text(text)
    return escape_text(text)
