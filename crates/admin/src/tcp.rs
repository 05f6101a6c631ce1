//! The admin API on TCP, for an operator on another machine: the same routes, handlers and
//! bounds as the Unix socket ([`crate::server`]), but only over TLS (rustls, the certificates
//! of the caller's acceptor) and only for requests that carry `Authorization: Bearer TOKEN`
//! with the operator's [`Token`] (compared in constant time). There is no way to build an
//! [`AdminTcp`] without both: a listener that cannot authenticate does not start.
//!
//! A request without the token, or with another, is answered 401 before its body is read,
//! logged with the client's address, and its connection closed (each guess costs a TLS
//! handshake). A client that does not complete the TLS handshake within
//! [`HEADER_READ_TIMEOUT`] (a plaintext client, one that does not trust the certificate, one
//! that sends nothing) is logged and dropped. At most [`CONNECTIONS_MAX`] connections at once
//! (their own bound, not the Unix socket's); more are closed at once, before any handshake.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request as HttpRequest, Response};
use serde_json::json;
use tokio_rustls::TlsAcceptor;

use crate::server::{self, Arrays, CONNECTIONS_MAX, HEADER_READ_TIMEOUT};
use crate::token::Token;
use crate::Log;

/// The authentication scheme of the `Authorization` header.
pub const BEARER: &str = "Bearer";

/// A bound TCP admin listener with its TLS acceptor and token.
pub struct AdminTcp {
    listener: std::net::TcpListener,
    acceptor: TlsAcceptor,
    token: Arc<Token>,
}

impl AdminTcp {
    /// The admin listener on `listener` (already bound where the operator said), speaking TLS
    /// with `acceptor` and answering only requests that carry `token`.
    pub fn new(
        listener: std::net::TcpListener,
        acceptor: TlsAcceptor,
        token: Token,
    ) -> io::Result<AdminTcp> {
        listener.set_nonblocking(true)?;
        Ok(AdminTcp {
            listener,
            acceptor,
            token: Arc::new(token),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// Serves the admin API of `arrays` on `tcp` until `shutdown` completes, then closes the
/// connections still open and returns. Must run inside a tokio runtime.
pub async fn serve(
    tcp: &AdminTcp,
    arrays: Arc<Arrays>,
    log: Log,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(tcp.listener.try_clone()?)?;
    let accept = || async { listener.accept().await };
    let served = |(stream, peer): (tokio::net::TcpStream, SocketAddr)| {
        let acceptor = tcp.acceptor.clone();
        let (token, arrays, log) = (
            Arc::clone(&tcp.token),
            Arc::clone(&arrays),
            Arc::clone(&log),
        );
        async move {
            let tls = match tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(stream)).await
            {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    log(&format!(
                        "admin TCP connection from {peer} refused: TLS handshake failed: {e}"
                    ));
                    return;
                }
                Err(_) => {
                    log(&format!(
                        "admin TCP connection from {peer} refused: no TLS handshake within \
                         {HEADER_READ_TIMEOUT:?}"
                    ));
                    return;
                }
            };
            let guard = Guard {
                token,
                peer,
                log: Arc::clone(&log),
            };
            let service = move |req| guarded(req, Arc::clone(&arrays), guard.clone());
            server::serve_http(tls, service, &log).await;
        }
    };
    // Over the bound: closed at once (a plaintext 503 would mean nothing to a TLS client).
    let refuse = |_: (tokio::net::TcpStream, SocketAddr), _: String| async {};
    server::accept_bounded(
        accept,
        CONNECTIONS_MAX,
        "admin TCP",
        &log,
        shutdown,
        served,
        refuse,
    )
    .await;
    Ok(())
}

/// What checks a request's token, and where refusals are logged.
#[derive(Clone)]
struct Guard {
    token: Arc<Token>,
    peer: SocketAddr,
    log: Log,
}

/// Why a request's credentials were refused, if they were.
pub fn refusal(authorization: Option<&[u8]>, token: &Token) -> Option<&'static str> {
    let Some(value) = authorization else {
        return Some("no Authorization header");
    };
    let scheme = BEARER.len();
    let bearer = value.len() > scheme
        && value[..scheme].eq_ignore_ascii_case(BEARER.as_bytes())
        && value[scheme] == b' ';
    if !bearer {
        return Some("the Authorization header is not `Bearer TOKEN`");
    }
    let given = value[scheme + 1..].trim_ascii();
    (!token.matches(given)).then_some("a wrong token")
}

async fn guarded(
    req: HttpRequest<Incoming>,
    arrays: Arc<Arrays>,
    guard: Guard,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let authorization = req.headers().get(hyper::header::AUTHORIZATION);
    if let Some(why) = refusal(authorization.map(|v| v.as_bytes()), &guard.token) {
        (guard.log)(&format!(
            "admin TCP request {} {} from {} refused (401): {why}",
            req.method(),
            req.uri().path(),
            guard.peer
        ));
        let body = json!({ "error": format!("unauthorized: {why}; send `Authorization: Bearer TOKEN` with the token of --admin-token-file") });
        let mut response = server::http_response(401, "application/json", body.to_string());
        let headers = response.headers_mut();
        headers.insert(
            hyper::header::WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static("Bearer realm=\"raidkit\""),
        );
        headers.insert(
            hyper::header::CONNECTION,
            hyper::header::HeaderValue::from_static("close"),
        );
        return Ok(response);
    }
    server::handle(req, arrays).await
}
