//! The NBD server: accept loop, per-connection handshake and transmission.
//!
//! [`serve`] serves one export; [`serve_exports`] the [`Exports`] of a listener, which may be
//! added and removed while it serves. Each runs until its `shutdown` future completes; then it
//! stops accepting, every connection stops reading new requests, requests in flight finish and
//! their replies are sent, and it returns (after at most [`ServerConfig::shutdown_grace`]).

mod admission;
mod buffers;
mod config;
mod conn_error;
mod connection;
mod exports;
mod gate;
mod handshake;
mod listener;
mod request;
mod shared;
mod tls;
mod transmission;

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinSet;

pub use config::{
    check_thread_nice, ConfigError, ServerConfig, MAX_OPTION_BYTES, MIN_OPTION_BYTES, NICE,
};
pub use exports::{AddError, Exports, Removed, MAX_EXPORTS};
pub use listener::{Address, Listener, Stream};
pub use tls::{Tls, TlsError, TlsMode};

use admission::{Admission, Client};

use crate::export::Export;

/// What every connection of one listener shares: the listener's limits (connections,
/// handshake) and its exports.
pub(crate) struct Listening {
    pub config: ServerConfig,
    pub exports: Arc<Exports>,
}

/// Serves `export` on `listener` until `shutdown` completes, then drains (see module doc).
/// Fails only on an invalid configuration; per-connection errors are logged and end that
/// connection only.
pub async fn serve(
    listener: Listener,
    export: Arc<dyn Export>,
    config: ServerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ConfigError> {
    let exports = Exports::new();
    exports.add(export, config.clone()).map_err(|e| match e {
        AddError::Config(e) => e,
        AddError::Duplicate(_) | AddError::Full => unreachable!("the first export of a new set"),
    })?;
    serve_exports(listener, exports, config, shutdown).await
}

/// Serves every export of `exports` on `listener` until `shutdown` completes, then drains
/// (see module doc). `config` gives the listener's limits — `max_connections`,
/// `max_connections_per_client`, `max_option_bytes`, `max_options_per_conn`,
/// `handshake_timeout`, `idle_timeout`, `reply_timeout`, `shutdown_grace` —; each export has
/// its own for the rest ([`Exports::add`]).
pub async fn serve_exports(
    listener: Listener,
    exports: Arc<Exports>,
    config: ServerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ConfigError> {
    config.validate()?;
    let grace = config.shutdown_grace;
    let admission = Admission::new(config.max_connections, config.max_connections_per_client);
    let shared = Arc::new(Listening { config, exports });
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let client = Client::of(peer);
                    let slot = match admission.admit(client) {
                        Ok(slot) => slot,
                        Err(refusal) => {
                            // Closed at once: the stream is dropped here.
                            admission.log_refusal(client, refusal);
                            continue;
                        }
                    };
                    let (shared, stop) = (shared.clone(), stop_rx.clone());
                    connections.spawn(async move {
                        connection::run(stream, peer, shared, stop).await;
                        drop(slot);
                    });
                }
                Err(e) => {
                    log::warn!("nbd: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            },
            Some(done) = connections.join_next(), if !connections.is_empty() => log_join(done),
        }
    }
    drop(listener);
    // Receivers may all be gone already; that is fine.
    let _ = stop_tx.send(true);
    shared.exports.stop_all();
    drain(&mut connections, grace).await;
    Ok(())
}

async fn drain(connections: &mut JoinSet<()>, grace: std::time::Duration) {
    let all_done = async {
        while let Some(done) = connections.join_next().await {
            log_join(done);
        }
    };
    if tokio::time::timeout(grace, all_done).await.is_err() {
        log::warn!(
            "nbd: {} connection(s) still open after the {grace:?} shutdown grace; closing them",
            connections.len()
        );
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
}

fn log_join(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done {
        if e.is_panic() {
            log::error!("nbd: connection task panicked: {e}");
        }
    }
}
