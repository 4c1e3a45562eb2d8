"""write_html: a self-contained page with the DAG, the Gantt chart and the steps table."""

from __future__ import annotations

from pathlib import Path

import lxml.html

from plandag.trace.html import write_html
from plandag.trace.model import load_trace, parse_trace


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
