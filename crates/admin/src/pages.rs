//! Pages beside the metrics on the metrics listener: every path but `/metrics` goes to the
//! process's [`Pages`] if it has one (the web dashboard, crate `dashboard`). The listener reads
//! the request (body at most [`PAGE_BODY_BYTES_MAX`]) into a plain [`PageRequest`], calls
//! [`Pages::answer`] on a blocking thread and writes the [`PageResponse`] with
//! [`PageResponse::SECURITY_HEADERS`] ([`serve_page`]).

use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::HeaderValue;

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

/// Answers one HTTP request with `pages` (the listener's paths other than `/metrics`): the body
/// read up to [`PAGE_BODY_BYTES_MAX`] (413 past it), `answer` run on tokio's blocking pool (a
/// panic becomes a 500), the security headers added. Must run inside a tokio runtime.
pub async fn serve_page(
    request: hyper::Request<hyper::body::Incoming>,
    pages: Arc<dyn Pages>,
) -> hyper::Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let body = match crate::server::read_body(body, PAGE_BODY_BYTES_MAX).await {
        Ok(body) => body,
        Err(e) => return http_response(plain(e.status, e.message)),
    };
    let token = (parts.headers.get(pages.token_header())).map(|v| v.as_bytes().to_vec());
    let method = parts.method.as_str().to_string();
    let (path, query) = (
        parts.uri.path().to_string(),
        parts.uri.query().map(str::to_string),
    );
    let answered = tokio::task::spawn_blocking(move || {
        pages.answer(&PageRequest {
            method: &method,
            path: &path,
            query: query.as_deref(),
            token: token.as_deref(),
            body: &body,
        })
    })
    .await;
    let response = answered.unwrap_or_else(|e| plain(500, format!("the page failed: {e}")));
    http_response(response)
}

fn plain(status: u16, message: String) -> PageResponse {
    PageResponse {
        status,
        content_type: "text/plain; charset=utf-8",
        body: (message + "\n").into_bytes(),
        cache: "no-store",
    }
}

fn http_response(page: PageResponse) -> hyper::Response<Full<Bytes>> {
    let mut response = crate::server::http_response(page.status, page.content_type, page.body);
    let headers = response.headers_mut();
    let cache = ("cache-control", page.cache);
    for (name, value) in std::iter::once(cache).chain(PageResponse::SECURITY_HEADERS) {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
