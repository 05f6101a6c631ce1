//! The admin endpoint: an HTTP/1.1 + JSON API on a Unix socket (`raidkit serve --admin PATH`)
//! and the client the operator commands use.
//!
//! - [`api`]: the requests ([`api::Request`]), parsed from method, path and body by one pure
//!   function, and the error type ([`api::ApiError`]) with its HTTP status.
//! - [`server`]: binds the socket (mode 0600, removed at exit), bounds connections, body size
//!   and time, and hands each request to a [`server::Control`] on a blocking thread.
//! - [`control`]: [`control::VolumeControl`], the `Control` over a `volume::Volume`.
//! - [`status`]: [`status::Status`], what `GET /v1/status` serves and the CLI reads back.
//! - [`client`]: one request per connection from the command line, with errors that name the
//!   socket.

pub mod api;
pub mod client;
pub mod control;
pub mod server;
pub mod status;
