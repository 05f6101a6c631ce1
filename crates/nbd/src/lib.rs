//! NBD (Network Block Device) wire codec and server.
//!
//! WIP.
pub mod codec;
