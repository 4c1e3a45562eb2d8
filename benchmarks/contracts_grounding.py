"""Evidence grounding and scoring of ``plandag extract contracts`` with stand-in models.

The shared CUAD contracts (``../shared/data/contracts``: seven contracts with their CUAD v1
labels, The Atticus Project, CC BY 4.0) are extracted with the 41 CUAD fields through the
local Messages API server, twice:

* with :class:`plandag.testing.PerfectContractsModel` (the labelled clauses of each chunk,
  values read from their passages): clause precision and recall by ``plandag eval
  contracts`` and by a direct port of CUAD's own scoring (``benchmarks/cuad_reference.py``),
  and the genuine quotes rejected (every quote of this model is genuine);
* with :class:`plandag.testing.AdversarialContractsModel` (``--share`` of the answers
  altered): for each kind of alteration, how many were sent and how many accepted; the
  values accepted that their quote does not hold (changed values with genuine quotes), the
  clause quotes under the floor accepted (fewer than 5 words or 25 letters, counted here
  apart from plandag), the offsets of accepted values that are not plandag's own, and the
  unaltered quotes rejected.

Targets: clause recall and precision >= 0.98 with the perfect model, 0 values accepted
whose quote does not hold them, 0 clause quotes under the floor accepted, 0 genuine quotes
rejected, ``plandag eval`` equal to CUAD's scoring.

``--before PATH`` measures another source tree too (a checkout of main: its ``plandag``
imported with ``PYTHONPATH=PATH``, the stand-ins and the CUAD reference taken from this
checkout when that tree has none) in a process of its own, and prints the two side by side.

Run: ``.venv/bin/python benchmarks/contracts_grounding.py [--contracts N] [--share S]
[--seed K] [--data DIR] [--before PATH] [--json]``; prints a table (or one JSON object).
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

from benchmarks.cuad_reference import reference_counts
from plandag.brakes.budget import Budget
from plandag.executors import ModelAccess
from plandag.jobs.contracts.batch import extract_contracts
from plandag.jobs.contracts.evaluate import evaluate_contracts
from plandag.models import AnthropicClient
from plandag.scheduler import RunLimits
from plandag.testing import MessagesServer

REPO = Path(__file__).resolve().parents[1]


def _stand_ins() -> types.ModuleType:
    """``plandag.testing.contracts`` of the tree imported, else this checkout's (an older
    tree measured with ``--before`` has no stand-in models)."""
    try:
        return importlib.import_module("plandag.testing.contracts")
    except ModuleNotFoundError:
        name = "plandag.testing.contracts"
        spec = importlib.util.spec_from_file_location(name, REPO / "plandag/testing/contracts.py")
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {name} from {REPO}") from None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module


_STAND_INS = _stand_ins()
AdversarialContractsModel = _STAND_INS.AdversarialContractsModel
PerfectContractsModel = _STAND_INS.PerfectContractsModel


def _shared_contracts() -> Path:
    """``PLANDAG_SHARED_CONTRACTS``, else the first of ``<repo>/../shared/data/contracts``
    and ``/work/shared/data/contracts`` that holds the labels (as the tests find them)."""
    given = os.environ.get("PLANDAG_SHARED_CONTRACTS")
    candidates = [Path(given)] if given else []
    candidates += [REPO.parent / "shared/data/contracts", Path("/work/shared/data/contracts")]
    return next(
        (path for path in candidates if (path / "cuad_labels.jsonl").is_file()), candidates[-1]
    )


DEFAULT_DATA = _shared_contracts()
CLAUSE_TYPES = ("clause", "yes_no")


def _labels_subset(
    data: Path, contracts: int | None, folder: Path
) -> tuple[Path, list[dict[str, Any]]]:
    rows = [
        json.loads(line)
        for line in (data / "cuad_labels.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    rows = rows[:contracts] if contracts is not None else rows
    path = folder / "labels.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path, rows


async def _extract(model: Any, files: Sequence[Path], output: Path) -> list[dict[str, Any]]:
    with MessagesServer(default=model) as server:
        client = AnthropicClient(api_key="local", base_url=server.url)
        try:
            await extract_contracts(
                list(files),
                output,
                run_options={
                    "models": ModelAccess(client, "claude-haiku-4-5"),
                    "budget": Budget(20.0, 5_000_000),
                    "limits": RunLimits.lifted(),
                },
            )
        finally:
            await client.aclose()
    return _read_records(output)


def _read_records(output: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.read_text(encoding="utf-8").splitlines()]


def _letters_words(quote: str) -> tuple[int, int]:
    """Words and letters of a quote counted here, apart from plandag: tokens holding a
    letter that are not section numbers such as 4.2(a) or enumerators such as (iv)."""
    words = [
        token.strip("\"'“”‘’()[],;:.")
        for token in quote.split()
        if re.search(r"[^\W\d_]", token)
        and not re.fullmatch(
            r"[(]?([ivxlc]+|[a-z]|\d+(\.\d+)*)[).]?(\([a-z0-9]+\))*[,;:]?", token, re.I
        )
    ]
    return len(words), len(" ".join(words))


def _values(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str, Mapping[str, Any]]]:
    found = []
    for record in records:
        for name, field in (record.get("fields") or {}).items():
            for value in field.get("values") or []:
                found.append((Path(record["file"]).name, name, field.get("type", ""), value))
    return found


def _rejected(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, Mapping[str, Any]]]:
    return [
        (Path(record["file"]).name, name, item)
        for record in records
        for name, field in (record.get("fields") or {}).items()
        for item in field.get("rejected") or []
    ]


def _texts(data: Path, records: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    return {
        Path(record["file"]).name: (data / Path(record["file"]).name).read_text(encoding="utf-8")
        for record in records
    }


def _common(data: Path, records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Counts over every accepted value: clause quotes under the floor, and offsets that do
    not hold the quote (plandag's offsets index the text; a shifted claim must not land)."""
    texts = _texts(data, records)
    short = bad_offsets = 0
    for file, _, kind, value in _values(records):
        quote = str(value.get("quote", ""))
        if kind in CLAUSE_TYPES:
            words, letters = _letters_words(quote)
            short += words < 5 or letters < 25
        piece = texts[file][int(value["start"]) : int(value["end"])]
        if " ".join(piece.casefold().split()) != " ".join(quote.casefold().split()):
            bad_offsets += 1
    return {"clause_quotes_under_floor_accepted": short, "offsets_not_holding_quote": bad_offsets}


async def measure(
    data: Path = DEFAULT_DATA, *, contracts: int | None = None, share: float = 0.3, seed: int = 0
) -> dict[str, Any]:
    """Both runs on the first ``contracts`` labelled contracts (all by default)."""
    with tempfile.TemporaryDirectory() as folder:
        labels, rows = _labels_subset(data, contracts, Path(folder))
        files = [data / row["file"] for row in rows]

        perfect = PerfectContractsModel(labels, folder=data)
        records = await _extract(perfect, files, Path(folder) / "perfect.jsonl")
        evaluation = evaluate_contracts(records, rows)
        clauses = evaluation.clauses
        cuad = reference_counts(records, rows)
        rejected = collections.Counter(str(item.get("reason")) for _, _, item in _rejected(records))
        perfect_row = {
            "contracts": len(rows),
            "labelled_spans": clauses.tp + clauses.fn,
            "plandag_eval": [clauses.tp, clauses.fp, clauses.fn],
            "cuad_reference": list(cuad),
            "eval_equals_cuad": [clauses.tp, clauses.fp, clauses.fn] == list(cuad),
            "precision": clauses.precision,
            "recall": clauses.recall,
            "cuad_precision": cuad[0] / (cuad[0] + cuad[1]) if cuad[0] + cuad[1] else None,
            "cuad_recall": cuad[0] / (cuad[0] + cuad[2]) if cuad[0] + cuad[2] else None,
            "genuine_quotes_rejected": sum(rejected.values()),
            "rejected_by_reason": dict(rejected),
            "statuses": dict(collections.Counter(r["status"] for r in records)),
            **_common(data, records),
        }

        adversary = AdversarialContractsModel(labels, share=share, seed=seed, folder=data)
        records = await _extract(adversary, files, Path(folder) / "adversarial.jsonl")
        accepted = collections.Counter(
            (
                file,
                name,
                str(value.get("quote", "")).strip(),
                json.dumps(value.get("value"), sort_keys=True),
            )
            for file, name, _, value in _values(records)
        )
        accepted_quotes = collections.Counter((f, n, q) for f, n, q, _ in accepted.elements())
        by_kind: dict[str, list[int]] = {}
        changed_accepted = 0
        altered_quotes: collections.Counter[tuple[str, str, str]] = collections.Counter()
        for alteration in adversary.alterations:
            key = (alteration.file, alteration.field, alteration.quote.strip())
            altered_quotes[(alteration.file, alteration.field, alteration.quote)] += 1
            if alteration.kind == "changed_value":
                hit = accepted[(*key, json.dumps(alteration.value, sort_keys=True))] > 0
                changed_accepted += hit
            else:
                hit = accepted_quotes[key] > 0
            sent, taken = by_kind.get(alteration.kind, [0, 0])
            by_kind[alteration.kind] = [sent + 1, taken + hit]
        rejected_items = collections.Counter(
            (f, n, str(i.get("quote"))) for f, n, i in _rejected(records)
        )
        genuine_rejected = sum((rejected_items - altered_quotes).values())
        adversarial_row = {
            "share": share,
            "seed": seed,
            "altered_sent_accepted": by_kind,
            "changed_values_accepted": changed_accepted,
            "genuine_quotes_rejected": genuine_rejected,
            "statuses": dict(collections.Counter(r["status"] for r in records)),
            "plandag_eval_equals_cuad": (lambda c, r: [c.tp, c.fp, c.fn] == list(r))(
                evaluate_contracts(records, rows).clauses, reference_counts(records, rows)
            ),
            **_common(data, records),
        }
    return {"perfect": perfect_row, "adversarial": adversarial_row}


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _rows(result: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The table of :func:`measure`'s result as (figure, value) rows."""
    perfect, adversarial = result["perfect"], result["adversarial"]
    rows = [
        ("perfect model", ""),
        ("contracts / labelled spans", f"{perfect['contracts']} / {perfect['labelled_spans']}"),
        ("plandag eval tp/fp/fn", "/".join(map(str, perfect["plandag_eval"]))),
        ("CUAD reference tp/fp/fn", "/".join(map(str, perfect["cuad_reference"]))),
        ("plandag eval = CUAD", str(perfect["eval_equals_cuad"])),
        ("clause precision (CUAD)", _score(perfect["cuad_precision"])),
        ("clause recall (CUAD)", _score(perfect["cuad_recall"])),
        (
            "genuine quotes rejected",
            f"{perfect['genuine_quotes_rejected']} {perfect['rejected_by_reason'] or ''}",
        ),
        (
            "clause quotes under the floor accepted",
            str(perfect["clause_quotes_under_floor_accepted"]),
        ),
        ("statuses", json.dumps(perfect["statuses"])),
        (f"adversarial model (share {adversarial['share']}, seed {adversarial['seed']})", ""),
    ]
    for kind, (sent, taken) in sorted(adversarial["altered_sent_accepted"].items()):
        rows.append((f"  {kind}: sent / accepted", f"{sent} / {taken}"))
    rows += [
        (
            "values accepted that their quote does not hold",
            str(adversarial["changed_values_accepted"]),
        ),
        (
            "clause quotes under the floor accepted",
            str(adversarial["clause_quotes_under_floor_accepted"]),
        ),
        ("accepted offsets not holding their quote", str(adversarial["offsets_not_holding_quote"])),
        ("unaltered quotes rejected", str(adversarial["genuine_quotes_rejected"])),
        ("plandag eval = CUAD", str(adversarial["plandag_eval_equals_cuad"])),
        ("statuses", json.dumps(adversarial["statuses"])),
    ]
    return rows


def _table(rows: Sequence[Sequence[str]]) -> str:
    sizes = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(f"{cell:<{size}}" for cell, size in zip(row, sizes, strict=True)).rstrip()
        for row in rows
    )


def render(result: Mapping[str, Any]) -> str:
    """The table of :func:`measure`'s result."""
    return _table(_rows(result))


def _keyed(rows: Sequence[tuple[str, str]]) -> dict[tuple[str, int], str]:
    """Rows by (figure, its occurrence): both runs have a ``statuses`` row, for instance."""
    seen: collections.Counter[str] = collections.Counter()
    keyed = {}
    for name, value in rows:
        keyed[(name, seen[name])] = value
        seen[name] += 1
    return keyed


def side_by_side(before: Mapping[str, Any], after: Mapping[str, Any], tree: Path) -> str:
    """The tables of two :func:`measure` results side by side: ``before`` (``tree``) and
    this checkout (a figure one of them lacks shown as ``-``)."""
    old, new = _keyed(_rows(before)), _keyed(_rows(after))
    rows = [("", f"before ({tree})", "this checkout")]
    for key in [*new, *(key for key in old if key not in new)]:
        rows.append((key[0], old.get(key, "-"), new.get(key, "-")))
    return _table(rows)


def _measure_in(tree: Path, argv: Sequence[str]) -> dict[str, Any]:
    """:func:`measure` in a process of its own, ``plandag`` imported from ``tree``."""
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join((str(tree), str(REPO)))
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *argv, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the measurement in {tree} failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared contracts")
    parser.add_argument("--contracts", type=int, default=None, help="the first N labelled")
    parser.add_argument("--share", type=float, default=0.3, help="share of answers altered")
    parser.add_argument("--seed", type=int, default=0, help="which answers are altered")
    parser.add_argument("--before", type=Path, default=None, help="a checkout to compare with")
    parser.add_argument("--json", action="store_true", help="print JSON")
    options = parser.parse_args(argv)
    result = anyio.run(
        lambda: measure(
            options.data, contracts=options.contracts, share=options.share, seed=options.seed
        )
    )
    if options.before is None:
        print(json.dumps(result, indent=2) if options.json else render(result))
        return
    passed = ["--data", str(options.data), "--share", str(options.share)]
    passed += ["--seed", str(options.seed)]
    if options.contracts is not None:
        passed += ["--contracts", str(options.contracts)]
    before = _measure_in(options.before, passed)
    if options.json:
        print(json.dumps({"before": before, "after": result}, indent=2))
    else:
        print(side_by_side(before, result, options.before))


if __name__ == "__main__":
    main()
