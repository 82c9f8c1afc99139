"""The ``tls`` key per target and ``https://`` addresses: validation, and the TLS objects users build."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from inferload.errors import ScenarioError
from inferload.scenario.loader import load_scenario, scenario_from_dict, scenario_to_dict
from inferload.scenario.tls import TlsSettings, describe_tls, requests_tls, tls_hint
from inferload.users.tls import TlsFileError, grpc_credentials, http_tls_options, ssl_context
from tests.support.tls_certs import Certificates, make_certificates

CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIE-not-shown\n-----END PRIVATE KEY-----\n"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


def target(kind: str = "triton-grpc", address: str = "127.0.0.1:8001", **keys: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "t",
        "kind": kind,
        "address": address,
        "model": "m",
        "inputs": [{"name": "INPUT__0", "shape": [4], "dtype": "FP32"}],
    }
    data.update(keys)
    return data


def scenario(*targets: dict[str, Any]) -> dict[str, Any]:
    return {"name": "unit", "duration": "10s", "targets": list(targets), "shape": {"kind": "steady", "users": 1}}


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    (tmp_path / "ca.pem").write_text(CERT)
    (tmp_path / "client.pem").write_text(CERT)
    (tmp_path / "client.key").write_text(KEY)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def problems(tmp_path: Path, *targets: dict[str, Any]) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(write(tmp_path, scenario(*targets)))
    return [str(p) for p in caught.value.problems]


def test_paths_are_relative_to_the_scenario_file_and_made_absolute(tmp_path: Path) -> None:
    tls = {"ca_file": "ca.pem", "cert_file": "client.pem", "key_file": "client.key", "server_name": "triton.internal"}
    loaded = load_scenario(write(tmp_path, scenario(target(tls=tls)))).targets[0].tls

    assert loaded == TlsSettings(
        ca_file=str(tmp_path / "ca.pem"),
        cert_file=str(tmp_path / "client.pem"),
        key_file=str(tmp_path / "client.key"),
        server_name="triton.internal",
    )
    again = scenario_from_dict(scenario_to_dict(load_scenario(tmp_path / "scenario.yaml")))
    assert again.targets[0].tls == loaded


@pytest.mark.parametrize(
    ("kind", "written", "stored"),
    [
        ("triton-http", "https://127.0.0.1:8443", "127.0.0.1:8443"),
        ("torchserve-rest", "https://127.0.0.1:8443/", "https://127.0.0.1:8443"),
        ("torchserve-rest", "HTTPS://ts.example.com:443", "https://ts.example.com:443"),
    ],
)
def test_an_https_address_turns_tls_on_with_the_system_cas(kind: str, written: str, stored: str) -> None:
    loaded = scenario_from_dict(scenario(target(kind, written))).targets[0]

    assert loaded.address == stored and loaded.tls == TlsSettings()


def test_tls_true_is_tls_with_the_system_cas_and_a_torchserve_address_without_a_scheme_becomes_https() -> None:
    grpc_target, ts_target = scenario_from_dict(
        scenario(target(tls=True), {**target("torchserve-rest", "127.0.0.1:8443", tls=True), "name": "ts"})
    ).targets

    assert grpc_target.tls == TlsSettings() and grpc_target.address == "127.0.0.1:8001"
    assert ts_target.address == "https://127.0.0.1:8443"
    assert scenario_from_dict(scenario(target(tls=False))).targets[0].tls is None


@pytest.mark.parametrize(
    ("keys", "where", "message"),
    [
        ({"tls": {"ca_file": "missing.pem"}}, "targets[0].tls.ca_file", "missing.pem does not exist"),
        ({"tls": {"ca_file": "."}}, "targets[0].tls.ca_file", "is not a regular file"),
        ({"tls": {"ca_file": "client.key"}}, "targets[0].tls.ca_file", "holds no PEM certificate"),
        (
            {"tls": {"cert_file": "client.pem", "key_file": "ca.pem"}},
            "targets[0].tls.key_file",
            "holds no PEM private key",
        ),
        ({"tls": {"key_file": "client.key"}}, "targets[0].tls.key_file", "a key_file needs its cert_file"),
        ({"tls": {"cert_file": "client.pem"}}, "targets[0].tls.cert_file", "a cert_file needs its key_file"),
        ({"tls": {"ca_file": ""}}, "targets[0].tls.ca_file", "expected the path of a PEM file; got an empty string"),
        ({"tls": {"insecure_skip_verify": True}}, "targets[0].tls.insecure_skip_verify", "gRPC cannot skip verifying"),
        ({"tls": {"cafile": "ca.pem"}}, "targets[0].tls.cafile", "unknown key 'cafile' (did you mean 'ca_file'?)"),
        ({"tls": {"server_name": 5}}, "targets[0].tls.server_name", "expected a non-empty string; got 5"),
        ({"tls": "yes"}, "targets[0].tls", "expected a mapping"),
    ],
)
def test_bad_tls_values_are_reported_at_their_key(tmp_path: Path, keys: dict[str, Any], where: str, message: str) -> None:
    found = problems(tmp_path, target(**keys))

    assert len(found) == 1 and f"scenario.yaml: {where}: " in found[0] and message in found[0], found


def test_an_encrypted_key_and_a_ca_with_insecure_skip_verify_are_refused(tmp_path: Path) -> None:
    (tmp_path / "locked.key").write_text("-----BEGIN ENCRYPTED PRIVATE KEY-----\nx\n-----END ENCRYPTED PRIVATE KEY-----\n")
    locked = problems(tmp_path, target(tls={"cert_file": "client.pem", "key_file": "locked.key"}))
    skip = problems(tmp_path, target("triton-http", "127.0.0.1:8000", tls={"insecure_skip_verify": True, "ca_file": "ca.pem"}))

    assert len(locked) == 1 and "targets[0].tls.key_file: " in locked[0] and "encrypted private key" in locked[0]
    assert "MIIE" not in locked[0]
    assert len(skip) == 1 and "targets[0].tls.ca_file: is not used with insecure_skip_verify" in skip[0], skip


@pytest.mark.parametrize("kind", ["triton-http", "torchserve-rest"])
def test_tls_on_an_http_address_or_https_with_tls_false_is_refused(tmp_path: Path, kind: str) -> None:
    on_http = problems(tmp_path, target(kind, "http://127.0.0.1:8000", tls={"ca_file": "ca.pem"}))
    https_off = problems(tmp_path, target(kind, "https://127.0.0.1:8000", tls=False))

    assert len(on_http) == 1 and "targets[0].address: this target has tls, so its address takes https://" in on_http[0]
    assert len(https_off) == 1 and "targets[0].address: an https:// address needs TLS" in https_off[0]


def test_a_grpc_address_takes_no_scheme_even_with_tls(tmp_path: Path) -> None:
    found = problems(tmp_path, target(address="https://127.0.0.1:8001", tls={"ca_file": "ca.pem"}))

    assert len(found) == 1 and "targets[0].address: expected host:port without a scheme" in found[0], found


def test_requests_options_and_descriptions_name_paths_never_contents(tmp_path: Path) -> None:
    mutual = TlsSettings(ca_file="/c/ca.pem", cert_file="/c/client.pem", key_file="/c/client.key", server_name="svc")

    assert requests_tls(None) == {}
    assert requests_tls(mutual) == {"verify": "/c/ca.pem", "cert": ("/c/client.pem", "/c/client.key")}
    assert requests_tls(TlsSettings(insecure_skip_verify=True)) == {"verify": False}
    assert describe_tls(mutual) == "TLS (CA /c/ca.pem, client certificate /c/client.pem, server name 'svc')"
    assert describe_tls(TlsSettings()) == "TLS (system CAs)"


def test_connection_errors_that_look_like_tls_get_a_hint() -> None:
    with_ca = TlsSettings(ca_file="/c/ca.pem")

    assert "the TLS handshake failed with TLS (CA /c/ca.pem)" in tls_hint(
        with_ca, "Ssl handshake failed: CERTIFICATE_VERIFY_FAILED"
    )
    assert "does it want a client certificate" in tls_hint(with_ca, "ipv4:127.0.0.1:1: Socket closed")
    assert "does the server expect TLS" in tls_hint(None, "ipv4:127.0.0.1:1: Socket closed")
    assert tls_hint(None, "connection refused") == "" and tls_hint(with_ca, "connection refused") == ""


def test_users_build_contexts_and_credentials_from_real_certificates(certs: Certificates) -> None:
    mutual = TlsSettings(
        ca_file=str(certs.ca), cert_file=str(certs.client_cert), key_file=str(certs.client_key), server_name="localhost"
    )

    context = ssl_context(mutual, Path("/"), "t")
    options = http_tls_options(mutual, Path("/"), "t")
    credentials, channel_options = grpc_credentials(mutual, Path("/"), "t")

    assert context.check_hostname and context.get_ca_certs()[0]["subject"] == ((("commonName", "test-ca"),),)
    assert options["ssl_context_factory"](cafile="ignored") is options["ssl_context_factory"]()
    assert options["ssl_options"] == {"server_hostname": "localhost"} and options["insecure"] is False
    assert isinstance(credentials, grpc.ChannelCredentials)
    assert channel_options == [("grpc.ssl_target_name_override", "localhost")]
    unverified = ssl_context(TlsSettings(insecure_skip_verify=True), Path("/"), "t")
    assert not unverified.check_hostname and unverified.verify_mode == 0


def test_a_tls_file_gone_when_a_user_starts_names_the_target_and_the_path(tmp_path: Path, certs: Certificates) -> None:
    gone = TlsSettings(ca_file=str(tmp_path / "gone.pem"))
    wrong = TlsSettings(ca_file=str(certs.ca), cert_file=str(certs.client_cert), key_file=str(certs.ca))

    with pytest.raises(TlsFileError, match=r"target 'grpc': cannot read tls ca_file .*gone\.pem"):
        grpc_credentials(gone, tmp_path, "grpc")
    with pytest.raises(TlsFileError, match=r"target 'ts': cannot use the tls files") as caught:
        ssl_context(wrong, tmp_path, "ts")
    assert "PRIVATE" not in str(caught.value)
