"""Check-digit arithmetic of the NF-e access key, the CNPJ and the CPF. Pure functions.

Sources:

* Access key (chave de acesso) layout and its check digit: Manual de Orientação do
  Contribuinte (MOC) 7.0, Anexo I, item 5.4 "Chave de Acesso" and 5.4.1 "Cálculo do dígito
  verificador da chave de acesso": 43 characters weighted 2, 3, ..., 9, 2, 3, ... from the
  right, the sum taken modulo 11; a remainder of 0 or 1 gives the digit 0, otherwise the digit
  is 11 minus the remainder.
* Alphanumeric CNPJ: Nota Técnica 2025.001 (CNPJ alfanumérico, from July 2026) and the
  Receita Federal's calculation note: the first 12 characters may be ``0-9`` or ``A-Z``; each
  character counts as its ASCII code minus 48 (``"0"`` → 0, ``"A"`` → 17, ``"Z"`` → 42); the
  two check digits stay numeric and are computed with the same weights and rule as before.
  The same value mapping applies to the access key that embeds such a CNPJ.
* CNPJ check digits (Receita Federal's published rule, restated by NT 2025.001): first
  digit over the 12
  base characters with weights 5,4,3,2,9,8,7,6,5,4,3,2 (2..9 cycling from the right), second
  digit over the 12 characters plus the first digit with weights 6,5,...,2; remainder < 2
  gives 0, else 11 minus the remainder.
* CPF check digits (Receita Federal): first digit over 9 digits with weights 10..2, second
  over 10 digits with weights 11..2; remainder < 2 gives 0, else 11 minus the remainder.
  Numbers made of one repeated digit (``11111111111``) pass the arithmetic but are not
  valid CPFs; they are rejected, as the Receita's own validator does. The same rule is applied
  to a CNPJ made of one repeated character.
"""

from __future__ import annotations

import functools
import itertools
import operator
import re
from decimal import Decimal, InvalidOperation

__all__ = [
    "ACCESS_KEY_PATTERN",
    "CNPJ_FORMAT",
    "CPF_FORMAT",
    "KEY_FIELDS",
    "cnpj_check_digits",
    "cpf_check_digits",
    "decompose_key",
    "key_check_digit",
    "mod11_digit",
    "parse_decimal",
    "valid_cnpj",
    "valid_cpf",
    "valid_key",
]

#: cUF(2) AAMM(4) CNPJ/CPF(14, the first 12 alphanumeric) mod(2) serie(3) nNF(9) tpEmis(1)
#: cNF(8) cDV(1) — MOC 7.0, Anexo I, 5.4; NT 2025.001 for the alphanumeric CNPJ.
ACCESS_KEY_PATTERN = re.compile(r"[0-9]{6}[0-9A-Z]{12}[0-9]{26}")

#: The access key's fields in order, with their widths in characters (MOC 7.0, 5.4).
KEY_FIELDS: tuple[tuple[str, int], ...] = (
    ("cUF", 2),
    ("AAMM", 4),
    ("CNPJ", 14),
    ("mod", 2),
    ("serie", 3),
    ("nNF", 9),
    ("tpEmis", 1),
    ("cNF", 8),
    ("cDV", 1),
)

CNPJ_FORMAT = re.compile(r"[0-9A-Z]{12}[0-9]{2}")
"""A CNPJ's shape: 12 characters 0-9 or A-Z (alphanumeric from July 2026, NT 2025.001),
then 2 check digits."""
CPF_FORMAT = re.compile(r"[0-9]{11}")
"""A CPF's shape: 11 digits, the last two check digits."""


_MOD11_WEIGHTS = (2, 3, 4, 5, 6, 7, 8, 9)
_MOD11_WEIGHT_SUM = sum(_MOD11_WEIGHTS)


def mod11_digit(text: str) -> int:
    """The modulo-11 check digit of ``text``, weights 2..9 cycling from the rightmost character.

    Args:
        text: digits and upper-case letters; each character counts as ASCII code − 48.

    Returns:
        0 when the weighted sum's remainder modulo 11 is 0 or 1, else 11 − remainder.

    Source: MOC 7.0 Anexo I 5.4.1 (access key); the CNPJ rule is the same computation.
    """
    # sum((ord(c) - 48) * w) over the characters from the right, weights 2..9 cycling,
    # computed as sum(ord(c) * w) - 48 * sum(w).
    full, rest = divmod(len(text), len(_MOD11_WEIGHTS))
    weights = full * _MOD11_WEIGHT_SUM + sum(_MOD11_WEIGHTS[:rest])
    total = sum(map(operator.mul, map(ord, reversed(text)), itertools.cycle(_MOD11_WEIGHTS)))
    total -= 48 * weights
    remainder = total % 11
    return 0 if remainder < 2 else 11 - remainder


def key_check_digit(key43: str) -> int:
    """The check digit (cDV) for the first 43 characters of an access key.

    Args:
        key43: the 43 characters before cDV (digits, and letters of an alphanumeric CNPJ).

    Returns:
        The digit 0..9.

    Raises:
        ValueError: ``key43`` is not 43 characters of ``0-9``/``A-Z``.
    """
    if len(key43) != 43 or not re.fullmatch(r"[0-9A-Z]{43}", key43):
        raise ValueError(f"an access key body has 43 characters 0-9/A-Z, got {key43!r}")
    return mod11_digit(key43)


def valid_key(key: str) -> bool:
    """True when ``key`` has the access key's shape and its last digit is its check digit.

    Args:
        key: the 44-character access key (``chNFe``; no ``NFe`` prefix).
    """
    if not ACCESS_KEY_PATTERN.fullmatch(key):
        return False
    return int(key[43]) == mod11_digit(key[:43])


def decompose_key(key: str) -> dict[str, str]:
    """Split an access key into its fields (``cUF``, ``AAMM``, ``CNPJ``, ``mod``, ``serie``,
    ``nNF``, ``tpEmis``, ``cNF``, ``cDV``), each a string as written in the key.

    Raises:
        ValueError: ``key`` does not have the access key's shape (44 characters, digits except
            the 12 base characters of an alphanumeric CNPJ).
    """
    if not ACCESS_KEY_PATTERN.fullmatch(key):
        raise ValueError(
            f"an access key is 44 characters (digits; letters only in the CNPJ), got {key!r}"
        )
    fields: dict[str, str] = {}
    position = 0
    for name, width in KEY_FIELDS:
        fields[name] = key[position : position + width]
        position += width
    return fields


def cnpj_check_digits(base12: str) -> str:
    """The two check digits of a CNPJ (numeric or alphanumeric) from its 12 base characters.

    Raises:
        ValueError: ``base12`` is not 12 characters of ``0-9``/``A-Z``.
    """
    if not re.fullmatch(r"[0-9A-Z]{12}", base12):
        raise ValueError(f"a CNPJ base is 12 characters 0-9/A-Z, got {base12!r}")
    first = mod11_digit(base12)
    second = mod11_digit(f"{base12}{first}")
    return f"{first}{second}"


@functools.lru_cache(maxsize=4096)
def valid_cnpj(cnpj: str) -> bool:
    """True when ``cnpj`` is a 14-character CNPJ whose check digits are right.

    Numeric and alphanumeric (NT 2025.001) CNPJs are both accepted; letters must be upper
    case. A CNPJ of one repeated character (``00000000000000``) is rejected. (Remembered for
    the last few thousand: a batch repeats its emitters.)
    """
    if not CNPJ_FORMAT.fullmatch(cnpj) or len(set(cnpj)) == 1:
        return False
    return cnpj[12:] == cnpj_check_digits(cnpj[:12])


def cpf_check_digits(base9: str) -> str:
    """The two check digits of a CPF from its first 9 digits.

    Raises:
        ValueError: ``base9`` is not 9 digits.
    """
    if not re.fullmatch(r"[0-9]{9}", base9):
        raise ValueError(f"a CPF base is 9 digits, got {base9!r}")
    first = _cpf_digit(base9)
    second = _cpf_digit(f"{base9}{first}")
    return f"{first}{second}"


def _cpf_digit(digits: str) -> int:
    """CPF rule: weights 2, 3, ... from the right without cycling (10..2, then 11..2)."""
    total = sum(int(digit) * weight for weight, digit in enumerate(reversed(digits), start=2))
    remainder = total % 11
    return 0 if remainder < 2 else 11 - remainder


@functools.lru_cache(maxsize=4096)
def valid_cpf(cpf: str) -> bool:
    """True when ``cpf`` is 11 digits, not all the same, whose check digits are right
    (remembered for the last few thousand)."""
    if not CPF_FORMAT.fullmatch(cpf) or len(set(cpf)) == 1:
        return False
    return cpf[9:] == cpf_check_digits(cpf[:9])


_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")


def parse_decimal(value: object) -> Decimal | None:
    """``Decimal(value)`` for a finite decimal string (``"1209.00"``), else None.

    Money and quantities are read from their XML text only, never through float. Surrounding
    whitespace is ignored; exponents, ``NaN`` and ``Infinity`` are refused. (Remembered for
    the last few thousand texts: invoices repeat ``"0.00"`` and their own totals, and a
    ``Decimal`` is immutable.)
    """
    if not isinstance(value, str):
        return None
    return _parse_decimal_text(value)


@functools.lru_cache(maxsize=4096)
def _parse_decimal_text(value: str) -> Decimal | None:
    text = value.strip()
    if not _DECIMAL.fullmatch(text):
        return None
    try:
        return Decimal(text)
    except InvalidOperation:  # pragma: no cover - the pattern already excludes these
        return None
