//! Parsing NBD URIs (`nbd://HOST[:PORT]/EXPORT`, `nbd+unix:///EXPORT?socket=PATH`), after the
//! NBD URI specification. TLS schemes are refused: this client does not speak TLS.

use std::fmt;
use std::path::PathBuf;

/// The IANA port of NBD, used when a URI names none.
pub const DEFAULT_PORT: u16 = 10809;
/// The longest export name the NBD protocol allows (bytes).
pub const EXPORT_NAME_MAX_BYTES: usize = 4096;

/// Where an NBD server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NbdTarget {
    /// TCP: a host name or IP address (IPv6 without brackets) and a port.
    Tcp { host: String, port: u16 },
    /// A Unix domain socket path (a leading NUL byte names an abstract socket).
    Unix { path: PathBuf },
}

/// A parsed NBD URI: where to connect and which export to ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NbdAddress {
    pub target: NbdTarget,
    /// The export name (may be empty).
    pub export: String,
}

/// True when `spec` uses one of the NBD URI schemes (so [`crate::open`] treats it as remote).
pub fn is_nbd_uri(spec: &str) -> bool {
    [
        "nbd://",
        "nbd+unix://",
        "nbds://",
        "nbds+unix://",
        "nbd+vsock://",
    ]
    .iter()
    .any(|p| spec.starts_with(p))
}

impl fmt::Display for NbdAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            NbdTarget::Tcp { host, port } if host.contains(':') => {
                write!(f, "nbd://[{host}]:{port}/{}", self.export)
            }
            NbdTarget::Tcp { host, port } => write!(f, "nbd://{host}:{port}/{}", self.export),
            NbdTarget::Unix { path } => {
                write!(f, "nbd+unix:///{}?socket={}", self.export, path.display())
            }
        }
    }
}

/// Parses an NBD URI; the error says what is wrong with it.
pub fn parse_nbd_uri(uri: &str) -> Result<NbdAddress, String> {
    let (scheme, rest) = uri
        .split_once("://")
        .ok_or_else(|| "not a URI (no \"://\")".to_string())?;
    match scheme {
        "nbd" | "nbd+unix" => {}
        "nbds" | "nbds+unix" => return Err(format!("scheme {scheme}: TLS is not supported")),
        other => {
            return Err(format!(
                "scheme {other} is not supported (use nbd or nbd+unix)"
            ))
        }
    }
    if rest.contains('#') {
        return Err("a fragment (#...) is not allowed".to_string());
    }
    let (before_query, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match before_query.find('/') {
        Some(i) => (&before_query[..i], &before_query[i + 1..]),
        None => (before_query, ""),
    };
    let export = percent_decode(path)?;
    if export.len() > EXPORT_NAME_MAX_BYTES || export.contains('\0') {
        return Err("export name is longer than 4096 bytes or contains NUL".to_string());
    }
    let params = parse_query(query.unwrap_or(""))?;
    let target = if scheme == "nbd" {
        if let Some((key, _)) = params.first() {
            return Err(format!("unknown query parameter {key:?}"));
        }
        parse_authority(authority)?
    } else {
        unix_target(authority, &params)?
    };
    Ok(NbdAddress { target, export })
}

fn unix_target(authority: &str, params: &[(String, String)]) -> Result<NbdTarget, String> {
    if !authority.is_empty() {
        return Err(format!(
            "nbd+unix URIs take no host (found {authority:?}); write nbd+unix:///EXPORT?socket=PATH"
        ));
    }
    let mut socket = None;
    for (key, value) in params {
        match key.as_str() {
            "socket" if socket.is_none() => socket = Some(value.clone()),
            "socket" => return Err("socket given twice".to_string()),
            other => return Err(format!("unknown query parameter {other:?}")),
        }
    }
    match socket {
        Some(path) if !path.is_empty() => Ok(NbdTarget::Unix {
            path: PathBuf::from(path),
        }),
        _ => Err("nbd+unix needs ?socket=PATH".to_string()),
    }
}

fn parse_authority(authority: &str) -> Result<NbdTarget, String> {
    if authority.contains('@') {
        return Err("user information (user@) is not supported".to_string());
    }
    let (host, port_text) = if let Some(inner) = authority.strip_prefix('[') {
        let (host, after) = inner
            .split_once(']')
            .ok_or_else(|| "IPv6 address without closing ']'".to_string())?;
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(format!("unexpected {after:?} after the IPv6 address")),
            },
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("no host (write nbd://HOST[:PORT]/EXPORT)".to_string());
    }
    let port = match port_text {
        None | Some("") => DEFAULT_PORT,
        Some(text) => match text.parse::<u16>() {
            Ok(p) if p != 0 => p,
            _ => return Err(format!("bad port {text:?}")),
        },
    };
    Ok(NbdTarget::Tcp {
        host: host.to_string(),
        port,
    })
}

fn parse_query(query: &str) -> Result<Vec<(String, String)>, String> {
    let mut params = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        params.push((percent_decode(key)?, percent_decode(value)?));
    }
    Ok(params)
}

fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape in {text:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{text:?} does not decode to UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16, export: &str) -> NbdAddress {
        NbdAddress {
            target: NbdTarget::Tcp {
                host: host.to_string(),
                port,
            },
            export: export.to_string(),
        }
    }

    #[test]
    fn tcp_uris() {
        assert_eq!(parse_nbd_uri("nbd://h/disk"), Ok(tcp("h", 10809, "disk")));
        assert_eq!(parse_nbd_uri("nbd://h:99/"), Ok(tcp("h", 99, "")));
        assert_eq!(parse_nbd_uri("nbd://h"), Ok(tcp("h", 10809, "")));
        assert_eq!(parse_nbd_uri("nbd://h//disk"), Ok(tcp("h", 10809, "/disk")));
        assert_eq!(
            parse_nbd_uri("nbd://h/hello%20world"),
            Ok(tcp("h", 10809, "hello world"))
        );
        assert_eq!(parse_nbd_uri("nbd://[::1]:5/x"), Ok(tcp("::1", 5, "x")));
        assert_eq!(parse_nbd_uri("nbd://[::1]/x"), Ok(tcp("::1", 10809, "x")));
        assert_eq!(
            parse_nbd_uri("nbd://127.0.0.1:10810/a/b"),
            Ok(tcp("127.0.0.1", 10810, "a/b"))
        );
    }

    #[test]
    fn unix_uris() {
        let a = parse_nbd_uri("nbd+unix:///disk?socket=/tmp/s%20k").unwrap();
        assert_eq!(a.export, "disk");
        assert_eq!(
            a.target,
            NbdTarget::Unix {
                path: "/tmp/s k".into()
            }
        );
        let a = parse_nbd_uri("nbd+unix://?socket=sock").unwrap();
        assert_eq!(a.export, "");
    }

    #[test]
    fn bad_uris_say_why() {
        let cases = [
            ("nbds://h/x", "TLS"),
            ("nbds+unix:///x?socket=s", "TLS"),
            ("http://h/x", "not supported"),
            ("nbd:///x", "no host"),
            ("nbd://h:0/x", "bad port"),
            ("nbd://h:99999/x", "bad port"),
            ("nbd://h:abc/x", "bad port"),
            ("nbd://[::1/x", "closing"),
            ("nbd://u@h/x", "user"),
            ("nbd://h/x?socket=s", "unknown query"),
            ("nbd+unix:///x", "socket=PATH"),
            ("nbd+unix://h/x?socket=s", "no host"),
            ("nbd+unix:///x?socket=s&tls=1", "unknown query"),
            ("nbd://h/%zz", "percent"),
            ("nbd://h/%00", "NUL"),
            ("nbd://h/x#frag", "fragment"),
        ];
        for (uri, want) in cases {
            let err = parse_nbd_uri(uri).unwrap_err();
            assert!(err.contains(want), "{uri}: {err}");
        }
    }

    #[test]
    fn display_round_trips() {
        for uri in [
            "nbd://h:1/x",
            "nbd://[::1]:10809/",
            "nbd+unix:///e?socket=/s",
        ] {
            let a = parse_nbd_uri(uri).unwrap();
            assert_eq!(parse_nbd_uri(&a.to_string()), Ok(a.clone()), "{uri}");
        }
    }
}
