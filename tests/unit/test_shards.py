"""The integration layer's shards (`tests/support/shards.py`): whole modules, longest first, each to
the least loaded shard; the seconds per module read back from pytest's JUnit XML."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from inferload.errors import UsageError
from inferload.launch.distributed import FREE_PORTS_ENV, free_port
from tests.support.shards import (
    ALONE,
    INTEGRATION,
    PORT_SLICES,
    QUIET,
    QUIET_SHARDS,
    Session,
    Shard,
    asks_for,
    lendable,
    module_seconds,
    partition,
    plan,
    port_slices,
    run,
    shared_fixture_groups,
)
from tests.support.shards import test_modules as integration_modules
from tests.support.system_tools import REPO


def test_modules_go_longest_first_to_the_least_loaded_shard() -> None:
    durations = {"a.py": 100.0, "b.py": 60.0, "c.py": 50.0, "d.py": 40.0, "e.py": 10.0}
    shards = partition(sorted(durations), durations, 2)
    assert [shard.modules for shard in shards] == [["a.py", "d.py"], ["b.py", "c.py", "e.py"]]
    assert [shard.expected_s for shard in shards] == [140.0, 120.0]


def test_modules_that_share_a_session_fixture_go_to_one_shard_as_one_unit() -> None:
    durations = {"a.py": 100.0, "b.py": 60.0, "c.py": 50.0, "d.py": 40.0, "e.py": 10.0}
    shards = partition(sorted(durations), durations, 2, together=[{"a.py", "e.py"}])
    assert [shard.modules for shard in shards] == [["a.py", "e.py", "d.py"], ["b.py", "c.py"]]  # e.py beside a.py


def test_the_modules_using_the_session_servers_form_one_group_and_the_others_none() -> None:
    modules = integration_modules(INTEGRATION)
    groups = shared_fixture_groups(modules)
    local_servers = next(group for group in groups if "tests/integration/test_locust_runs.py" in group)
    # local_servers and influxdb joined by the modules using both; bare_number_server by the one using it and local_servers
    assert {
        "tests/integration/test_influx_histograms.py",
        "tests/integration/test_sink.py",
        "tests/integration/test_torchserve_response_check.py",
    } <= local_servers
    assert not any("tests/integration/test_signals.py" in group for group in groups)  # the reference server's, per module
    assert sum(len(group) for group in groups) == len(set().union(*groups))  # a module in one group at most


def test_a_module_never_timed_counts_as_the_median_and_empty_shards_are_dropped() -> None:
    shards = partition(["new.py", "x.py", "y.py", "z.py"], {"x.py": 10.0, "y.py": 20.0, "z.py": 90.0}, 3)
    assert sorted(shard.expected_s for shard in shards) == [20.0, 30.0, 90.0]  # new.py counted as 20 s
    assert sorted(m for shard in shards for m in shard.modules) == ["new.py", "x.py", "y.py", "z.py"]
    assert len(partition(["only.py"], {}, 4)) == 1


def test_seconds_per_module_add_up_every_test_of_it_from_junit_xml(tmp_path: Path) -> None:
    junit = tmp_path / "shard.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.integration.test_a" name="test_one" time="1.5"/>'
        '<testcase classname="tests.integration.test_a" name="test_two" time="2.0"/>'
        '<testcase classname="tests.integration.test_b.TestGroup" name="test_three" time="4.25"/>'
        "</testsuite></testsuites>"
    )
    assert module_seconds([junit, tmp_path / "missing.xml"]) == {
        "tests/integration/test_a.py": 3.5,
        "tests/integration/test_b.py": 4.25,
    }


def test_a_session_of_its_own_runs_after_the_first_shard_which_gets_fewer_modules_by_as_much() -> None:
    durations = {"a.py": 50.0, "b.py": 50.0, "c.py": 50.0, "python-transport": 100.0}
    shards = partition(["a.py", "b.py", "c.py"], durations, 2, Session("python-transport", ["a.py::test_x"], {"X": "1"}))
    assert [shard.modules for shard in shards] == [["c.py"], ["a.py", "b.py"]]
    assert [[session.name for session in shard.sessions()] for shard in shards] == [["shard 1", "python-transport"], ["shard 2"]]
    assert shards[0].sessions()[1].environment == {"X": "1"}


def test_the_quiet_and_alone_modules_are_distinct_existing_modules_and_quiet_sessions_are_named_apart() -> None:
    assert not QUIET & ALONE
    assert all((REPO / module).is_file() for module in QUIET | ALONE)
    quiet = partition(sorted(QUIET), {}, QUIET_SHARDS, label="quiet")
    assert [shard.sessions()[0].name for shard in quiet] == [
        f"quiet {n}" for n in range(1, QUIET_SHARDS + 1)
    ]  # their logs and JUnit files apart


def test_the_runner_lends_its_local_servers_only_to_sessions_that_never_run_side_by_side() -> None:
    uses = "tests/integration/test_locust_runs.py"  # asks for local_servers
    other = "tests/integration/test_signals.py"  # does not
    fallback = Session("python-transport", [f"{uses}::test_each_user_class_sends_real_inferences_and_the_run_ends_on_time"])
    one_after_another = [
        [Shard(1, [uses]), Shard(2, [other])],
        [Shard(1, [other]), Shard(2, after=[fallback])],
        [Shard(0, [uses], name="alone")],
    ]
    assert lendable(one_after_another, "local_servers")
    side_by_side = [[Shard(1, [uses]), Shard(2, after=[fallback])]]
    assert not lendable(side_by_side, "local_servers")
    assert lendable([[Shard(1, [uses], after=[fallback])]], "local_servers")  # one after the other in a shard
    assert not lendable([[Shard(1, [other])], [Shard(0, [other], name="alone")]], "local_servers")  # nobody asks


def test_make_integrations_plan_lends_the_local_servers_to_its_three_sessions_that_ask_for_them() -> None:
    makefile = (REPO / "Makefile").read_text()
    fallback_tests = [word for word in makefile.split() if word.startswith("tests/integration/test_")]
    fallback = Session("python-transport", fallback_tests)
    phases = [phase for _, phase in plan(integration_modules(INTEGRATION), {}, 3, fallback, integration=True)]
    assert lendable(phases, "local_servers")
    asking = [
        session.name for phase in phases for shard in phase for session in shard.sessions() if asks_for(session, "local_servers")
    ]
    assert len(asking) == 3 and asking[1:] == ["python-transport", "alone"], asking


#: a test module that writes down the ports its session's servers would be drawn from, then lingers so
#: that the sessions beside it are still running when theirs start
PORTS_PROBE = """
import os, time
from pathlib import Path

def test_write_the_ports():
    Path(os.environ["PROBE_OUT"], os.environ["PYTEST_CURRENT_TEST"].split("::")[0].rsplit("/", 1)[-1]).write_text(
        os.environ["INFERLOAD_FREE_PORTS"]
    )
    time.sleep(1.5)
"""


def test_sessions_side_by_side_draw_their_servers_ports_from_slices_none_of_them_shares(tmp_path: Path, monkeypatch) -> None:
    slices = port_slices()
    bounds = [tuple(map(int, slice_.split("-"))) for slice_ in slices]
    assert len(slices) == PORT_SLICES and all(low < high for low, high in bounds)
    assert all(high <= next_low for (_, high), (next_low, _) in itertools.pairwise(bounds))  # disjoint, in order
    modules = []
    for name in ("a", "b", "c"):
        module = tmp_path / f"test_probe_{name}.py"
        module.write_text(PORTS_PROBE)
        modules.append(str(module))
    (tmp_path / "out").mkdir()
    monkeypatch.setenv("PROBE_OUT", str(tmp_path / "out"))
    shards = [Shard(1, [modules[0]]), Shard(2, [modules[1]], after=[Session("after", [modules[2]])])]
    code, ran = run(shards, ["-q", "-p", "no:cacheprovider"], tmp_path, slices[1:])
    assert code == 0 and [session.name for session in ran] == ["shard 1", "shard 2", "after"]
    drawn = {path.name: path.read_text() for path in (tmp_path / "out").iterdir()}
    assert drawn["test_probe_a.py"] != drawn["test_probe_b.py"]  # side by side: two slices
    assert set(drawn.values()) <= set(slices[1:]) and drawn["test_probe_a.py"] == ran[0].ports


def test_free_ports_come_from_the_range_the_environment_names_and_a_bad_range_is_refused(monkeypatch) -> None:
    monkeypatch.setenv(FREE_PORTS_ENV, "21000-21010")
    assert all(21000 <= free_port() < 21010 for _ in range(20))
    monkeypatch.setenv(FREE_PORTS_ENV, "21010-21000")
    with pytest.raises(UsageError, match=r"INFERLOAD_FREE_PORTS='21010-21000': expected LOW-HIGH"):
        free_port()
