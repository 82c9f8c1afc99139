"""`inferload tune`'s command line: the servers to tune, their management URLs, the search space,
and the capacity search's settings (shared with `inferload sweep`)."""

from __future__ import annotations

import argparse
import urllib.parse
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from inferload.errors import StoppedBeforeStart, UsageError
from inferload.results.repeats import format_repeats, repetition_folder, write_repeats
from inferload.run.server_changes import ServerJournal
from inferload.scenario.headers import HeadersError, read_management_key
from inferload.scenario.loader import load_scenario
from inferload.scenario.schema import Scenario
from inferload.scenario.targets import Target, TorchServeTarget
from inferload.tune.capacity import CapacitySearch
from inferload.tune.server_config import SearchSpace, TorchServeConfigurator, TritonConfigurator
from inferload.tune.sweep_cli import add_search_arguments, default_out, settings_from_args, with_gpu
from inferload.tune.tune import ServerTune, Tune, TuneSettings

# `inferload run --repeat N`: the same headless run N times, then each figure's 95 % interval
# (repeat.json, `inferload.results.repeats`); a signal or failed start checks end the repetitions.
EXIT_USAGE = 2


def cmd_run_repeated(args: argparse.Namespace, scenario_name: str, run_once: Callable[[argparse.Namespace, Any], int]) -> int:
    """`--repeat N`: N headless runs into repeat-NN/ folders, then repeat.json (each figure's 95 % interval)."""
    if args.repeat < 2:
        raise UsageError(f"--repeat: expected 2 or more runs; got {args.repeat}")
    if not args.headless:
        raise UsageError("--repeat needs --headless (each repetition runs to its end by itself)")
    run_id = args.run_id or f"{scenario_name}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    out = args.out or Path("results") / run_id
    folders: list[Path] = []
    codes: list[int] = []
    for index in range(1, args.repeat + 1):
        folder = repetition_folder(out, index)
        print(f"inferload run: repetition {index} of {args.repeat} -> {folder}", flush=True)
        repetition = argparse.Namespace(**{**vars(args), "out": folder, "run_id": f"{run_id}-r{index:02d}", "repeat": 1})
        try:
            code = run_once(repetition, load_scenario(args.scenario))
        except StoppedBeforeStart as stopped:  # a signal between two repetitions: the ones run are kept
            if not folders:
                raise
            print(f"inferload run: {stopped}", flush=True)
            codes.append(stopped.exit_code)
            break
        folders.append(folder)
        codes.append(code)
        if code == EXIT_USAGE or code >= 128:  # start checks failed, or a signal: no more repetitions
            break
    document = write_repeats(out, folders)
    print(format_repeats(document))
    print(f"repeat.json: {out / 'repeat.json'}")
    return next((code for code in codes if code >= 128 or code == EXIT_USAGE), max(codes))


#: values one search option may list (each is a candidate measured by a capacity search of its own)
MAX_CANDIDATE_VALUES = 20
#: model instances (Triton) or workers (TorchServe) of one candidate: each is a copy of the model
MAX_MODEL_COPIES = 64
#: a batch size (max_batch_size, preferred sizes, TorchServe's batch_size)
MAX_BATCH_SIZE = 65_536
#: a batching delay: 10 s (Triton's in microseconds, TorchServe's in milliseconds)
MAX_DELAY_US = 10_000_000
MAX_DELAY_MS = 10_000


def _ints(option: str, text: str, least: int = 0, most: int = MAX_BATCH_SIZE) -> tuple[int, ...]:
    """A comma list of whole numbers from `least` to `most` (at most `MAX_CANDIDATE_VALUES` of them); an empty
    string is an empty list (that stage is skipped)."""
    if not text.strip():
        return ()
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"{option}: expected whole numbers separated by commas; got {text!r}") from None
    if any(v < least or v > most for v in values):
        raise UsageError(f"{option}: expected numbers from {least} to {most:,}; got {text!r}")
    if len(values) > MAX_CANDIDATE_VALUES:
        raise UsageError(f"{option}: {len(values)} values; at most {MAX_CANDIDATE_VALUES} (each is a candidate to measure)")
    return values


def search_space(args: argparse.Namespace) -> SearchSpace:
    """The search space from the options, each checked (errors name the option)."""
    max_sizes = _ints("--triton-max-batch-sizes", args.triton_max_batch_sizes, least=1)
    preferred = _ints("--triton-preferred-batch-sizes", args.triton_preferred_batch_sizes, least=1)
    if list(preferred) != sorted(set(preferred)):
        raise UsageError(f"--triton-preferred-batch-sizes: expected increasing sizes; got {args.triton_preferred_batch_sizes!r}")
    if preferred and max_sizes and max(preferred) > min(max_sizes):
        raise UsageError(
            f"--triton-preferred-batch-sizes: {max(preferred)} is above --triton-max-batch-sizes {min(max_sizes)}"
            " (a preferred batch size must fit every max_batch_size tried)"
        )
    return SearchSpace(
        triton_delays_us=_ints("--triton-delays-us", args.triton_delays_us, most=MAX_DELAY_US),
        triton_instances=_ints("--triton-instances", args.triton_instances, least=1, most=MAX_MODEL_COPIES),
        triton_preferred=preferred,
        triton_max_batch_sizes=max_sizes,
        torchserve_batch_sizes=_ints("--torchserve-batch-sizes", args.torchserve_batch_sizes, least=1),
        torchserve_delays_ms=_ints("--torchserve-delays-ms", args.torchserve_delays_ms, most=MAX_DELAY_MS),
        torchserve_workers=_ints("--torchserve-workers", args.torchserve_workers, least=1, most=MAX_MODEL_COPIES),
    )


def add_tune_parser(sub: argparse._SubParsersAction, help_text: str) -> None:
    tune = sub.add_parser("tune", help=help_text)
    tune.add_argument("scenario", type=Path, help="scenario with a Triton target and/or a TorchServe target")
    tune.add_argument("--servers", default="triton,torchserve", help="which to tune (default triton,torchserve)")
    tune.add_argument(
        "--triton-url", help="Triton's HTTP API, e.g. http://127.0.0.1:8000 (default: a triton-http target's address)"
    )
    tune.add_argument("--torchserve-management", help="TorchServe's management API (default: the target's management_url)")
    tune.add_argument("--triton-delays-us", default="100,1000", help="dynamic batching queue delays to try (default 100,1000)")
    tune.add_argument("--triton-instances", default="2", help="instance counts to try after batching (default 2)")
    tune.add_argument(
        "--triton-max-batch-sizes", default="", help="max_batch_size values to try with batching (default: the model's own)"
    )
    tune.add_argument(
        "--triton-preferred-batch-sizes", default="", help="dynamic batching preferred_batch_size, e.g. 4,8 (default none)"
    )
    tune.add_argument("--torchserve-batch-sizes", default="8", help="batch sizes to try (default 8)")
    tune.add_argument("--torchserve-delays-ms", default="5,20", help="batch delays to try (default 5,20)")
    tune.add_argument("--torchserve-workers", default="2", help="worker counts to try after batching (default 2)")
    add_search_arguments(tune)
    tune.set_defaults(users=None, rate=None, find_max_rps=True, find_max_users=False, resume=False, target=None, plateau_steps=2)
    # what the capacity search is for, in its errors (tune has no --find-max-rps of its own)
    tune.set_defaults(capacity_for="tune (each candidate scored by its capacity under --slo)")


def pick(scenario: Scenario, server: str) -> Target | None:
    return next((t for t in scenario.targets if t.server == server), None)


def servers_from_args(args: argparse.Namespace, scenario: Scenario, journal: ServerJournal | None = None) -> list[ServerTune]:
    """The servers to tune, each with its configurator (which journals its changes in `journal`)."""
    wanted = [s.strip() for s in args.servers.split(",") if s.strip()]
    unknown = set(wanted) - {"triton", "torchserve"}
    if unknown or not wanted:
        raise UsageError(f"--servers: expected triton and/or torchserve; got {args.servers!r}")
    base = Path(args.scenario).resolve().parent
    servers: list[ServerTune] = []
    for server in wanted:
        target = pick(scenario, server)
        if target is None:
            raise UsageError(f"the scenario has no {server} target to tune (--servers {args.servers})")
        headers = Target.request_headers(target, base)  # the management API: the token_file's key is its own
        access: dict[str, Any] = {"headers_from_env": dict(target.headers_from_env or {})}
        if server == "triton":
            url = args.triton_url or (target.address if target.protocol == "http" else None)
            if url is None:
                raise UsageError(f"target {target.name!r} is {target.kind}: give Triton's HTTP API with --triton-url")
            url = management_url("--triton-url", url if "://" in url else f"http://{url}")
            servers.append(
                ServerTune(
                    "triton",
                    target.name,
                    target.model,
                    TritonConfigurator(url, target.model, headers, journal=journal, access=access),
                    f"--triton-url {url}",
                )
            )
        else:
            assert isinstance(target, TorchServeTarget)  # `pick` found the scenario's torchserve target
            url = args.torchserve_management or target.management_url
            if url is None:
                raise UsageError(f"target {target.name!r}: give TorchServe's management API with --torchserve-management")
            url = management_url("--torchserve-management", url)
            if target.token_file:
                try:
                    key = read_management_key(base / target.token_file)
                except HeadersError as error:
                    raise UsageError(f"target {target.name!r}: {error}") from None
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                access = {"token_file": str((base / target.token_file).resolve())}
            servers.append(
                ServerTune(
                    "torchserve",
                    target.name,
                    target.model,
                    TorchServeConfigurator(url, target.model, headers, journal=journal, access=access),
                    f"--torchserve-management {url}",
                )
            )
    return servers


def management_url(option: str, url: str) -> str:
    """An http(s)://host:port URL of a server's API (no trailing slash); UsageError naming `option`."""
    parsed = urllib.parse.urlsplit(url)
    try:
        port = parsed.port
    except ValueError:
        port = -1
    if parsed.scheme not in ("http", "https") or not parsed.hostname or port == -1:
        raise UsageError(f"{option}: expected http://HOST:PORT or https://HOST:PORT; got {url!r}")
    return url.rstrip("/")


def cmd_tune(args: argparse.Namespace) -> int:
    """The tuning loop; a bad option, scenario or unusable server raises a UsageError (exit 2)."""
    scenario = load_scenario(args.scenario)
    space = search_space(args)
    journal = ServerJournal()
    servers = servers_from_args(args, scenario, journal)
    out = args.out.resolve() if args.out else default_out("tune")
    sweep = settings_from_args(args, out)
    settings = TuneSettings(
        scenario=args.scenario,
        out=out,
        sweep=replace(sweep, out=out, capacity=sweep.capacity or CapacitySearch(args.start_rate, args.precision), budget_s=None),
        space=space,
        plateau_pct=args.plateau,
        budget_s=sweep.budget_s,
    )
    tune = Tune(settings, servers)
    tune.restore_leftovers(journal)  # what a killed tune or run left changed on these servers
    tune.check_servers()  # UsageError: a server that cannot be read (its URL, its model)
    settings.sweep = with_gpu(settings.sweep, args)
    return tune.run()
