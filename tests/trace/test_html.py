"""write_html: a self-contained page with the DAG, the Gantt chart and the steps table."""

from __future__ import annotations

from pathlib import Path

import lxml.html

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
