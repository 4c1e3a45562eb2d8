"""Make a realistic NF-e corpus for benchmarks: N distinct, valid invoices from the shipped ones.

Usage (from the repository root)::

    .venv/bin/python benchmarks/generate_nfe.py N OUTDIR [--seed 0] [--source PATH ...]

The sources are the shipped invoices that plandag extracts with status ``ok`` and that hold
exactly one ``infNFe``: ``examples/nfe`` and the files ``SOURCES.md`` lists with status
``ok`` in the shared data folder (``PLANDAG_SHARED_NFE``, else ``<repo>/../shared/data/nfe``).
Copy ``i`` (0-based) is made from source ``i mod len(sources)``, so every source is used.

Each copy gets a new access key (``chNFe``, 44 digits; NF-e layout manual, MOC 7.0 Anexo I,
"Chave de Acesso"): ``cUF`` (2), ``AAMM`` (4), emitter ``CNPJ`` (14), ``mod`` (2), ``serie``
(3), ``nNF`` (9), ``tpEmis`` (1), ``cNF`` (8) and ``cDV`` (1), the mod-11 check digit
(weights 2..9 from the right; remainder 0 or 1 gives 0, else 11 minus it). ``cUF``, the
CNPJ, ``mod``, ``serie`` and ``tpEmis`` are the source's; ``nNF`` and ``cNF`` are drawn at
random (``cNF`` never equal to ``nNF``, as the manual requires); every date of the file
(``dhEmi``/``dEmi``, ``dhSaiEnt``/``dSaiEnt``, the protocol's ``dhRecbto``, event dates) is
moved back by the same random number of days (0-729), and ``AAMM`` is the new ``dhEmi``'s own
local year and month. The document agrees with its key: every occurrence of the old key (the
``Id`` attribute ``"NFe" + key``, ``protNFe/infProt/chNFe``, the signature's reference, an
NFC-e's QR code) becomes the new one, and ``ide/nNF``, ``ide/cNF``, ``ide/cDV`` are rewritten.
The edits are made on the bytes, so encoding, namespace prefixes and layout are kept. (The
XML signature no longer verifies; plandag does not verify signatures.)

So the copies are neither duplicates (distinct keys: ``unique_in_batch`` passes) nor resumed
as already done (different bytes, different sha256), and each copy's record has its source's
status. The same ``--seed`` gives the same files, byte for byte.
"""

from __future__ import annotations

import argparse
import datetime
import random
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` and ``plandag`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

__all__ = [
    "EXAMPLES_DIR",
    "GeneratedInvoice",
    "check_digit",
    "default_sources",
    "generate",
    "new_key",
    "rekey",
]

#: The invoices shipped with the repository.
EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples" / "nfe"

_ID = re.compile(rb'Id\s*=\s*["\']NFe([0-9A-Z]{44})["\']')
_IDE = re.compile(rb"<(?:[\w.-]+:)?ide\b")
_DATES = re.compile(
    rb"(<(?:[\w.-]+:)?(?:dhEmi|dEmi|dhSaiEnt|dSaiEnt|dhRecbto|dhEvento|dhRegEvento|dhCont)>)"
    rb"\s*(\d{4})-(\d{2})-(\d{2})"
)
_DATE_OF_ISSUE = re.compile(rb"<(?:[\w.-]+:)?(?:dhEmi|dEmi)>\s*(\d{4})-(\d{2})-\d{2}")


def check_digit(key43: str) -> int:
    """The mod-11 check digit of the first 43 characters of an access key.

    Each character counts as its ASCII code minus 48 (digits as themselves; the letters of
    an alphanumeric CNPJ as the layout's technical note says); weights 2, 3, ..., 9, 2, ...
    from the rightmost character; remainder 0 or 1 gives 0, otherwise 11 minus the remainder
    (MOC 7.0 Anexo I, "Cálculo do Dígito Verificador da Chave de Acesso").

    Raises:
        ValueError: ``key43`` is not 43 characters long.
    """
    if len(key43) != 43:
        raise ValueError(f"an access key without its check digit has 43 characters, not {key43!r}")
    total = sum((ord(char) - 48) * (2 + position % 8) for position, char in enumerate(key43[::-1]))
    remainder = total % 11
    return 0 if remainder < 2 else 11 - remainder


def new_key(old_key: str, *, year: int, month: int, nnf: int, cnf: int, tp_emis: str = "") -> str:
    """``old_key`` with a new ``AAMM`` (``year``, ``month``), ``nNF`` and ``cNF``, and its
    check digit recomputed; ``cUF``, CNPJ, ``mod``, ``serie`` and ``tpEmis`` (unless
    ``tp_emis`` is given) kept.

    Raises:
        ValueError: ``old_key`` is not 44 characters, or ``nnf``/``cnf`` do not fit 9/8 digits.
    """
    if len(old_key) != 44:
        raise ValueError(f"an access key has 44 characters, not {old_key!r}")
    if not 0 < nnf < 10**9 or not 0 <= cnf < 10**8:
        raise ValueError(f"nNF {nnf} or cNF {cnf} does not fit the key")
    body = (
        old_key[:2]
        + f"{year % 100:02d}{month:02d}"
        + old_key[6:25]
        + f"{nnf:09d}"
        + (tp_emis or old_key[34])
        + f"{cnf:08d}"
    )
    return body + str(check_digit(body))


def _replace_in_ide(data: bytes, name: str, value: str) -> bytes:
    """``data`` with the first ``<name>`` element after ``<ide>`` holding ``value``."""
    start = _IDE.search(data)
    if start is None:
        raise ValueError("no <ide> group")
    pattern = re.compile(rb"(<(?:[\w.-]+:)?" + name.encode() + rb">)[^<]*(</)")
    found = pattern.search(data, start.end())
    if found is None:
        raise ValueError(f"no ide/{name}")
    return data[: found.start()] + found.group(1) + value.encode() + data[found.start(2) :]


def _shift_dates(data: bytes, days: int) -> bytes:
    def shifted(match: re.Match[bytes]) -> bytes:
        day = datetime.date(int(match.group(2)), int(match.group(3)), int(match.group(4)))
        moved = day - datetime.timedelta(days=days)
        return match.group(1) + moved.isoformat().encode()

    return _DATES.sub(shifted, data)


def rekey(data: bytes, *, nnf: int, cnf: int, days_back: int) -> tuple[bytes, str]:
    """One invoice file's bytes with a new access key, numbers and dates.

    Args:
        data: the bytes of a file holding exactly one ``infNFe`` (its ``Id`` ``"NFe" + key``).
        nnf: the new ``nNF`` (1 to 999999999).
        cnf: the new ``cNF`` (0 to 99999999), different from ``nnf``.
        days_back: days every date of the file moves back (``AAMM`` follows ``dhEmi``).

    Returns:
        ``(new bytes, new key)``.

    Raises:
        ValueError: the file does not hold exactly one key, or lacks ``ide/nNF``, ``ide/cNF``,
            ``ide/cDV`` or the date of issue.
    """
    keys = set(_ID.findall(data))
    if len(keys) != 1:
        raise ValueError(f"{len(keys)} invoice keys in the file; one is needed")
    old_key = keys.pop().decode("ascii")
    data = _shift_dates(data, days_back)
    issued = _DATE_OF_ISSUE.search(data)
    if issued is None:
        raise ValueError("no dhEmi or dEmi")
    key = new_key(old_key, year=int(issued.group(1)), month=int(issued.group(2)), nnf=nnf, cnf=cnf)
    data = data.replace(old_key.encode("ascii"), key.encode("ascii"))
    data = _replace_in_ide(data, "nNF", str(nnf))
    data = _replace_in_ide(data, "cNF", f"{cnf:08d}")
    data = _replace_in_ide(data, "cDV", key[-1])
    return data, key


def default_sources() -> list[Path]:
    """The shipped invoices that plandag extracts as one record with status ``ok``:
    ``examples/nfe`` and the shared files ``SOURCES.md`` lists as ``ok``, sorted by name,
    each file content once."""
    import anyio

    from benchmarks.extract_bench import DEFAULT_DATA_DIR, valid_invoice_files
    from plandag.extract.nfe import extract_document

    candidates = sorted(EXAMPLES_DIR.glob("*.xml"))
    if (DEFAULT_DATA_DIR / "SOURCES.md").is_file():
        candidates += valid_invoice_files(DEFAULT_DATA_DIR)

    async def statuses() -> list[Path]:
        chosen: list[Path] = []
        seen: set[bytes] = set()
        for path in candidates:
            data = path.read_bytes()
            if data in seen or len(_ID.findall(data)) != 1:
                continue
            records = await extract_document(path)
            if len(records) == 1 and records[0]["status"] == "ok":
                seen.add(data)
                chosen.append(path)
        return chosen

    return anyio.run(statuses)


@dataclass(frozen=True)
class GeneratedInvoice:
    """One generated file: its path, new key and the source it was made from."""

    path: Path
    key: str
    source: Path


def generate(
    count: int, folder: Path, *, seed: int = 0, sources: Sequence[Path] | None = None
) -> list[GeneratedInvoice]:
    """Write ``count`` distinct invoices into ``folder`` (created when missing), named
    ``000000-<key>.xml``, ``000001-<key>.xml``...; copy ``i`` is made from source
    ``i mod len(sources)`` by :func:`rekey`.

    Args:
        count: how many files (>= 0).
        folder: where to write them.
        seed: the random generator's seed; the same seed and sources give the same bytes.
        sources: single-invoice files to copy (default :func:`default_sources`).

    Returns:
        The files written, in order.

    Raises:
        ValueError: ``count`` < 0, no source, or a source :func:`rekey` cannot copy (the
            message names it).
        OSError: a source cannot be read or a file cannot be written.
    """
    if count < 0:
        raise ValueError(f"the number of invoices must be >= 0, not {count}")
    chosen = list(sources) if sources is not None else default_sources()
    if not chosen:
        raise ValueError("no source invoice to copy")
    folder.mkdir(parents=True, exist_ok=True)
    randomness = random.Random(seed)
    originals = [path.read_bytes() for path in chosen]
    keys: set[str] = set()
    made: list[GeneratedInvoice] = []
    for index in range(count):
        which = index % len(chosen)
        while True:
            nnf = randomness.randrange(1, 10**9)
            cnf = randomness.randrange(0, 10**8)
            if cnf == nnf:
                continue
            try:
                data, key = rekey(
                    originals[which], nnf=nnf, cnf=cnf, days_back=randomness.randrange(730)
                )
            except ValueError as error:
                raise ValueError(f"{chosen[which]}: {error}") from None
            if key not in keys:
                break
        keys.add(key)
        path = folder / f"{index:06d}-{key}.xml"
        path.write_bytes(data)
        made.append(GeneratedInvoice(path, key, chosen[which]))
    return made


def main(argv: list[str] | None = None) -> int:
    """The command line: ``generate_nfe.py N OUTDIR [--seed S] [--source PATH ...]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("count", type=int, metavar="N", help="how many invoices to write")
    parser.add_argument("folder", type=Path, metavar="OUTDIR", help="where to write them")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--source",
        type=Path,
        action="append",
        help="a single-invoice file to copy (repeat; default: the shipped valid invoices)",
    )
    options = parser.parse_args(argv)
    if options.count < 0:
        parser.error(f"N must be >= 0, not {options.count}")
    try:
        made = generate(options.count, options.folder, seed=options.seed, sources=options.source)
    except OSError as error:
        parser.error(f"{error.filename or options.folder}: {error.strerror or error}")
    except ValueError as error:
        parser.error(str(error))
    sources = len({invoice.source for invoice in made})
    print(f"{len(made)} invoices from {sources} sources written to {options.folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
