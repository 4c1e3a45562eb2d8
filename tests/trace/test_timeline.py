"""render_timeline: one row per step with its bar, the critical path marked, model calls."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from plandag.trace.model import load_trace, parse_trace
from plandag.trace.timeline import format_seconds, render_timeline


def rendered(path: Path, width: int = 100) -> list[str]:
    console = Console(record=True, width=width, color_system=None)
    render_timeline(load_trace(path), console)
    return console.export_text().splitlines()


def test_rows_bars_and_critical_path(sample_path: Path) -> None:
    # 100 columns: 26 label + │ + 41 bar + "│ " + 30 status; 6.5 s over 41 cells
    assert rendered(sample_path) == [
        "run run-a  failed  6.50 s  $0.2515 (steps $0.2500, models $0.0015)  4 step(s)",
        "  time                    │─────────────────────────────────────────│ 0 → 6.50 s",
        "* 1 echo                  │      ███████                            │ succeeded  1.00 s",
        "  2 echo                  │            ███████                      │ succeeded  1.00 s",
        "* 3 nap                   │            ██████████████──██████████   │ succeeded  4.00 s  "
        "2 attempts",
        "* 4 echo                  │                                     ████│ failed  0.500 s  "
        "check_failed",
        "  llm plan claude-x       │ ▒▒▒                                     │ 100→20 tok $0.0015",
        "  approval v1             │     ◆                                   │ approved by ana",
        "critical path (*): 1 → 3 → 4  (5.50 s)",
    ]


def test_critical_rows_are_bold(sample_path: Path) -> None:
    console = Console(record=True, width=100, force_terminal=True, color_system="standard")
    render_timeline(load_trace(sample_path), console)
    html = console.export_html(inline_styles=True)
    assert html.count("font-weight: bold") >= 3


def test_the_width_scales_the_bars(sample_path: Path) -> None:
    lines = rendered(sample_path, width=140)
    assert lines[1] == "  time                    │" + "─" * 81 + "│ 0 → 6.50 s"
    assert all(len(line) <= 140 for line in lines)


def test_format_seconds() -> None:
    assert [format_seconds(value) for value in (0.0421, 3.2, 125.0, 3720.0)] == [
        "0.042 s",
        "3.20 s",
        "2m 05s",
        "1h 02m",
    ]


def test_a_resumed_run_is_one_timeline_with_its_segments_marked() -> None:
    lines = [
        '{"type":"run_started","run_id":"r","time":0.0,"segment":0,"command":"exec"}',
        '{"type":"event","run_id":"r","time":0.0,"kind":"step_started",'
        '"attrs":{"step_id":1,"tool":"slow","attempt":1}}',
        '{"type":"event","run_id":"r","time":4.0,"kind":"heartbeat","attrs":{}}',
        '{"type":"run_started","run_id":"r","time":6.0,"segment":1,"command":"resume"}',
        '{"type":"event","run_id":"r","time":6.0,"kind":"step_started",'
        '"attrs":{"step_id":1,"tool":"slow","attempt":1}}',
        '{"type":"event","run_id":"r","time":10.0,"kind":"step_ended",'
        '"attrs":{"step_id":1,"status":"succeeded","reason":null}}',
        '{"type":"run_finished","run_id":"r","time":10.0,"segment":1,"status":"succeeded",'
        '"spent_usd":0.0,"spent_tokens":0,"critical_path":[1]}',
    ]
    console = Console(record=True, width=100, color_system=None)
    render_timeline(parse_trace("\n".join(lines) + "\n"), console)
    # 41 cells over 10 s: segment 1 starts at cell 24; attempt 1 (0-4 s, cut by the crash)
    # and attempt 2 (6-10 s) with the gap between them
    assert console.export_text().splitlines() == [
        "run r  succeeded  10.00 s  $0.0000 (steps $0.0000, models $0.0000)  1 step(s)  2 segments",
        "  time                    │" + "─" * 24 + "┊" + "─" * 16 + "│ 0 → 10.00 s",
        "* 1 slow                  │" + "█" * 17 + "─" * 7 + "█" * 17 + "│ succeeded  10.00 s  "
        "2 attempts",
        "critical path (*): 1  (10.00 s)",
        "note: segment 0 has no run_finished (its process stopped); its steps come from live "
        "events",
    ]
