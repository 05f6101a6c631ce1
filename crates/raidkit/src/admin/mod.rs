//! The operator's side of the admin endpoint (the server is the `admin` crate).
//!
//! - [`status`]: [`status::Status`], what `GET /v1/status` serves (`serve` encodes it through
//!   `admin::control::VolumeControl::with_status`) and the CLI reads back.
//! - [`client`]: one request per connection from the command line, with errors that name the
//!   socket.

pub mod client;
pub mod status;
