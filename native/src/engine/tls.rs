//! A target's TLS (rustls, ring): the CA that verifies the server (PEM given by Python, else the
//! system's roots, else Mozilla's), a client certificate for mutual TLS, the name the server's
//! certificate must carry (and the SNI name), or no verification at all (`insecure_skip_verify`,
//! HTTPS targets only: the handshake's signatures are still checked, the chain is not).
//!
//! Errors: a handshake refused because of the server's certificate is an
//! `SSLCertVerificationError`, any other TLS failure an `SSLError`: the names of the Python
//! exceptions the Python path puts in its message (`connection error to ADDR: SSLError`).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// What Python hands over for a target's `tls` (the PEM files' contents, read by Python).
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    pub ca_pem: Option<Vec<u8>>,
    pub cert_pem: Option<Vec<u8>>,
    pub key_pem: Option<Vec<u8>>,
    pub server_name: Option<String>,
    pub insecure_skip_verify: bool,
}

/// A target's TLS, made once: the client configuration and the server's name.
#[derive(Clone)]
pub struct TlsSetup {
    pub config: Arc<ClientConfig>,
    pub server_name: ServerName<'static>,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(ca_pem: Option<&[u8]>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match ca_pem {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| format!("ca_pem: not a PEM certificate ({e})"))?;
                store
                    .add(cert)
                    .map_err(|e| format!("ca_pem: a certificate rustls cannot use ({e})"))?;
            }
            if store.is_empty() {
                return Err("ca_pem: no '-----BEGIN CERTIFICATE-----' block".into());
            }
        }
        None => {
            let (added, _) =
                store.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            if added == 0 {
                store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            }
        }
    }
    Ok(store)
}

/// The TLS of a target: `alpn` is the protocol the connection speaks (`h2` for gRPC, `http/1.1`).
/// `host` is the address's host, the default server name. Err: which PEM is unusable, and why.
pub fn tls_setup(options: &TlsOptions, host: &str, alpn: &[u8]) -> Result<TlsSetup, String> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?;
    let builder = if options.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoChainCheck {
                provider: provider(),
            }))
    } else {
        builder.with_root_certificates(roots(options.ca_pem.as_deref())?)
    };
    let mut config = match (&options.cert_pem, &options.key_pem) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("cert_pem: not a PEM certificate ({e})"))?;
            if chain.is_empty() {
                return Err("cert_pem: no '-----BEGIN CERTIFICATE-----' block".into());
            }
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| format!("key_pem: not a PEM private key ({e})"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("cert_pem/key_pem: {e}"))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err("cert_pem and key_pem: give both or neither".into()),
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    let name = options
        .server_name
        .as_deref()
        .unwrap_or(host)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let server_name = ServerName::try_from(name.clone())
        .map_err(|_| format!("server_name: {name:?} is not a DNS name or an IP address"))?;
    Ok(TlsSetup {
        config: Arc::new(config),
        server_name,
    })
}

/// The Python exception a TLS failure would be there: `SSLCertVerificationError` when the server's
/// certificate was refused, else `SSLError`.
pub fn tls_error_kind(error: &std::io::Error) -> Option<&'static str> {
    let inner = error.get_ref()?.downcast_ref::<rustls::Error>()?;
    Some(match inner {
        rustls::Error::InvalidCertificate(_) => "SSLCertVerificationError",
        _ => "SSLError",
    })
}

/// `insecure_skip_verify`: any certificate chain, but the handshake's signatures are verified.
#[derive(Debug)]
struct NoChainCheck {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for NoChainCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_pems_are_named() {
        let bad = TlsOptions {
            ca_pem: Some(b"not a pem".to_vec()),
            ..Default::default()
        };
        assert_eq!(
            tls_setup(&bad, "localhost", b"h2").err().unwrap(),
            "ca_pem: no '-----BEGIN CERTIFICATE-----' block"
        );
        let half = TlsOptions {
            cert_pem: Some(b"x".to_vec()),
            ..Default::default()
        };
        assert_eq!(
            tls_setup(&half, "localhost", b"h2").err().unwrap(),
            "cert_pem and key_pem: give both or neither"
        );
    }

    #[test]
    fn the_system_roots_or_mozillas_verify_by_default_and_names_may_be_ips() {
        let setup = tls_setup(&TlsOptions::default(), "127.0.0.1", b"http/1.1").unwrap();
        assert_eq!(setup.config.alpn_protocols, vec![b"http/1.1".to_vec()]);
        assert!(matches!(setup.server_name, ServerName::IpAddress(_)));
        let named = TlsOptions {
            server_name: Some("triton.example".into()),
            insecure_skip_verify: true,
            ..Default::default()
        };
        assert!(matches!(
            tls_setup(&named, "127.0.0.1", b"h2").unwrap().server_name,
            ServerName::DnsName(_)
        ));
    }
}
