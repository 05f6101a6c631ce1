//! Why a connection ended abnormally: shared by the handshake, the transmission phase and the
//! connection that runs them.

use std::fmt;
use std::io;

use crate::codec::DecodeError;

/// Why a connection ended abnormally (logged, never shown to other clients).
#[derive(Debug)]
pub(crate) enum ConnError {
    Io(io::Error),
    Decode(DecodeError),
    Protocol(String),
    /// The handshake did not finish within the listener's deadline.
    HandshakeTimeout(std::time::Duration),
    /// An option's data is over the listener's maximum (refused with `NBD_REP_ERR_TOO_BIG`
    /// unless it was `NBD_OPT_EXPORT_NAME`).
    OptionTooBig {
        option: String,
        length: u32,
        max: u32,
    },
    /// No request for the listener's idle timeout.
    Idle(std::time::Duration),
    /// A reply write made no progress for the listener's reply timeout.
    ReplyTimeout(std::time::Duration),
    /// The TLS handshake after STARTTLS failed (wrong CA, no client certificate, ...).
    Tls(io::Error),
    /// A plaintext client entered transmission (EXPORT_NAME) where TLS is required.
    TlsRequired(String),
}

impl fmt::Display for ConnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnError::Io(e) => write!(f, "I/O error: {e}"),
            ConnError::Decode(e) => write!(f, "malformed message: {e}"),
            ConnError::Protocol(m) => write!(f, "protocol violation: {m}"),
            ConnError::HandshakeTimeout(limit) => write!(
                f,
                "handshake not finished within {} s; raise the limit with --handshake-timeout \
                 (daemon: handshake_timeout_secs)",
                limit.as_secs_f64()
            ),
            ConnError::OptionTooBig {
                option,
                length,
                max,
            } => write!(
                f,
                "{option} with {length} bytes of data, over the limit of {max}; raise it with \
                 --max-option-size (daemon: max_option_size)"
            ),
            ConnError::Idle(limit) => write!(
                f,
                "idle: no request for {} s; the limit is --idle-timeout (daemon: \
                 idle_timeout_secs)",
                limit.as_secs_f64()
            ),
            ConnError::ReplyTimeout(limit) => write!(
                f,
                "the client took no byte of a reply for {} s; the limit is --reply-timeout \
                 (daemon: reply_timeout_secs)",
                limit.as_secs_f64()
            ),
            ConnError::Tls(e) => write!(f, "TLS handshake failed: {e}"),
            ConnError::TlsRequired(option) => write!(
                f,
                "plaintext client sent {option}: TLS is required (--tls require); \
                 the client must start with NBD_OPT_STARTTLS (an nbds:// URI)"
            ),
        }
    }
}

impl From<io::Error> for ConnError {
    fn from(e: io::Error) -> Self {
        ConnError::Io(e)
    }
}

impl From<DecodeError> for ConnError {
    fn from(e: DecodeError) -> Self {
        ConnError::Decode(e)
    }
}
