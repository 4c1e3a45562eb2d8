"""Masking of secrets (always) and personal data (``--redact``) in recorded values and logs.

Two layers, applied to every ``attrs`` value of a trace line before it is written
(``plandag.trace.writer``) and, for secrets, to every log record:

* :func:`scrub_secrets` — always on. API keys and authorization headers never reach a trace
  or a log: values under secret-named keys (``api_key``, ``x-api-key``, ``authorization``,
  ``token``, ``password``, ``cookie``...), ``Bearer``/``Basic`` credentials, Anthropic
  (``sk-ant-...``) and OpenAI (``sk-...``) keys, JSON Web Tokens, passwords in URLs
  (``http://user:[secret]@host/``), and the current values of the environment's
  ``*_API_KEY``/``*_TOKEN``/``*_SECRET``/``*_PASSWORD`` variables.
* :func:`redact_personal` — with ``--redact``, for users bound by the LGPD (Lei
  13.709/2018, art. 5 I: personal data is information about an identified or identifiable
  natural person). It masks CPFs, e-mail addresses, Brazilian phone numbers and the names of
  individuals in NF-e parties (a recipient identified by CPF or ``idEstrangeiro``). A CNPJ
  identifies a company, not a person, and is kept, as are access keys, money values and dates.

Masks are plain and visible: ``[secret]``, ``[cpf]``, ``[email]``, ``[phone]``, ``[name]``.
Containers are copied (tuples become lists), the input is never changed; values that are not
JSON (bytes, sets, objects) are returned as they are. Every pattern is a simple regular
expression whose repetitions are bounded or stop at the next delimiter, so a string of
several megabytes is handled in linear time.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "CASE_LOOKALIKES",
    "CPF_MASK",
    "EMAIL_MASK",
    "KEY_NUMBERS",
    "KEY_PLAIN",
    "LONG_TEXT",
    "NAME_MASK",
    "PHONE_MASK",
    "SECRET_MASK",
    "Redactor",
    "SecretFilter",
    "environment_secrets",
    "holds_url_password",
    "install_secret_filter",
    "is_secret_environment_name",
    "is_secret_key",
    "is_valid_cpf",
    "may_hold_word",
    "redact_personal",
    "scrub_secret_text",
    "scrub_secret_values",
    "scrub_secrets",
    "word_finder",
]

SECRET_MASK = "[secret]"
CPF_MASK = "[cpf]"
EMAIL_MASK = "[email]"
PHONE_MASK = "[phone]"
NAME_MASK = "[name]"

# ---------------------------------------------------------------------------------------------
# Secrets
# ---------------------------------------------------------------------------------------------

# Key names (lower case, dashes as underscores) whose values are credentials.
_SECRET_KEYS = frozenset(
    {
        "api_key",
        "apikey",
        "x_api_key",
        "x_goog_api_key",
        "authorization",
        "proxy_authorization",
        "token",
        "access_token",
        "refresh_token",
        "id_token",
        "secret",
        "client_secret",
        "secret_key",
        "password",
        "passwd",
        "cookie",
        "set_cookie",
    }
)
_SECRET_KEY_SUFFIXES = ("_api_key", "_token", "_secret", "_secret_key", "_password")

# Environment variables whose values are secrets wherever they appear.
_SECRET_ENV_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD")
_SECRET_ENV_MIN_LENGTH = 8

_ANTHROPIC_KEY = re.compile(r"(?<![A-Za-z0-9])sk-ant-[A-Za-z0-9_-]{8,}")
_OPENAI_KEY = re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{20,}")
_JSON_WEB_TOKEN = re.compile(
    r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
)
# RFC 7617 (Basic) and RFC 6750 (Bearer) credentials: the scheme, blanks, a token68.
_AUTH_SCHEME = re.compile(r"(?i)(?<![A-Za-z0-9_])(bearer|basic)([ \t]+)([A-Za-z0-9._~+/=-]{8,})")
# `name: value`, `name=value`, `"name": "value"`, `('name', 'value')` for secret names inside
# free text (header dumps, URLs' query strings, reprs). Cookies run to the end of the line.
_SECRET_NAMES = (
    r"(?:x-)?api[-_]?key|(?:proxy-)?authorization|(?:access|refresh|id|auth|session|api)[-_]token"
    r"|token|client[-_]secret|secret[-_]key|secret|password|passwd"
)
_KEY_VALUE = re.compile(
    r"(?i)(?<![A-Za-z0-9])(" + _SECRET_NAMES + r")"
    r"(['\"]?[ \t]*[:=][ \t]*['\"]?|['\"][ \t]*,[ \t]*['\"])"
    r"(?!\[secret\]|(?:bearer|basic)[ \t])([^\s'\",;&)}\]]+)"
)
# RFC 3986, 3.2.1: the userinfo of a URL, ``scheme://user:password@host``; the password is
# masked, the user name kept. As ``urllib.parse`` reads it, the user name runs to the first
# ``:`` and the password to the last ``@`` before the host. Neither holds what RFC 3986 never
# allows raw in a URL (blanks and other control characters, ``"\\<>{}|^```) nor ``[]``
# and the delimiters ``/?#``, so a match stops there: it never runs across the quotes of
# JSON or a table's border, and every character JSON escapes is among those, so a URL
# matches in a string value exactly when it matches in that value's JSON text. Linear time:
# each try starts at a ``://`` and the host after each ``@`` is read once (possessive).
_NEVER_IN_URL = r"\x00-\x20\x7f\"\\<>{}|^`"
_URL_PASSWORD = re.compile(
    r"(://[^" + _NEVER_IN_URL + r"/?#\[\]:]*:)"  # the scheme's end and the user name
    r"([^" + _NEVER_IN_URL + r"/?#\[\]]+)"  # the password, to ...
    r"(?=@[^" + _NEVER_IN_URL + r"/?#@]*+(?!@))"  # ... the last @ before the host
)
_COOKIE = re.compile(
    r"(?i)(?<![A-Za-z0-9])(set-cookie|cookie)(['\"]?[ \t]*[:=][ \t]*['\"]?)"
    r"(?!\[secret\])([^\r\n'\"]+)"
)


def holds_url_password(text: str) -> bool:
    """Whether ``text`` holds a URL with a password (``scheme://user:password@``) that the
    secret rules mask (a password already ``[secret]`` is not counted)."""
    return "://" in text and _URL_PASSWORD.search(text) is not None


def _mask_url_passwords(text: str) -> str:
    if "://" not in text:
        return text
    return _URL_PASSWORD.sub(lambda match: f"{match.group(1)}{SECRET_MASK}", text)


def is_secret_key(name: str) -> bool:
    """Whether a mapping key or header name names a credential.

    Args:
        name: the key, compared without case, with ``-`` and ``_`` alike and without an XML
            namespace (``{uri}name`` or ``prefix:name``): ``X-Api-Key``, ``authorization``,
            ``access_token``, ``ANTHROPIC_API_KEY``, ``client_secret``, ``password``...

    Returns:
        True for the names in the module's list and for names ending in ``_api_key``,
        ``_token``, ``_secret``, ``_secret_key`` or ``_password``. Plural counters such as
        ``input_tokens`` are not credentials.
    """
    normalized = _local_name(name).lower().replace("-", "_")
    return normalized in _SECRET_KEYS or normalized.endswith(_SECRET_KEY_SUFFIXES)


#: The environment :func:`environment_secrets` last read (a copy of ``os.environ``'s own
#: mapping of encoded names to encoded values) and what it found there.
_remembered: tuple[dict[Any, Any], dict[str, str]] | None = None


def environment_secrets() -> dict[str, str]:
    """The current secret values of the environment, by value, longest value first.

    Returns:
        ``{value: NAME}`` for every variable named ``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``
        or ``*_PASSWORD`` (any case) whose value has 8 characters or more; when two names
        hold the same value, the first name in sorted order. A new dict at each call.

    The answer depends on ``os.environ`` alone: it is remembered with a copy of the
    environment it was read from, and given again while ``os.environ`` holds exactly that
    (one comparison of two small dicts, instead of decoding and testing every variable's
    name); any change (a value, a name, a variable added or removed) reads it again.
    """
    global _remembered
    data = getattr(os.environ, "_data", None)
    if not isinstance(data, dict):
        return _read_environment_secrets()
    remembered = _remembered
    if remembered is not None and remembered[0] == data:
        return dict(remembered[1])
    snapshot = dict(data)
    found = _read_environment_secrets()
    _remembered = (snapshot, found)
    return dict(found)


def _read_environment_secrets() -> dict[str, str]:
    found: dict[str, str] = {}
    for name in sorted(os.environ):
        if name.upper().endswith(_SECRET_ENV_SUFFIXES):
            value = os.environ.get(name, "")
            if len(value) >= _SECRET_ENV_MIN_LENGTH and value not in found:
                found[value] = name
    return dict(sorted(found.items(), key=lambda item: (-len(item[0]), item[0])))


def is_secret_environment_name(name: str) -> bool:
    """Whether environment variable ``name`` holds a secret (``*_API_KEY``, ``*_TOKEN``,
    ``*_SECRET``, ``*_PASSWORD``, any case)."""
    return name.upper().endswith(_SECRET_ENV_SUFFIXES)


#: The letters that ``re.IGNORECASE`` matches with an ASCII letter while ``str.lower`` does
#: not put that letter where a word needs it: U+0131 (dotless i) and U+017F (long s) are not
#: lowered to one, and U+0130 (capital I with a dot) is lowered to ``i`` and a combining dot,
#: which breaks the word (``authorİzation`` lowers to no ``authorization``); U+212A (the
#: Kelvin sign) lowers to ``k`` and needs nothing. A text holding one may hold a word in any
#: case.
CASE_LOOKALIKES = ("\u0131", "\u017f", "\u0130")


def may_hold_word(text: str, words: Iterable[str]) -> bool:
    """Whether ``text`` may hold one of ``words`` in any case, as a case-insensitive regular
    expression would find it: a cheap test (``str.lower`` and substring search) that lets a
    caller skip a costlier scan. Never a false negative; a text holding a letter that only
    ``re.IGNORECASE`` folds to ASCII (dotless i, long s) always answers True.

    Args:
        text: any text.
        words: lower-case ASCII words.
    """
    if any(letter in text for letter in CASE_LOOKALIKES):
        return True
    lowered = text.lower()
    return any(word in lowered for word in words)


LONG_TEXT = 4096
"""Characters from which a text's words are looked for with :func:`word_finder`, which
keeps what it found for the next caller asking about the same text (a run's plan: the store
seals it, then the trace writes it); shorter texts are lowered by each caller."""
_last_words: tuple[str, str, dict[str, bool]] = ("", "", {})


def lowered_text(text: str) -> str:
    """``text.lower()``, made once for the callers asking about the same text (the same
    ``str`` object) in turn, as :func:`word_finder` keeps it.

    Args:
        text: any text.
    """
    global _last_words
    last = _last_words
    if last[0] is not text:
        last = _last_words = (text, text.lower(), {})
    return last[1]


def word_finder(text: str) -> Callable[[str], bool]:
    """A function telling whether ``text.lower()`` holds a word (lower-case ASCII), for a
    text of :data:`LONG_TEXT` characters or more: the lowered text and each word's answer
    are kept until a function is asked for another text, so that callers looking at the
    same text in turn (the same ``str`` object) lower it and search it for a word once.

    Args:
        text: any text.
    """
    lowered = lowered_text(text)
    found = _last_words[2]

    def held(word: str) -> bool:
        answer = found.get(word)
        if answer is None:
            answer = found[word] = word in lowered
        return answer

    return held


_AUTH_WORDS = ("bearer", "basic")

# The text rules of :func:`scrub_secrets`, in the order they apply. Each needs, to match, what
# its guard finds in the text (a literal, or a word in any case: the text lowered once; a
# letter only ``re.IGNORECASE`` folds to ASCII, CASE_LOOKALIKES, counts as every word).
_ANTHROPIC, _OPENAI, _JWT, _URL, _AUTH, _PAIR, _COOKIE_RULE = (1 << bit for bit in range(7))
_RULE_PATTERNS = (
    (_ANTHROPIC, _ANTHROPIC_KEY),
    (_OPENAI, _OPENAI_KEY),
    (_JWT, _JSON_WEB_TOKEN),
    (_URL, _URL_PASSWORD),
    (_AUTH, _AUTH_SCHEME),
    (_PAIR, _KEY_VALUE),
    (_COOKIE_RULE, _COOKIE),
)
_VALUE_RULES = _ANTHROPIC | _OPENAI | _JWT | _URL | _AUTH
_TEXT_RULES = _VALUE_RULES | _PAIR | _COOKIE_RULE
# The words of a secret name in a ``name: value`` pair (every spelling _SECRET_NAMES allows
# holds one of them).
_PAIR_WORDS = ("api", "auth", "token", "secret", "passw")
_PAIR_CHARACTERS = (":", "=", ",")

#: The shortest text any rule of :func:`scrub_secrets` can change: ``://:p@`` (a URL's
#: password of one character); every other rule needs more (a ``token=x`` pair 7, an
#: environment's secret value 8). Shorter strings are never scanned.
SHORTEST_SECRET_TEXT = 6


def _rules_in(text: str, rules: int) -> int:
    """The rules among ``rules`` that may match in ``text``: those whose literal or word it
    holds (a necessary condition of a match, never a sufficient one)."""
    found = 0
    if "sk-" in text:
        found |= _ANTHROPIC | _OPENAI
    if "eyJ" in text:
        found |= _JWT
    if "://" in text:
        found |= _URL
    if any(letter in text for letter in CASE_LOOKALIKES):
        return found | _AUTH | _PAIR | _COOKIE_RULE
    lowered = text.lower()
    if "bearer" in lowered or "basic" in lowered:
        found |= _AUTH
    if rules & _PAIR and any(character in text for character in _PAIR_CHARACTERS):
        if any(word in lowered for word in _PAIR_WORDS):
            found |= _PAIR
        if "cookie" in lowered:
            found |= _COOKIE_RULE
    return found & rules


def _flagged(pattern: re.Pattern[str]) -> str:
    source = pattern.pattern
    return f"(?i:{source[4:]})" if source.startswith("(?i)") else f"(?:{source})"


@functools.cache  # at most one per subset of the seven rules
def _combined(rules: int) -> re.Pattern[str]:
    """One expression that matches where any of ``rules`` matches: a text is scanned once
    to learn whether it holds a credential at all."""
    return re.compile(
        "|".join(_flagged(pattern) for rule, pattern in _RULE_PATTERNS if rule & rules)
    )


def _mask_by_rules(text: str, rules: int) -> str:
    """``text`` with the matches of ``rules`` masked, the rules applied one after the other
    in their order (each sees what the ones before it masked)."""
    if rules & (_ANTHROPIC | _OPENAI) and "sk-" in text:
        text = _ANTHROPIC_KEY.sub(SECRET_MASK, text)
        text = _OPENAI_KEY.sub(SECRET_MASK, text)
    if rules & _JWT and "eyJ" in text:
        text = _JSON_WEB_TOKEN.sub(SECRET_MASK, text)
    if rules & _URL:
        text = _mask_url_passwords(text)
    if rules & _AUTH and may_hold_word(text, _AUTH_WORDS):
        text = _AUTH_SCHEME.sub(_mask_auth_scheme, text)
    if rules & _PAIR:
        text = _KEY_VALUE.sub(_mask_pair_value, text)
    if rules & _COOKIE_RULE:
        text = _COOKIE.sub(_mask_pair_value, text)
    return text


def _mask_pair_value(match: re.Match[str]) -> str:
    return f"{match.group(1)}{match.group(2)}{SECRET_MASK}"


class _SecretScrubber:
    """The secret rules for one set of secret values.

    Strings are masked in two steps: the secret values (each looked for with ``in``, C's
    substring search: on CPython it beats one regular expression alternating the values
    and an Aho-Corasick automaton, ``benchmarks/trace_bench.py --matchers``; the values
    found are replaced longest first), then the rules that find a credential by its form
    (:func:`_masked_by_rules`: one scan, each text once).
    """

    def __init__(self, environment: tuple[str, ...]) -> None:
        self.environment = environment
        self.shortest_value = min((len(value) for value in environment), default=sys.maxsize)
        self.shortest = min(self.shortest_value, SHORTEST_SECRET_TEXT)

    def _replace_values(self, text: str) -> str:
        if len(text) < self.shortest_value:
            return text
        for value in self.environment:
            if value in text:
                text = text.replace(value, SECRET_MASK)
        return text

    def text(self, text: str) -> str:
        """``text`` masked by every rule (:func:`scrub_secret_text`)."""
        if len(text) < self.shortest:
            return text
        return _masked_by_rules(self._replace_values(text), _TEXT_RULES, _REMEMBERED_TEXTS)

    def values(self, text: str) -> str:
        """``text`` masked by the rules for credential values (:func:`scrub_secret_values`)."""
        if len(text) < self.shortest:
            return text
        return _masked_by_rules(self._replace_values(text), _VALUE_RULES, _REMEMBERED_VALUES)


#: Texts the rules were applied to lately, and what they gave (one mapping for the rules of
#: :func:`scrub_secret_text`, one for those of :func:`scrub_secret_values`): at most
#: :data:`_REMEMBERED` texts of at most :data:`_REMEMBERED_CHARACTERS` characters each
#: (then forgotten all at once). The rules do not depend on the environment, so a text is
#: scanned once whoever masks it: the trace's redactor, the run store's sealing and its
#: connection, the command line's output.
_REMEMBERED = 4096
_REMEMBERED_CHARACTERS = 512
_REMEMBERED_TEXTS: dict[str, str] = {}
_REMEMBERED_VALUES: dict[str, str] = {}


def _masked_by_rules(text: str, rules: int, remembered: dict[str, str]) -> str:
    """``text`` with the matches of ``rules`` masked: the rules whose words it holds are
    tried by one combined expression (:func:`_combined`) in one scan, and only a text with
    a match is masked rule by rule (:func:`_mask_by_rules`); a text seen lately is not
    scanned again."""
    if len(text) < SHORTEST_SECRET_TEXT:
        return text
    masked = remembered.get(text)
    if masked is not None:
        return masked
    masked = text
    present = _rules_in(text, rules)
    if present and _combined(present).search(text) is not None:
        masked = _mask_by_rules(text, rules)
    if len(text) <= _REMEMBERED_CHARACTERS:
        if len(remembered) >= _REMEMBERED:
            remembered.clear()
        remembered[text] = masked
    return masked


@functools.lru_cache(maxsize=4)
def _scrubber(environment: tuple[str, ...]) -> _SecretScrubber:
    return _SecretScrubber(environment)


def scrub_secret_values(text: str, environment: Iterable[str] | None = None) -> str:
    """``text`` with credential values masked as ``[secret]``, its structure left alone.

    Masks what is a credential by its value alone: the environment's secret values, Anthropic
    and OpenAI keys, JSON Web Tokens, ``Bearer``/``Basic`` credentials, and the password of
    a URL (``http://user:[secret]@host/``). Unlike
    :func:`scrub_secrets` it does not look for ``name: value`` pairs, so JSON, CSV or a
    table stays well formed; use it on text already rendered (command output, text stored
    as is).

    Args:
        text: any text.
        environment: the secret values to mask (default: :func:`environment_secrets`).

    Returns:
        The masked text (the same object when nothing matched).
    """
    values = tuple(environment_secrets() if environment is None else environment)
    return _scrubber(values).values(text)


def scrub_secret_text(text: str, environment: Iterable[str] = ()) -> str:
    """``text`` masked by :func:`scrub_secrets`'s rules for strings, the environment given.

    Args:
        text: a string value (not JSON text: ``name: value`` pairs inside are masked too).
        environment: the secret values to mask wherever they appear (default: none; pass
            :func:`environment_secrets` keys to mask the environment's).

    Returns:
        The masked text.
    """
    return _scrubber(tuple(environment)).text(text)


def _environment_secrets() -> tuple[str, ...]:
    """The current values of secret-named environment variables, longest first (the keys
    of :func:`environment_secrets`, in its order: by length, longest first, then by value)."""
    return tuple(environment_secrets())


def _looks_like_credential(token: str) -> bool:
    """Whether the word after ``Bearer``/``Basic`` is a credential rather than prose."""
    if len(token) >= 24:
        return True
    if any(not char.isalpha() for char in token):
        return True
    return any(char.isupper() for char in token[1:])


def _mask_auth_scheme(match: re.Match[str]) -> str:
    if not _looks_like_credential(match.group(3)):
        return match.group(0)
    return f"{match.group(1)}{match.group(2)}{SECRET_MASK}"


# ---------------------------------------------------------------------------------------------
# Personal data (LGPD)
# ---------------------------------------------------------------------------------------------

_CPF_FORMATTED = re.compile(r"(?<![0-9])\d{3}\.\d{3}\.\d{3}-\d{2}(?![0-9])")
# Isolated runs of exactly 11 digits (not part of a longer number, a hash or an identifier).
_ELEVEN_DIGITS = re.compile(r"(?<![0-9A-Za-z])\d{11}(?![0-9A-Za-z])")
_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}"
    r"(?:\.[A-Za-z0-9-]{1,63}){0,8}\.[A-Za-z]{2,24}(?![A-Za-z0-9-])"
)
# Written phone numbers: +55 prefix, a DDD in parentheses, or a DDD then a blank or dot; the
# subscriber number is 8 digits (landline) or 9 beginning with 9 (mobile), maybe split.
_PHONE = re.compile(
    r"(?<![0-9])(\+55[ .-]?(?:\(\d{2}\)|\d{2})|\(\d{2}\)|\d{2}(?=[ .-]))"
    r"([ .-]?(?:9[ .]?)?\d{4}([ .-]?)\d{4})(?![0-9])"
)
# ANATEL's Plano Geral de Códigos Nacionais (Resolução 263/2001): the DDD codes in use.
_DDD_CODES = frozenset(
    str(code)
    for code in (
        *range(11, 20),
        21,
        22,
        24,
        27,
        28,
        *range(31, 36),
        37,
        38,
        *range(41, 50),
        51,
        53,
        54,
        55,
        *range(61, 70),
        71,
        73,
        74,
        75,
        77,
        79,
        *range(81, 90),
        *range(91, 100),
    )
)

# NF-e parties (MOC 7.0, Anexo I): emitter C, recipient E, pick-up F, delivery G, carrier X03.
_PARTY_TAGS = ("dest", "emit", "retirada", "entrega", "transporta")
_PARTY_OPENINGS = {
    tag: re.compile(r"<((?:[A-Za-z_][\w.-]*:)?" + tag + r")(?:\s[^<>]*)?>") for tag in _PARTY_TAGS
}
_XML_CPF = re.compile(
    r"(<(?:[A-Za-z_][\w.-]*:)?CPF(?:\s[^<>]*)?>)([^<]*)(</(?:[A-Za-z_][\w.-]*:)?CPF>)"
)
_XML_PERSONAL_FIELD = re.compile(
    r"(<(?:[A-Za-z_][\w.-]*:)?(xNome|xFant|fone|email)(?:\s[^<>]*)?>)([^<]*)"
    r"(</(?:[A-Za-z_][\w.-]*:)?\2>)"
)
_XML_HAS_CPF = re.compile(r"<(?:[A-Za-z_][\w.-]*:)?CPF(?:\s[^<>]*)?>\s*[^\s<]")
_XML_HAS_FOREIGN_ID = re.compile(r"<(?:[A-Za-z_][\w.-]*:)?idEstrangeiro[\s/>]")
_XML_HAS_CNPJ = re.compile(r"<(?:[A-Za-z_][\w.-]*:)?CNPJ(?:\s[^<>]*)?>\s*[^\s<]")
_FIELD_MASKS = {"xNome": NAME_MASK, "xFant": NAME_MASK, "fone": PHONE_MASK, "email": EMAIL_MASK}

# Mapping keys whose values are known not to be personal data (identifiers of companies,
# documents, products and places; digests): pattern masking skips them, so an 11-digit IE or
# a hash is never taken for a CPF or a phone.
_NOT_PERSONAL_KEYS = frozenset(
    {
        "CNPJ",
        "IE",
        "IEST",
        "IM",
        "CNAE",
        "chNFe",
        "nProt",
        "cNF",
        "cDV",
        "nNF",
        "serie",
        "cEAN",
        "cEANTrib",
        "cBarra",
        "cBarraTrib",
        "NCM",
        "CEST",
        "CFOP",
        "cMun",
        "cMunFG",
        "cUF",
        "cPais",
        "CEP",
        "digVal",
        "sha256",
        "hash",
        "run_id",
        "step_id",
    }
)


def is_valid_cpf(digits: str) -> bool:
    """Whether 11 digits are a CPF with valid check digits.

    The rule is the Receita Federal's módulo 11: the first check digit is ``(Σ dᵢ·(11-i)
    for i = 1..9) · 10 mod 11 mod 10`` (weights 10 down to 2), the second the same over the
    first 10 digits with weights 11 down to 2. Sequences of one repeated digit
    (``11111111111``) pass the arithmetic but are not issued, so they are rejected.

    Args:
        digits: the candidate, exactly 11 ASCII digits (no dots or dash).

    Returns:
        True when both check digits match.
    """
    if len(digits) != 11 or not digits.isascii() or not digits.isdigit():
        return False
    if digits == digits[0] * 11:
        return False
    numbers = [int(char) for char in digits]
    for length in (9, 10):
        total = sum(number * (length + 1 - index) for index, number in enumerate(numbers[:length]))
        if total * 10 % 11 % 10 != numbers[length]:
            return False
    return True


def _mask_eleven_digits(match: re.Match[str]) -> str:
    digits = match.group(0)
    if is_valid_cpf(digits):
        return CPF_MASK
    if digits[:2] in _DDD_CODES and digits[2] == "9":
        return PHONE_MASK  # DDD + a 9-digit mobile number written without separators
    return digits


def _mask_phone(match: re.Match[str]) -> str:
    prefix = match.group(1)
    if prefix[0] not in "+(" and (prefix not in _DDD_CODES or match.group(3) != "-"):
        return match.group(0)  # a bare DDD needs a known code and a dash inside the number
    return PHONE_MASK


def _mask_party_block(block: str) -> str:
    individual = bool(_XML_HAS_CPF.search(block) or _XML_HAS_FOREIGN_ID.search(block))
    if not individual or _XML_HAS_CNPJ.search(block):
        return block
    return _XML_PERSONAL_FIELD.sub(
        lambda match: (
            match.group(1) + _FIELD_MASKS[match.group(2)] + match.group(4)
            if match.group(3).strip()
            else match.group(0)
        ),
        block,
    )


def _redact_xml_parties(text: str) -> str:
    """Mask names, phones and e-mails inside NF-e party elements of individuals (XML text)."""
    for tag in _PARTY_TAGS:
        if f"{tag}>" not in text and f"{tag} " not in text:
            continue
        opening = _PARTY_OPENINGS[tag]
        pieces: list[str] = []
        position = 0
        while True:
            match = opening.search(text, position)
            if match is None:
                break
            close = f"</{match.group(1)}>"
            end = text.find(close, match.end())
            if end < 0:
                break
            pieces.append(text[position : match.end()])
            pieces.append(_mask_party_block(text[match.end() : end]))
            position = end
        if pieces:
            pieces.append(text[position:])
            text = "".join(pieces)
    return text


def _redact_personal_text(text: str) -> str:
    if "<" in text and ("CPF" in text or "idEstrangeiro" in text):
        text = _redact_xml_parties(text)
        text = _XML_CPF.sub(
            lambda match: (
                match.group(1) + CPF_MASK + match.group(3)
                if match.group(2).strip()
                else match.group(0)
            ),
            text,
        )
    if "@" in text:
        text = _EMAIL.sub(EMAIL_MASK, text)
    text = _CPF_FORMATTED.sub(CPF_MASK, text)
    text = _ELEVEN_DIGITS.sub(_mask_eleven_digits, text)
    return _PHONE.sub(_mask_phone, text)


def _is_individual_party(mapping: Mapping[Any, Any]) -> bool:
    """Whether a mapping is an NF-e party identified as a natural person (CPF or foreign id).

    A party with a CNPJ is a company. ``idEstrangeiro`` (a foreign recipient) may name a
    person or a company; with no way to tell, it counts as a person.
    """
    fields = {_local_name(key): value for key, value in mapping.items() if isinstance(key, str)}
    if fields.get("CNPJ") not in (None, ""):
        return False
    return fields.get("CPF") not in (None, "") or fields.get("idEstrangeiro") is not None


# ---------------------------------------------------------------------------------------------
# The walk over nested values
# ---------------------------------------------------------------------------------------------


def _local_name(key: str) -> str:
    """``{uri}xNome`` and ``nfe:xNome`` → ``xNome``."""
    if key.startswith("{"):
        key = key.rpartition("}")[2]
    return key.rpartition(":")[2]


@functools.lru_cache(maxsize=4096)
def _key_facts(key: str) -> tuple[str, bool]:
    """A mapping key's local name and whether it names a credential (records repeat the
    same few hundred keys)."""
    return _local_name(key), is_secret_key(key)


#: Values returned as they are: they hold no text to scan.
_SCALARS = frozenset({int, float, bool, type(None)})

#: :meth:`Redactor.key_kind`: a key written as it is, a value under it masked as anywhere.
KEY_PLAIN = 1
#: :meth:`Redactor.key_kind`: a key written as it is, a number, boolean or None under it too.
KEY_NUMBERS = 2
# The keys whose presence decides whether an NF-e party is a person (_is_individual_party).
_PARTY_KEYS = frozenset({"CPF", "CNPJ", "idEstrangeiro"})


class _Walk:
    """One pass over a value: secrets always, personal data when ``personal``."""

    def __init__(
        self, *, secrets: bool, personal: bool, environment: tuple[str, ...] | None = None
    ) -> None:
        self.secrets = secrets
        self.personal = personal
        if not secrets:
            self.environment: tuple[str, ...] = ()
        else:
            self.environment = environment if environment is not None else _environment_secrets()
        self.scrubber = _scrubber(self.environment)
        self._path: set[int] = set()

    def busy(self) -> bool:
        """Whether this walk is inside a value now (a walk started from within another)."""
        return bool(self._path)

    def text(self, text: str, *, personal: bool) -> str:
        if self.secrets:
            text = self.scrubber.text(text)
        if personal:
            text = _redact_personal_text(text)
        return text

    def value(self, value: Any, *, personal: bool) -> Any:
        kind = type(value)
        if kind is str:
            return self.text(value, personal=personal)
        if kind in _SCALARS:
            return value
        if isinstance(value, str):
            return self.text(value, personal=personal)
        if isinstance(value, Mapping):
            return self._container(value, personal, self._mapping)
        if isinstance(value, list | tuple):
            return self._container(value, personal, self._sequence)
        return value

    def _container(self, value: Any, personal: bool, walk: Callable[[Any, bool], Any]) -> Any:
        marker = id(value)
        if marker in self._path:
            return "[cycle]"
        self._path.add(marker)
        try:
            return walk(value, personal)
        finally:
            self._path.discard(marker)

    def _mapping(self, mapping: Mapping[Any, Any], personal: bool) -> dict[Any, Any]:
        if not personal and self.secrets:
            return self._secret_mapping(mapping)
        individual = personal and _is_individual_party(mapping)
        result: dict[Any, Any] = {}
        for key, item in mapping.items():
            if isinstance(key, str):
                name, secret = _key_facts(key)
                new_key = self.text(key, personal=personal)
            else:
                name, secret, new_key = None, False, key
            if new_key in result:  # two keys masked alike: keep both values
                new_key = f"{new_key}#{len(result)}"
            result[new_key] = self._field(name, secret, item, personal, individual)
        return result

    def _secret_mapping(self, mapping: Mapping[Any, Any]) -> dict[Any, Any]:
        """:meth:`_mapping` for secrets alone: the same rules, strings and plain values
        handled in the loop (a trace line's attrs are mostly those)."""
        scrub = self.scrubber.text
        shortest = self.scrubber.shortest
        result: dict[Any, Any] = {}
        for key, item in mapping.items():
            if type(key) is str:
                secret = _key_facts(key)[1]
                new_key = scrub(key) if len(key) >= shortest else key
            elif isinstance(key, str):
                secret, new_key = _key_facts(key)[1], scrub(key)
            else:
                secret, new_key = False, key
            if new_key in result:  # two keys masked alike: keep both values
                new_key = f"{new_key}#{len(result)}"
            kind = type(item)
            if secret and item is not None:
                result[new_key] = SECRET_MASK
            elif kind is str:
                result[new_key] = scrub(item) if len(item) >= shortest else item
            elif kind in _SCALARS:
                result[new_key] = item
            else:
                result[new_key] = self.value(item, personal=False)
        return result

    def _field(
        self, name: str | None, secret: bool, item: Any, personal: bool, individual: bool
    ) -> Any:
        if name is None:
            return self.value(item, personal=personal)
        if secret and self.secrets and item is not None:
            return SECRET_MASK
        if personal and isinstance(item, str | int) and item not in ("", None):
            if name.upper() == "CPF":
                return CPF_MASK
            if individual and name in _FIELD_MASKS:
                return _FIELD_MASKS[name]
        if personal and name in _NOT_PERSONAL_KEYS:
            return self.value(item, personal=False)
        return self.value(item, personal=personal)

    def _sequence(self, items: Iterable[Any], personal: bool) -> list[Any]:
        result: list[Any] = []
        plain = self.secrets and not personal  # strings need only the secret rules
        scrub = self.scrubber.text
        shortest = self.scrubber.shortest
        for item in items:
            kind = type(item)
            if kind in _SCALARS:
                result.append(item)
            elif plain and kind is str:
                result.append(scrub(item) if len(item) >= shortest else item)
            elif (
                self.secrets
                and isinstance(item, list | tuple)
                and len(item) == 2
                and isinstance(item[0], str)
                and item[1] is not None
                and _key_facts(item[0])[1]
            ):  # a header pair: ("Authorization", "Bearer ...")
                result.append([item[0], SECRET_MASK])
            else:
                result.append(self.value(item, personal=personal))
        return result


#: How deep and how many items :func:`_kept_as_is` looks before it gives up (the walk then
#: copies the value as always).
_KEPT_DEPTH = 8
_KEPT_ITEMS = 256


def _kept_as_is(value: Any, scrubber: _SecretScrubber, budget: list[int], depth: int) -> bool:
    """Whether the secrets-only walk would return an equal copy of ``value`` and
    ``to_jsonable`` would too: exactly ``dict`` (``str`` keys), ``list``, ``str``, ``int``,
    ``bool``, None and finite ``float``; no key that names a credential over a value that is
    not None, no header pair, no text a rule masks (the walk's own tests, cached by text)."""
    budget[0] -= 1
    if budget[0] < 0 or depth > _KEPT_DEPTH:
        return False
    kind = type(value)
    if kind is str:
        return len(value) < scrubber.shortest or scrubber.text(value) == value
    if kind is float:
        return math.isfinite(value)
    if kind in _SCALARS:
        return True
    shortest = scrubber.shortest
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return False
            if len(key) >= shortest and scrubber.text(key) != key:
                return False
            if item is not None and _key_facts(key)[1]:
                return False
            if not _kept_as_is(item, scrubber, budget, depth + 1):
                return False
        return True
    if kind is list:
        for item in value:
            if (
                type(item) is list
                and len(item) == 2
                and isinstance(item[0], str)
                and item[1] is not None
                and _key_facts(item[0])[1]
            ):  # a header pair: masked by the walk
                return False
            if not _kept_as_is(item, scrubber, budget, depth + 1):
                return False
        return True
    return False


def scrub_secrets(value: Any) -> Any:
    """A copy of ``value`` with every credential masked as ``[secret]``.

    Applied to every value plandag records (trace ``attrs``, params, plans) and, through
    :class:`SecretFilter`, to log records; it is never turned off.

    Args:
        value: a JSON-like value: ``dict``/``Mapping``, ``list``/``tuple`` (copied as lists),
            ``str``, numbers, booleans, None. Other objects are returned as they are.

    Returns:
        The copy, where:

        * a value under a secret-named key (:func:`is_secret_key`: ``api_key``,
          ``x-api-key``, ``authorization``, ``proxy-authorization``, ``token``,
          ``access_token``, ``secret``, ``password``, ``cookie``, ``set-cookie``, any case,
          ``-`` or ``_``) becomes ``"[secret]"`` (None stays None), and so does the second
          item of a ``(name, value)`` header pair;
        * inside strings, ``Bearer <token>`` / ``Basic <token68>`` (RFC 6750 / RFC 7617)
          become ``Bearer [secret]`` / ``Basic [secret]``; ``name: value`` and ``name=value``
          for those names (header dumps, query strings, reprs) keep the name and mask the
          value; the password of a URL (``scheme://user:password@host``) becomes
          ``[secret]``, the user name kept; Anthropic keys ``sk-ant-...``, OpenAI keys
          ``sk-...`` (20+ characters after ``sk-``), JSON Web Tokens, and the current
          values (8+ characters) of environment
          variables named ``*_API_KEY``, ``*_TOKEN``, ``*_SECRET`` or ``*_PASSWORD`` become
          ``[secret]`` wherever they appear.

        A container that contains itself is cut with ``"[cycle]"``.
    """
    return _Walk(secrets=True, personal=False).value(value, personal=False)


def redact_personal(value: Any) -> Any:
    """A copy of ``value`` with personal data masked (``--redact``, LGPD Lei 13.709/2018).

    Secrets are not touched here; :class:`Redactor` applies both.

    Args:
        value: a JSON-like value, as for :func:`scrub_secrets`; NF-e records
            (``plandag.extract.nfe.record`` dumped as dicts, fields named as in the layout)
            and NF-e XML text are recognised.

    Returns:
        The copy, where:

        * CPFs become ``[cpf]``: written ``000.000.000-00`` always; as 11 bare digits only
          when the check digits are valid (:func:`is_valid_cpf`, Receita Federal's módulo
          11); any value under a key or in an element named ``CPF``;
        * e-mail addresses become ``[email]``;
        * Brazilian phone numbers become ``[phone]``: ``+55 (11) 91234-5678``,
          ``+5511912345678``, ``(11) 91234-5678``, ``(11) 1234-5678``, ``11 91234-5678``
          (a DDD of ANATEL's plan and a dash), and 11 bare digits when they are a DDD plus
          a mobile number (third digit 9);
        * in an NF-e party identified as a person — a mapping or an XML element ``dest``
          (also ``emit``, ``retirada``, ``entrega``, ``transporta``) with a ``CPF`` or an
          ``idEstrangeiro`` and no ``CNPJ`` — ``xNome``/``xFant`` become ``[name]``, ``fone``
          ``[phone]`` and ``email`` ``[email]``. A party with a CNPJ is a company: kept.

        Kept: NF-e access keys (44 digits), CNPJs (14 digits, formatted or not), money
        values, dates and times, numbers that are not strings, and values under keys of
        company, document and product identifiers (``CNPJ``, ``IE``, ``chNFe``, ``nProt``,
        ``cEAN``, ``NCM``, ``CFOP``, ``sha256``, ``hash``...).
    """
    return _Walk(secrets=False, personal=True).value(value, personal=True)


#: Words one of which (in any case) is in the JSON text of every value the secrets-only walk
#: changes by a rule: each name :func:`is_secret_key` and the ``name: value`` rule know holds
#: one (``api_key`` and ``x-api-key`` hold ``api_key``/``api-key``, ``access_token``
#: ``token``, ``passwd`` ``passw``...), and so does each credential found by its form.
_JSON_TEXT_WORDS = (
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
    "cookie",
)


class Redactor:
    """The redactor the trace writer applies to every recorded value.

    Args:
        personal: also mask personal data (``--redact``): :func:`redact_personal` after
            :func:`scrub_secrets`. False masks secrets only.

    Calling it with a JSON-like value returns the masked copy (see :func:`scrub_secrets` and
    :func:`redact_personal`). The environment's secret values are read again whenever the
    number of environment variables changed since the last call (a key added mid-run is
    masked from then on); reading them on every call costs tens of microseconds per
    recorded value.
    """

    def __init__(self, personal: bool = False) -> None:
        self.personal = personal
        self._environment: tuple[str, ...] | None = None
        self._environment_size = -1
        # the environment's secret values read last and their JSON forms (keeps_json_text)
        self._json_forms: tuple[tuple[str, ...] | None, tuple[str, ...]] = (None, ())
        # each thread's walk over the current environment's values, made once (a walk keeps
        # the containers it is inside, so a thread never shares one)
        self._walks = threading.local()

    def __call__(self, value: Any) -> Any:
        """Return a copy of ``value`` with secrets (and with ``personal``, personal data)
        masked."""
        return self._walk().value(value, personal=self.personal)

    def kept_as_is(self, value: Any) -> bool:
        """Whether ``value`` needs neither masking nor conversion: calling this redactor on
        it, and :func:`plandag.scheduler.result.to_jsonable`, would both return an equal copy.

        Args:
            value: any value.

        Returns:
            True only for a value built of exactly ``dict`` with ``str`` keys, ``list``,
            ``str``, ``int``, ``bool``, None and finite ``float`` (at most 8 levels and 256
            items), with no key naming a credential over a value that is not None, no
            ``(name, value)`` header pair and no text a secret rule masks; always False with
            ``personal``. A caller that owns ``value`` may then use it instead of a copy.
        """
        if self.personal:
            return False
        return _kept_as_is(value, self._walk().scrubber, [_KEPT_ITEMS], 0)

    def keeps_json_text(self, text: str, rules: tuple[str, ...] | None = None) -> bool:
        """Whether calling this redactor on JSON data whose compact JSON text is ``text``
        (``json.dumps(value, ensure_ascii=False, separators=(",", ":"))``) returns an equal
        copy, told from the text alone (no walk over the value).

        Every change the walk makes needs, in that text: a word of
        :data:`_JSON_TEXT_WORDS` in any case (a secret-named key or header pair, a
        ``name: value`` pair, a cookie, ``Bearer``/``Basic``, ``sk-`` keys, a JSON Web
        Token's ``eyJ``), a letter only ``re.IGNORECASE`` folds to ASCII, a URL with a
        password (matched alike in a string and in its JSON text), or the JSON form of an
        environment secret value (a string holding the value holds it so in its JSON).

        Args:
            text: the value's compact JSON text.
            rules: :meth:`rules` as the caller read it for the same line (the step lines
                read it once per event); None: read now.

        Returns:
            True when none of those is in ``text``; always False with ``personal``.
        """
        if self.personal:
            return False
        for letter in CASE_LOOKALIKES:
            if letter in text:
                return False
        if len(text) >= LONG_TEXT:  # a plan's text, say: the store looks at it too
            if any(map(word_finder(text), _JSON_TEXT_WORDS)):
                return False
        else:
            lowered = text.lower()
            for word in _JSON_TEXT_WORDS:
                if word in lowered:
                    return False
        if holds_url_password(text):
            return False
        environment = self.rules() if rules is None else rules
        known, forms = self._json_forms
        if known is not environment:  # each value's JSON form, made once per reading
            forms = tuple(json.dumps(value, ensure_ascii=False)[1:-1] for value in environment)
            self._json_forms = (environment, forms)
        return not forms or all(form not in text for form in forms)

    def text(self, text: str) -> str:
        """``text`` masked as a string value under a key that names nothing special:
        ``self({"detail": text})["detail"]``, without building the mapping (``detail`` is
        no credential's name, no personal field's, no identifier's, and a mapping holding
        only it is no NF-e party).

        Args:
            text: a string value.

        Returns:
            The masked text.
        """
        return self._walk().text(text, personal=self.personal)

    def rules(self) -> tuple[str, ...]:
        """What this redactor masks with now: the environment's secret values it read last
        (a new tuple each time it reads them again, when the number of environment
        variables changed). Answers of :meth:`text` and :meth:`key_kind` hold while
        ``rules()`` returns the same object."""
        environment = self._environment
        if environment is None:
            return self._walk().environment
        try:  # len(os.environ) is the length of its own mapping: read without a call
            size = len(os.environ._data)  # type: ignore[attr-defined]
        except AttributeError:  # an environment that is no os._Environ
            size = len(os.environ)
        if size != self._environment_size:
            return self._walk().environment
        return environment

    def key_kind(self, key: str) -> int:
        """How a value under mapping key ``key`` is masked.

        Args:
            key: a mapping key.

        Returns:
            :data:`KEY_PLAIN` (1): the key is written as it is and a value under it is
            masked as the same value anywhere else (a string as :meth:`text` masks it,
            lists and mappings walked alike); :data:`KEY_NUMBERS` (2, personal data on):
            the key is written as it is and a number, boolean or None under it too (an
            identifier's key, ``step_id``, ``CNPJ``..., whose strings are not looked at for
            personal data); 0 otherwise: a key that is no ``str``, that names a credential,
            that masking changes, a person's field (``CPF``, ``xNome``, ``fone``,
            ``email``) or a party's identifier (``CNPJ``, ``idEstrangeiro``), which make a
            mapping an individual's.
        """
        if type(key) is not str:
            return 0
        name, secret = _key_facts(key)
        if secret or self.text(key) != key:
            return 0
        if not self.personal:
            return KEY_PLAIN
        if name.upper() == "CPF" or name in _FIELD_MASKS or name in _PARTY_KEYS:
            return 0
        return KEY_NUMBERS if name in _NOT_PERSONAL_KEYS else KEY_PLAIN

    def _walk(self) -> _Walk:
        size = len(os.environ)
        if self._environment is None or size != self._environment_size:
            self._environment, self._environment_size = _environment_secrets(), size
        walk: _Walk | None = getattr(self._walks, "walk", None)
        if walk is None or walk.environment is not self._environment or walk.busy():
            walk = _Walk(secrets=True, personal=self.personal, environment=self._environment)
            self._walks.walk = walk
        return walk

    def __reduce__(self) -> tuple[Any, ...]:
        return (Redactor, (self.personal,))

    def __repr__(self) -> str:
        return f"Redactor(personal={self.personal!r})"


# ---------------------------------------------------------------------------------------------
# Logging
# ---------------------------------------------------------------------------------------------

_SCRUBBED_ATTRIBUTE = "plandag_secrets_scrubbed"
_EXCEPTION_FORMATTER = logging.Formatter()


def _scrub_record(record: logging.LogRecord) -> None:
    if getattr(record, _SCRUBBED_ATTRIBUTE, False):
        return
    walk = _Walk(secrets=True, personal=False)
    try:
        message = record.getMessage()
    except Exception:  # a malformed call: scrub the parts, logging reports the mismatch
        record.msg = walk.value(record.msg, personal=False)
        if isinstance(record.args, Mapping):
            record.args = walk.value(record.args, personal=False)
        elif isinstance(record.args, tuple):
            record.args = tuple(walk.value(list(record.args), personal=False))
    else:
        record.msg = walk.text(message, personal=False)
        record.args = ()
    if record.exc_info and not record.exc_text:
        record.exc_text = walk.text(
            _EXCEPTION_FORMATTER.formatException(record.exc_info), personal=False
        )
    elif record.exc_text:
        record.exc_text = walk.text(record.exc_text, personal=False)
    if record.stack_info:
        record.stack_info = walk.text(record.stack_info, personal=False)
    setattr(record, _SCRUBBED_ATTRIBUTE, True)


class SecretFilter(logging.Filter):
    """A logging filter that masks credentials in every record it sees; it drops nothing.

    The message is formatted (``msg % args``) and scrubbed with :func:`scrub_secrets`'s text
    rules, then stored back as ``record.msg`` with empty ``args``; a formatted traceback and
    stack are scrubbed too. httpx and the Anthropic SDK log requests, options and headers at
    DEBUG: with this filter, API keys and authorization headers never reach a handler.

    Attach it to a handler (sees every record the handler emits) or a logger (sees only the
    records logged on that very logger, not those propagated from its children); see
    :func:`install_secret_filter`.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Scrub ``record`` in place; always returns True (the record is kept)."""
        _scrub_record(record)
        return True


_FACTORY_ATTRIBUTE = "plandag_secret_factory"


def install_secret_filter(logger: logging.Logger | None = None) -> SecretFilter:
    """Make sure credentials never reach log output.

    Args:
        logger: with a logger, a :class:`SecretFilter` is added to it and to each of its
            current handlers (so records propagated from child loggers are scrubbed when
            those handlers emit them). With None (the CLI at start-up): the same for the
            root logger, and the process's log record factory is wrapped so every record of
            every logger (``httpx``, ``httpcore``, ``anthropic``...) is scrubbed where it is
            created, whatever handlers are added later.

    Returns:
        The filter installed (an existing :class:`SecretFilter` is reused). Calling again is
        harmless: nothing is installed twice.
    """
    target = logger if logger is not None else logging.getLogger()
    secret_filter = next(
        (item for item in target.filters if isinstance(item, SecretFilter)), SecretFilter()
    )
    for filterer in (target, *target.handlers):
        if not any(isinstance(item, SecretFilter) for item in filterer.filters):
            filterer.addFilter(secret_filter)
    if logger is None:
        factory = logging.getLogRecordFactory()
        if not getattr(factory, _FACTORY_ATTRIBUTE, False):

            def scrubbing_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
                record = factory(*args, **kwargs)
                _scrub_record(record)
                return record

            setattr(scrubbing_factory, _FACTORY_ATTRIBUTE, True)
            logging.setLogRecordFactory(scrubbing_factory)
    return secret_filter
