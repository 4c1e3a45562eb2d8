"""Run settings: defaults, [tool.plandag] in pyproject.toml, plandag.toml, flags (README,
"The command line", "Brakes")."""

from __future__ import annotations

from pathlib import Path

import pytest

from plandag.brakes import JOB_BRAKES, UNLIMITED
from plandag.config import SETTINGS, Settings, load_settings
from plandag.errors import InputError
from plandag.scheduler import RunLimits

DEFAULTS = {
    # brakes are on by default (plandag.brakes.JOB_BRAKES, the exec row)
    "max_seconds": 900.0,
    "max_cost": 1.0,
    "max_tokens": 200_000,
    "max_concurrency": None,
    "max_steps": 500,
    "max_plan_bytes": 16 * 1024 * 1024,
    "retries": 2,
    "write_boundary": None,
    "http_allow": None,
    "heartbeat": None,
    "heartbeat_every": 10.0,
    "stall_after": 120.0,
    "stop_on_stall": True,
    "planner_max_tokens": 4096,
    "executor_model": None,
    "breaker_after": 3,
    "max_blocked": 3,
    "total_replan_below": None,
    "plan_cost_factor": 2.0,
    "plan_time_factor": 3.0,
    "slow_start": 0.15,
    "rpm": None,
    "tpm": None,
    "mcp_timeout": 60.0,
    "jobs": 4,
    "workers": None,
    "approve": "ask",
    "approval_expiry": 86400.0,
    "escalate": "person",
    "escalation_command": None,
    "escalation_url": None,
    "escalation_timeout": 10.0,
}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project folder as the working directory, with no settings file above it."""
    folder = tmp_path.resolve()
    for parent in (folder, *folder.parents):
        assert not (parent / "pyproject.toml").exists(), parent
        assert not (parent / "plandag.toml").exists(), parent
    monkeypatch.chdir(folder)
    return folder


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_every_setting_from_default(project: Path) -> None:
    settings = load_settings()
    assert settings.values == DEFAULTS
    assert settings.sources == dict.fromkeys(DEFAULTS, "default")
    assert [name for name, _, _ in settings.as_rows()] == list(DEFAULTS)
    assert [setting.name for setting in SETTINGS] == list(DEFAULTS)
    assert settings["retries"] == 2


def test_pyproject_without_tool_plandag_changes_nothing(project: Path) -> None:
    write(project / "pyproject.toml", '[project]\nname = "x"\n\n[tool.ruff]\nline-length = 80\n')
    settings = load_settings()
    assert settings.values == DEFAULTS
    assert settings.sources == dict.fromkeys(DEFAULTS, "default")


def test_tool_plandag_in_pyproject(project: Path) -> None:
    pyproject = write(
        project / "pyproject.toml",
        '[project]\nname = "x"\n\n[tool.plandag]\nmax_seconds = 60\nretries = 5\n'
        'write_boundary = "out/"\nstop_on_stall = false\nstall_after = 2.5\n',
    )
    settings = load_settings()
    source = f"{pyproject} [tool.plandag]"
    assert settings.values == {
        **DEFAULTS,
        "max_seconds": 60.0,
        "retries": 5,
        "write_boundary": ["out/"],
        "stop_on_stall": False,
        "stall_after": 2.5,
    }
    assert isinstance(settings["max_seconds"], float)
    assert settings.sources == {
        **dict.fromkeys(DEFAULTS, "default"),
        "max_seconds": source,
        "retries": source,
        "write_boundary": source,
        "stop_on_stall": source,
        "stall_after": source,
    }


def test_pyproject_found_from_a_subfolder_nearest_parent_wins(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(project / "pyproject.toml", "[tool.plandag]\nmax_cost = 9.0\njobs = 7\n")
    inner = write(project / "pkg" / "pyproject.toml", "[tool.plandag]\nmax_cost = 1.5\n")
    deep = project / "pkg" / "src" / "mod"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    settings = load_settings()
    assert settings["max_cost"] == 1.5
    assert settings["jobs"] == 4  # the outer file is not read at all: only the nearest
    assert settings.sources["max_cost"] == f"{inner} [tool.plandag]"
    assert settings.sources["jobs"] == "default"
    # an explicit start folder searches from there instead of the working directory
    outer = load_settings(project)
    assert (outer["max_cost"], outer["jobs"]) == (9.0, 7)


def test_plandag_toml_overrides_pyproject_top_level_keys(project: Path) -> None:
    pyproject = write(
        project / "pyproject.toml", "[tool.plandag]\nmax_seconds = 60\nmax_tokens = 1000\n"
    )
    own = write(project / "plandag.toml", "max_seconds = 5\nheartbeat_every = 0.5\n")
    settings = load_settings()
    assert settings.values == {
        **DEFAULTS,
        "max_seconds": 5.0,
        "max_tokens": 1000,
        "heartbeat_every": 0.5,
    }
    assert settings.sources["max_seconds"] == str(own)
    assert settings.sources["heartbeat_every"] == str(own)
    assert settings.sources["max_tokens"] == f"{pyproject} [tool.plandag]"
    assert settings.sources["retries"] == "default"


def test_plandag_toml_with_a_plandag_table(project: Path) -> None:
    own = write(
        project / "plandag.toml", '[plandag]\nmax_concurrency = 3\nheartbeat = "hb.jsonl"\n'
    )
    settings = load_settings()
    assert (settings["max_concurrency"], settings["heartbeat"]) == (3, "hb.jsonl")
    assert settings.sources["max_concurrency"] == str(own)
    assert settings.sources["heartbeat"] == str(own)


def test_plandag_toml_keys_outside_its_plandag_table_are_an_error(project: Path) -> None:
    own = write(project / "plandag.toml", "retries = 1\n[plandag]\nmax_seconds = 3\n")
    with pytest.raises(InputError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"{own}: 'retries' outside the [plandag] table; put every setting in [plandag] or "
        "every one at the top level"
    )


def test_hyphenated_keys(project: Path) -> None:
    own = write(project / "plandag.toml", 'max-seconds = 12\nwrite-boundary = ["a/", "b/*.json"]\n')
    settings = load_settings()
    assert settings["max_seconds"] == 12.0
    assert settings["write_boundary"] == ["a/", "b/*.json"]
    assert settings.sources["max_seconds"] == str(own)


def test_the_same_key_spelled_twice_is_an_error(project: Path) -> None:
    own = write(project / "plandag.toml", "max-seconds = 12\nmax_seconds = 13\n")
    with pytest.raises(InputError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"{own}: max_seconds is given twice ('max-seconds' and 'max_seconds'); keep one"
    )


def test_unknown_key_names_the_file_and_the_nearest_name(project: Path) -> None:
    pyproject = write(project / "pyproject.toml", "[tool.plandag]\nmax_second = 3\n")
    with pytest.raises(InputError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"{pyproject} [tool.plandag]: unknown setting 'max_second'; did you mean max_seconds?"
    )


def test_unknown_key_in_plandag_toml_with_hyphen_and_without_a_near_name(project: Path) -> None:
    own = write(project / "plandag.toml", "heartbeat-evry = 3\n")
    with pytest.raises(InputError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"{own}: unknown setting 'heartbeat-evry'; did you mean heartbeat_every?"
    )
    write(own, "colour = 'blue'\n")
    with pytest.raises(InputError) as caught:
        load_settings()
    assert str(caught.value) == f"{own}: unknown setting 'colour'"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('max_seconds = "10"', "max_seconds must be a number or \"none\" to lift it, got '10'"),
        ("retries = true", "retries must be an integer, got True"),
        ("jobs = 2.5", "jobs must be an integer, got 2.5"),
        # false does not lift a brake: "none" does
        ("max_cost = false", 'max_cost must be a number or "none" to lift it, got False'),
        ("stop_on_stall = 1", "stop_on_stall must be true or false, got 1"),
        ("heartbeat = 3", "heartbeat must be a string, got 3"),
        ('write_boundary = ["out/", 3]', "write_boundary must be a string, got 3"),
    ],
)
def test_wrong_type_names_the_file_and_the_key(project: Path, line: str, message: str) -> None:
    pyproject = write(project / "pyproject.toml", f"[tool.plandag]\n{line}\n")
    with pytest.raises(InputError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"{pyproject} [tool.plandag]: {message}; see `plandag config` for every setting"
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("max_seconds = 0", "max_seconds must be a finite number > 0, got 0"),
        ("max_seconds = inf", "max_seconds must be a finite number > 0, got inf"),
        ("max_cost = -1.0", "max_cost must be a finite number >= 0, got -1.0"),
        ("max_cost = nan", "max_cost must be a finite number >= 0, got nan"),
        ("retries = -1", "retries must be a finite number >= 0, got -1"),
        ("max_concurrency = 0", "max_concurrency must be a finite number >= 1, got 0"),
        ("jobs = 0", "jobs must be a finite number >= 1, got 0"),
        ("heartbeat_every = 0.0", "heartbeat_every must be a finite number > 0, got 0.0"),
        ("stall_after = -2", "stall_after must be a finite number > 0, got -2"),
    ],
)
def test_out_of_range_numbers_are_refused_like_the_flags(
    project: Path, line: str, message: str
) -> None:
    own = write(project / "plandag.toml", line + "\n")
    with pytest.raises(InputError) as caught:
        load_settings()
    assert str(caught.value) == f"{own}: {message}"


def test_zero_is_allowed_where_the_flags_allow_it(project: Path) -> None:
    write(project / "plandag.toml", "retries = 0\nmax_cost = 0\nmax_tokens = 0\n")
    settings = load_settings()
    assert (settings["retries"], settings["max_cost"], settings["max_tokens"]) == (0, 0.0, 0)


def test_invalid_toml_is_an_input_error(project: Path) -> None:
    own = write(project / "plandag.toml", "max_seconds = \n")
    with pytest.raises(InputError) as caught:
        load_settings()
    text = str(caught.value)
    assert text.startswith(f"{own}: not valid TOML (")
    assert text.endswith("); fix or remove the file")
    pyproject = write(project / "pyproject.toml", "[tool.plandag\n")
    own.unlink()
    with pytest.raises(InputError) as caught:
        load_settings()
    assert str(caught.value).startswith(f"{pyproject}: not valid TOML (")


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "pyproject.toml",
            "[tool]\nplandag = 3\n",
            "tool.plandag must be a table ([tool.plandag])",
        ),
        ("plandag.toml", "plandag = 3\n", "plandag must be a table ([plandag])"),
    ],
)
def test_a_plandag_key_that_is_not_a_table(
    project: Path, name: str, text: str, message: str
) -> None:
    path = write(project / name, text)
    with pytest.raises(InputError) as caught:
        load_settings()
    assert str(caught.value) == f"{path}: {message}"


def test_a_tool_key_that_is_not_a_table_is_not_ours(project: Path) -> None:
    write(project / "pyproject.toml", 'tool = "something else"\n')
    assert load_settings().values == DEFAULTS


def test_with_flags_precedence_and_sources(project: Path) -> None:
    own = write(project / "plandag.toml", 'max_seconds = 5\nretries = 4\nwrite_boundary = "a/"\n')
    settings = load_settings().with_flags(
        {
            "max_seconds": 0.25,
            "retries": None,  # not given: the file's value stays
            "write_boundary": [],  # not given (an empty repeated option): the file's stays
            "stop_on_stall": None,
            "heartbeat_every": 1.0,
        }
    )
    assert isinstance(settings, Settings)
    assert settings.values == {
        **DEFAULTS,
        "max_seconds": 0.25,
        "retries": 4,
        "write_boundary": ["a/"],
        "heartbeat_every": 1.0,
    }
    assert settings.sources == {
        **dict.fromkeys(DEFAULTS, "default"),
        "max_seconds": "--max-seconds",
        "retries": str(own),
        "write_boundary": str(own),
        "heartbeat_every": "--heartbeat-every",
    }
    flagged = settings.with_flags({"write_boundary": ["x/", "y/*.json"], "stop_on_stall": False})
    assert flagged["write_boundary"] == ["x/", "y/*.json"]
    assert flagged.sources["write_boundary"] == "--write-boundary"
    assert (flagged["stop_on_stall"], flagged.sources["stop_on_stall"]) == (
        False,
        "--stop-on-stall",
    )
    # with_flags returns a copy
    assert settings.sources["write_boundary"] == str(own)


def test_with_flags_rejects_an_unknown_name(project: Path) -> None:
    with pytest.raises(KeyError):
        load_settings().with_flags({"max_second": 1.0})


def test_repeated_write_boundary_string_or_list(project: Path) -> None:
    own = write(project / "plandag.toml", 'write_boundary = "out/"\n')
    assert load_settings()["write_boundary"] == ["out/"]
    write(own, 'write_boundary = ["out/", "data/*.json", "https://api.example.com"]\n')
    assert load_settings()["write_boundary"] == ["out/", "data/*.json", "https://api.example.com"]
    write(own, "write_boundary = []\n")
    assert load_settings()["write_boundary"] == []


def test_plan_factors_from_a_file_and_none_lifts_them(project: Path) -> None:
    own = write(project / "plandag.toml", 'plan_cost_factor = "none"\nplan-time-factor = 5\n')
    settings = load_settings()
    assert (settings["plan_cost_factor"], settings["plan_time_factor"]) == (None, 5.0)
    assert settings.sources["plan_cost_factor"] == str(own)
    flagged = settings.with_flags({"plan_cost_factor": 1.5, "plan_time_factor": "None"})
    assert (flagged["plan_cost_factor"], flagged["plan_time_factor"]) == (1.5, None)
    assert flagged.sources["plan_time_factor"] == "--plan-time-factor"


def test_a_plan_factor_must_be_positive(project: Path) -> None:
    write(project / "plandag.toml", "plan_time_factor = 0\n")
    with pytest.raises(InputError, match="plan_time_factor must be a finite number > 0"):
        load_settings()
    write(project / "plandag.toml", 'plan_time_factor = "never"\n')
    with pytest.raises(InputError, match="plan_time_factor must be a number"):
        load_settings()


def test_none_lifts_a_brake_in_a_file(project: Path) -> None:
    own = write(
        project / "plandag.toml",
        'max_cost = "none"\nmax_tokens = "NONE"\nmax_seconds = "none"\nstall_after = "none"\n',
    )
    settings = load_settings()
    assert (
        settings["max_cost"],
        settings["max_tokens"],
        settings["max_seconds"],
        settings["stall_after"],
    ) == (UNLIMITED, UNLIMITED, UNLIMITED, UNLIMITED)
    assert settings.sources["max_cost"] == str(own)
    # a lifted brake reaches the runner as UNLIMITED
    limits = RunLimits(
        max_seconds=settings["max_seconds"],
        max_cost_usd=settings["max_cost"],
        max_tokens=settings["max_tokens"],
        stall_after=settings["stall_after"],
    )
    assert (limits.seconds_cap, limits.cost_cap, limits.token_cap, limits.stall_cap) == (
        None,
        None,
        None,
        None,
    )


def test_none_does_not_lift_settings_that_are_not_brakes(project: Path) -> None:
    own = write(project / "plandag.toml", 'retries = "none"\n')
    with pytest.raises(InputError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"{own}: retries must be an integer, got 'none'; see `plandag config` for every setting"
    )


def test_each_job_has_its_own_default_brakes(project: Path) -> None:
    batch = load_settings(job="extract nfe")
    assert (
        batch["max_cost"],
        batch["max_tokens"],
        batch["max_seconds"],
        batch["stall_after"],
        batch["stop_on_stall"],
    ) == (5.0, 1_000_000, UNLIMITED, 300.0, True)
    run = load_settings(job="run")
    assert (run["max_cost"], run["max_tokens"], run["max_seconds"], run["stall_after"]) == (
        1.0,
        200_000,
        900.0,
        120.0,
    )
    # a file changes the default of every job
    write(project / "plandag.toml", "max_cost = 3\n")
    assert load_settings(job="extract nfe")["max_cost"] == 3.0
    assert load_settings(job="exec")["max_cost"] == 3.0


def test_the_table_holds_every_job_of_the_brakes_table() -> None:
    rows = {
        job: (row.max_cost_usd, row.max_tokens, row.max_seconds, row.stall_after, row.boundary)
        for job, row in JOB_BRAKES.items()
    }
    assert rows == {
        "exec": (1.0, 200_000, 900.0, 120.0, "working directory"),
        "run": (1.0, 200_000, 900.0, 120.0, "working directory"),
        "python": (1.0, 200_000, 900.0, 120.0, "working directory"),
        "research": (2.0, 500_000, 1800.0, 120.0, "report's folder"),
        "extract nfe": (5.0, 1_000_000, UNLIMITED, 300.0, "output's folder"),
        "extract contracts": (20.0, 5_000_000, UNLIMITED, 300.0, "output's folder"),
    }
    assert all(row.stop_on_stall for row in JOB_BRAKES.values())
    assert RunLimits() == RunLimits.for_job("python")


def test_an_http_allow_pattern_that_can_never_match_is_refused_from_a_file_and_a_flag(
    project: Path,
) -> None:
    write(project / "plandag.toml", 'http_allow = ["docs.example.com", "example.com/api"]\n')
    with pytest.raises(InputError) as caught:
        load_settings(project)
    assert str(caught.value) == (
        f"{project / 'plandag.toml'}: http_allow 'example.com/api' can never match a host: "
        "it has a path, query or user part ('/', '?', '#' or '@'); give a host glob such as "
        "api.example.com, *.example.org or 127.0.0.1:8080"
    )
    (project / "plandag.toml").unlink()
    with pytest.raises(InputError) as caught:
        load_settings(project).with_flags({"http_allow": ["127.0.0.1:*"]})
    assert str(caught.value) == (
        "--http-allow: http_allow '127.0.0.1:*' can never match a host: its port '*' is not "
        "a number from 1 to 65535; give a host glob such as api.example.com, *.example.org or "
        "127.0.0.1:8080 (a pattern without a port matches any port)"
    )


@pytest.mark.parametrize(
    ("key", "choices"), [("escalate", "person or never"), ("approve", "ask, auto or never")]
)
def test_a_choice_setting_outside_its_choices_names_the_file(
    project: Path, key: str, choices: str
) -> None:
    write(project / "plandag.toml", f'{key} = "maybe"\n')
    with pytest.raises(InputError) as caught:
        load_settings(project)
    assert str(caught.value) == (
        f"{project / 'plandag.toml'}: {key} must be {choices}, got 'maybe'; "
        "see `plandag config` for every setting"
    )


def test_rate_limit_table_sets_rpm_and_tpm(project: Path) -> None:
    own = write(project / "plandag.toml", "[rate_limit]\nrpm = 50\ntpm = 40000\n")
    settings = load_settings()
    assert settings["rpm"] == 50.0
    assert settings["tpm"] == 40000.0
    assert settings.sources["rpm"] == str(own)
    assert settings.with_flags({"rpm": 10.0})["rpm"] == 10.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[rate_limit]\nrps = 5\n", "unknown key 'rps'"),
        ("[rate_limit]\nrpm = 0\n", "rpm must be a finite number > 0"),
        ('rate_limit = "fast"\n', "rate_limit must be a table"),
        ("rpm = 3\n[rate_limit]\nrpm = 5\n", "rpm is given twice"),
    ],
)
def test_a_bad_rate_limit_table_says_what_is_wrong(project: Path, text: str, message: str) -> None:
    write(project / "plandag.toml", text)
    with pytest.raises(InputError, match=message):
        load_settings()


def test_prices_tables_of_both_files_merge_per_model(project: Path) -> None:
    write(
        project / "pyproject.toml",
        '[tool.plandag.prices."a"]\ninput = 1\noutput = 2\n'
        '[tool.plandag.prices."b"]\ninput = 3\noutput = 4\n',
    )
    own = write(project / "plandag.toml", '[prices."b"]\ninput = 5\noutput = 6\n')
    settings = load_settings()
    assert settings.prices == {"a": {"input": 1, "output": 2}, "b": {"input": 5, "output": 6}}
    assert str(own) in settings.prices_source
    assert settings.values == DEFAULTS  # no setting changed
    assert settings.with_flags({"retries": 1}).prices == settings.prices
