"""The local servers' checks that come before anything starts: ports, Java, TorchServe's config."""

from __future__ import annotations

import json
import socket
import stat
from pathlib import Path

import pytest

from inferload.errors import JavaMissingError, PortInUseError, ServerError
from inferload.launch.distributed import FREE_PORTS_FROM, free_port
from inferload.local.servers.manager import LocalServers
from inferload.local.servers.ports import ServerPorts, check_free
from inferload.local.servers.procs import ProcessRecord, processes_mentioning
from inferload.local.servers.torchserve_local import TorchServeModelConfig, check_java, config_properties, start_torchserve


def test_a_taken_port_is_named_with_the_service_that_wanted_it(tmp_path):
    ports = ServerPorts.free()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", ports.ts_metrics))
        holder.listen()
        with pytest.raises(PortInUseError, match=rf"port {ports.ts_metrics} .*TorchServe metrics"):
            check_free(ports)
        with pytest.raises(PortInUseError, match=rf"port {ports.ts_metrics} .*TorchServe metrics"):
            LocalServers(tmp_path, ports, ("tiny",)).up(which=("torchserve",))
    assert processes_mentioning(str(tmp_path)) == []


def test_free_ports_are_distinct_bindable_and_below_the_range_the_kernel_gives_outgoing_connections():
    """A port drawn from the ephemeral range could become some client's source port before the server binds it."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = list(ServerPorts.free().to_dict().values())
    assert len(set(ports)) == len(ports)
    assert all(FREE_PORTS_FROM <= port < low for port in ports), ports
    for port in ports:
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", ports[0]))
        holder.listen()
        assert all(free_port(taken=ports[1:]) not in ports for _ in range(50))  # neither taken nor bound


def test_the_same_port_twice_is_refused():
    with pytest.raises(PortInUseError, match="configured twice"):
        check_free(ServerPorts(triton_http=18123, triton_grpc=18123))


def test_java_missing_is_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(JavaMissingError, match="no `java` was found on PATH"):
        check_java({"PATH": str(tmp_path)})
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaMissingError, match="JDK"):
        start_torchserve(tmp_path / "state", ServerPorts.free(), ("tiny",))
    assert processes_mentioning(str(tmp_path)) == []


def test_java_older_than_11_is_refused(tmp_path):
    fake = tmp_path / "java"
    fake.write_text("#!/bin/sh\necho 'java version \"1.8.0_392\"' >&2\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(JavaMissingError, match="Java 11 or newer; the `java` on PATH is Java 8"):
        check_java({"PATH": str(tmp_path)})


def test_torchserve_config_batches_and_keeps_everything_local(tmp_path):
    text = config_properties(
        ServerPorts(),
        ("tiny", "cnn"),
        tmp_path / "store",
        tmp_path / "tmp",
        TorchServeModelConfig(batch_size=8, max_batch_delay_ms=5),
    )
    assert "inference_address=http://127.0.0.1:8080" in text
    assert "metrics_mode=prometheus" in text and "model_metrics_auto_detect=true" in text
    assert "disable_token_authorization=true" in text
    assert f"-Djava.io.tmpdir={tmp_path / 'tmp'}" in text
    models = json.loads(text.split("\nmodels=", 1)[1].splitlines()[0])
    assert models["cnn"]["1.0"]["batchSize"] == 8 and models["cnn"]["1.0"]["maxBatchDelay"] == 5


def test_llama_cpp_is_the_openai_server_s_launcher_and_serves_the_built_in_llm_whatever_is_asked():
    from inferload.cli import UsageError, parse_servers
    from inferload.local.models.llm import LLM_NAME
    from inferload.local.servers.manager import KNOWN_SERVERS, LAUNCHERS, local_server

    assert LAUNCHERS["llamacpp"] == "openai" and "openai" not in KNOWN_SERVERS
    launcher = local_server("llamacpp")
    assert launcher.models(("tiny", "cnn")) == (LLM_NAME,)
    assert local_server("triton").models(("tiny",)) == ("tiny",)
    ports = ServerPorts(llamacpp_http=18085)
    assert ports.for_server("llamacpp") == {"llamacpp_http": 18085}
    assert launcher.urls(ports, "127.0.0.1") == {
        "http": "http://127.0.0.1:18085",
        "metrics_url": "http://127.0.0.1:18085/metrics",
    }
    assert parse_servers("triton,llamacpp", "--servers") == ("triton", "llamacpp")
    with pytest.raises(UsageError, match="unknown server"):
        parse_servers("openai", "--servers")


def test_a_llama_cpp_server_that_does_not_answer_is_not_ready(tmp_path):
    from inferload.local.servers.llamacpp_local import chat_answers
    from inferload.local.servers.manager import NotReady

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(NotReady, match=rf"127.0.0.1:{port}/v1/chat/completions"):
        chat_answers(port, "random-llama", timeout_s=1.0)


def test_the_state_the_servers_write_reads_back(tmp_path: Path) -> None:
    servers = LocalServers(tmp_path / "state")
    record = ProcessRecord(12345, 678, 1.5, str(tmp_path / "triton.log"), ("tritonserver",))
    state = servers._state({"triton": servers._entry("triton", record, {"cnn": 2.25}, ready=True)})
    servers._write_state(state)
    assert servers.read_state() == json.loads(json.dumps(state))


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{bad", "is not valid JSON (Invalid JSON: key must be a string at line 1 column 2)"),
        ("[]", "is not the state inferload writes (the file: Input should be an object)"),
        ('{"servers": {"triton": {"pid": 1}}}', "is not the state inferload writes (servers.triton.process: Field required)"),
        (
            '{"ports": {"triton_grpc": "x"}}',
            "is not the state inferload writes (ports.triton_grpc: Input should be a valid integer",
        ),
    ],
    ids=["not JSON", "not an object", "an entry without its process", "a port not a number"],
)
def test_a_state_file_not_of_the_servers_shape_is_one_error_naming_the_key(tmp_path: Path, text: str, said: str) -> None:
    servers = LocalServers(tmp_path / "state")
    servers.state_dir.mkdir()
    servers.state_path.write_text(text)
    for read in (servers.read_state, servers.status, servers.down):  # status and down read it first
        with pytest.raises(ServerError) as caught:
            read()
        assert str(caught.value).startswith(f"{servers.state_path} {said}"), caught.value
        assert str(caught.value).endswith("; delete it and retry")
