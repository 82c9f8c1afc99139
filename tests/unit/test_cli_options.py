"""Every subcommand's bad options, as a user types them: one line naming the option, exit 2, no
traceback, and nothing started (no server contacted, no folder made).

Table-driven: each row is a command line run in a subprocess from an empty working folder. The
scenario's target points at a closed port, so a run that got past its options would end in the
start checks instead; the line naming the option is what proves the option was checked first.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.scenario_factory import bare_target, steady_one_user, write_scenario
from tests.support.system_tools import REPO

SUBCOMMANDS = (
    "demo",
    "run",
    "sweep",
    "tune",
    "trace-to-replay",
    "calibrate",
    "validate",
    "compare",
    "report",
    "worker",
    "servers",
    "restore",
)

#: (arguments, what the one error line must name); @S (the scenario), @D (an empty folder but for
#: a file, a-file) and @C (a closed port) are filled in per test
BAD_OPTIONS: list[tuple[tuple[str, ...], str]] = [
    (("run", "@S", "--headless", "--workers", "-1"), "--workers"),
    (("run", "@S", "--headless", "--workers", "100000"), "--workers"),
    (("run", "@S", "--headless", "--workers", "two"), "--workers"),
    (("run", "@S", "--headless", "--remote-workers", "-3"), "--remote-workers"),
    (("run", "@S", "--headless", "--workers", "1", "--master-bind-host", "no.such.host.invalid"), "--master-bind-host"),
    (("run", "@S", "--headless", "--workers", "1", "--master-bind-host", "192.0.2.1"), "--master-bind-host"),
    (("run", "@S", "--headless", "--workers", "1", "--master-port", "99999"), "--master-port"),
    (("run", "@S", "--headless", "--master-port", "5557"), "--master-port"),
    (("run", "@S", "--headless", "--workers", "1", "--worker-wait", "nan"), "--worker-wait"),
    (("run", "@S", "--headless", "--workers", "1", "--worker-wait", "inf"), "--worker-wait"),
    (("run", "@S", "--headless", "--workers", "1", "--worker-wait", "-1"), "--worker-wait"),
    (("run", "@S", "--web-host", "999.999.1.1"), "--web-host"),
    (("run", "@S", "--headless", "--repeat", "0"), "--repeat"),
    (("run", "@S", "--repeat", "3"), "--repeat"),
    (("run", "@S", "--headless", "--run-id", "../x"), "--run-id"),
    (("run", "@S", "--headless", "--out", "@D/a-file"), "--out"),
    (("run", "@S", "--headless", "--out", "/dev/zero"), "--out"),
    (("run", "@S", "--headless", "--", "--users", "50", "--run-time", "2s"), "--users"),
    (("run", "@S", "--headless", "--", "-t", "2s"), "-t"),
    (("run", "@S", "--headless", "--", "--run-time=2s"), "--run-time"),
    (("run", "@D/missing.yaml", "--headless"), "missing.yaml"),
    (("run", "@S", "--headless", "--", "--influx-url", "ftp://x"), "InfluxDB: --influx-url (or INFLUX_URL): expected an http"),
    (("run", "@S", "--headless", "--", "--influx-url=http://127.0.0.1:1", "--influx-api=v9"), "--influx-api (or INFLUX_API)"),
    (("sweep", "@S", "--users", "1,2", "--warmup", "garbage"), "--warmup"),
    (("sweep", "@S", "--users", "1,2", "--window", "0s"), "--window"),
    (("sweep", "@S", "--users", "1,2", "--out", "@D/a-file"), "--out"),
    (("sweep", "@S", "--users", "1,2", "--max-client-cpu", "-1"), "--max-client-cpu"),
    (("sweep", "@S", "--users", "1,2", "--max-error-rate", "2"), "--max-error-rate"),
    (("sweep", "@S", "--users", "1,2", "--precision", "nan"), "--precision"),
    (("sweep", "@S", "--users", "1,2", "--stable-windows", "0"), "--stable-windows"),
    (("sweep", "@S", "--users", "1,2", "--budget", "0s"), "--budget"),
    (("sweep", "@S", "--find-max-rps", "--slo", "p99_ms=20", "--budget", "1ms"), "leaves no time for one step"),
    (("sweep", "@S", "--users", "1,2", "--workers", "100000"), "--workers"),
    (("sweep", "@S", "--users", "1,x"), "--users"),
    (("sweep", "@S", "--users", "1,200000"), "--users"),  # each step a run: refused before the first, not at its own
    (("sweep", "@S", "--users", "1:1000000:x2"), "--users"),
    (("sweep", "@S", "--rate", "1,2000000"), "--rate"),
    (("sweep", "@S", "--users", "1,2", "--workers", "-1"), "--workers"),
    (("sweep", "@S", "--find-max-rps"), "--slo"),
    (("sweep", "@S", "--find-max-rps", "--slo", "p99_ms=inf"), "--slo"),
    (("sweep", "@S", "--users", "1,2", "--min-rps", "5"), "--min-rps"),
    (("sweep", "@S", "--find-max-users"), "--find-max-users needs a latency or goodput bound"),
    (("sweep", "@S", "--find-max-rps", "--slo", "p99_ms=50", "--min-users", "5"), "--min-users"),
    (("sweep", "@S", "--find-max-users", "--slo", "p99_ms=50", "--start-users", "0"), "--start-users"),
    (("sweep", "@S", "--find-max-users", "--slo", "p99_ms=50", "--calibration", "@D/a-file"), "closed-loop users offer no rate"),
    (("sweep", "@S", "--users", "1", "--target", "nope"), "--target"),
    (("sweep", "@S", "--find-max-rps", "--slo", "p99_ms=50", "--calibration", "/dev/zero"), "--calibration"),
    (("sweep", "@S", "--find-max-rps", "--slo", "p99_ms=50", "--calibration", "@D/missing.json"), "--calibration"),
    (("sweep", "@S", "--find-max-rps", "--slo", "p99_ms=50", "--calibration", "@D/a-file"), "--calibration"),
    (("sweep", "@S", "--users", "1,2", "--server-state", "@D/none"), "--server-state"),
    (("tune", "@S", "--servers", "triton", "--slo", "p99_ms=50", "--triton-url", "ftp://x"), "--triton-url"),
    (("tune", "@S", "--servers", "triton", "--slo", "p99_ms=50", "--triton-url", "http://127.0.0.1:@C"), "--triton-url"),
    (("tune", "@S", "--slo", "p99_ms=50"), "torchserve"),
    (
        ("tune", "@S", "--servers", "triton", "--triton-url", "http://127.0.0.1:1"),
        "tune (each candidate scored by its capacity under --slo) needs a latency or goodput bound",
    ),
    (("tune", "@S", "--servers", "triton", "--slo", "p99_ms=50", "--calibration", "/dev/zero"), "--calibration"),
    (("tune", "@S", "--slo", "p99_ms=50", "--servers", "nginx"), "--servers"),
    (("tune", "@S", "--servers", "triton", "--slo", "p99_ms=50", "--triton-delays-us", "a,b"), "--triton-delays-us"),
    (("tune", "@S", "--servers", "triton", "--slo", "p99_ms=50", "--budget", "soon"), "--budget"),
    (("tune", "@S", "--servers", "triton", "--slo", "p99_ms=50", "--workers", "100000"), "--workers"),
    (("tune", "@S", "--servers", "triton", "--slo", "p99_ms=50", "--triton-instances", "100000"), "--triton-instances"),
    (("tune", "@S", "--servers", "triton", "--slo", "p99_ms=50", "--triton-delays-us", "1,99999999999"), "--triton-delays-us"),
    (
        ("tune", "@S", "--servers", "triton", "--slo", "p99_ms=50", "--triton-max-batch-sizes", "1000000"),
        "--triton-max-batch-sizes",
    ),
    (("tune", "@S", "--servers", "triton", "--slo", "p99_ms=50", "--torchserve-workers", "1000"), "--torchserve-workers"),
    (
        ("tune", "@S", "--servers", "triton", "--slo", "p99_ms=50", "--triton-delays-us", ",".join(map(str, range(1, 30)))),
        "--triton-delays-us",
    ),
    (("demo", "--users", "-1"), "--users"),
    (("demo", "--steady", "0"), "--steady"),
    (("demo", "--warmup", "nan"), "--warmup"),
    (("demo", "--servers", "nginx"), "--servers"),
    (("demo", "--out", "@D/a-file"), "--out"),
    (("worker", "--master-host", "bad host"), "--master-host"),
    (("worker", "--master-host", "127.0.0.1", "--master-port", "0"), "--master-port"),
    (("servers", "up", "--state-dir", "/proc/x"), "--state-dir"),
    (("servers", "status", "--ports", "triton_grpc=notaport"), "--ports"),
    (("servers", "status", "--ports", "nope=9000"), "--ports"),
    (("servers", "up", "--host", "999.1.1.1"), "--host"),
    (("servers", "up", "--servers", " , "), "--servers: expected a comma list of triton, torchserve"),
    (("servers", "up", "--only", "triton", "--servers", "kserve"), "--only triton and --servers kserve: give one"),
    (("servers", "sideways"), "action"),
    (("validate", "@S", "--", "--users", "3"), "--"),
    (("compare", "@D/none", "@D/none"), "@D/none"),
    (("report",), "RESULTS_DIR"),
    (("restore", "--journal", "@D/a-file"), "--journal"),
    (
        ("calibrate", "--quick", "--bogus"),
        "inferload calibrate: unrecognized arguments: --bogus (see inferload calibrate --help)",
    ),
    (("calibrate", "--quick", "--workers", "999"), "inferload calibrate: argument --workers: expected a whole number from 0 to"),
    (
        ("calibrate", "--quick", "--remote-workers", "-1"),
        "inferload calibrate: argument --remote-workers: expected a whole number",
    ),
    (("servers", "status", "--x"), "inferload servers: unrecognized arguments: --x"),
    (("compare", "@D", "@D", "@D"), "inferload compare: unrecognized arguments: @D"),
]


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "INFERLOAD_JOURNAL_DIR": str(cwd / "journal"), "HOME": str(cwd)}
    return subprocess.run(
        [sys.executable, "-m", "inferload.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "a-file").write_text("not a folder\n")
    return tmp_path


def fill(args: tuple[str, ...], scenario: Path, folder: Path, closed_port: int) -> list[str]:
    return [arg.replace("@S", str(scenario)).replace("@D", str(folder)).replace("@C", str(closed_port)) for arg in args]


@pytest.mark.parametrize(("args", "named"), BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS])
def test_a_bad_option_is_one_line_naming_it_and_exit_2(folder: Path, args: tuple[str, ...], named: str) -> None:
    closed = free_port()
    target = bare_target("t", "triton-http", f"127.0.0.1:{closed}")
    scenario = write_scenario(folder, steady_one_user(target))
    before = sorted(path.name for path in folder.iterdir())
    done = run_cli(fill(args, scenario, folder, closed), folder)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert len(lines) == 1, done.stderr
    assert named.replace("@D", str(folder)) in lines[0], lines[0]
    assert sorted(path.name for path in folder.iterdir()) == before  # nothing made: no results/, no journal/


def test_a_run_with_fewer_users_than_targets_stops_before_any_load(folder: Path) -> None:
    """Two targets and one user: Locust gave the user to one target, and the other sent nothing."""
    closed = free_port()
    targets = [bare_target(name, "triton-http", f"127.0.0.1:{closed}") for name in ("a", "b")]
    scenario = write_scenario(folder, steady_one_user(*targets))
    done = run_cli(["run", str(scenario), "--headless", "--out", str(folder / "out")], folder)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "shape.users: 1 users for 2 targets: they are shared among the targets by weight" in done.stderr, done.stderr
    assert "cannot reach" not in done.stderr  # refused before the start checks reach for the servers


def test_a_plain_locust_run_with_a_bad_influx_url_variable_exits_2_naming_it(folder: Path) -> None:
    """`locust -f inferload/locustfile.py` with INFLUX_URL=ftp://... ended in a pydantic traceback, exit 1."""
    scenario = write_scenario(folder, steady_one_user(bare_target("t", "triton-http", f"127.0.0.1:{free_port()}")))
    command = [sys.executable, "-m", "locust", "-f", str(REPO / "inferload" / "locustfile.py"), "--scenario", str(scenario)]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(folder), "INFLUX_URL": "ftp://influx:8086"}
    done = subprocess.run([*command, "--headless"], cwd=folder, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "errors.pydantic.dev" not in done.stderr, done.stderr
    assert "InfluxDB: --influx-url (or INFLUX_URL): expected an http:// or https:// URL" in done.stderr, done.stderr
    assert "got 'ftp://influx:8086'" in done.stderr


@pytest.mark.parametrize("command", [None, *SUBCOMMANDS])
def test_help_works_for_the_command_and_every_subcommand(tmp_path: Path, command: str | None) -> None:
    done = run_cli([command, "--help"] if command else ["--help"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: inferload"), done.stdout
    assert "Traceback" not in done.stderr


#: a command's own option, shown by its --help, for the commands whose options are read only when named
OWN_OPTION = {"sweep": "--find-max-rps", "tune": "--servers", "trace-to-replay": "--time-field", "calibrate": "--quick"}


@pytest.mark.parametrize("command", [None, *SUBCOMMANDS])
def test_a_command_line_imports_only_the_named_commands_slow_modules(tmp_path: Path, command: str | None) -> None:
    """`inferload --help`, `run` or `validate` do not pay the second of imports sweep, tune,
    trace-to-replay and calibrate need for their options; each of those four still shows them."""
    program = (
        "import sys\n"
        "from inferload.cli import SLOW_TO_IMPORT_COMMANDS, main\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('imported:', *sorted(name for name, (module, _, _) in SLOW_TO_IMPORT_COMMANDS.items() if module in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, *([command] if command else []), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    imported = done.stdout.strip().splitlines()[-1].split()[1:]
    if command in OWN_OPTION:  # tune's options include sweep's search options
        assert command in imported and OWN_OPTION[command] in done.stdout, done.stdout
    else:
        assert imported == [], done.stdout


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--scenario", "@S", "--interval", "0", "--influx-url", "http://127.0.0.1:1"), "--interval"),
        (("--scenario", "@S", "--interval", "nan", "--influx-url", "http://127.0.0.1:1"), "--interval"),
        (("--scenario", "@S", "--duration", "0s", "--influx-url", "http://127.0.0.1:1"), "--duration"),
        (("--scenario", "@S", "--log-level", "LOUD"), "--log-level"),
        (("--scenario", "@S", "--influx-url", "notaurl"), "influx: url: expected an http:// or https:// URL"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else value,
)
def test_the_collectors_bad_options_are_one_line_and_exit_2(folder: Path, args: tuple[str, ...], named: str) -> None:
    """`python -m collectors --interval 0` scraped in a busy loop; `--log-level LOUD` ended in a traceback."""
    scenario = write_scenario(folder, steady_one_user(bare_target("t", "triton-http", f"127.0.0.1:{free_port()}")))
    command = [sys.executable, "-m", "collectors", *fill(args, scenario, folder, 1)]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(folder)}
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=60)
    output = (done.stdout + done.stderr).strip()
    assert done.returncode == 2, output
    assert "Traceback" not in output
    errors = [line for line in output.splitlines() if line.startswith(("collector:", "python -m collectors:"))]
    assert len(errors) == 1 and named in errors[0], output
    assert "validation error" not in output and "errors.pydantic.dev" not in output, output  # no pydantic report
