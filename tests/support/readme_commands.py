"""The commands README.md shows, and what the tests do with each: run it as written (``RUN``; the
Locust lines are run whatever they say) or say why not (``NOT_RUN``).

The commands are read from README.md itself: the lines of its shell code blocks and its inline code
spans that start with a command (`inferload ...`, `locust ...`, `python ...`, `pip ...`, `make ...`,
`export ...`, `docker ...`). `tests/unit/test_readme_listing.py` holds every one of them to a line
here (a README edit changes what is tested, and says so in the fast layer);
`tests/integration/test_readme_commands.py` runs them.
"""

from __future__ import annotations

import re
import shutil

from tests.support.system_tools import REPO

README = REPO / "README.md"
COMMAND_WORDS = frozenset({"inferload", "locust", "python", "python3", "pip", "make", "export", "docker", "docker-compose"})
SHELL_FENCES = frozenset({"", "bash", "sh", "shell", "console"})
INFERLOAD_RUN = "inferload run SCENARIO [--headless] [--workers N] [-- LOCUST ARGS]"
#: the README's first run: the commands it shows as typed (run by the tests below, in this order)
FIRST_RUN = (
    "inferload servers up",
    "inferload validate scenarios/*.yaml",
    "inferload run scenarios/triton-http.yaml --headless",
    "inferload run scenarios/steady.yaml",
)

#: README commands this file runs: the README's text -> the commands run for it (itself when complete,
#: instances of a synopsis otherwise; A, B and DIR are the results the Locust runs wrote)
RUN: dict[str, tuple[str, ...]] = {
    **{command: (command,) for command in FIRST_RUN},
    r"inferload servers up\|down\|status": ("inferload servers up", "inferload servers status", "inferload servers down"),
    "inferload validate SCENARIO...": ("inferload validate scenarios/*.yaml",),
    INFERLOAD_RUN: ("inferload run scenarios/triton-http.yaml --headless", "inferload run scenarios/steady.yaml"),
    "inferload compare A B [--fail-on FIGURE:±P%]": (
        "inferload compare A B",
        "inferload compare A B --json",
        "inferload compare A B --fail-on p99:+400%",
        "inferload compare A B --rename triton-grpc-cnn=renamed",
    ),
    "inferload report RESULTS_DIR [--from T] [--to T]": (
        "inferload report DIR",
        "inferload report DIR --from 1 --to 20",
    ),
}

_DEMO = "starts both servers and runs ~3 min; tests/integration/test_wheel.py runs `inferload demo` with short phases from the installed wheel"
_PLACEHOLDER = "has placeholders, not a command as typed"
#: README commands this file does not run, and why
NOT_RUN: dict[str, str] = {
    "make demo": "installs system packages (apt) and runs the full demo; CI runs `make test`, which builds the same",
    "make test": "runs the whole suite, this file included: CI runs it itself",
    "inferload calibrate [--quick] [--workers N]": _PLACEHOLDER + "; tests/integration/test_calibrate.py runs it",
    "make bench": "the benchmarks (tens of minutes, figures not verdicts): docs/benchmarks.md; their parsers are unit-tested",
    "pip install 'inferload[servers]'": "installs from a registry; tests/integration/test_wheel.py installs the built wheel",
    "inferload demo": _DEMO,
    "inferload demo [--servers LIST]": _DEMO + "; test_kserve_server.py and test_bentoml_service.py run the other servers",
    "inferload demo --llm": "three real servers and a capacity search each (minutes); tests/integration/test_llm_demo.py"
    " runs it short on all three",
    "inferload sweep SCENARIO (--users LEVELS \\| --rate LEVELS \\| --find-max-rps \\| --find-max-users)": _PLACEHOLDER
    + "; tests/integration/test_sweep.py runs sweeps and a capacity search, test_capacity.py the search and the"
    " ramp-and-hold mode against the reference server",
    "inferload tune SCENARIO --slo p99_ms=X": _PLACEHOLDER + "; tests/integration/test_tune.py runs it",
    "inferload worker --master-host H": _PLACEHOLDER + "; tests/integration/test_distributed.py runs workers",
    "inferload trace-to-replay SOURCE... --out FILE.csv": _PLACEHOLDER
    + "; tests/integration/test_replay.py runs it on a real Triton's trace, tests/unit/test_trace_to_replay.py on logs",
    "inferload restore": _PLACEHOLDER.replace("has placeholders", "puts back a killed tune's changes")
    + "; tests/integration/test_servers_left_as_found.py runs it",
}


def strip_comment(line: str) -> str:
    return re.sub(r"\s+#\s.*$", "", line).removeprefix("$ ").strip()


def readme_commands(text: str) -> list[str]:
    """The commands README.md shows, in order: shell code block lines, then command-like inline spans."""
    commands: list[str] = []
    for fence, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        lines = [strip_comment(line) for line in body.splitlines() if line.strip()]
        starts = [line.split()[0] for line in lines if line]
        if fence in SHELL_FENCES and any(word in COMMAND_WORDS or shutil.which(word) for word in starts):
            commands += [line for line in lines if line]
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    commands += [span for span in re.findall(r"`([^`\n]+)`", prose) if span.split()[0] in COMMAND_WORDS]
    return list(dict.fromkeys(commands))


def is_locust_run(command: str) -> bool:
    """A complete Locust command on a scenario (the README's Locust block): run whatever it says."""
    return command.startswith(("locust ", "python -m inferload.locustfile ")) and "--scenario " in command


def locust_runs(headless: bool) -> list[str]:
    commands = [c for c in readme_commands(README.read_text()) if is_locust_run(c) and ("--headless" in c.split()) == headless]
    assert commands, f"README.md shows no {'headless' if headless else 'web UI'} Locust command on a scenario"
    return commands
