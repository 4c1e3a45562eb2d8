"""The CLI's consoles mask credentials in text before rich lays it out, so that no wrap
and no table border can cut a token from the word that tells it is one."""

from __future__ import annotations

import io

import pytest
from rich.table import Table
from rich.text import Text

from plandag.cli.secret_output import SecretMaskingConsole, SecretMaskingStream, masked_text

TOKEN = "abcdefghijklmnopqrstuvwxyz0123456789"


def test_masked_text_keeps_the_styles_around_the_credential() -> None:
    text = Text.from_markup(f"[red]error[/] Authorization Bearer {TOKEN} [bold]end[/]")
    masked = masked_text(text)
    assert masked.plain == "error Authorization Bearer [secret] end"
    assert [(span.start, span.end, span.style) for span in masked.spans] == [
        (0, 5, "red"),
        (36, 39, "bold"),
    ]
    plain = Text("nothing to hide")
    assert masked_text(plain) is plain


@pytest.mark.parametrize("width", range(24, 64))
def test_a_table_never_shows_the_token_whatever_its_width(width: int) -> None:
    out = io.StringIO()
    console = SecretMaskingConsole(width=width, file=out, highlight=False)
    table = Table(title=f"Bearer {TOKEN}")
    table.add_column("step")
    table.add_column("reason", overflow="fold")
    table.add_row("1", f"tool_error the server said no to Authorization Bearer {TOKEN}")
    table.add_row("2", Text(f"Bearer {TOKEN}"))
    console.print(table)
    console.print(f"[bold]reason:[/] Bearer {TOKEN} and http://alice:hunter2@host/")
    shown = out.getvalue()
    for piece in (TOKEN[:6], TOKEN[-6:], "hunter2"):
        assert piece not in shown.replace("│", "").replace("\n", "").replace(" ", "")
    assert "[secret]" in shown


def test_the_stream_masks_each_write_and_never_fails_on_a_lone_surrogate() -> None:
    out = io.StringIO()
    stream = SecretMaskingStream(out)  # type: ignore[arg-type]
    assert stream.write(f"Bearer {TOKEN}\n") == len(f"Bearer {TOKEN}\n")
    stream.write('{"n": "a\ud800"}\n')
    assert out.getvalue() == 'Bearer [secret]\n{"n": "a\\ud800"}\n'
    out.getvalue().encode("utf-8")
