"""Test-wide set-up: where the shared NF-e corpus is.

Tests over the shared invoice corpus read ``PLANDAG_SHARED_NFE`` (a folder of NF-e files
with its ``SOURCES.md``). When it is not set, the first existing of ``<repo>/../shared/data/nfe``
(where CI lays ``shared/`` beside the clone) and ``/work/shared/data/nfe`` is used; tests
that need the corpus skip with a reason when none exists.
"""

from __future__ import annotations

import os
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]

if not os.environ.get("PLANDAG_SHARED_NFE"):
    for candidate in (_REPO.parent / "shared/data/nfe", Path("/work/shared/data/nfe")):
        if candidate.is_dir():
            os.environ["PLANDAG_SHARED_NFE"] = str(candidate)
            break

# Every run is recorded in a run store (issue 6); tests never write into the user's store
# (neither the data folder nor a PLANDAG_STORE the user exported): one store per test
# session, in a temporary folder; a test that needs its own sets it.
import tempfile  # noqa: E402

os.environ["PLANDAG_STORE"] = str(
    Path(tempfile.mkdtemp(prefix="plandag-test-store-")) / "runs.sqlite3"
)
