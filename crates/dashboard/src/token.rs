//! The token that enables the dashboard's actions (`admin::token::Token`, read from
//! `--dashboard-token-file`), sent by the page in a request header ([`TOKEN_HEADER`]; never a
//! cookie, so another site's page cannot make the browser send it: no CSRF).

pub use admin::token::{Token, TOKEN_BYTES_MAX, TOKEN_BYTES_MIN};

/// The request header that carries the token.
pub const TOKEN_HEADER: &str = "x-raidkit-token";

/// What a dashboard token file is called in errors.
pub const TOKEN_FILE: &str = "the dashboard token file";
