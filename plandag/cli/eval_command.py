"""``plandag eval``: score a job's records against labels (``eval contracts``: the rules are
:mod:`plandag.jobs.contracts.evaluate`'s; this module reads the options and prints)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from plandag.cli.options import fail

if TYPE_CHECKING:
    from plandag.jobs.contracts.evaluate import ContractsEvaluation

__all__ = ["eval_app", "eval_contracts", "register"]

eval_app = typer.Typer(
    help="Score a job's records against labels.", no_args_is_help=True, rich_markup_mode=None
)


@eval_app.callback()
def eval_group() -> None:
    """Score a job's records against labels."""


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _print_table(evaluation: ContractsEvaluation, labels: Path) -> None:
    from rich import box
    from rich.table import Table

    from plandag.cli.secret_output import SecretMaskingConsole as Console

    # Never narrower than the rows (CUAD's longest category name is 34 characters): a
    # squashed table would wrap the names.
    console = Console(soft_wrap=False, highlight=False)
    console = Console(soft_wrap=False, highlight=False, width=max(console.width, 100))

    def table(title: str, columns: tuple[str, ...]) -> Table:
        # The figures are never cut: numeric columns do not wrap and keep their width
        # (a score is 5 characters); when the console is too narrow, the text columns
        # (category, kind) wrap instead.
        shown = Table(
            title=title,
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            show_edge=False,
            collapse_padding=True,
        )
        text = 2 if columns[1] == "kind" else 1
        for index, name in enumerate(columns):
            if index < text:
                shown.add_column(name, justify="left", overflow="fold")
            else:
                shown.add_column(name, justify="right", no_wrap=True, min_width=max(len(name), 5))
        return shown

    clauses = table(
        "Clauses, by CUAD's rules (a labelled span is found by a quote with word Jaccard >= "
        "0.5, or holding it for Parties; a quote matching no span is stray)",
        ("category", "labelled", "quotes", "found", "stray", "P", "R", "F1"),
    )
    for score in evaluation.categories.values():
        counts = score.clauses
        clauses.add_row(
            score.category,
            str(score.labelled_clauses),
            str(score.quotes),
            str(counts.tp),
            str(counts.fp),
            _score(counts.precision),
            _score(counts.recall),
            _score(counts.f1),
        )
    total = evaluation.clauses
    clauses.add_row(
        "all (micro)",
        str(total.tp + total.fn),
        "",
        str(total.tp),
        str(total.fp),
        _score(total.precision),
        _score(total.recall),
        _score(total.f1),
    )
    console.print(clauses)
    console.print()
    answers = table(
        "Answers (a wrong answer counts as both extra and missed)",
        ("category", "kind", "right", "extra", "missed", "P", "R", "F1", "unscored"),
    )
    for score in evaluation.categories.values():
        if score.answer_kind is None:
            continue
        counts = score.answers
        answers.add_row(
            score.category,
            score.answer_kind,
            str(counts.tp),
            str(counts.fp),
            str(counts.fn),
            _score(counts.precision),
            _score(counts.recall),
            _score(counts.f1),
            str(score.unscored),
        )
    total = evaluation.answers
    answers.add_row(
        "all (micro)",
        "",
        str(total.tp),
        str(total.fp),
        str(total.fn),
        _score(total.precision),
        _score(total.recall),
        _score(total.f1),
        str(len(evaluation.unscored)),
    )
    console.print(answers)
    from plandag.jobs.contracts.evaluate import NOT_COMPUTED

    lines = [
        f"contracts: {len(evaluation.labelled)} labelled in {labels}, "
        f"{len(evaluation.missing)} without a record, {len(evaluation.errored)} with an error "
        f"record (both scored as nothing found), {len(evaluation.unlabelled)} records "
        "unlabelled (not scored)",
    ]
    lines += [f"  no record: {file}" for file in evaluation.missing]
    lines += [
        f"  error record: {file} ({', '.join(codes) or 'no code'})"
        for file, codes in evaluation.errored.items()
    ]
    lines += [f"  unlabelled: {file}" for file in evaluation.unlabelled]
    rate = evaluation.rejected_rate
    lines.append(
        f"rejected quotes: {evaluation.rejected_quotes} of "
        f"{evaluation.accepted_quotes + evaluation.rejected_quotes}"
        + ("" if rate is None else f" ({rate:.1%})")
    )
    if evaluation.unscored:
        lines.append("labels not scored (they do not parse in their category's kind):")
        lines += [
            f"  {item.file}: {item.category}: {item.answer!r}" for item in evaluation.unscored
        ]
    if evaluation.unknown_categories:
        lines.append(
            "label categories not scored (no record has them and they are not CUAD categories; "
            "check the labels' spelling or the --fields of the extraction):"
        )
        for unknown in evaluation.unknown_categories:
            contracts = f"{unknown.contracts} contract{'s' if unknown.contracts != 1 else ''}"
            texts = f"{unknown.clauses} clause{'s' if unknown.clauses != 1 else ''}"
            near = f" (did you mean {unknown.nearest!r}?)" if unknown.nearest else ""
            lines.append(f"  {unknown.category}: {contracts}, {texts}{near}")
    for line, reason in evaluation.invalid_records:
        lines.append(f"records line {line} skipped: {reason}")
    lines.append(f"{NOT_COMPUTED}.")
    sys.stdout.write("\n".join(lines) + "\n")


@eval_app.command("contracts")
def eval_contracts(
    records: Annotated[
        Path,
        typer.Argument(
            metavar="RECORDS",
            help="The JSONL records of `plandag extract contracts` (one per contract).",
        ),
    ],
    labels: Annotated[
        Path,
        typer.Option(
            "--labels",
            metavar="FILE",
            help='Labels, one JSON line per contract: {"file", "labels": {CATEGORY: '
            '{"clauses", "answer"}}} (as CUAD v1\'s cuad_labels.jsonl).',
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
) -> None:
    """Score contract records against labels: clauses by CUAD's rules, answers by kind.

    Per category: precision, recall and F1 of the clauses by CUAD's own scoring (its
    evaluate.py: a labelled span, <omitted>-joined labels split, is found when an accepted
    quote has word Jaccard >= 0.5 with it, or holds it for Parties; a quote matching no
    span is a false positive; AUPR and precision at 80%/90% recall are not computed, as
    records carry no confidence) and of the answers (dates parsed from the label's M/D/YY,
    parties as sets of names, governing law by jurisdiction, durations, yes/no). Labels
    that do not parse in their kind and label categories no record has that are not CUAD
    categories are listed apart, not scored; a labelled contract without a record, or with
    an error record, counts as nothing found.
    Also the rate of rejected quotes. Exit 0, or 2 when a file cannot be used.
    """
    from plandag.errors import InputError
    from plandag.jobs.contracts.evaluate import evaluate_contract_files

    try:
        evaluation = evaluate_contract_files(records, labels)
    except InputError as error:
        fail(str(error))
    if not evaluation.labelled:
        fail(
            f"labels file {labels} labels no contract; give one JSON line per contract, "
            "as in cuad_labels.jsonl"
        )
    if as_json:
        sys.stdout.write(json.dumps(evaluation.as_dict(), indent=2, ensure_ascii=False) + "\n")
        return
    _print_table(evaluation, labels)


def register(app: typer.Typer) -> None:
    """Add ``eval`` (its subcommand ``contracts``) to the ``plandag`` app."""
    app.add_typer(eval_app, name="eval")
