//! NBD (Network Block Device) wire codec and server.
//!
//! - [`codec`]: bytes ⇄ typed messages, no I/O: the `nbd-codec` crate, re-exported; the NBD
//!   member client in `member` uses the same codec.
//! - [`Export`]: the block device being served (implemented by the RAID volume); blocking
//!   calls, run on a bounded thread pool.
//! - [`serve`]: a tokio server on a [`Listener`] (TCP or Unix socket) with a
//!   [`ServerConfig`]; it returns after its shutdown future completes and requests in flight
//!   have been answered, so the caller can then flush and mark the array clean.
//!   [`serve_exports`] serves a set of [`Exports`] that grows and shrinks while it serves.
//! - [`qos`]: latency targets between exports ([`QosGroup`], [`QosClass`]), enforced at each
//!   request's admission.
//! - [`Counted`]: an export filter counting each request as the client sent it
//!   (`iostats::IoCounters`).
//!
//! ```no_run
//! use std::sync::Arc;
//! # async fn demo(export: Arc<dyn nbd::Export>) -> Result<(), Box<dyn std::error::Error>> {
//! let listener = nbd::Listener::bind_unix("/tmp/raid.sock")?;
//! let config = nbd::ServerConfig { export_name: "raid".into(), ..Default::default() };
//! println!("serving at {}", listener.uri("raid"));
//! nbd::serve(listener, export, config, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```
//!
//! Protocol coverage: fixed newstyle handshake with NO_ZEROES; options EXPORT_NAME, ABORT,
//! LIST, INFO, GO, STRUCTURED_REPLY, LIST/SET_META_CONTEXT (`base:allocation`), STARTTLS (with
//! [`ServerConfig::tls`]); EXTENDED_HEADERS and unknown options get `NBD_REP_ERR_UNSUP`. Commands READ, WRITE (FUA),
//! FLUSH, TRIM, WRITE_ZEROES (NO_HOLE, FAST_ZERO), CACHE, DISC, BLOCK_STATUS (REQ_ONE).

pub use nbd_codec as codec;
mod counted;
mod errno;
mod export;
pub mod qos;
mod server;

pub use counted::Counted;
pub use errno::nbd_errno;
pub use export::{Export, StatusExtent};
pub use qos::{QosClass, QosGroup, QosSnapshot};
pub use server::{
    check_thread_nice, serve, serve_exports, AddError, Address, ConfigError, Exports, Listener,
    Removed, ServerConfig, Stream, Tls, TlsError, TlsMode, MAX_EXPORTS, MAX_OPTION_BYTES,
    MIN_OPTION_BYTES, NICE,
};
