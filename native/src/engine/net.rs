//! Connections: TCP (no Nagle), optionally TLS, under an I/O wrapper that stamps the wire times.
//!
//! Where the times come from: [`StampedIo`] sits directly on the TCP socket (under TLS), so a
//! request's send time is the start of the first socket write after the call armed the stamps
//! (the request's headers and body leave in that write, or begin to; read before the write, so a
//! thread preempted between the write and the clock cannot make an answer look older than its
//! request: a preemption only ever lengthens a latency, as it would any client's), and its receive time is the
//! return of the last socket read that brought bytes before the answer was complete. Both are
//! CLOCK_MONOTONIC (`time.monotonic_ns()`).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::clock::{monotonic_ns, receive_shift_ns};
use super::tls::TlsSetup;

/// The wire times of the call in flight on one connection.
#[derive(Debug, Default)]
pub struct Stamps {
    armed: AtomicBool,
    sent_ns: AtomicU64,
    read_ns: AtomicU64,
    read_bytes: AtomicU64,
}

impl Stamps {
    /// A call begins: the next write is its request.
    pub fn arm(&self) {
        self.sent_ns.store(0, Ordering::Relaxed);
        self.read_ns.store(0, Ordering::Relaxed);
        self.read_bytes.store(0, Ordering::Relaxed);
        self.armed.store(true, Ordering::Release);
    }

    /// When the call's request was written (None: nothing was written yet).
    pub fn sent_ns(&self) -> Option<u64> {
        Some(self.sent_ns.load(Ordering::Acquire)).filter(|ns| *ns != 0)
    }

    /// When the last bytes since the call began were read (None: none were).
    pub fn read_ns(&self) -> Option<u64> {
        Some(self.read_ns.load(Ordering::Acquire)).filter(|ns| *ns != 0)
    }

    /// How many bytes were read since the call began.
    pub fn read_bytes(&self) -> u64 {
        self.read_bytes.load(Ordering::Relaxed)
    }
}

/// A socket whose reads and writes are stamped into [`Stamps`].
pub struct StampedIo<T> {
    inner: T,
    stamps: Arc<Stamps>,
}

impl<T> StampedIo<T> {
    /// The instant a write begins, read only while a call is armed (0: not armed).
    fn write_begins(&self) -> u64 {
        if self.stamps.armed.load(Ordering::Acquire) {
            monotonic_ns()
        } else {
            0
        }
    }

    /// A write that began at `began_ns` put `n` bytes out: the armed call's send time.
    fn wrote(&self, n: usize, began_ns: u64) {
        if n > 0 && began_ns != 0 && self.stamps.armed.swap(false, Ordering::AcqRel) {
            self.stamps.sent_ns.store(began_ns, Ordering::Release);
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for StampedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        let got = buf.filled().len() - before;
        if got > 0 {
            self.stamps
                .read_ns
                .store(monotonic_ns() + receive_shift_ns(), Ordering::Release);
            self.stamps
                .read_bytes
                .fetch_add(got as u64, Ordering::Relaxed);
        }
        result
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StampedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let began_ns = self.write_begins();
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = result {
            self.wrote(n, began_ns);
        }
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let began_ns = self.write_begins();
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = result {
            self.wrote(n, began_ns);
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A connected stream: plain or TLS, stamped underneath.
pub enum Stream {
    Plain(StampedIo<TcpStream>),
    Tls(Box<tokio_rustls::client::TlsStream<StampedIo<TcpStream>>>),
}

macro_rules! delegate {
    ($self:ident, $stream:ident => $call:expr) => {
        match $self.get_mut() {
            Stream::Plain($stream) => {
                let $stream = Pin::new($stream);
                $call
            }
            Stream::Tls($stream) => {
                let $stream = Pin::new($stream.as_mut());
                $call
            }
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        delegate!(self, s => s.poll_read(cx, buf))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => s.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => s.poll_shutdown(cx))
    }
}

/// Why a connection could not be made.
#[derive(Debug)]
pub enum ConnectError {
    /// the host name did not resolve (Python: `socket.gaierror`)
    Resolve(io::Error),
    /// the TCP connection failed (every address tried; the last error)
    Tcp(io::Error),
    /// the TLS handshake failed
    Tls(io::Error),
}

/// Where a target's connections go.
#[derive(Clone)]
pub struct Peer {
    pub host: String,
    pub port: u16,
    pub tls: Option<TlsSetup>,
}

impl Peer {
    /// A new connection (every resolved address in turn, as `socket.create_connection` does).
    pub async fn connect(&self, stamps: &Arc<Stamps>) -> Result<Stream, ConnectError> {
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        let addresses: Vec<SocketAddr> = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, self.port)],
            Err(_) => tokio::net::lookup_host((host, self.port))
                .await
                .map_err(ConnectError::Resolve)?
                .collect(),
        };
        let mut last = io::Error::new(io::ErrorKind::AddrNotAvailable, "no address");
        for address in addresses {
            match TcpStream::connect(address).await {
                Ok(tcp) => {
                    tcp.set_nodelay(true).map_err(ConnectError::Tcp)?;
                    let io = StampedIo {
                        inner: tcp,
                        stamps: stamps.clone(),
                    };
                    return match &self.tls {
                        None => Ok(Stream::Plain(io)),
                        Some(tls) => {
                            let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
                            let secure = connector
                                .connect(tls.server_name.clone(), io)
                                .await
                                .map_err(ConnectError::Tls)?;
                            Ok(Stream::Tls(Box::new(secure)))
                        }
                    };
                }
                Err(error) => last = error,
            }
        }
        Err(ConnectError::Tcp(last))
    }
}

/// The name of the Python exception (`OSError`'s subclass by errno) an I/O error would be.
pub fn os_error_name(error: &io::Error) -> &'static str {
    match error.raw_os_error() {
        Some(libc::EAGAIN | libc::EALREADY | libc::EINPROGRESS) => "BlockingIOError",
        Some(libc::EPIPE | libc::ESHUTDOWN) => "BrokenPipeError",
        Some(libc::ECONNABORTED) => "ConnectionAbortedError",
        Some(libc::ECONNREFUSED) => "ConnectionRefusedError",
        Some(libc::ECONNRESET) => "ConnectionResetError",
        Some(libc::EACCES | libc::EPERM) => "PermissionError",
        Some(libc::ETIMEDOUT) => "TimeoutError",
        Some(_) => "OSError",
        None => match error.kind() {
            io::ErrorKind::ConnectionRefused => "ConnectionRefusedError",
            io::ErrorKind::ConnectionReset => "ConnectionResetError",
            io::ErrorKind::ConnectionAborted => "ConnectionAbortedError",
            io::ErrorKind::BrokenPipe => "BrokenPipeError",
            io::ErrorKind::TimedOut => "TimeoutError",
            io::ErrorKind::PermissionDenied => "PermissionError",
            _ => "OSError",
        },
    }
}

/// Whether the Python path takes an I/O error for a refused connection (`failures._REFUSED_ERRNOS`).
pub fn is_refused_errno(error: &io::Error) -> bool {
    match error.raw_os_error() {
        Some(code) => [
            libc::ECONNREFUSED,
            libc::ECONNRESET,
            libc::EHOSTUNREACH,
            libc::ENETUNREACH,
        ]
        .contains(&code),
        None => matches!(
            error.kind(),
            io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionReset
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket whose every write takes 20 ms (a thread preempted inside or around the write).
    struct SlowWriter;

    impl AsyncWrite for SlowWriter {
        fn poll_write(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            std::thread::sleep(std::time::Duration::from_millis(20));
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn write(io: &mut StampedIo<SlowWriter>, bytes: &[u8]) {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let written = Pin::new(io).poll_write(&mut cx, bytes);
        assert!(matches!(written, Poll::Ready(Ok(n)) if n == bytes.len()));
    }

    #[test]
    fn a_request_is_stamped_when_its_write_begins_and_only_the_armed_write_counts() {
        let stamps = Arc::new(Stamps::default());
        let mut io = StampedIo {
            inner: SlowWriter,
            stamps: stamps.clone(),
        };
        write(&mut io, b"before the call");
        assert_eq!(stamps.sent_ns(), None); // not armed: no call's request

        stamps.arm();
        let before = monotonic_ns();
        write(&mut io, b"the request");
        let after = monotonic_ns();
        let sent = stamps.sent_ns().expect("the armed write is the request");
        assert!(
            before <= sent && sent + 15_000_000 < after,
            "{before} {sent} {after}"
        );

        write(&mut io, b"its body, later");
        assert_eq!(stamps.sent_ns(), Some(sent)); // the first write after arming, kept
    }
}
