"""The corpus generator's command line: a source it cannot copy is a one-line error naming
the file (exit 2), not a traceback, and nothing half-made is left as if complete."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.generate_nfe import generate, main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"


def test_a_source_without_one_invoice_key_is_named_in_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    event = tmp_path / "event.xml"
    event.write_text("<procEventoNFe><evento/></procEventoNFe>", encoding="utf-8")

    with pytest.raises(SystemExit) as stopped:
        main(["3", str(tmp_path / "out"), "--source", str(event)])

    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert f"{event}: 0 invoice keys in the file; one is needed" in error
    assert "Traceback" not in error


def test_a_missing_source_is_named_in_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.xml"

    with pytest.raises(SystemExit) as stopped:
        main(["3", str(tmp_path / "out"), "--source", str(missing)])

    assert stopped.value.code == 2
    assert str(missing) in capsys.readouterr().err


def test_generate_names_the_source_it_cannot_copy(tmp_path: Path) -> None:
    good = EXAMPLES / "brnfe_without_proc.xml"
    bad = tmp_path / "bad.xml"
    bad.write_text("<NFe/>", encoding="utf-8")

    with pytest.raises(ValueError, match=r"bad\.xml: 0 invoice keys"):
        generate(4, tmp_path / "out", sources=[good, bad])
