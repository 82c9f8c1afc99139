"""A run forked from the session's warm Locust is what `python -m locust ARGS` in its own process
would be: its arguments, working folder, environment, output and exit status its own."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.support.locust_forks import LocustForks
from tests.support.locust_runner import python_env

PROBE = """
import os, sys, time
import inferload.users.engine as engine
print("cwd", os.getcwd())
print("probe", os.environ.get("PROBE"))
print("argv", sys.argv[1:3])
print("transport resolved before the run", engine.native_module.cache_info().currsize)
sys.stdout.flush()
if os.environ.get("SLEEP"):
    time.sleep(float(os.environ["SLEEP"]))
print("to stderr", file=sys.stderr)
sys.exit(int(os.environ.get("CODE", "0")))
"""


@pytest.fixture(scope="module")
def forks() -> Iterator[LocustForks]:
    server = LocustForks(python_env())
    yield server
    server.close()


def test_a_run_has_its_own_folder_environment_arguments_output_and_exit_code(forks, tmp_path):
    locustfile = tmp_path / "probe.py"
    locustfile.write_text(PROBE)
    done = forks.run(["-f", str(locustfile)], tmp_path, {**python_env(), "PROBE": "seen", "CODE": "7"}, timeout_s=60)
    assert done.returncode == 7, done
    assert f"cwd {tmp_path}" in done.stdout and "probe seen" in done.stdout
    assert f"argv ['-f', '{locustfile}']" in done.stdout
    assert "transport resolved before the run 0" in done.stdout  # the server chose no transport for its forks
    assert "to stderr" in done.stderr and "to stderr" not in done.stdout
    again = forks.run(["-f", str(locustfile)], tmp_path, {**python_env(), "PROBE": "other"}, timeout_s=60)
    assert again.returncode == 0 and "probe other" in again.stdout  # nothing of the first run's environment


def test_a_run_past_its_timeout_is_killed_and_raises_as_subprocess_run_does(forks, tmp_path):
    locustfile = tmp_path / "probe.py"
    locustfile.write_text(PROBE)
    with pytest.raises(subprocess.TimeoutExpired):
        forks.run(["-f", str(locustfile)], tmp_path, {**python_env(), "SLEEP": "60"}, timeout_s=3)
    done = forks.run(["-f", str(locustfile)], tmp_path, python_env(), timeout_s=60)  # the server goes on serving
    assert done.returncode == 0, done


def test_a_run_killed_by_a_signal_reports_it_as_a_negative_return_code(forks, tmp_path):
    locustfile = tmp_path / "probe.py"
    locustfile.write_text(PROBE.replace("sys.exit(", "os.kill(os.getpid(), 15)\nsys.exit("))
    done = forks.run(["-f", str(locustfile)], tmp_path, python_env(), timeout_s=60)
    assert done.returncode == -15, done
