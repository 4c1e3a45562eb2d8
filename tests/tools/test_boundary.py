"""The write boundary: folders, path globs and URL hosts; every escape refused."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from plandag.errors import BoundaryError
from plandag.tools.boundary import HostRule, PathGlob, WriteBoundary, is_url


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``tmp_path/work`` (the base) with ``out/``, ``data/`` and links pointing outside."""
    base = tmp_path / "work"
    (base / "out" / "sub").mkdir(parents=True)
    (base / "data").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    (base / "out" / "dir_link").symlink_to(outside, target_is_directory=True)
    (base / "out" / "file_link.json").symlink_to(outside / "secret.txt")
    (base / "out" / "dangling.json").symlink_to(outside / "not-yet.json")
    (base / "out" / "inner_link").symlink_to(base / "out" / "sub", target_is_directory=True)
    return base


@pytest.fixture
def boundary(tree: Path) -> WriteBoundary:
    return WriteBoundary.from_specs(
        [
            "out/",
            "data/*.json",
            "runs/**/result.json",
            "reports/*/",
            "https://api.example.com",
            "http://127.0.0.1:8080/v1",
        ],
        base=tree,
    )


# -- construction --------------------------------------------------------------------------


def test_from_specs_sorts_specs_by_kind(tree: Path, boundary: WriteBoundary) -> None:
    real = tree.resolve()
    assert boundary.roots == [real / "out"]
    assert boundary.globs == [
        PathGlob(f"{real}/data/*.json"),
        PathGlob(f"{real}/runs/**/result.json"),
        PathGlob(f"{real}/reports/*", tree=True),
    ]
    assert boundary.hosts == [
        HostRule("https", "api.example.com", 443, ""),
        HostRule("http", "127.0.0.1", 8080, "/v1"),
    ]
    assert boundary.specs == [
        f"{real}/out",
        f"{real}/data/*.json",
        f"{real}/runs/**/result.json",
        f"{real}/reports/*/",
        "https://api.example.com",
        "http://127.0.0.1:8080/v1",
    ]
    assert boundary.describe() == ", ".join(boundary.specs)


def test_constructor_keeps_its_old_form(tree: Path) -> None:
    boundary = WriteBoundary([tree / "out", "data"], base=tree)
    assert boundary.roots == [tree.resolve() / "out", tree.resolve() / "data"]
    assert (boundary.globs, boundary.hosts) == ([], [])
    assert boundary.contains("out/x.json") is True
    assert boundary.contains("data/deep/x.json") is True
    assert boundary.contains("other/x.json") is False
    # a folder name holding "*" is taken literally by the constructor
    assert WriteBoundary(["a*"], base=tree).roots == [tree.resolve() / "a*"]


def test_path_like_specs_are_folders_and_base_defaults_to_cwd(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree)
    boundary = WriteBoundary.from_specs([Path("out")])
    assert boundary.base == tree
    assert boundary.roots == [tree.resolve() / "out"]


def test_empty_boundary_allows_nothing(tree: Path) -> None:
    boundary = WriteBoundary.from_specs([], base=tree)
    assert boundary.describe() == "nowhere"
    assert boundary.contains("x.json") is False
    assert boundary.contains("https://api.example.com/") is False


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("", "an empty --write-boundary value allows nothing; give a path"),
        ("   ", "an empty --write-boundary value allows nothing; give a path"),
        (
            "https://user@api.example.com",
            "write boundary 'https://user@api.example.com' is not a usable host: it holds "
            "user info (user@host); pass credentials in headers instead",
        ),
        (
            "https://api.example.com/?q=1",
            "write boundary 'https://api.example.com/?q=1': a host spec takes no query or fragment",
        ),
        (
            "http://127.0.0.1:99999",
            "write boundary 'http://127.0.0.1:99999' is not a usable host: Port out of "
            "range 0-65535",
        ),
        (
            "file:///srv/out",
            "write boundary 'file:///srv/out' is not a usable host: its host '' is not a "
            "plain host name",
        ),
    ],
)
def test_bad_specs_are_refused(tree: Path, spec: str, problem: str) -> None:
    with pytest.raises(ValueError) as caught:  # noqa: PT011 (the message is compared below)
        WriteBoundary.from_specs([spec], base=tree)
    assert str(caught.value) == problem


def test_is_url() -> None:
    assert [is_url(text) for text in ("https://a", "HTTP://a", "s3+x://b", "C:x", "a/b")] == [
        True,
        True,
        True,
        False,
        False,
    ]


# -- path targets --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        "out",
        "out/x.json",
        "out/sub/deep/new.json",
        "out/sub/../x.json",
        "out/inner_link/x.json",  # a link that stays inside
        "out/dir_link/../work/out/x.json",  # out, then back in through the real parent
        "data/a.json",
        "runs/result.json",
        "runs/2024/01/result.json",
        "reports/r1",
        "reports/r1/a/b.csv",
    ],
)
def test_paths_inside(tree: Path, boundary: WriteBoundary, target: str) -> None:
    assert boundary.contains(target) is True
    assert boundary.contains(tree / target) is True  # the same path, absolute
    assert boundary.check(target) == Path(os.path.realpath(tree / target))


@pytest.mark.parametrize(
    "target",
    [
        "../escape.json",
        "out/../../escape.json",
        "out/sub/../../x.json",
        "/etc/passwd",
        "/tmp/plandag-escape.json",
        "x.json",
        "data/a.txt",
        "data/sub/a.json",  # "*" does not cross "/"
        "runs/2024/other.json",
        "reports",
        "out/dir_link/x.json",  # a folder link pointing outside, file not yet there
        "out/dir_link/secret.txt",
        "out/dir_link/../x.json",  # ".." applies to the link's real folder, not to out/
        "out/file_link.json",  # a file link pointing outside
        "out/dangling.json",  # a dangling link pointing outside
        "",
        "out/x\x00.json",
    ],
)
def test_paths_outside(boundary: WriteBoundary, target: str) -> None:
    assert boundary.contains(target) is False
    with pytest.raises(BoundaryError) as caught:
        boundary.check(target, step_id=7)
    assert caught.value.target == target
    assert str(caught.value).startswith(f"step 7: write target {target!r} ")


def test_outside_message_names_the_real_path_and_the_boundary(tmp_path: Path, tree: Path) -> None:
    boundary = WriteBoundary.from_specs(["out/"], base=tree)
    with pytest.raises(BoundaryError) as caught:
        boundary.check("out/dir_link/x.json", step_id=2)
    real = tmp_path.resolve()
    assert str(caught.value) == (
        f"step 2: write target 'out/dir_link/x.json' resolves to {real}/outside/x.json, "
        f"outside the write boundary ({real}/work/out); write inside it or widen it with "
        "--write-boundary"
    )


def test_symlinked_base_compares_by_real_path(tmp_path: Path, tree: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(tree, target_is_directory=True)
    boundary = WriteBoundary.from_specs(["out/", "data/*.json"], base=alias)
    assert boundary.contains(tree / "out" / "x.json") is True
    assert boundary.contains(tree / "data" / "a.json") is True
    assert boundary.contains(alias / "data" / "a.json") is True


def test_glob_character_sets(tree: Path) -> None:
    boundary = WriteBoundary.from_specs(["data/report-[0-9].json", "data/?.csv"], base=tree)
    assert [
        boundary.contains(name)
        for name in (
            "data/report-1.json",
            "data/report-x.json",
            "data/a.csv",
            "data/ab.csv",
        )
    ] == [True, False, True, False]


def test_path_targets_never_match_hosts(tree: Path) -> None:
    boundary = WriteBoundary.from_specs(["https://api.example.com"], base=tree)
    assert boundary.contains("api.example.com/x") is False
    assert boundary.contains(tree / "x") is False


# -- URL targets ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        "https://api.example.com",
        "https://api.example.com/",
        "https://api.example.com/items?id=3#top",
        "https://api.example.com:443/items",
        "HTTPS://API.Example.COM/items",
        "https://api.example.com./items",
        "http://127.0.0.1:8080/v1",
        "http://127.0.0.1:8080/v1/",
        "http://127.0.0.1:8080/v1/items/3",
        "http://127.0.0.1:8080/v1/a/../b",
    ],
)
def test_urls_inside(boundary: WriteBoundary, target: str) -> None:
    assert boundary.contains(target) is True
    assert boundary.check(target) == target


@pytest.mark.parametrize(
    "target",
    [
        "http://api.example.com/items",  # another scheme
        "https://api.example.com:8443/items",  # another port
        "https://api.example.com.evil.com/items",
        "https://evil.com/api.example.com",
        "https://evilapi.example.com/",
        "https://other.example.com/",
        "https://api.example.com@evil.com/",
        "https://api.example.com:443@evil.com/",
        "https://user:pass@api.example.com/",  # user info is refused outright
        "https://api.example.com\\@evil.com/",
        "https://api.example.com%2eevil.com/",
        "https://api.exam ple.com/",
        "https://xn--pple-43d.com/",  # punycode of another name: just another host
        "http://127.0.0.1:8080/v10",  # the prefix ends at a "/"
        "http://127.0.0.1:8080/admin",
        "http://127.0.0.1:8080/v1/../admin",
        "http://127.0.0.1:8080/v1/%2e%2e/admin",
        "http://127.0.0.1:8080/v1/..%2fadmin",
        "http://127.0.0.1/v1",  # port 80, not 8080
        "http://localhost:8080/v1",
        "http://127.0.0.1:99999/v1",
        "ftp://api.example.com/",
    ],
)
def test_urls_outside(boundary: WriteBoundary, target: str) -> None:
    assert boundary.contains(target) is False
    with pytest.raises(BoundaryError) as caught:
        boundary.check(target, step_id=3)
    assert caught.value.target == target


def test_url_refusal_messages(boundary: WriteBoundary) -> None:
    with pytest.raises(BoundaryError) as caught:
        boundary.check("https://evil.com/x", step_id=4)
    assert str(caught.value) == (
        "step 4: write target 'https://evil.com/x' is not on an allowed host of the write "
        f"boundary ({boundary.describe()}); write inside it or widen it with --write-boundary"
    )
    with pytest.raises(BoundaryError) as caught:
        boundary.check("https://api.example.com@evil.com/")
    assert str(caught.value) == (
        "write target 'https://api.example.com@evil.com/' is refused: it holds user info "
        "(user@host); pass credentials in headers instead"
    )


def test_ipv6_hosts_and_default_ports(tree: Path) -> None:
    boundary = WriteBoundary.from_specs(["http://[::1]:9000", "http://example.org"], base=tree)
    assert boundary.specs == ["http://[::1]:9000", "http://example.org"]
    assert boundary.contains("http://[::1]:9000/x") is True
    assert boundary.contains("http://[::1]/x") is False
    assert boundary.contains("http://example.org:80/x") is True
    assert boundary.contains("http://example.org:8080/x") is False


def test_a_path_that_changes_while_it_is_resolved_is_refused(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``os.path.realpath`` itself can fail when a link vanishes between its ``lstat`` and
    its ``readlink``: the target is refused with a boundary error, never a crash."""
    boundary = WriteBoundary.from_specs(["out/"], base=tree)

    def vanished(path: Any, *args: Any, **kwargs: Any) -> str:
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(os.path, "realpath", vanished)
    with pytest.raises(BoundaryError) as caught:
        boundary.check("out/x.json", step_id=3)
    assert str(caught.value) == (
        "step 3: write target 'out/x.json' could not be resolved while it was checked (No "
        "such file or directory): a folder on its path changed; refused, as outside the write "
        "boundary"
    )
