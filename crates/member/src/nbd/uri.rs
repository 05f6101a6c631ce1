//! Parsing NBD URIs (`nbd[s]://HOST[:PORT]/EXPORT`, `nbd[s]+unix:///EXPORT?socket=PATH`), after
//! the NBD URI specification (../shared/reference/nbd-uri.md) and libnbd's `nbd_connect_uri`:
//! the `nbds` schemes require TLS, with the query parameters `tls-certificates=DIR`,
//! `tls-verify-peer=0|1|false|true`, `tls-hostname=NAME` and `tls-type=x509`.

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

/// The TLS settings of an `nbds://` or `nbds+unix://` URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// `tls-certificates=DIR`: `ca-cert.pem` (the CA the server's certificate must be signed
    /// by), optionally `client-cert.pem` + `client-key.pem` (our certificate, for servers that
    /// verify clients) and `ca-crl.pem` (revoked certificates), as libnbd reads them.
    pub certificates: Option<PathBuf>,
    /// `tls-verify-peer` (default true): check the server's certificate against the CA and
    /// its name. False encrypts without knowing who the server is.
    pub verify_peer: bool,
    /// `tls-hostname=NAME`: the name the server's certificate must carry (and the SNI sent);
    /// by default the URI's host. A Unix socket has no host: without it only the chain is
    /// checked.
    pub hostname: Option<String>,
}

/// A parsed NBD URI: where to connect, which export to ask for and whether TLS is required.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NbdAddress {
    pub target: NbdTarget,
    /// The export name (may be empty).
    pub export: String,
    /// `Some` for the `nbds` schemes: TLS is negotiated first and required.
    pub tls: Option<TlsSettings>,
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
        let s = if self.tls.is_some() { "s" } else { "" };
        let mut query = Vec::new();
        match &self.target {
            NbdTarget::Tcp { host, port } if host.contains(':') => {
                write!(f, "nbd{s}://[{host}]:{port}/{}", self.export)?
            }
            NbdTarget::Tcp { host, port } => write!(f, "nbd{s}://{host}:{port}/{}", self.export)?,
            NbdTarget::Unix { path } => {
                write!(f, "nbd{s}+unix:///{}", self.export)?;
                query.push(format!("socket={}", path.display()));
            }
        }
        if let Some(tls) = &self.tls {
            if let Some(dir) = &tls.certificates {
                query.push(format!("tls-certificates={}", dir.display()));
            }
            if !tls.verify_peer {
                query.push("tls-verify-peer=false".to_string());
            }
            if let Some(name) = &tls.hostname {
                query.push(format!("tls-hostname={name}"));
            }
        }
        if !query.is_empty() {
            write!(f, "?{}", query.join("&"))?;
        }
        Ok(())
    }
}

/// Parses an NBD URI; the error says what is wrong with it.
pub fn parse_nbd_uri(uri: &str) -> Result<NbdAddress, String> {
    let (scheme, rest) = uri
        .split_once("://")
        .ok_or_else(|| "not a URI (no \"://\")".to_string())?;
    let (unix, tls) = match scheme {
        "nbd" => (false, false),
        "nbd+unix" => (true, false),
        "nbds" => (false, true),
        "nbds+unix" => (true, true),
        other => {
            return Err(format!(
                "scheme {other} is not supported (use nbd, nbds, nbd+unix or nbds+unix)"
            ))
        }
    };
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
    let mut params = Params::parse(query.unwrap_or(""), scheme)?;
    let target = if unix {
        unix_target(scheme, authority, params.socket.take())?
    } else {
        if params.socket.is_some() {
            return Err(format!(
                "socket=PATH is for Unix sockets: write {scheme}+unix:///EXPORT?socket=PATH"
            ));
        }
        parse_authority(authority)?
    };
    let tls = match (tls, params.tls) {
        (true, tls) => Some(tls.settings()?),
        (false, tls) => match tls.first_key {
            Some(key) => {
                return Err(format!(
                    "{key} is a TLS parameter, but {scheme}:// never uses TLS: write nbds{}://",
                    if unix { "+unix" } else { "" }
                ))
            }
            None => None,
        },
    };
    Ok(NbdAddress {
        target,
        export,
        tls,
    })
}

/// The query parameters of a URI, each at most once.
struct Params {
    socket: Option<String>,
    tls: TlsParams,
}

/// The `tls-*` parameters as given.
#[derive(Default)]
struct TlsParams {
    /// The first `tls-*` key met (for the error of a plaintext scheme).
    first_key: Option<String>,
    certificates: Option<String>,
    verify_peer: Option<String>,
    hostname: Option<String>,
}

impl Params {
    fn parse(query: &str, scheme: &str) -> Result<Params, String> {
        let mut params = Params {
            socket: None,
            tls: TlsParams::default(),
        };
        for (key, value) in parse_query(query)? {
            let slot = match key.as_str() {
                "socket" => &mut params.socket,
                "tls-certificates" => &mut params.tls.certificates,
                "tls-verify-peer" => &mut params.tls.verify_peer,
                "tls-hostname" => &mut params.tls.hostname,
                "tls-type" if value == "x509" => {
                    params.tls.first_key.get_or_insert(key);
                    continue;
                }
                "tls-type" => {
                    return Err(format!(
                        "tls-type={value} is not supported: only x509 (certificates) is"
                    ))
                }
                "tls-psk-file" => {
                    return Err(format!(
                        "{key}: TLS with pre-shared keys is not supported; use certificates \
                         (tls-certificates=DIR)"
                    ))
                }
                other => {
                    return Err(format!(
                        "unknown query parameter {other:?} for {scheme}:// (known: socket, \
                         tls-certificates, tls-verify-peer, tls-hostname, tls-type)"
                    ))
                }
            };
            if slot.is_some() {
                return Err(format!("{key} given twice"));
            }
            *slot = Some(value);
            if key.starts_with("tls-") {
                params.tls.first_key.get_or_insert(key);
            }
        }
        Ok(params)
    }
}

impl TlsParams {
    fn settings(self) -> Result<TlsSettings, String> {
        let verify_peer = match self.verify_peer.as_deref() {
            None | Some("1") | Some("true") => true,
            Some("0") | Some("false") => false,
            Some(other) => {
                return Err(format!(
                    "tls-verify-peer={other}: give 1 or true (the default), 0 or false"
                ))
            }
        };
        let certificates = match self.certificates {
            Some(dir) if dir.is_empty() => {
                return Err("tls-certificates= names no directory".to_string())
            }
            dir => dir.map(PathBuf::from),
        };
        if verify_peer && certificates.is_none() {
            return Err(
                "TLS needs tls-certificates=DIR, a directory with ca-cert.pem (the CA that \
                 signed the server's certificate; client-cert.pem and client-key.pem too if the \
                 server verifies clients), or tls-verify-peer=false to encrypt without checking \
                 the server's identity"
                    .to_string(),
            );
        }
        if let Some(name) = &self.hostname {
            rustls::pki_types::ServerName::try_from(name.to_string())
                .map_err(|e| format!("tls-hostname={name} is not a host name: {e}"))?;
        }
        Ok(TlsSettings {
            certificates,
            verify_peer,
            hostname: self.hostname,
        })
    }
}

fn unix_target(scheme: &str, authority: &str, socket: Option<String>) -> Result<NbdTarget, String> {
    if !authority.is_empty() {
        return Err(format!(
            "{scheme} URIs take no host (found {authority:?}); write {scheme}:///EXPORT?socket=PATH"
        ));
    }
    match socket {
        Some(path) if !path.is_empty() => Ok(NbdTarget::Unix {
            path: PathBuf::from(path),
        }),
        _ => Err(format!("{scheme} needs ?socket=PATH")),
    }
}

fn parse_authority(authority: &str) -> Result<NbdTarget, String> {
    if authority.contains('@') {
        return Err(
            "user information (user@) is not supported (libnbd takes it as the TLS-PSK user \
             name; use certificates)"
                .to_string(),
        );
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
            tls: None,
        }
    }

    #[test]
    fn tls_uris() {
        let a = parse_nbd_uri("nbds://h:99/disk?tls-certificates=/etc/pki/c%20d").unwrap();
        assert_eq!(a.target, tcp("h", 99, "").target);
        assert_eq!(a.export, "disk");
        let want = TlsSettings {
            certificates: Some("/etc/pki/c d".into()),
            verify_peer: true,
            hostname: None,
        };
        assert_eq!(a.tls, Some(want));
        let a = parse_nbd_uri(
            "nbds+unix:///e?socket=/s&tls-verify-peer=false&tls-hostname=nas.example&tls-type=x509",
        )
        .unwrap();
        assert_eq!(a.target, NbdTarget::Unix { path: "/s".into() });
        let want = TlsSettings {
            certificates: None,
            verify_peer: false,
            hostname: Some("nas.example".into()),
        };
        assert_eq!(a.tls, Some(want));
        for (value, verify) in [("1", true), ("true", true), ("0", false), ("false", false)] {
            let uri = format!("nbds://h/?tls-certificates=d&tls-verify-peer={value}");
            assert_eq!(
                parse_nbd_uri(&uri).unwrap().tls.unwrap().verify_peer,
                verify
            );
        }
        assert_eq!(parse_nbd_uri("nbd://h/x").unwrap().tls, None);
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
            ("nbds://h/x", "tls-certificates=DIR"),
            ("nbds+unix:///x?socket=s", "tls-certificates=DIR"),
            ("nbds://h/x?tls-certificates=", "names no directory"),
            ("nbds://h/x?tls-verify-peer=maybe", "give 1 or true"),
            ("nbds://h/x?tls-verify-peer=0&tls-type=psk", "only x509"),
            ("nbds://h/x?tls-psk-file=k", "pre-shared keys"),
            (
                "nbds://h/x?tls-verify-peer=0&tls-verify-peer=1",
                "given twice",
            ),
            (
                "nbds://h/x?tls-verify-peer=0&tls-hostname=a%20b",
                "not a host name",
            ),
            ("nbds://h/x?tls-verify-peer=0&socket=s", "nbds+unix:///"),
            ("nbd://h/x?tls-certificates=d", "write nbds://"),
            (
                "nbd+unix:///x?socket=s&tls-verify-peer=0",
                "write nbds+unix://",
            ),
            ("http://h/x", "not supported"),
            ("nbd:///x", "no host"),
            ("nbd://h:0/x", "bad port"),
            ("nbd://h:99999/x", "bad port"),
            ("nbd://h:abc/x", "bad port"),
            ("nbd://[::1/x", "closing"),
            ("nbd://u@h/x", "user"),
            ("nbd://h/x?socket=s", "nbd+unix:///"),
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
            "nbds://h:1/x?tls-certificates=/d",
            "nbds+unix:///e?socket=/s&tls-verify-peer=false&tls-hostname=h",
            "nbds://[::1]:5/?tls-certificates=/d&tls-hostname=nas",
        ] {
            let a = parse_nbd_uri(uri).unwrap();
            assert_eq!(parse_nbd_uri(&a.to_string()), Ok(a.clone()), "{uri}");
        }
    }
}
