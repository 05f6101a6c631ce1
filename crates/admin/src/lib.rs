//! The admin endpoint of running arrays: an HTTP/1.1 + JSON API on a Unix socket (`raidkit
//! serve --admin PATH`), one socket for every array a process serves.
//!
//! - [`api`]: the requests ([`api::Request`]), parsed from method, path and body by one pure
//!   function, the routing of a path to an array ([`api::route`]), and the error type
//!   ([`api::ApiError`]) with its HTTP status.
//! - [`server`]: binds the socket (mode 0600, removed at exit), bounds connections, body size
//!   and time, and hands each request to the [`server::Control`] of its array in
//!   [`server::Arrays`] on a blocking thread.
//! - [`control`]: [`control::VolumeControl`], the `Control` over a `volume::Volume`.
//! - [`status`]: [`status::Status`], what `GET /v1/status` serves and the CLI decodes: the
//!   volume's status with the journal and read-cache sections the front end fills in.
//! - [`pages`]: [`pages::Pages`], what answers the metrics listener's other paths (the web
//!   dashboard), with its plain request and response.
//! - [`tcp`]: the same API on a TCP listener, only over TLS and only with the operator's
//!   [`token::Token`] (`Authorization: Bearer`).
//! - [`metrics`]: the Prometheus text exposition of the arrays' snapshots and its HTTP
//!   listener (`GET /metrics`), bounded like the admin socket.
//! - [`stats`]: [`stats::Snapshot`], what `GET /v1/stats` serves: the I/O counters of the
//!   array (as its clients see it) and of each member, with the status, at one moment.
//! - [`mdstat`]: the arrays' statuses in exactly /proc/mdstat's format, for the tools that
//!   parse that file (node_exporter, telegraf); a pure renderer.
//!
//! Nothing here prints: lines for the operator (an action done, a stale socket removed, a
//! connection error) go to the front end's [`Log`].

use std::sync::Arc;

pub mod api;
pub mod control;
pub mod mdstat;
pub mod metrics;
pub mod pages;
pub mod server;
pub mod stats;
pub mod status;
pub mod tcp;
pub mod token;

/// Where the admin service's lines for the operator go (`raidkit serve`: stderr).
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;
