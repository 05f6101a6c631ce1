//! Pages beside the metrics on the metrics listener: every path but `/metrics` goes to the
//! process's [`Pages`] if it has one (the web dashboard, crate `dashboard`). The listener reads
//! the request (body at most [`PAGE_BODY_BYTES_MAX`]) into a plain [`PageRequest`], calls
//! [`Pages::answer`] on a blocking thread and writes the [`PageResponse`] with
//! [`PageResponse::SECURITY_HEADERS`].

/// Largest request body a page is given (an action's JSON).
pub const PAGE_BODY_BYTES_MAX: usize = 64 * 1024;

/// One HTTP request as the listener read it.
#[derive(Clone, Copy, Debug)]
pub struct PageRequest<'a> {
    pub method: &'a str,
    /// The path without the query.
    pub path: &'a str,
    pub query: Option<&'a str>,
    /// The value of the header named by [`Pages::token_header`], if sent.
    pub token: Option<&'a [u8]>,
    /// The whole body (at most [`PAGE_BODY_BYTES_MAX`]).
    pub body: &'a [u8],
}

/// The answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageResponse {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// `cache-control`'s value.
    pub cache: &'static str,
}

impl PageResponse {
    /// Headers every page carries: no framing by other sites (a page may have action
    /// buttons), no content sniffing, scripts, styles and fetches from this origin only, no
    /// referrer.
    pub const SECURITY_HEADERS: [(&'static str, &'static str); 4] = [
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        (
            "content-security-policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
        ("referrer-policy", "no-referrer"),
    ];
}

/// What answers the listener's pages. `answer` may block (an action writes superblocks).
pub trait Pages: Send + Sync + 'static {
    /// The request header whose value is passed as [`PageRequest::token`].
    fn token_header(&self) -> &'static str;

    fn answer(&self, request: &PageRequest) -> PageResponse;
}
