"""``extract nfe --planner`` (README, "Planning with a model"): a stored NF-e
plan whose emitter selection misses a layout variant (an emitter identified by CPF) is
repaired by a scripted replanner for that input only; the other inputs make no request."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from plandag.brakes.budget import Budget
from plandag.brakes.clock import VirtualClock
from plandag.brakes.retry import RetryPolicy
from plandag.compiler import compile_plan
from plandag.executors.data import parse_data_blocks
from plandag.extract.nfe import load_plan_text
from plandag.extract.nfe.batch import extract_batch
from plandag.extract.nfe.document import extract_document, nfe_needs_repair
from plandag.extract.nfe.validators import key_check_digit
from plandag.models import AnthropicClient
from plandag.planner.repair import PlanRepairer
from plandag.scheduler import RunLimits
from plandag.testing import MessagesServer
from plandag.tools.registry import default_registry

MODEL = "claude-sonnet-4-6"
NS = "http://www.portalfiscal.inf.br/nfe"
CNPJ = "34128745000152"
CPF = "52998224725"  # a valid CPF (check digits 2 and 5)

CHECKS = [
    {"k": kind}
    for kind in (
        "nfe_key_check_digit",
        "nfe_key_matches_document",
        "nfe_cnpj_cpf_valid",
        "nfe_items_sum_vprod",
        "nfe_vnf_formula",
        "nfe_protocol_authorised",
    )
]


def broken_plan() -> str:
    """The stored plan, its emitter step reading only a CNPJ, with a structural check that
    the emitter's document was found: right for companies, wrong for a person (CPF)."""
    plan = json.loads(load_plan_text())
    emitter = plan["steps"][4]
    assert emitter["id"] == 5
    emitter["args"]["paths"] = {
        "CNPJ": "nfe:emit/nfe:CNPJ",
        "xNome": "nfe:emit/nfe:xNome",
        "IE": "nfe:emit/nfe:IE",
        "UF": "nfe:emit/nfe:enderEmit/nfe:UF",
    }
    emitter["check"] = [{"kind": "not_empty", "path": "CNPJ"}]
    return json.dumps(plan)


PATCH = {
    "g": "Extract one NF-e",
    "s": [
        {
            "i": 10,
            "t": "xml_select",
            "a": {
                "xml": "<step_3_result.xml>",
                "paths": {
                    "CNPJ": "nfe:emit/nfe:CNPJ",
                    "CPF": "nfe:emit/nfe:CPF",
                    "xNome": "nfe:emit/nfe:xNome",
                    "IE": "nfe:emit/nfe:IE",
                    "UF": "nfe:emit/nfe:enderEmit/nfe:UF",
                },
            },
            "d": [3],
        },
        {
            "i": 11,
            "t": "nfe_record",
            "a": {
                "source": "<param.input>",
                "sha256": "<step_3_result.sha256>",
                "invoice": "<step_3_result>",
                "ide": "<step_4_result>",
                "emit": "<step_10_result>",
                "dest": "<step_6_result>",
                "items": "<step_7_result>",
                "total": "<step_8_result>",
                "protocol": "<step_3_result.protocol>",
                "events": "<step_3_result.events>",
            },
            "d": [3, 4, 10, 6, 7, 8],
            "c": CHECKS,
        },
    ],
    "o": "<step_11_result>",
}


def key(number: int, emitter: str) -> str:
    body = f"351808{emitter.zfill(14)}55001{number:09d}1{number:08d}"
    return body + str(key_check_digit(body))


def invoice(number: int, *, cpf: bool = False) -> str:
    emitter = CPF if cpf else CNPJ
    access = key(number, emitter)
    document = f"<CPF>{CPF}</CPF>" if cpf else f"<CNPJ>{CNPJ}</CNPJ>"
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<NFe xmlns="{NS}"><infNFe versao="4.00" Id="NFe{access}">
<ide><cUF>35</cUF><cNF>{number:08d}</cNF><mod>55</mod><serie>1</serie><nNF>{number}</nNF>
<dhEmi>2018-08-28T10:00:00-03:00</dhEmi><tpNF>1</tpNF><tpEmis>1</tpEmis><cDV>{access[-1]}</cDV>
<tpAmb>2</tpAmb><finNFe>1</finNFe></ide>
<emit>{document}<xNome>Produtor {number}</xNome><enderEmit><UF>MG</UF></enderEmit>
<IE>0012345</IE></emit>
<det nItem="1"><prod><cProd>C1</cProd><xProd>Cafe</xProd><NCM>09011110</NCM>
<CFOP>5101</CFOP><qCom>10.0000</qCom><vUnCom>25.0000000000</vUnCom><vProd>250.00</vProd>
<indTot>1</indTot></prod></det>
<total><ICMSTot><vProd>250.00</vProd><vDesc>0.00</vDesc><vNF>250.00</vNF></ICMSTot></total>
</infNFe></NFe>"""


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    with MessagesServer() as running:
        yield running


@pytest.fixture
def inputs(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "in"
    folder.mkdir()
    paths = []
    for number, cpf in ((1, False), (2, True), (3, False)):
        path = folder / f"{number}.xml"
        path.write_text(invoice(number, cpf=cpf), encoding="utf-8")
        paths.append(path)
    return paths


def test_the_broken_plan_compiles() -> None:
    compiled = compile_plan(broken_plan(), default_registry(), params={"input": "x", "index": 0})
    assert [check.definition.name for check in compiled.steps[5].checks] == ["not_empty"]


async def batch(
    server: MessagesServer, inputs: list[Path], output: Path, repairs: Path | None
) -> tuple[Any, list[dict[str, Any]], Budget]:

    client = AnthropicClient(api_key="test", base_url=server.url)
    registry = default_registry()
    repairer = PlanRepairer(
        client, MODEL, registry, retry=RetryPolicy(retries=0), clock=VirtualClock()
    )
    budget = Budget(1.0, None)
    run_options = {
        "retry": RetryPolicy(retries=0),
        "limits": RunLimits(heartbeat_every=None),
        "budget": budget,
    }
    extractor = functools.partial(
        extract_document,
        registry=registry,
        run_options=run_options,
        repairer=repairer,
        save_repairs=repairs,
        plan_text=broken_plan(),
    )
    try:
        summary = await extract_batch(inputs, output, jobs=1, extractor=extractor)
    finally:
        await client.aclose()
    text = await anyio.Path(output).read_text("utf-8")
    records = [json.loads(line) for line in text.splitlines()]
    return summary, records, budget


def test_one_input_is_repaired_the_others_make_no_request(
    server: MessagesServer, inputs: list[Path], tmp_path: Path
) -> None:
    server.push_json(PATCH, usage={"input_tokens": 6000, "output_tokens": 300})
    summary, records, budget = anyio.run(
        batch, server, inputs, tmp_path / "out.jsonl", tmp_path / "repairs"
    )

    assert len(server.message_requests) == 1  # for input 2 only
    assert [record["status"] for record in records] == ["ok", "ok", "ok"]
    assert ["repair" in record for record in records] == [False, True, False]
    repaired = records[1]
    # the repaired record, written out by hand from 2.xml
    assert repaired["emit"] == {
        "CNPJ": None,
        "CPF": "52998224725",
        "xNome": "Produtor 2",
        "IE": "0012345",
        "UF": "MG",
    }
    assert repaired["ide"]["chNFe"] == key(2, CPF)
    assert repaired["ide"]["chNFe"] == "35180800052998224725550010000000021000000020"
    assert repaired["ide"]["nNF"] == "2"
    assert repaired["total"]["vNF"] == "250.00"
    assert repaired["items"][0]["vProd"] == "250.00"
    assert repaired["errors"] == []
    assert repaired["checks"]["key_matches_document"]["status"] == "pass"
    assert repaired["checks"]["cnpj_cpf_valid"] == {
        "status": "pass",
        "detail": "emitter CPF 52998224725 valid; recipient has no CNPJ/CPF to check",
    }
    note = repaired["repair"]
    assert note["outcome"] == "repaired"
    assert (note["model"], note["replans"], note["model_calls"], note["reused"]) == (
        MODEL,
        1,
        1,
        False,
    )
    assert (note["replaced"], note["new_steps"]) == ([5, 9], [10, 11])
    assert note["plan"].startswith("nfe.")
    assert note["plan"].endswith(".json")
    assert records[0]["emit"]["CNPJ"] == CNPJ
    assert summary.repairs == {"repaired": 1, "model_calls": 1}
    # the shared batch budget paid the call: $3/M input, $15/M output
    assert budget.spent_usd == pytest.approx(6000 * 3e-6 + 300 * 15e-6)

    # the request: the failed check and the input excerpt, quoted as data
    content = server.message_requests[0].json["messages"][0]["content"]
    blocks = {block.label: block.value for block in parse_data_blocks(content)}
    error = blocks["step 5 error"]
    assert error["reason"] == "check_failed"
    assert "not_empty" in error["detail"]
    excerpt = blocks["input excerpt"]
    assert excerpt["source"] == str(inputs[1])
    assert excerpt["invoice_index"] == 0
    assert f"<CPF>{CPF}</CPF>" in excerpt["xml"]
    assert excerpt["outline"]["infNFe"][1] == {
        "emit": ["CPF", "xNome", {"enderEmit": ["UF"]}, "IE"]
    }

    # the saved plan compiles (as `plandag check` does) and its sidecar says what changed
    saved = tmp_path / "repairs" / note["plan"]
    compiled = compile_plan(saved.read_text("utf-8"), default_registry())
    assert sorted(compiled.steps) == [1, 2, 3, 4, 6, 7, 8, 10, 11]
    sidecar = json.loads(saved.with_name(saved.stem + ".repair.json").read_text("utf-8"))
    assert sidecar["failed"][0]["step"] == 5
    assert sidecar["failed"][0]["checks"][0]["kind"] == "not_empty"
    assert (sidecar["replaced"], sidecar["new_steps"]) == ([5, 9], [10, 11])
    assert sidecar["source"] == str(inputs[1])


def test_a_known_repair_is_reused_for_a_later_input(
    server: MessagesServer, inputs: list[Path], tmp_path: Path
) -> None:
    (tmp_path / "in" / "4.xml").write_text(invoice(4, cpf=True), encoding="utf-8")
    server.push_json(PATCH)
    summary, records, _ = anyio.run(
        batch, server, [*inputs, tmp_path / "in" / "4.xml"], tmp_path / "out.jsonl", None
    )
    assert len(server.message_requests) == 1
    assert [record["status"] for record in records] == ["ok", "ok", "ok", "ok"]
    assert records[3]["emit"]["CPF"] == CPF
    assert records[3]["repair"]["reused"] is True
    assert records[3]["repair"]["model_calls"] == 0
    assert summary.repairs == {"repaired": 1, "reused": 1, "model_calls": 1}


def test_business_check_failures_and_unusable_inputs_call_no_model(
    server: MessagesServer, tmp_path: Path
) -> None:
    bad_total = tmp_path / "bad.xml"
    bad_total.write_text(invoice(1).replace("<vNF>250.00</vNF>", "<vNF>999.00</vNF>"), "utf-8")
    event = tmp_path / "event.xml"
    event.write_text(f'<procEventoNFe xmlns="{NS}"/>', "utf-8")
    summary, records, _ = anyio.run(batch, server, [bad_total, event], tmp_path / "o.jsonl", None)
    assert server.message_requests == []
    assert [record["status"] for record in records] == ["check_failed", "error"]
    assert records[0]["checks"]["vnf_formula"]["status"] == "fail"
    assert records[1]["errors"][0]["code"] == "not_an_invoice"
    assert "repair" not in records[0]
    assert "repair" not in records[1]
    assert summary.repairs == {}
    assert nfe_needs_repair.__doc__ is not None


def test_the_repair_note_is_in_the_schema_and_the_csv() -> None:
    from plandag.extract.nfe.output import INVOICE_COLUMNS, flatten_record
    from plandag.extract.nfe.record import NfeRecord

    note = {"outcome": "repaired", "model_calls": 1}
    record = {"source": "a.xml", "sha256": "ab", "status": "ok", "repair": note}
    assert NfeRecord.model_validate(record).repair == note
    assert INVOICE_COLUMNS[-1] == "repair"
    assert json.loads(flatten_record(record)["repair"]) == note


def test_with_workers_only_the_parent_repairs_and_the_records_are_the_same(
    server: MessagesServer, inputs: list[Path], tmp_path: Path
) -> None:

    from plandag.extract.parallel import ChunkMapper, ProcessBackend, WorkerConfig, lost_record

    server.push_json(PATCH, usage={"input_tokens": 6000, "output_tokens": 300})
    _, alone, _ = anyio.run(batch, server, inputs, tmp_path / "alone.jsonl", None)
    server.push_json(PATCH, usage={"input_tokens": 6000, "output_tokens": 300})

    async def with_workers() -> tuple[Any, Budget]:
        client = AnthropicClient(api_key="test", base_url=server.url)
        registry = default_registry()
        repairer = PlanRepairer(
            client, MODEL, registry, retry=RetryPolicy(retries=0), clock=VirtualClock()
        )
        budget = Budget(1.0, None)
        options = {"retry": RetryPolicy(retries=0), "limits": RunLimits(heartbeat_every=None)}
        local = functools.partial(
            extract_document,
            registry=registry,
            run_options={**options, "budget": budget},
            repairer=repairer,
            plan_text=broken_plan(),
        )
        config = WorkerConfig(
            jobs=1, run_options=options, probe_repairs=True, plan_text=broken_plan()
        )
        backend = ProcessBackend(2)
        mapper = ChunkMapper(backend, config, local, lost_record)
        try:
            summary = await extract_batch(
                inputs, tmp_path / "workers.jsonl", jobs=3, extractor=mapper
            )
        finally:
            backend.close()
            await client.aclose()
        return summary, budget

    summary, budget = anyio.run(with_workers)
    text = (tmp_path / "workers.jsonl").read_text("utf-8")
    records = [json.loads(line) for line in text.splitlines()]
    assert records == alone  # the worker handed input 2 back; the parent repaired it
    assert ["repair" in record for record in records] == [False, True, False]
    assert len(server.message_requests) == 2  # one per batch: the parent's, for input 2
    assert summary.repairs == {"repaired": 1, "model_calls": 1}
    assert budget.spent_usd == pytest.approx(6000 * 3e-6 + 300 * 15e-6)


def test_with_workers_a_known_repair_is_applied_in_the_workers_with_no_model_call(
    server: MessagesServer, tmp_path: Path
) -> None:
    from plandag.extract.parallel import ProcessBackend

    _known_repairs_in_workers(server, tmp_path, lambda config: ProcessBackend(2))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_on_a_dask_cluster_a_known_repair_is_applied_in_the_workers(
    server: MessagesServer, tmp_path: Path
) -> None:
    pytest.importorskip("distributed")
    from plandag.extract.cluster import DaskBackend

    # the documents travel as bytes: the sidecar still names the command's path
    _known_repairs_in_workers(server, tmp_path, lambda config: DaskBackend("local", 2, config))


def _known_repairs_in_workers(
    server: MessagesServer, tmp_path: Path, backend_for: Callable[[Any], Any]
) -> None:
    """Six inputs, four failing the same way, on ``backend_for(config)``'s workers: one
    model call (the first such input's, in the parent), the later ones repaired in the
    workers with the repair the parent shipped, the records and plan files byte for byte
    those of one process."""
    from plandag.extract.parallel import ChunkMapper, WorkerConfig, lost_record

    folder = tmp_path / "in"
    folder.mkdir()
    inputs = []
    for number, cpf in ((1, True), (2, False), (3, True), (4, True), (5, False), (6, True)):
        path = folder / f"{number}.xml"
        path.write_text(invoice(number, cpf=cpf), encoding="utf-8")
        inputs.append(path)
    server.push_json(PATCH, usage={"input_tokens": 6000, "output_tokens": 300})
    anyio.run(batch, server, inputs, tmp_path / "alone.jsonl", tmp_path / "r1")
    assert len(server.message_requests) == 1
    server.push_json(PATCH, usage={"input_tokens": 6000, "output_tokens": 300})
    in_parent: list[str] = []

    async def with_workers() -> tuple[Any, Budget, ChunkMapper]:
        client = AnthropicClient(api_key="test", base_url=server.url)
        registry = default_registry()
        repairer = PlanRepairer(
            client, MODEL, registry, retry=RetryPolicy(retries=0), clock=VirtualClock()
        )
        budget = Budget(1.0, None)
        options = {"retry": RetryPolicy(retries=0), "limits": RunLimits(heartbeat_every=None)}
        parent = functools.partial(
            extract_document,
            registry=registry,
            run_options={**options, "budget": budget},
            repairer=repairer,
            save_repairs=tmp_path / "r2",
            plan_text=broken_plan(),
        )

        async def local(path: Path) -> list[dict[str, Any]]:
            in_parent.append(path.name)
            return await parent(path)

        config = WorkerConfig(jobs=1, run_options=options, plan_text=broken_plan())
        backend = backend_for(config)
        mapper = ChunkMapper(
            backend, config, local, lost_record, repairer=repairer, save_repairs=tmp_path / "r2"
        )
        try:
            # one document at a time: each is sent after the previous one's record is back
            summary = await extract_batch(
                inputs, tmp_path / "workers.jsonl", jobs=1, extractor=mapper
            )
        finally:
            backend.close()
            await client.aclose()
        return summary, budget, mapper

    summary, budget, mapper = anyio.run(with_workers)
    text = (tmp_path / "workers.jsonl").read_text("utf-8")
    assert text == (tmp_path / "alone.jsonl").read_text("utf-8")
    records = [json.loads(line) for line in text.splitlines()]
    assert [record["status"] for record in records] == ["ok"] * 6
    assert [record.get("repair", {}).get("reused") for record in records] == [
        False,
        None,
        True,
        True,
        None,
        True,
    ]
    assert len(server.message_requests) == 2  # one per batch: the first CPF input's
    # only the first CPF input came back to the parent; the later ones were repaired in
    # the workers, from the repair the parent shipped with their chunks
    assert in_parent == ["1.xml"]
    assert mapper.handed_back == 1
    assert summary.repairs == {"repaired": 1, "reused": 3, "model_calls": 1}
    assert budget.spent_usd == pytest.approx(6000 * 3e-6 + 300 * 15e-6)  # reuses cost nothing
    # the parent wrote the plan files of the workers' repairs, as --workers 1 does
    names = sorted(path.name for path in (tmp_path / "r2").iterdir())
    assert names == sorted(path.name for path in (tmp_path / "r1").iterdir())
    assert len(names) == 2
    for name in names:
        assert (tmp_path / "r2" / name).read_bytes() == (tmp_path / "r1" / name).read_bytes()
    sidecar = json.loads((tmp_path / "r2" / names[1]).read_text("utf-8"))
    assert (sidecar["source"], sidecar["reused"]) == (str(inputs[5]), True)


def test_a_worker_given_bytes_applies_a_known_repair_as_the_parent_would(
    server: MessagesServer, tmp_path: Path
) -> None:
    """What a cluster worker runs (the document as bytes, no shared filesystem): a known
    repair applied with no model call, the record and the saved plan files the parent's."""
    from plandag.extract.parallel import WorkerConfig, extract_chunk

    folder = tmp_path / "in"
    folder.mkdir()
    first, later = folder / "1.xml", folder / "2.xml"
    first.write_text(invoice(1, cpf=True), encoding="utf-8")
    later.write_text(invoice(2, cpf=True), encoding="utf-8")
    server.push_json(PATCH)
    _, alone, _ = anyio.run(batch, server, [first, later], tmp_path / "alone.jsonl", tmp_path / "r")
    assert len(server.message_requests) == 1
    assert alone[1]["repair"]["reused"] is True

    options = {"retry": RetryPolicy(retries=0), "limits": RunLimits(heartbeat_every=None)}

    async def repair_first() -> PlanRepairer:
        client = AnthropicClient(api_key="test", base_url=server.url)
        repairer = PlanRepairer(client, MODEL, default_registry(), clock=VirtualClock())
        try:
            await extract_document(
                first, repairer=repairer, plan_text=broken_plan(), run_options=options
            )
        finally:
            await client.aclose()
        return repairer

    server.push_json(PATCH)
    repairer = anyio.run(repair_first)
    assert len(repairer.known_repairs()) == 1
    config = WorkerConfig(
        run_options=options,
        probe_repairs=True,
        plan_text=broken_plan(),
        model=MODEL,
        repairs=repairer.known_repairs(),
        save_repairs=True,
    )
    [(kind, value)] = extract_chunk([(str(later), later.read_bytes())], config)
    assert kind == "repaired"
    records, files = value
    # the batch adds its batch-wide check (unique_in_batch) as the record is written
    expected = json.loads(json.dumps(alone[1]))
    del expected["checks"]["unique_in_batch"]
    assert records == [expected]
    assert records[0]["repair"]["reused"] is True
    assert records[0]["source"] == str(later)
    names = sorted(path.name for path in (tmp_path / "r").iterdir())
    assert [name for name, _ in files] == names
    for name, text in files:
        assert text == (tmp_path / "r" / name).read_text("utf-8")
    # without the repair, the worker hands the document back (the parent asks the model)
    unknown = dataclasses.replace(config, repairs=())
    assert extract_chunk([(str(later), later.read_bytes())], unknown) == [("parent", None)]
    assert len(server.message_requests) == 2


def test_the_batch_trace_ends_with_what_the_repairs_spent(
    server: MessagesServer, inputs: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from plandag.cli import app
    from plandag.extract.nfe import document
    from plandag.store import open_store

    plan = broken_plan()
    monkeypatch.setattr(document, "load_plan_text", lambda: plan)
    server.push_json(PATCH, usage={"input_tokens": 6000, "output_tokens": 300})
    store_path = tmp_path / "runs.sqlite3"
    args = [*map(str, inputs), "-o", str(tmp_path / "out.jsonl"), "--store", str(store_path)]
    planner = ["--planner", "anthropic", "--base-url", server.url]
    result = CliRunner().invoke(
        app,
        ["extract", "nfe", *args, "--workers", "1", *planner, "--save-repairs", str(tmp_path)],
        env={"ANTHROPIC_API_KEY": "test"},
    )
    assert result.exit_code == 0, result.output
    assert len(server.message_requests) == 1
    store = open_store(store_path)
    try:
        (run,) = store.runs()
        lines = store.trace_path(run.run_id).read_text("utf-8").splitlines()
    finally:
        store.close()
    spent = 6000 * 3e-6 + 300 * 15e-6
    assert run.spent_usd == pytest.approx(spent)
    end = json.loads(lines[-1])
    assert end["type"] == "run_finished"
    assert (end["spent_usd"], end["spent_tokens"]) == (pytest.approx(spent), 6300)
