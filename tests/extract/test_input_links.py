"""Symbolic links among the inputs of ``plandag extract nfe`` and ``plandag extract
contracts`` (one input expansion): a link leading outside the folders and files given is an
error row ``link_outside`` in its place, never read, unless ``--follow-links``; a link
named as an argument leads inside only when its target lies in another argument."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from plandag.cli import app
from plandag.extract.nfe.batch import expand_inputs
from plandag.jobs.contracts.batch import expand_contract_inputs
from plandag.testing import MessagesServer, ScriptedResponse

SECRET = "root:x:0:0:SECRET-PASSWD-LINE:/root:/bin/bash"
REPO = Path(__file__).resolve().parents[2]
INVOICE = REPO / "examples" / "nfe" / "brnfe_without_proc.xml"


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def passwd(tmp_path: Path) -> Path:
    """A file outside every input folder that stands for /etc/passwd."""
    folder = tmp_path / "etc"
    folder.mkdir()
    path = folder / "passwd"
    path.write_text(SECRET + "\n", encoding="utf-8")
    return path


def codes(missing: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(row["source"], row["errors"][0]["code"]) for row in missing]


def test_a_link_in_a_folder_leading_outside_gets_a_row_in_its_place(
    tmp_path: Path, passwd: Path
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("A contract.\n", encoding="utf-8")
    (folder / "b.txt").symlink_to(passwd)
    (folder / "c.txt").symlink_to("a.txt")  # inside: the same file, taken once
    (folder / "d.txt").write_text("Another contract.\n", encoding="utf-8")
    files, missing = expand_inputs([str(folder)])
    assert files == [folder / "a.txt", folder / "b.txt", folder / "d.txt"]
    assert codes(missing) == [(str(folder / "b.txt"), "link_outside")]
    message = missing[0]["errors"][0]["message"]
    assert message == (
        f"{folder / 'b.txt'}: a symbolic link to {passwd}, outside the folders and files "
        "given; not read (name the file itself, or give --follow-links to follow links)"
    )
    files, missing = expand_inputs([str(folder)], follow_links=True)
    assert files == [folder / "a.txt", folder / "b.txt", folder / "d.txt"]
    assert missing == []


def test_a_link_named_as_an_argument_leads_inside_only_to_another_argument(
    tmp_path: Path, passwd: Path
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    real = folder / "a.txt"
    real.write_text("A contract.\n", encoding="utf-8")
    outside = tmp_path / "outside.txt"
    outside.symlink_to(passwd)
    inside = tmp_path / "inside.txt"
    inside.symlink_to(real)
    # alone, a link named as an argument points outside what was given: a row, no error
    files, missing = expand_inputs([str(outside)])
    assert (files, codes(missing)) == ([outside], [(str(outside), "link_outside")])
    files, missing = expand_inputs([str(inside)])
    assert codes(missing) == [(str(inside), "link_outside")]
    # its target is another argument's file, or in another argument's folder: taken
    files, missing = expand_inputs([str(real), str(inside)])
    assert (files, missing) == ([real], [])
    files, missing = expand_inputs([str(inside), str(folder)])
    assert (files, missing) == ([inside], [])
    # the file itself named: taken, as asked
    files, missing = expand_inputs([str(passwd)])
    assert (files, missing) == ([passwd], [])


def test_links_to_folders_and_globs(tmp_path: Path, passwd: Path) -> None:
    folder = tmp_path / "in"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.txt").write_text("A contract.\n", encoding="utf-8")
    (folder / "etc").symlink_to(passwd.parent)  # a folder link out, inside a folder
    (folder / "mine").symlink_to(folder / "sub")  # a folder link inside: never entered
    (folder / "p.txt").symlink_to(passwd)
    linked = tmp_path / "linked"
    linked.symlink_to(passwd.parent)  # a folder link named as an argument
    files, missing = expand_inputs([str(folder), str(linked)])
    assert codes(missing) == [
        (str(folder / "etc"), "link_outside"),
        (str(folder / "p.txt"), "link_outside"),
        (str(linked), "link_outside"),
    ]
    assert folder / "mine" in files  # kept: the batch gives it not_a_file, as before
    assert not any(path.parent == linked for path in files)
    # a glob's matches, also those reached through a linked folder (``*/`` and ``**``)
    for pattern in (f"{folder}/*.txt", f"{folder}/*/passwd", f"{folder}/**/passwd"):
        files, missing = expand_inputs([pattern])
        assert [row["errors"][0]["code"] for row in missing] == ["link_outside"], pattern
        assert {Path(row["source"]) for row in missing} == set(files), pattern
    files, missing = expand_inputs([f"{folder}/**/*.txt"])
    assert codes(missing) == [(str(folder / "p.txt"), "link_outside")]
    # the file inside is taken once, first met through the link to its folder
    assert files == [folder / "mine" / "a.txt", folder / "p.txt"]
    # with --follow-links, a folder link named as an argument is entered
    files, missing = expand_inputs([str(linked)], follow_links=True)
    assert (files, missing) == ([linked / "passwd"], [])


def test_contracts_take_the_same_rows(tmp_path: Path, passwd: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("A contract.\n", encoding="utf-8")
    (folder / "b.txt").symlink_to(passwd)
    files, rows = expand_contract_inputs([str(folder)])
    assert files == [folder / "a.txt", folder / "b.txt"]
    assert [(row["file"], row["status"], row["errors"][0]["code"]) for row in rows] == [
        (str(folder / "b.txt"), "error", "link_outside")
    ]
    assert expand_contract_inputs([str(folder)], follow_links=True)[1] == []


def empty_fields(body: dict[str, Any]) -> ScriptedResponse:
    """A schema-only stand-in model: every field of the request's group, with no passage."""
    text = body["messages"][0]["content"]
    text = text if isinstance(text, str) else "".join(b["text"] for b in text)
    group = json.loads(text.rsplit("JSON Schema:\n", 1)[1])["properties"]["fields"]["required"]
    return ScriptedResponse.json({"fields": {name: [] for name in group}})


def test_extract_contracts_never_sends_a_linked_file_to_the_model(
    tmp_path: Path, passwd: Path
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("This Agreement is governed by Delaware law.\n", "utf-8")
    (folder / "b.txt").symlink_to(passwd)
    output = tmp_path / "out.jsonl"
    with MessagesServer(default=empty_fields) as server:
        for follow in (False, True):
            result = CliRunner().invoke(
                app,
                [
                    "extract",
                    "contracts",
                    str(folder),
                    "-o",
                    str(output),
                    "--base-url",
                    server.url,
                    "--store",
                    str(tmp_path / "runs.sqlite3"),
                    *(["--follow-links"] if follow else []),
                ],
                env={"ANTHROPIC_API_KEY": "test"},
            )
            assert result.exit_code == 0, result.output
            rows = [json.loads(line) for line in output.read_text("utf-8").splitlines()]
            sent = [json.dumps(request.json) for request in server.message_requests]
            if not follow:
                assert [(row["file"], row["status"]) for row in rows] == [
                    (str(folder / "a.txt"), "ok"),
                    (str(folder / "b.txt"), "error"),
                ]
                assert rows[1]["errors"][0]["code"] == "link_outside"
                assert sent
                assert not any("SECRET-PASSWD-LINE" in text for text in sent)
            else:
                assert [row["status"] for row in rows] == ["ok", "ok"]
                assert any("SECRET-PASSWD-LINE" in text for text in sent)


def test_extract_nfe_gives_the_same_row(tmp_path: Path, passwd: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.xml").write_bytes(INVOICE.read_bytes())
    secret = tmp_path / "etc" / "nfe.xml"  # an invoice outside the folder
    secret.write_bytes(INVOICE.read_bytes())
    (folder / "b.xml").symlink_to(secret)
    output = tmp_path / "out.jsonl"
    for follow, sources in ((False, 1), (True, 2)):
        result = CliRunner().invoke(
            app,
            [
                "extract",
                "nfe",
                str(folder),
                "-o",
                str(output),
                "--workers",
                "1",
                "--store",
                str(tmp_path / "runs.sqlite3"),
                *(["--follow-links"] if follow else []),
            ],
        )
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in output.read_text("utf-8").splitlines()]
        assert [row["source"] for row in rows] == [str(folder / "a.xml"), str(folder / "b.xml")]
        extracted = [row for row in rows if row["sha256"]]
        assert len(extracted) == sources
        if not follow:
            assert rows[1]["errors"] == [
                {
                    "code": "link_outside",
                    "message": f"{folder / 'b.xml'}: a symbolic link to {secret}, outside the "
                    "folders and files given; not read (name the file itself, or give "
                    "--follow-links to follow links)",
                }
            ]
