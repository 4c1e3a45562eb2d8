"""The distribution's metadata: one version, the licence file, classifiers."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import plandag

ROOT = Path(__file__).resolve().parent.parent


def pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_version_is_written_once() -> None:
    project = pyproject()["project"]
    assert isinstance(project, dict)
    assert "version" not in project
    assert project["dynamic"] == ["version"]
    written = [
        path
        for path in [ROOT / "pyproject.toml", *sorted((ROOT / "plandag").rglob("*.py"))]
        if re.search(r"""(?m)^\s*(__version__|version)\s*=\s*["']\d""", path.read_text("utf-8"))
    ]
    assert written == [ROOT / "plandag" / "__init__.py"]


def test_the_installed_version_is_the_package_version() -> None:
    assert importlib.metadata.version("plandag") == plandag.__version__


def test_plandag_version_prints_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "plandag", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"plandag {plandag.__version__}"


def test_the_licence_file_is_the_mit_licence_the_metadata_names() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License")
    assert "WITHOUT WARRANTY OF ANY KIND" in text
    project = pyproject()["project"]
    assert isinstance(project, dict)
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]


def test_the_metadata_carries_classifiers_of_the_standard_list() -> None:
    classifiers = importlib.metadata.metadata("plandag").get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers
    # a licence is stated once, by its SPDX expression, never again as a classifier
    assert not [c for c in classifiers if c.startswith("License ::")]
    assert (ROOT / "plandag" / "py.typed").is_file()
