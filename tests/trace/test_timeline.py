"""render_timeline: one row per step with its bar, the critical path marked, model calls."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from plandag.trace.reader import load_trace, parse_trace
from plandag.trace.timeline import format_seconds, render_timeline


def rendered(path: Path, width: int = 100) -> list[str]:
    console = Console(record=True, width=width, color_system=None)
    render_timeline(load_trace(path), console)
    return console.export_text().splitlines()


def test_rows_bars_and_critical_path(sample_path: Path) -> None:
    # 100 columns: 26 label + │ + 41 bar + "│ " + 30 status; 6.5 s over 41 cells
    assert rendered(sample_path) == [
        "run run-a  failed  6.50 s  $0.2515 (steps $0.2500, models $0.0015)  160 tokens  4 step(s)",
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
    # 41 cells: 40 for 8 s of active time (segment 0: 0-4 s, segment 1: 6-10 s, 20 cells
    # each) and the ┊ of the 2 s wait between them; attempt 1 (cut by the crash) and
    # attempt 2 are two bars, the wait is not drawn as the step's time
    assert console.export_text().splitlines() == [
        "run r  succeeded  8.00 s active, 10.00 s wall clock  $0.0000 (steps $0.0000, models "
        "$0.0000)  0 tokens  1 step(s)  2 segments",
        "  time                    │" + "─" * 20 + "┊" + "─" * 20 + "│ 0 → 8.00 s",
        "  waits                   │"
        + " " * 20
        + "┊waited 2.00 s"
        + " " * 7
        + "│ 2.00 s of waiting cut out",
        "* 1 slow                  │" + "█" * 20 + "┊" + "█" * 20 + "│ succeeded  8.00 s  "
        "2 attempts",
        "critical path (*): 1  (8.00 s)",
        "note: segment 0 has no run_finished (its process stopped); its steps come from live "
        "events",
    ]


T = 1_700_000_000
WAITED_100_S = [
    # segment 0: step 1 runs 0-1 s, step 2 starts at 1 s, the process dies after 2 s
    f'{{"type":"run_started","run_id":"r","time":{T},"segment":0,"command":"exec"}}',
    f'{{"type":"plan","run_id":"r","time":{T},"version":1,"hash":"ab","source":"stored",'
    '"plan":{"steps":[{"id":1,"tool":"fetch","args":{}},'
    '{"id":2,"tool":"slow","args":{},"depends_on":[1]},'
    '{"id":3,"tool":"fetch","args":{},"depends_on":[2]}]}}',
    f'{{"type":"event","run_id":"r","time":{T},"kind":"step_started",'
    '"attrs":{"step_id":1,"tool":"fetch","attempt":1}}',
    f'{{"type":"event","run_id":"r","time":{T + 1},"kind":"step_ended",'
    '"attrs":{"step_id":1,"status":"succeeded","reason":null}}',
    f'{{"type":"event","run_id":"r","time":{T + 1},"kind":"step_started",'
    '"attrs":{"step_id":2,"tool":"slow","attempt":1}}',
    f'{{"type":"event","run_id":"r","time":{T + 2},"kind":"heartbeat","attrs":{{}}}}',
    # 100 s later, segment 1: step 2 re-run 102-104 s, step 3 104-105 s
    f'{{"type":"run_started","run_id":"r","time":{T + 102},"segment":1,"command":"resume"}}',
    f'{{"type":"event","run_id":"r","time":{T + 102},"kind":"step_started",'
    '"attrs":{"step_id":2,"tool":"slow","attempt":1}}',
    f'{{"type":"event","run_id":"r","time":{T + 104},"kind":"step_ended",'
    '"attrs":{"step_id":2,"status":"succeeded","reason":null}}',
    f'{{"type":"event","run_id":"r","time":{T + 104},"kind":"step_started",'
    '"attrs":{"step_id":3,"tool":"fetch","attempt":1}}',
    f'{{"type":"event","run_id":"r","time":{T + 105},"kind":"step_ended",'
    '"attrs":{"step_id":3,"status":"succeeded","reason":null}}',
    f'{{"type":"run_finished","run_id":"r","time":{T + 105},"segment":1,'
    '"status":"succeeded","spent_usd":0.0,"spent_tokens":0,"critical_path":[1,2,3]}',
]


def test_a_100_s_wait_between_segments_is_cut_out_of_the_bars() -> None:
    console = Console(record=True, width=100, color_system=None)
    render_timeline(parse_trace("\n".join(WAITED_100_S) + "\n"), console)
    # 5 s active (2 + 3) over 40 cells: segment 0 gets round(2/5 * 40) = 16 cells (0-15),
    # the wait cell 16, segment 1 the 24 cells 17-40; 1 s = 8 cells in segment 0
    assert console.export_text().splitlines() == [
        "run r  succeeded  5.00 s active, 1m 45s wall clock  $0.0000 (steps $0.0000, models "
        "$0.0000)  0 tokens  3 step(s)  2 segments",
        "  time                    │" + "─" * 16 + "┊" + "─" * 24 + "│ 0 → 5.00 s",
        "  waits                   │"
        + " " * 16
        + "┊waited 1m 40s"
        + " " * 11
        + "│ 1m 40s of waiting cut out",
        # step 1: 0-1 s, cells 0-8
        "* 1 fetch                 │" + "█" * 9 + " " * 7 + "┊" + " " * 24 + "│ succeeded  1.00 s",
        # step 2: 1-2 s (cells 8-15, cut by the crash) and 102-104 s (cells 17-33): 3 s active,
        # not 104 s
        "* 2 slow                  │"
        + " " * 8
        + "█" * 8
        + "┊"
        + "█" * 17
        + " " * 7
        + "│ succeeded  3.00 s  2 attempts",
        # step 3: 104-105 s, cells 33-40
        "* 3 fetch                 │" + " " * 16 + "┊" + " " * 16 + "█" * 8 + "│ succeeded  1.00 s",
        "critical path (*): 1 → 2 → 3  (5.00 s)",
        "note: segment 0 has no run_finished (its process stopped); its steps come from live "
        "events",
    ]


def test_a_wait_label_goes_before_its_mark_when_there_is_no_room_after() -> None:
    lines = [
        f'{{"type":"run_started","run_id":"r","time":{T},"segment":0,"command":"exec"}}',
        f'{{"type":"run_finished","run_id":"r","time":{T + 9},"segment":0,'
        '"status":"awaiting_approval","spent_usd":0.0,"spent_tokens":0,"critical_path":[]}',
        # a decision from another shell, 2 h 5 min later: not part of segment 0
        f'{{"type":"span","run_id":"r","kind":"approval","start":{T + 7509},"end":{T + 7509},'
        '"attrs":{"version":1,"hash":"ab","decision":"approved","who":"ana"}}',
        f'{{"type":"run_started","run_id":"r","time":{T + 7509},"segment":1,"command":"approve"}}',
        f'{{"type":"run_finished","run_id":"r","time":{T + 7510},"segment":1,'
        '"status":"succeeded","spent_usd":0.0,"spent_tokens":0,"critical_path":[]}',
    ]
    console = Console(record=True, width=100, color_system=None)
    render_timeline(parse_trace("\n".join(lines) + "\n"), console)
    # 10 s active: segment 0 has 36 cells, segment 1 has 4 (too few for the label)
    assert console.export_text().splitlines() == [
        "run r  succeeded  10.00 s active, 2h 05m wall clock  $0.0000 (steps $0.0000, models "
        "$0.0000)  0 tokens  0 step(s)  2 segments",
        "  time                    │" + "─" * 36 + "┊" + "─" * 4 + "│ 0 → 10.00 s",
        "  waits                   │"
        + " " * 23
        + "waited 2h 05m┊"
        + " " * 4
        + "│ 2h 05m of waiting cut out",
        "  approval v1             │" + " " * 36 + "┊◆   │ approved by ana",
    ]
