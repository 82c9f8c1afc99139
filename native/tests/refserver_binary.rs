//! The `inferload-refserver` program as a user runs it: ready line, serving, SIGTERM, exit codes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

const PROGRAM: &str = env!("CARGO_BIN_EXE_inferload-refserver");

fn http_get(port: u16, path: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("the HTTP port accepts");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn it_prints_its_ports_when_ready_serves_and_stops_on_sigterm() {
    let mut child = Command::new(PROGRAM)
        .args([
            "--json",
            r#"{"model": "m"}"#,
            "--delay-ms",
            "1",
            "--concurrency",
            "2",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let ready: serde_json::Value = serde_json::from_str(&line).expect("one JSON line when ready");
    let http_port = ready["http_port"].as_u64().unwrap() as u16;
    assert!(ready["grpc_port"].as_u64().unwrap() > 0);
    assert_eq!(ready["pid"].as_u64().unwrap(), u64::from(child.id()));

    assert!(http_get(http_port, "/v2/health/ready").starts_with("HTTP/1.1 200"));
    let stats = http_get(http_port, "/reference/stats");
    assert!(
        stats.contains(r#""concurrency":2"#) && stats.contains(r#""model":"m""#),
        "{stats}"
    );
    assert!(stats.contains(r#""law":"fixed","ms":1.0"#), "{stats}");

    // SAFETY: kill sends a signal to the child this test started
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn a_bad_configuration_exits_2_naming_the_key() {
    let done = Command::new(PROGRAM)
        .args(["--json", r#"{"delay": {"law": "fixed", "ms": -3}}"#])
        .output()
        .unwrap();
    assert_eq!(done.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(
        stderr.contains("delay.ms: expected milliseconds"),
        "{stderr}"
    );

    let done = Command::new(PROGRAM)
        .args(["--threads", "many"])
        .output()
        .unwrap();
    assert_eq!(done.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&done.stderr).contains("--threads: expected a number"));
}

#[test]
fn a_port_taken_exits_1() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let done = Command::new(PROGRAM)
        .args(["--http-port", &port])
        .output()
        .unwrap();
    assert_eq!(done.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&done.stderr).contains("http_port: cannot listen on"));
}
