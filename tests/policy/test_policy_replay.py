"""`gate policy replay` on a synthetic week (examples/replay/week.py) on SQLite and PostgreSQL:
a dangerous flip exits 1 (0 when accepted), a safe candidate's flips and load, `--json`,
invalid input exits 2, the database is only read, and rows past `args_retention` are replayed
on their masked arguments and marked uncertain where that could change the answer.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import ModuleType

import pytest
import sqlalchemy as sa

from gate.base.statuses import utcnow
from gate.config.settings import load_settings
from gate.insights import replay as policy_replay
from gate.policy.rules import Policy
from gate.store import decision_log
from gate.store.db import normalise_url, read_only_engine
from tests.conftest import _pg_admin_url, _pg_skip, _stop_servers
from tests.support.cli import gate_in_process, run_gate
from tests.support.databases import migrated_sqlite
from tests.support.pg_databases import PostgresDatabases, temporary_database

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "replay"


def _week_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("replay_week", EXAMPLE / "week.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _generate(folder: Path, db_url: str) -> Path:
    """`folder`/gate.toml, pointing at `db_url` with the synthetic week written into it."""
    calls = _week_module().generate(folder, database_url=db_url)
    assert calls == 770
    return folder / "gate.toml"


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def week(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The week, generated once for the tests that only read it (replay opens the database
    read-only, and test_replay_only_reads checks that it did): writing it costs about a
    second of CPU."""
    folder = tmp_path_factory.mktemp("week")
    if request.param == "sqlite":
        yield _generate(folder, migrated_sqlite(folder / "gate.db"))
        return
    admin = _pg_admin_url()
    if not admin:
        pytest.skip(_pg_skip())
    databases: PostgresDatabases = request.getfixturevalue("postgres_databases")
    for url in temporary_database(databases, _stop_servers):
        yield _generate(folder, url)


@pytest.fixture
def own_week(tmp_path: Path, db_url: str) -> Path:
    """A folder with gate.toml pointing at a database of the test's own holding the week
    (for a test that changes it)."""
    return _generate(tmp_path / "week", db_url)


def replay(config: Path, candidate: str, *extra: str) -> tuple[int, str, str]:
    """`gate policy replay` (in this process) of examples/replay/`candidate`."""
    done = gate_in_process("policy", "replay", EXAMPLE / candidate, "--config", config, *extra)
    return done.returncode, done.stdout, done.stderr


def test_a_dangerous_flip_exits_1_unless_accepted(week: Path) -> None:
    # the real command once: its entry point, exit status and stdio
    done = run_gate("policy", "replay", EXAMPLE / "candidate.toml", "--config", week)
    code, out, err = done.returncode, done.stdout, done.stderr
    assert code == 1, err
    assert "Traceback" not in err
    # git status, git diff, ls, pytest and git push: 39 a day; the force pushes were rejected
    assert "ask->allow   rule routine-shell: 273 call(s)  DANGEROUS: 7 a person rejected" in out
    assert out.count("git push --force origin main") == 3  # the examples: dangerous first
    assert "rejected by" in out and "7 dangerous flip(s)" in err
    code, out, _ = replay(week, "candidate.toml", "--accept-dangerous")
    assert code == 0 and "DANGEROUS" in out


def test_a_safe_candidate_shows_its_flips_and_load(week: Path) -> None:
    code, out, err = replay(week, "candidate-fixed.toml", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["rows"] == 770 and report["dangerous"] == 0 and report["uncertain"] == 0
    flips = {(f["flip"], f["rule"]): f for f in report["flips"]}
    assert set(flips) == {("ask->allow", "routine-shell"), ("ask->deny", "no-force-push")}
    assert flips["ask->deny", "no-force-push"]["count"] == 7
    assert len(flips["ask->allow", "routine-shell"]["examples"]) == 3
    load = report["load"]
    assert load["asks_per_day_before"] > load["asks_per_day_after"]
    assert sum(d["before"] for d in load["days"]) == 280  # every ask of the week
    assert sum(d["after"] for d in load["days"]) == 21  # git push origin main, rm -rf
    live = Policy(load_settings(week)).revision
    assert report["revisions_replayed"] == {live: 770}
    assert report["candidate_revision"] != live


def test_invalid_input_exits_2(week: Path, tmp_path: Path) -> None:
    assert replay(week, "candidate.toml", "--since", "soon")[0] == 2
    broken = tmp_path / "broken.toml"
    broken.write_text('[[rules]]\nname = "x"\nwhen = "args.("\n')
    done = gate_in_process("policy", "replay", broken, "--config", week)
    assert done.returncode == 2 and "not valid CEL" in done.stderr
    broken.write_text("[[rules]\n")
    assert gate_in_process("policy", "replay", broken, "--config", week).returncode == 2
    missing = gate_in_process("policy", "replay", tmp_path / "none.toml", "--config", week)
    assert missing.returncode == 2 and "not found" in missing.stderr
    elsewhere = tmp_path / "elsewhere.toml"
    url = load_settings(week).server.database_url
    elsewhere.write_text(week.read_text().replace(url, f"sqlite:///{tmp_path}/none.db"))
    nothing = gate_in_process("policy", "replay", EXAMPLE / "candidate.toml", "--config", elsewhere)
    assert nothing.returncode == 2 and "no SQLite file" in nothing.stderr


def test_replay_only_reads(week: Path) -> None:
    db_url = load_settings(week).server.database_url
    engine = read_only_engine(db_url)
    try:
        with pytest.raises(sa.exc.DBAPIError), engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM decision_log"))
    finally:
        engine.dispose()
    if db_url.startswith("sqlite"):
        path = Path(db_url.split("///", 1)[1])
        before = path.read_bytes()
        assert replay(week, "candidate.toml")[0] == 1
        assert path.read_bytes() == before


def test_masked_rows_are_replayed_and_marked_uncertain(own_week: Path) -> None:
    week = own_week
    url = load_settings(week).server.database_url
    engine = sa.create_engine(normalise_url(url))
    try:
        with engine.begin() as conn:  # as the prune leaves rows past args_retention
            conn.execute(sa.text("UPDATE decision_log SET facts = NULL"))
        policy = Policy(load_settings(EXAMPLE / "candidate.toml", **_people(week)))
        with engine.connect() as conn:
            since = utcnow() - timedelta(days=8)
            rows = list(decision_log.since(conn, since))
        report = policy_replay.replay(
            policy, rows, since=since, until=utcnow(), candidate_revision=policy.revision
        )
    finally:
        engine.dispose()
    # the shell calls' new answers came from a `when` over masked arguments: uncertain, and
    # the force pushes a person rejected still count as dangerous (fail closed)
    assert report.uncertain >= 280
    assert len(report.dangerous) == 7 and all(r.uncertain for r in report.dangerous)
    reads = [r for r in rows if r.entry.rule == "reads"]
    assert reads and all(not policy_replay.decide_again(policy, r).uncertain for r in reads)


def _people(config: Path) -> dict[str, object]:
    import tomllib

    whole = tomllib.loads(config.read_text())
    return {"approvers": whole["approvers"], "server": whole["server"]}
