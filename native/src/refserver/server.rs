//! A running reference server: its own tokio runtime (`threads` workers), the gRPC and HTTP
//! listeners bound before it returns (so a taken port is an error at once), stopped by `stop`.

use std::net::{SocketAddr, TcpListener as StdListener, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::sync::watch;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, Server, ServerTlsConfig};

use super::canned::Canned;
use super::config::Config;
use super::grpc::InferenceService;
use super::hold::HoldTimer;
use super::shared::Shared;
use super::truth::{Truth, HOLD_SPIN_NS};

/// Why a server could not start.
#[derive(Debug)]
pub enum StartError {
    /// A problem of the configuration's values (key path and message).
    Config(String),
    /// A port could not be bound, a thread not started, a file not read.
    Io(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Config(message) | StartError::Io(message) => write!(f, "{message}"),
        }
    }
}

impl std::error::Error for StartError {}

pub struct RunningServer {
    runtime: Option<Runtime>,
    stop: watch::Sender<bool>,
    pub grpc_address: SocketAddr,
    pub http_address: SocketAddr,
    pub shared: Arc<Shared>,
}

fn bind(host: &str, port: u16, key: &str) -> Result<StdListener, StartError> {
    let address = (host, port)
        .to_socket_addrs()
        .map_err(|error| StartError::Config(format!("host: cannot resolve {host:?}: {error}")))?
        .next()
        .ok_or_else(|| StartError::Config(format!("host: {host:?} has no address")))?;
    let listener = StdListener::bind(address)
        .map_err(|error| StartError::Io(format!("{key}: cannot listen on {address}: {error}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|error| StartError::Io(format!("{key}: {error}")))?;
    Ok(listener)
}

fn read_pem(path: &str, key: &str) -> Result<Vec<u8>, StartError> {
    std::fs::read(path)
        .map_err(|error| StartError::Config(format!("{key}: cannot read {path:?}: {error}")))
}

fn http_tls(cert_pem: &[u8], key_pem: &[u8]) -> Result<tokio_rustls::TlsAcceptor, StartError> {
    let certificates = rustls_pemfile::certs(&mut &cert_pem[..])
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| {
            StartError::Config(format!(
                "tls.cert_file: not a PEM certificate chain: {error}"
            ))
        })?;
    if certificates.is_empty() {
        return Err(StartError::Config(
            "tls.cert_file: no certificate in the file".into(),
        ));
    }
    let key = rustls_pemfile::private_key(&mut &key_pem[..])
        .map_err(|error| {
            StartError::Config(format!("tls.key_file: not a PEM private key: {error}"))
        })?
        .ok_or_else(|| StartError::Config("tls.key_file: no private key in the file".into()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| StartError::Config(format!("tls: {error}")))?
        .with_no_client_auth()
        .with_single_cert(certificates, key)
        .map_err(|error| {
            StartError::Config(format!(
                "tls: the certificate and key do not go together: {error}"
            ))
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

impl RunningServer {
    /// Start serving a validated configuration.
    pub fn start(config: Config) -> Result<RunningServer, StartError> {
        config
            .validate()
            .map_err(|error| StartError::Config(error.to_string()))?;
        let tls_files = match &config.tls {
            Some(tls) => Some((
                read_pem(&tls.cert_file, "tls.cert_file")?,
                read_pem(&tls.key_file, "tls.key_file")?,
            )),
            None => None,
        };
        let grpc_listener = bind(&config.host, config.grpc_port, "grpc_port")?;
        let http_listener = bind(&config.host, config.http_port, "http_port")?;
        let grpc_address = grpc_listener
            .local_addr()
            .map_err(|e| StartError::Io(e.to_string()))?;
        let http_address = http_listener
            .local_addr()
            .map_err(|e| StartError::Io(e.to_string()))?;

        let mut grpc = Server::builder()
            .initial_stream_window_size(Some(4 << 20))
            .initial_connection_window_size(Some(16 << 20));
        let mut http_acceptor = None;
        if let Some((cert, key)) = &tls_files {
            grpc = grpc
                .tls_config(ServerTlsConfig::new().identity(Identity::from_pem(cert, key)))
                .map_err(|error| StartError::Config(format!("tls: {error}")))?;
            http_acceptor = Some(http_tls(cert, key)?);
        }

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.threads as usize)
            .thread_name("refserver")
            .enable_all()
            .build()
            .map_err(|error| {
                StartError::Io(format!("threads: cannot start the runtime: {error}"))
            })?;
        let timer = HoldTimer::start(HOLD_SPIN_NS)
            .map_err(|error| StartError::Io(format!("cannot start the timer thread: {error}")))?;
        let canned = Canned::new(&config);
        let shared = Arc::new(Shared {
            truth: Truth::new(config, timer),
            canned,
        });
        let (stop, stopped) = watch::channel(false);

        let entered = runtime.enter();
        let grpc_listener = tokio::net::TcpListener::from_std(grpc_listener)
            .map_err(|e| StartError::Io(e.to_string()))?;
        let http_listener = tokio::net::TcpListener::from_std(http_listener)
            .map_err(|e| StartError::Io(e.to_string()))?;
        let incoming = TcpIncoming::from(grpc_listener).with_nodelay(Some(true));
        let service = InferenceService::new(Arc::clone(&shared));
        let mut grpc_stopped = stopped.clone();
        runtime.spawn(async move {
            let signal = async move {
                let _ = grpc_stopped.changed().await;
            };
            if let Err(error) = grpc
                .serve_with_incoming_shutdown(service, incoming, signal)
                .await
            {
                eprintln!("inferload reference server: the gRPC server stopped: {error}");
            }
        });
        runtime.spawn(super::http::serve(
            http_listener,
            Arc::clone(&shared),
            http_acceptor,
            stopped,
        ));
        drop(entered);
        Ok(RunningServer {
            runtime: Some(runtime),
            stop,
            grpc_address,
            http_address,
            shared,
        })
    }

    /// Stop listening, give answers in flight a moment, end the threads.
    pub fn stop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_millis(500));
        }
    }

    /// The configuration and the bound ports as one JSON line (what the binary prints when ready).
    pub fn ready_line(&self) -> String {
        serde_json::json!({
            "grpc_port": self.grpc_address.port(),
            "http_port": self.http_address.port(),
            "host": self.shared.truth.config.host,
            "pid": std::process::id(),
        })
        .to_string()
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.stop();
    }
}
