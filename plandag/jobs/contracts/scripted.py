"""Scripted model replies for contract extraction, built from CUAD-shaped labels, for the
contracts guide's example and token figures (docs/guides/contracts.md), served by
:class:`plandag.testing.MessagesServer`.

:class:`ScriptedContracts` is a responder (``MessagesServer(default=scripted)``) that plays
the model of every ``llm`` step of ``plandag extract contracts``, whatever order the
requests arrive in: it reads the request's data block (the excerpt and its character
range), finds the labelled contract whose text holds that excerpt there, and for each field
of the request's schema quotes, word for word, the contract's labelled clauses of that
category that lie in the excerpt, with the value the label's answer gives (a M/D/YY date as
ISO 8601, a party with the role in parentheses after its name, the answer's text). A
contract without labels gets empty lists. With ``fabricate``, the first excerpt of each
labelled contract also answers ``Governing Law`` with :data:`FABRICATED_QUOTE`, which is in
no contract: the ``quote_exists`` check rejects it.

The labels file is shaped like CUAD's (``{"file", "labels": {CATEGORY: {"clauses",
"answer"}}}`` per line; The Atticus Project, CUAD v1, CC BY 4.0); the contracts are the
files it names, in its folder.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from plandag.errors import InputError
from plandag.executors.data import parse_data_blocks
from plandag.jobs.contracts.evidence import locate_quote
from plandag.testing.script import ScriptedResponse, estimate_tokens

__all__ = ["FABRICATED_QUOTE", "ScriptedContracts", "main"]

FABRICATED_QUOTE: Final = "This Agreement shall be governed by the laws of the State of Atlantis."
"""A governing-law clause that no contract holds."""

_LABEL_DATE = re.compile(r"(\d{1,2})/(\d{1,2})/(\d{2})")
_PARTY = re.compile(r"([^;()]+?)\s*\(\s*[\"“]([^\"”]+)[\"”]\s*\)")


def _value(category: str, clause: str, answer: str) -> Any:
    """The value a model would give for ``clause`` of ``category`` from the label's answer,
    or None for a clause category (the quote is the value)."""
    if category.endswith("Date"):
        found = _LABEL_DATE.fullmatch(answer.strip())
        if found is None:
            return None
        month, day, year = (int(part) for part in found.groups())
        return f"20{year:02d}-{month:02d}-{day:02d}"
    if category == "Parties":  # names only: the label's clauses also list the role terms
        roles = {name.strip(): role for name, role in _PARTY.findall(answer)}
        return {"name": clause, "role": roles[clause]} if clause in roles else None
    if category in ("Document Name", "Governing Law"):
        return answer or clause
    if category in ("Renewal Term", "Notice Period To Terminate Renewal"):
        return answer or None
    return None


class ScriptedContracts:
    """A responder answering ``extract contracts`` requests from labels (see the module's
    docstring).

    Args:
        labels: a CUAD-shaped labels file; its contracts are read from its folder.
        fabricate: add :data:`FABRICATED_QUOTE` to each labelled contract's first excerpt.

    Raises:
        InputError: the labels file or a contract it names cannot be read, or a line is not
            an object with ``"file"`` (a string) and ``"labels"`` (an object); the message
            names the file and the line.
    """

    def __init__(self, labels: Path, *, fabricate: bool = False) -> None:
        self.fabricate = fabricate
        self.contracts: list[tuple[str, str, dict[str, Any]]] = []
        try:
            lines = labels.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise InputError(
                f"{labels}: cannot be read ({_reason(error)}): give a CUAD-shaped labels file "
                "(JSONL), such as examples/contracts/cuad_labels.jsonl"
            ) from None
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{labels} line {number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                row = error
            if not isinstance(row, dict):
                raise InputError(
                    f'{where}: not a JSON object: each line is {{"file": NAME, "labels": '
                    "{CATEGORY: {...}}}"
                )
            if not isinstance(row.get("file"), str) or not isinstance(row.get("labels"), dict):
                raise InputError(
                    f'{where}: needs "file" (a contract in the same folder) and "labels" '
                    "(an object of categories)"
                )
            try:
                text = (labels.parent / row["file"]).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as error:
                raise InputError(
                    f"{where}: contract {row['file']} cannot be read ({_reason(error)}): put it "
                    "next "
                    "to the labels file"
                ) from None
            self.contracts.append((row["file"], text, row["labels"]))
        self.usage: dict[str, dict[str, int]] = {}
        self._lock = threading.Lock()

    def contract_of(self, excerpt: str, start: int) -> tuple[str, str, dict[str, Any]] | None:
        """The labelled contract holding ``excerpt`` at ``start``: ``(file, text, labels)``."""
        for contract in self.contracts:
            if contract[1][start : start + len(excerpt)] == excerpt:
                return contract
        return None

    def fields_for(self, excerpt: str, start: int, group: Sequence[str]) -> dict[str, Any]:
        """The reply's ``fields`` for one excerpt starting at ``start`` and one field group."""
        fields: dict[str, list[dict[str, Any]]] = {name: [] for name in group}
        found = self.contract_of(excerpt, start)
        if found is not None:
            _, _, labels = found
            for name in group:
                label = labels.get(name)
                if not isinstance(label, Mapping):
                    continue
                for clause in label.get("clauses", []):
                    if "<omitted>" in clause or locate_quote(excerpt, clause) is None:
                        continue
                    value = _value(name, clause, str(label.get("answer", "")))
                    if value is None and (name.endswith("Date") or name == "Parties"):
                        continue  # "perpetual", "08/[]/2019", a role term: no value to give
                    fields[name].append({"quote": clause, "value": value})
            if self.fabricate and start == 0 and "Governing Law" in fields:
                fields["Governing Law"].append({"quote": FABRICATED_QUOTE, "value": "Atlantis"})
        return fields

    def __call__(self, body: dict[str, Any]) -> ScriptedResponse:
        """The reply to one Messages API request body; its tokens are counted in
        :attr:`usage` by contract file (``(unlabelled)`` for the others) as the server
        counts them (characters / 4: system prompt and messages in, the reply out)."""
        users = [m for m in body["messages"] if isinstance(m, dict) and m.get("role") == "user"]
        text = _text(users[0]["content"]) if users else ""
        blocks = [b for b in parse_data_blocks(text) if b.attributes.get("label") == "data"]
        if not blocks or "JSON Schema:\n" not in text:
            return ScriptedResponse.text("This scripted server answers extract contracts only.")
        data = blocks[0].value
        start = int(str(data["characters"]).partition(" to ")[0])
        schema = json.loads(text.rsplit("JSON Schema:\n", 1)[1])
        group = schema["properties"]["fields"]["required"]
        reply = ScriptedResponse.json({"fields": self.fields_for(data["excerpt"], start, group)})
        found = self.contract_of(data["excerpt"], start)
        sent = _text(body.get("system", "")) + "".join(
            _text(message.get("content", "")) for message in body["messages"]
        )
        with self._lock:
            usage = self.usage.setdefault(
                found[0] if found else "(unlabelled)",
                {"calls": 0, "input_tokens": 0, "output_tokens": 0},
            )
            usage["calls"] += 1
            usage["input_tokens"] += estimate_tokens(sent)
            usage["output_tokens"] += estimate_tokens(reply.text_output)
        return reply


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(block.get("text", "")) for block in content if isinstance(block, dict))


def _reason(error: Exception) -> str:
    """Why a file could not be read, without repeating its path."""
    return str(getattr(error, "strerror", None) or error)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m plandag.jobs.contracts.scripted --labels FILE [--port N] [--fabricate]``:
    serve the scripted replies on 127.0.0.1 until interrupted (the contracts
    guide's example, docs/guides/contracts.md)."""
    import argparse

    from plandag.testing import MessagesServer
    from plandag.testing.server import cannot_listen

    parser = argparse.ArgumentParser(
        prog="python -m plandag.jobs.contracts.scripted",
        description="Serve scripted contract-extraction replies (Anthropic Messages API) on "
        "127.0.0.1, quoting the labelled clauses of a CUAD-shaped labels file.",
    )
    parser.add_argument("--labels", type=Path, required=True, help="the labels file (JSONL)")
    parser.add_argument(
        "--port", type=int, default=0, help="port on 127.0.0.1 (default 0: any free one)"
    )
    parser.add_argument(
        "--fabricate",
        action="store_true",
        help="also answer Governing Law with a quote that is in no contract",
    )
    options = parser.parse_args(argv)
    try:
        scripted = ScriptedContracts(options.labels, fabricate=options.fabricate)
    except InputError as error:
        sys.stderr.write(f"error: --labels {error}\n")
        raise SystemExit(2) from None
    server = MessagesServer(default=scripted, port=options.port)
    try:
        server.start()
    except OSError as error:
        sys.stderr.write(f"error: {cannot_listen(options.port, error)}\n")
        raise SystemExit(2) from None
    try:
        print(f"serving scripted contract replies on {server.url}; Ctrl-C stops", flush=True)
        try:
            threading.Event().wait()  # until Ctrl-C
        except KeyboardInterrupt:
            return
    finally:
        server.stop()


if __name__ == "__main__":
    main()
