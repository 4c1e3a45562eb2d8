"""The console says which runs ran with the offline model: the runs list, the run's page
and the inbox."""

from __future__ import annotations

import os
import re
from pathlib import Path

from starlette.testclient import TestClient

from plandag.runs.options import RunOptions
from plandag.serve import create_app
from plandag.store import open_store
from tests.serve.conftest import BASE, TOKEN, ScriptedPlanner, make_config, signed_in

OFFLINE_RUN = "0ff1e00000000001"
MODEL_RUN = "a0de100000000002"
LABEL = "Offline (offline-extractive): the model answers are extracts"


def store_runs(path: Path) -> None:
    offline = RunOptions(executor={"provider": "offline", "model": None, "base_url": None})
    model = RunOptions(executor={"provider": "anthropic", "model": None, "base_url": None})
    with open_store(path) as store:
        for run_id, options in ((OFFLINE_RUN, offline), (MODEL_RUN, model)):
            store.create_run(
                run_id,
                command="exec",
                goal="summarise a page",
                params={},
                options=options.as_json(),
            )
            # its process is gone: the run crashed, and the inbox lists it
            store.update_run(run_id, pid=os.getpid(), pid_started=1.0)


def test_the_console_labels_an_offline_run(tmp_path: Path) -> None:
    store_runs(tmp_path / "runs.sqlite3")
    app = create_app(make_config(tmp_path, ScriptedPlanner()), TOKEN)
    with TestClient(app, base_url=BASE) as client:
        signed_in(client)
        listed = client.get("/runs").text
        offline_page = client.get(f"/runs/{OFFLINE_RUN}").text
        model_page = client.get(f"/runs/{MODEL_RUN}").text
        inbox = client.get("/inbox").text
    (offline_row,) = [line for line in listed.splitlines() if f'data-run="{OFFLINE_RUN}"' in line]
    (model_row,) = [line for line in listed.splitlines() if f'data-run="{MODEL_RUN}"' in line]
    assert "exec (offline)" in offline_row
    assert "(offline)" not in model_row
    assert LABEL in offline_page
    assert LABEL not in model_page
    assert inbox.count(LABEL) == 1


def test_a_run_the_offline_model_planned_in_the_console_says_so(tmp_path: Path) -> None:
    from plandag.checks.builtins import BUILTIN_CHECKS
    from plandag.tools.registry import Registry
    from tests.serve.test_console_http import card_hash, eventually, start
    from tests.serve.test_console_run_page import PLAN, priced

    registry = Registry([priced], BUILTIN_CHECKS)
    config = make_config(tmp_path, ScriptedPlanner(PLAN), registry=registry, offline=True)
    app = create_app(config, TOKEN)
    with TestClient(app, base_url=BASE) as client:
        csrf = signed_in(client)
        path = start(client, csrf)
        digest = card_hash(eventually(client, path, lambda text: 'id="card"' in text))
        client.post(f"{path}/decide", data={"csrf": csrf, "hash": digest, "action": "approve"})
        page = eventually(client, path, lambda text: "</a> failed" in text)
        run_id = re.findall(r'href="/runs/([0-9a-f]{16})"', page)[0]
        assert LABEL in client.get(f"/runs/{run_id}").text
    with open_store(tmp_path / "runs.sqlite3") as store:
        assert RunOptions.from_json(store.run(run_id).options).offline
