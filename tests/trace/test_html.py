"""write_html: a self-contained page with the DAG, the Gantt chart and the steps table."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import lxml.html
import pytest

from plandag.trace.html import write_html
from plandag.trace.reader import load_trace, parse_trace


def has_class(name: str) -> str:
    return f'contains(concat(" ", normalize-space(@class), " "), " {name} ")'


def test_dag_gantt_and_table(sample_path: Path, tmp_path: Path) -> None:
    page = write_html(load_trace(sample_path), tmp_path / "report.html")
    text = page.read_text(encoding="utf-8")
    document = lxml.html.fromstring(text)
    [dag] = document.xpath('//svg[@id="dag"]')
    nodes = dag.xpath(f".//g[{has_class('node')}]")
    assert [node.get("data-step") for node in nodes] == ["1", "2", "3", "4"]
    assert [node.get("class") for node in nodes] == [
        "node status-succeeded critical",
        "node status-succeeded",
        "node status-succeeded critical",
        "node status-failed critical",
    ]
    edges = dag.xpath(f".//path[{has_class('edge')}]")
    assert sorted((edge.get("data-from"), edge.get("data-to")) for edge in edges) == [
        ("1", "2"),
        ("1", "3"),
        ("2", "4"),
        ("3", "4"),
    ]
    critical = dag.xpath(f".//path[{has_class('critical')}]")
    assert sorted((edge.get("data-from"), edge.get("data-to")) for edge in critical) == [
        ("1", "3"),
        ("3", "4"),
    ]
    # topological generations: 1 | 2 3 | 4
    x_of = {node.get("data-step"): node.xpath("./rect")[0].get("x") for node in nodes}
    assert x_of == {"1": "20", "2": "260", "3": "260", "4": "500"}
    [gantt] = document.xpath('//svg[@id="gantt"]')
    bars = gantt.xpath(f".//rect[{has_class('bar')}]")
    assert [bar.get("data-step") for bar in bars] == ["1", "2", "3", "4"]
    assert [has_critical(bar.get("class")) for bar in bars] == [True, False, True, True]
    assert len(gantt.xpath(f".//rect[{has_class('llm')}]")) == 1
    rows = document.xpath('//table[@id="steps"]/tbody/tr')
    assert [row.xpath("./td")[2].text_content() for row in rows] == [
        "succeeded",
        "succeeded",
        "succeeded",
        "failed",
    ]
    assert not document.xpath("//script")
    assert "http" not in text
    assert "<link" not in text


def has_critical(css: str | None) -> bool:
    return "critical" in (css or "").split()


def test_text_is_escaped(tmp_path: Path) -> None:
    text = (
        '{"type":"run_started","run_id":"<b>r</b>","time":1.0,"segment":0,"command":"exec"}\n'
        '{"type":"event","run_id":"<b>r</b>","time":1.0,"kind":"step_started",'
        '"attrs":{"step_id":1,"tool":"<script>alert(1)</script>","attempt":1}}\n'
        '{"type":"event","run_id":"<b>r</b>","time":2.0,"kind":"step_ended",'
        '"attrs":{"step_id":1,"status":"failed","reason":"\\"><img src=x>"}}\n'
    )
    page = write_html(parse_trace(text), tmp_path / "x.html")
    content = page.read_text(encoding="utf-8")
    assert "<script>" not in content
    assert "<img" not in content
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in content
    document = lxml.html.fromstring(content)
    assert not document.xpath("//script | //img | //b")
    assert document.xpath("//h1")[0].text_content() == "plandag run <b>r</b>"


T = 1_700_000_000


def event(time: float, kind: str, attrs: str) -> str:
    return f'{{"type":"event","run_id":"r","time":{T + time},"kind":"{kind}","attrs":{attrs}}}'


WAITED_100_S = "\n".join(
    [
        # segment 0: step 1 runs 0-1 s, step 2 starts at 1 s, the process dies after 2 s
        f'{{"type":"run_started","run_id":"r","time":{T},"segment":0,"command":"exec"}}',
        f'{{"type":"plan","run_id":"r","time":{T},"version":1,"hash":"ab","source":"stored",'
        '"plan":{"steps":[{"id":1,"tool":"fetch","args":{}},'
        '{"id":2,"tool":"slow","args":{},"depends_on":[1]},'
        '{"id":3,"tool":"fetch","args":{},"depends_on":[2]}]}}',
        event(0, "step_started", '{"step_id":1,"tool":"fetch","attempt":1}'),
        event(1, "step_ended", '{"step_id":1,"status":"succeeded"}'),
        event(1, "step_started", '{"step_id":2,"tool":"slow","attempt":1}'),
        event(2, "heartbeat", "{}"),
        # 100 s later, segment 1: step 2 re-run 102-104 s, step 3 104-105 s
        f'{{"type":"run_started","run_id":"r","time":{T + 102},"segment":1,"command":"resume"}}',
        event(102, "step_started", '{"step_id":2,"tool":"slow","attempt":1}'),
        event(104, "step_ended", '{"step_id":2,"status":"succeeded"}'),
        event(104, "step_started", '{"step_id":3,"tool":"fetch","attempt":1}'),
        event(105, "step_ended", '{"step_id":3,"status":"succeeded"}'),
        f'{{"type":"run_finished","run_id":"r","time":{T + 105},"segment":1,'
        '"status":"succeeded","spent_usd":0.0,"spent_tokens":0,"critical_path":[1,2,3]}',
    ]
)


def test_the_gantt_chart_cuts_out_a_100_s_wait(tmp_path: Path) -> None:
    page = write_html(parse_trace(WAITED_100_S + "\n"), tmp_path / "report.html")
    text = page.read_text(encoding="utf-8")
    document = lxml.html.fromstring(text)
    [summary] = document.xpath('//p[@class="summary"]')
    assert [span.text_content() for span in summary.xpath("./span")][1:3] == [
        "duration 5.00 s active, 1m 45s wall clock",
        "waited 1m 40s between segments (not drawn)",
    ]
    [gantt] = document.xpath('//svg[@id="gantt"]')
    # 900 px: the wait's band 24 px, 876 px for 5 s of active time (175.2 px/s) from x 220:
    # segment 0 (2 s) at 220-570.4, the band at 570.4-594.4, segment 1 (3 s) at 594.4-1120
    bars = gantt.xpath(f".//rect[{has_class('bar')}]")
    assert [
        (bar.get("data-step"), bar.get("data-period"), bar.get("x"), bar.get("width"))
        for bar in bars
    ] == [
        ("1", "0", "220.0", "175.2"),  # 0-1 s
        ("2", "0", "395.2", "175.2"),  # 1-2 s, cut by the crash
        ("2", "1", "594.4", "350.4"),  # 102-104 s: a second bar, none across the wait
        ("3", "1", "944.8", "175.2"),  # 104-105 s
    ]
    assert bars[1].xpath("./title")[0].text == "step 2 slow: succeeded, 3.00 s, 2 attempts"
    [wait] = gantt.xpath(f".//g[{has_class('wait')}]")
    assert wait.get("data-waited") == "100.000"
    assert wait.xpath("./rect")[0].get("x") == "570.4"
    assert wait.xpath("./rect")[0].get("width") == "24.0"
    assert wait.xpath("./line")[0].get("x1") == "582.4"
    assert wait.xpath("./text")[0].text == "waited 1m 40s"
    [segment] = gantt.xpath(f".//line[{has_class('segment')}]")
    assert segment.get("x1") == "594.4"
    # ticks over active time: 0, 1, ..., 5 s; 2 s is segment 0's end
    ticks = gantt.xpath(f".//text[{has_class('tick')}]")
    assert [(tick.get("x"), tick.text) for tick in ticks] == [
        ("222.0", "0.000 s"),
        ("397.2", "1.00 s"),
        ("572.4", "2.00 s"),
        ("771.6", "3.00 s"),
        ("946.8", "4.00 s"),
        ("1122.0", "5.00 s"),
    ]
    rows = document.xpath('//table[@id="steps"]/tbody/tr')
    assert [[cell.text_content() for cell in row.xpath("./td")[4:7]] for row in rows] == [
        ["+0.000 s", "1.00 s", "1"],
        ["+1.00 s", "3.00 s", "2"],
        ["+4.00 s", "1.00 s", "1"],
    ]
    assert not document.xpath("//script")
    assert "http" not in text


def test_a_single_segment_chart_is_unchanged(sample_path: Path, tmp_path: Path) -> None:
    page = write_html(load_trace(sample_path), tmp_path / "report.html")
    document = lxml.html.fromstring(page.read_text(encoding="utf-8"))
    [summary] = document.xpath('//p[@class="summary"]')
    assert summary.xpath("./span")[1].text_content() == "duration 6.50 s"
    [gantt] = document.xpath('//svg[@id="gantt"]')
    # 900 px for 6.5 s from x 220 (138.5 px/s); no wait band, no segment line
    assert [
        (bar.get("data-step"), bar.get("x"), bar.get("width"))
        for bar in gantt.xpath(f".//rect[{has_class('bar')}]")
    ] == [
        ("1", "358.5", "138.5"),
        ("2", "496.9", "138.5"),
        ("3", "496.9", "553.8"),  # 2-6 s: its two attempts and the retry wait, one bar
        ("4", "1050.8", "69.2"),
    ]
    assert gantt.get("height") == "170"
    assert not gantt.xpath(f".//g[{has_class('wait')}] | .//line[{has_class('segment')}]")


def test_the_page_shows_the_goal_escaped(tmp_path: Path) -> None:
    from plandag.trace.writer import TraceWriter

    path = tmp_path / "g.jsonl"
    with TraceWriter(path, "g1", clock=lambda: 1000.0) as writer:
        writer.run_started("exec", "total of <NF-e> & items", {})
    page = tmp_path / "g.html"
    write_html(load_trace(path), page)
    document = lxml.html.fromstring(page.read_text(encoding="utf-8"))
    assert document.xpath("string(//p[@class='goal'])") == "total of <NF-e> & items"


def _plan_trace(steps: str, extra: str = "") -> str:
    """A one-segment run of the plan ``steps`` (a JSON list) from 1 s to 2 s, with ``extra``
    lines right after ``run_started``."""
    return "\n".join(
        [
            f'{{"type":"run_started","run_id":"r","time":{T + 1},"segment":0,"command":"exec"}}',
            *([extra] if extra else []),
            f'{{"type":"plan","run_id":"r","time":{T + 1},"version":1,"hash":"ab",'
            f'"source":"stored","plan":{{"steps":{steps}}}}}',
            event(1, "step_started", '{"step_id":3,"tool":"a","attempt":1}'),
            event(2, "step_ended", '{"step_id":3,"status":"succeeded"}'),
            f'{{"type":"run_finished","run_id":"r","time":{T + 2},"segment":0,'
            '"status":"succeeded","spent_usd":0.0,"spent_tokens":0,"critical_path":[3]}',
        ]
    )


def _points(shape: str) -> list[tuple[float, float]]:
    """The points of an SVG path of M, L and C commands (a curve's control points: the
    curve lies inside their hull)."""
    points = []
    for token in shape.replace("M", " ").replace("L", " ").replace("C", " ").split():
        x, y = token.split(",")
        points.append((float(x), float(y)))
    return points


def _crosses(
    start: tuple[float, float], end: tuple[float, float], box: tuple[float, float, float, float]
) -> bool:
    """Whether the segment from ``start`` to ``end`` enters the inside of ``box`` (x, y,
    width, height), its border excluded (Liang-Barsky clipping)."""
    x, y, width, height = box
    left, right, top, bottom = x + 0.5, x + width - 0.5, y + 0.5, y + height - 0.5
    dx, dy = end[0] - start[0], end[1] - start[1]
    low, high = 0.0, 1.0
    for p, q in (
        (-dx, start[0] - left),
        (dx, right - start[0]),
        (-dy, start[1] - top),
        (dy, bottom - start[1]),
    ):
        if p == 0:
            if q < 0:
                return False
            continue
        t = q / p
        if p < 0:
            low = max(low, t)
        else:
            high = min(high, t)
        if low > high:
            return False
    return True


@pytest.mark.parametrize(
    "steps",
    [
        # one row: 3 → 4 → 5 and 3 → 5, which skips box 4's column
        '[{"id":3,"tool":"a","args":{}},{"id":4,"tool":"b","args":{},"depends_on":[3]},'
        '{"id":5,"tool":"c","args":{},"depends_on":[3,4]}]',
        # several rows, several edges skipping one or two columns
        '[{"id":1,"tool":"a","args":{}},{"id":2,"tool":"b","args":{},"depends_on":[1]},'
        '{"id":3,"tool":"b","args":{},"depends_on":[1]},{"id":4,"tool":"c","args":{},'
        '"depends_on":[2,3,1]},{"id":5,"tool":"d","args":{},"depends_on":[4,1,2]},'
        '{"id":6,"tool":"e","args":{},"depends_on":[1]}]',
    ],
)
def test_no_edge_passes_behind_a_box(steps: str, tmp_path: Path) -> None:
    page = write_html(parse_trace(_plan_trace(steps) + "\n"), tmp_path / "dag.html")
    [dag] = lxml.html.fromstring(page.read_text(encoding="utf-8")).xpath('//svg[@id="dag"]')
    boxes = {
        int(node.get("data-step")): tuple(
            float(node.xpath("./rect")[0].get(name)) for name in ("x", "y", "width", "height")
        )
        for node in dag.xpath(f".//g[{has_class('node')}]")
    }
    edges = dag.xpath(f".//path[{has_class('edge')}]")
    plan = json.loads(steps)
    assert len(edges) == sum(len(step.get("depends_on", [])) for step in plan)
    for edge in edges:
        ends = {int(edge.get("data-from")), int(edge.get("data-to"))}
        points = _points(edge.get("d"))
        for step_id, box in boxes.items():
            if step_id in ends:
                continue
            assert not any(_crosses(a, b, box) for a, b in itertools.pairwise(points)), (
                f"edge {edge.get('data-from')}→{edge.get('data-to')} crosses box {step_id}"
            )
    width, height = float(dag.get("width")), float(dag.get("height"))
    for edge in edges:
        assert all(0 <= x <= width and 0 <= y <= height for x, y in _points(edge.get("d")))


def test_a_one_segment_run_has_no_wait_between_segments(tmp_path: Path) -> None:
    # the plan compiled 0.5 s before the run's one segment started (its span is written
    # once the run has started, as exec writes it)
    compile_span = (
        f'{{"type":"span","run_id":"r","time":{T + 1},"kind":"compile","start":{T},'
        f'"end":{T + 0.5},"attrs":{{"version":1,"ok":true,"diagnostics":[]}}}}'
    )
    steps = '[{"id":3,"tool":"a","args":{}}]'
    trace = parse_trace(_plan_trace(steps, compile_span) + "\n")
    assert len(trace.segments) == 1
    assert trace.active_time().waits == ()
    page = write_html(trace, tmp_path / "one.html")
    text = page.read_text(encoding="utf-8")
    assert "between segments" not in text
    document = lxml.html.fromstring(text)
    [summary] = document.xpath('//p[@class="summary"]')
    duration = summary.xpath("./span")[1].text_content()
    assert duration.startswith("duration ")
    assert "wall clock" not in duration
    [gantt] = document.xpath('//svg[@id="gantt"]')
    assert not gantt.xpath(f".//g[{has_class('wait')}]")
