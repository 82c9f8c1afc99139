//! `inferload-refserver`: the reference server as a program.
//!
//! ```text
//! inferload-refserver [--config FILE.json] [--json TEXT] [--host H] [--grpc-port P] [--http-port P]
//!                     [--threads N] [--model NAME] [--delay-ms MS] [--concurrency N] [--seed N]
//! ```
//! The flags set the configuration's keys of the same names (after the file's and `--json`'s);
//! `--delay-ms MS` is `delay: {law: fixed, ms: MS}`. When ready it prints one JSON line
//! (`grpc_port`, `http_port`, `host`, `pid`) and serves until SIGTERM or SIGINT. Exit 2: a usage or
//! configuration error (one line naming the key); 1: the server could not start.

use std::process::ExitCode;

use inferload_native::refserver::config::Config;
use inferload_native::refserver::server::{RunningServer, StartError};
use serde_json::{json, Map, Value};

const USAGE: &str =
    "usage: inferload-refserver [--config FILE.json] [--json TEXT] [--host H] [--grpc-port P] \
[--http-port P] [--threads N] [--model NAME] [--delay-ms MS] [--concurrency N] [--seed N]";

fn usage_error(message: &str) -> ExitCode {
    eprintln!("inferload-refserver: {message}\n{USAGE}");
    ExitCode::from(2)
}

fn number(flag: &str, text: &str) -> Result<Value, String> {
    if let Ok(integer) = text.parse::<u64>() {
        return Ok(json!(integer));
    }
    match text.parse::<f64>() {
        Ok(float) if float.is_finite() => Ok(json!(float)),
        _ => Err(format!("{flag}: expected a number; got {text:?}")),
    }
}

fn merge(into: &mut Map<String, Value>, from: Value, source: &str) -> Result<(), String> {
    match from {
        Value::Object(object) => {
            into.extend(object);
            Ok(())
        }
        _ => Err(format!(
            "{source}: expected a JSON object of configuration keys"
        )),
    }
}

/// The configuration the arguments make (file, then --json, then the flags).
fn config_from(args: &[String]) -> Result<Config, String> {
    let mut keys = Map::new();
    let mut source = "the flags".to_string();
    let mut index = 0;
    while index < args.len() {
        let flag = args[index].as_str();
        if flag == "--help" || flag == "-h" {
            return Err(String::new());
        }
        let Some(value) = args.get(index + 1) else {
            return Err(format!("{flag}: expected a value after it"));
        };
        match flag {
            "--config" => {
                let text = std::fs::read_to_string(value)
                    .map_err(|error| format!("--config: cannot read {value:?}: {error}"))?;
                let parsed: Value = serde_json::from_str(&text)
                    .map_err(|error| format!("{value}: not JSON: {error}"))?;
                merge(&mut keys, parsed, value)?;
                source = value.clone();
            }
            "--json" => {
                let parsed: Value = serde_json::from_str(value)
                    .map_err(|error| format!("--json: not JSON: {error}"))?;
                merge(&mut keys, parsed, "--json")?;
            }
            "--host" => {
                keys.insert("host".into(), json!(value));
            }
            "--model" => {
                keys.insert("model".into(), json!(value));
            }
            "--grpc-port" | "--http-port" | "--threads" | "--concurrency" | "--seed" => {
                let key = flag.trim_start_matches("--").replace('-', "_");
                keys.insert(key, number(flag, value)?);
            }
            "--delay-ms" => {
                keys.insert(
                    "delay".into(),
                    json!({"law": "fixed", "ms": number(flag, value)?}),
                );
            }
            _ => return Err(format!("{flag}: unknown option")),
        }
        index += 2;
    }
    Config::from_json(&Value::Object(keys).to_string())
        .map_err(|error| format!("{source}: {error}"))
}

fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: a sigset_t is plain data; sigemptyset/sigaddset initialise it; pthread_sigmask
    // blocks the two signals in this thread, and every thread started after inherits the mask
    unsafe {
        let mut signals: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut signals);
        libc::sigaddset(&mut signals, libc::SIGTERM);
        libc::sigaddset(&mut signals, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut());
        signals
    }
}

fn wait_for(signals: &libc::sigset_t) {
    let mut received: libc::c_int = 0;
    // SAFETY: sigwait reads the set and writes the signal number it took
    unsafe {
        libc::sigwait(signals, &mut received);
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = match config_from(&args) {
        Ok(config) => config,
        Err(message) if message.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => return usage_error(&message),
    };
    let signals = block_stop_signals();
    let mut server = match RunningServer::start(config) {
        Ok(server) => server,
        Err(StartError::Config(message)) => return usage_error(&message),
        Err(StartError::Io(message)) => {
            eprintln!("inferload-refserver: {message}");
            return ExitCode::from(1);
        }
    };
    println!("{}", server.ready_line());
    wait_for(&signals);
    server.stop();
    ExitCode::SUCCESS
}
