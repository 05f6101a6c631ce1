//! Fixed newstyle handshake: greeting, client flags, then option haggling until the client
//! picks the export (EXPORT_NAME or GO), aborts, or misbehaves.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use super::conn_error::ConnError;
use super::exports::Selected;
use super::request::{Session, BASE_ALLOCATION_ID};
use super::shared::Shared;
use super::Listening;
use crate::codec::consts::*;
use crate::codec::{
    ClientFlags, ClientOption, ExportNameReply, Greeting, Info, InfoRequest, MetaContextRequest,
    OptionHeader, OptionReply,
};

/// How option haggling ended.
pub(crate) enum Outcome {
    /// The export chosen (held until the connection ends) and what was negotiated.
    Transmission(Selected, Session),
    /// The client aborted (or vanished) cleanly.
    Closed,
    /// STARTTLS was acknowledged: the TLS handshake comes next, then the options again.
    StartTls,
}

/// Per-connection negotiation state.
#[derive(Default)]
struct Haggle {
    no_zeroes: bool,
    /// TLS is up on this connection.
    tls: bool,
    /// An option was already refused for want of TLS (logged once).
    refused_plaintext: bool,
    structured: bool,
    base_allocation: bool,
}

/// Sends the greeting and reads the client's flags; returns whether the client asked for
/// `NO_ZEROES`.
pub(crate) async fn greet<R, W>(r: &mut R, w: &mut W) -> Result<bool, ConnError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let greeting = Greeting {
        handshake_flags: FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES,
    };
    w.write_all(&greeting.encode()).await?;
    w.flush().await?;
    let mut flags = [0u8; ClientFlags::SIZE];
    r.read_exact(&mut flags).await?;
    let ClientFlags(client) = ClientFlags::decode(&flags)?;
    if client & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(ConnError::Protocol(format!(
            "unknown client flags {client:#x}"
        )));
    }
    Ok(client & FLAG_C_NO_ZEROES != 0)
}

/// Option haggling, in plaintext (`tls` false) or after STARTTLS (`tls` true: nothing
/// negotiated before it counts, as the spec asks).
pub(crate) async fn options<R, W>(
    r: &mut R,
    w: &mut W,
    listening: &Listening,
    stop: &watch::Receiver<bool>,
    no_zeroes: bool,
    tls: bool,
) -> Result<Outcome, ConnError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut state = Haggle {
        no_zeroes,
        tls,
        ..Haggle::default()
    };
    for _ in 0..listening.config.max_options_per_conn {
        let (code, data) = read_option(r, w, listening).await?;
        if *stop.borrow() && code != OPT_ABORT {
            send(w, code, &err(REP_ERR_SHUTDOWN, "server is shutting down")).await?;
            continue;
        }
        if let Some(outcome) = handle_option(w, listening, &mut state, code, &data).await? {
            return Ok(outcome);
        }
    }
    Err(ConnError::Protocol("too many options".into()))
}

/// The next option. One whose data is over `max_option_bytes` is refused with
/// `NBD_REP_ERR_TOO_BIG` and ends the connection without its data being read (the spec lets
/// a server disconnect a client whose behaviour it takes for a denial of service);
/// `NBD_OPT_EXPORT_NAME` cannot be answered with an error and is just closed.
async fn read_option<R, W>(
    r: &mut R,
    w: &mut W,
    listening: &Listening,
) -> Result<(u32, Vec<u8>), ConnError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut header = [0u8; OptionHeader::SIZE];
    r.read_exact(&mut header).await?;
    let header = OptionHeader::decode(&header)?;
    let max = listening.config.max_option_bytes;
    if header.length > max {
        let option = option_name(header.option);
        if header.option != OPT_EXPORT_NAME {
            let message = format!(
                "{option} carries {} bytes of data; this server takes at most {max}",
                header.length
            );
            // Then the connection ends: a client that already went is no error of ours.
            let _ = send(w, header.option, &err(REP_ERR_TOO_BIG, &message)).await;
            let _ = w.shutdown().await;
        }
        return Err(ConnError::OptionTooBig {
            option,
            length: header.length,
            max,
        });
    }
    let mut data = vec![0u8; header.length as usize];
    r.read_exact(&mut data).await?;
    Ok((header.option, data))
}

async fn handle_option<W: AsyncWrite + Unpin>(
    w: &mut W,
    listening: &Listening,
    state: &mut Haggle,
    code: u32,
    data: &[u8],
) -> Result<Option<Outcome>, ConnError> {
    let tls_required = listening.config.tls.as_ref().is_some_and(|t| t.require) && !state.tls;
    if tls_required && code != OPT_STARTTLS && code != OPT_ABORT {
        let name = option_name(code);
        if code == OPT_EXPORT_NAME {
            // EXPORT_NAME cannot be answered with an error: the spec says to close.
            return Err(ConnError::TlsRequired(name));
        }
        if !state.refused_plaintext {
            state.refused_plaintext = true;
            log::warn!(
                "nbd: refusing {name} from a plaintext client: TLS is required (--tls require); \
                 the client must start with NBD_OPT_STARTTLS (an nbds:// URI)"
            );
        }
        let message = "TLS is required: negotiate NBD_OPT_STARTTLS first";
        send(w, code, &err(REP_ERR_TLS_REQD, message)).await?;
        return Ok(None);
    }
    let option = match ClientOption::decode(code, data) {
        Ok(option) => option,
        Err(e) if code == OPT_EXPORT_NAME => return Err(e.into()),
        Err(e) => {
            send(w, code, &err(REP_ERR_INVALID, &e.to_string())).await?;
            return Ok(None);
        }
    };
    let replies = match option {
        ClientOption::ExportName(name) => return export_name(w, listening, state, &name).await,
        ClientOption::Abort => {
            // The client may already have closed: a failed reply is not an error.
            let _ = send(w, code, &[OptionReply::Ack]).await;
            return Ok(Some(Outcome::Closed));
        }
        ClientOption::Go(request) => {
            let Some(selected) = listening.exports.select(&request.name) else {
                send(w, code, &unknown_export(&request.name)).await?;
                return Ok(None);
            };
            let replies = info_replies(&selected.shared, state, &request);
            send(w, code, &replies).await?;
            let acked = matches!(replies.last(), Some(OptionReply::Ack));
            return Ok(acked.then(|| {
                let session = session(&selected.shared, state);
                Outcome::Transmission(selected, session)
            }));
        }
        ClientOption::Info(request) => match listening.exports.find(&request.name) {
            Some(shared) => info_replies(&shared, state, &request),
            None => unknown_export(&request.name),
        },
        ClientOption::List { has_data } => list_replies(listening, has_data),
        ClientOption::StructuredReply { has_data } => structured(state, has_data),
        ClientOption::ListMetaContext(request) => list_meta(listening, state, &request),
        ClientOption::SetMetaContext(request) => set_meta(listening, state, &request),
        ClientOption::StartTls { has_data } => match &listening.config.tls {
            None => err(REP_ERR_UNSUP, "TLS is not enabled on this server"),
            Some(_) if has_data => err(REP_ERR_INVALID, "NBD_OPT_STARTTLS takes no data"),
            Some(_) if state.tls => err(REP_ERR_INVALID, "TLS is already negotiated"),
            Some(_) => {
                send(w, code, &[OptionReply::Ack]).await?;
                return Ok(Some(Outcome::StartTls));
            }
        },
        ClientOption::ExtendedHeaders | ClientOption::Unknown(_) => {
            err(REP_ERR_UNSUP, "option not supported")
        }
    };
    send(w, code, &replies).await?;
    Ok(None)
}

async fn export_name<W: AsyncWrite + Unpin>(
    w: &mut W,
    listening: &Listening,
    state: &Haggle,
    name: &str,
) -> Result<Option<Outcome>, ConnError> {
    let Some(selected) = listening.exports.select(name) else {
        // EXPORT_NAME cannot return an error: the spec says to close.
        return Err(ConnError::Protocol(format!("unknown export {name:?}")));
    };
    let session = session(&selected.shared, state);
    let reply = ExportNameReply {
        size: session.size,
        transmission_flags: session.transmission_flags,
        no_zeroes: state.no_zeroes,
    };
    w.write_all(&reply.encode()).await?;
    w.flush().await?;
    Ok(Some(Outcome::Transmission(selected, session)))
}

/// The spec's name of option `code`, for log lines.
fn option_name(code: u32) -> String {
    let name = match code {
        OPT_EXPORT_NAME => "NBD_OPT_EXPORT_NAME",
        OPT_ABORT => "NBD_OPT_ABORT",
        OPT_LIST => "NBD_OPT_LIST",
        OPT_STARTTLS => "NBD_OPT_STARTTLS",
        OPT_INFO => "NBD_OPT_INFO",
        OPT_GO => "NBD_OPT_GO",
        OPT_STRUCTURED_REPLY => "NBD_OPT_STRUCTURED_REPLY",
        OPT_LIST_META_CONTEXT => "NBD_OPT_LIST_META_CONTEXT",
        OPT_SET_META_CONTEXT => "NBD_OPT_SET_META_CONTEXT",
        _ => return format!("option {code}"),
    };
    name.to_owned()
}

fn session(shared: &Shared, state: &Haggle) -> Session {
    Session {
        size: shared.size,
        transmission_flags: shared.transmission_flags(state.structured),
        structured: state.structured,
        base_allocation: state.base_allocation,
        max_request_bytes: shared.config.max_request_bytes,
        can_fast_zero: shared.export.can_fast_zero(),
    }
}

fn err(reply_type: u32, message: &str) -> Vec<OptionReply> {
    vec![OptionReply::Error {
        reply_type,
        message: message.to_owned(),
    }]
}

fn unknown_export(name: &str) -> Vec<OptionReply> {
    err(REP_ERR_UNKNOWN, &format!("no export named {name:?}"))
}

/// The replies describing `shared`, the export `request` named.
fn info_replies(shared: &Shared, state: &Haggle, request: &InfoRequest) -> Vec<OptionReply> {
    let (minimum, preferred, maximum) = shared.block_sizes();
    let transmission_flags = shared.transmission_flags(state.structured);
    let mut replies = vec![
        OptionReply::Info(Info::Export {
            size: shared.size,
            transmission_flags,
        }),
        OptionReply::Info(Info::BlockSize {
            minimum,
            preferred,
            maximum,
        }),
    ];
    if request.requests.contains(&INFO_NAME) {
        replies.push(OptionReply::Info(Info::Name(
            shared.config.export_name.clone(),
        )));
    }
    if request.requests.contains(&INFO_DESCRIPTION) && !shared.config.description.is_empty() {
        replies.push(OptionReply::Info(Info::Description(
            shared.config.description.clone(),
        )));
    }
    replies.push(OptionReply::Ack);
    replies
}

fn list_replies(listening: &Listening, has_data: bool) -> Vec<OptionReply> {
    if has_data {
        return err(REP_ERR_INVALID, "NBD_OPT_LIST takes no data");
    }
    let mut replies: Vec<OptionReply> = (listening.exports.list().into_iter())
        .map(|(name, details)| OptionReply::Server { name, details })
        .collect();
    replies.push(OptionReply::Ack);
    replies
}

fn structured(state: &mut Haggle, has_data: bool) -> Vec<OptionReply> {
    if has_data {
        return err(REP_ERR_INVALID, "NBD_OPT_STRUCTURED_REPLY takes no data");
    }
    if state.structured {
        return err(REP_ERR_INVALID, "structured replies already negotiated");
    }
    state.structured = true;
    vec![OptionReply::Ack]
}

/// True if `query` names `base:allocation` (exactly, or as the `base:` wildcard if allowed).
fn selects_base_allocation(query: &str, wildcard: bool) -> bool {
    query == META_BASE_ALLOCATION || (wildcard && query == "base:")
}

fn list_meta(
    listening: &Listening,
    state: &Haggle,
    request: &MetaContextRequest,
) -> Vec<OptionReply> {
    if !state.structured {
        return err(REP_ERR_INVALID, "negotiate structured replies first");
    }
    if listening.exports.find(&request.name).is_none() {
        return unknown_export(&request.name);
    }
    let listed = request.queries.is_empty()
        || request
            .queries
            .iter()
            .any(|q| selects_base_allocation(q, true));
    let mut replies = Vec::new();
    if listed {
        replies.push(OptionReply::MetaContext {
            id: 0,
            name: META_BASE_ALLOCATION.into(),
        });
    }
    replies.push(OptionReply::Ack);
    replies
}

fn set_meta(
    listening: &Listening,
    state: &mut Haggle,
    request: &MetaContextRequest,
) -> Vec<OptionReply> {
    // Replaces the previous selection, even when it fails.
    state.base_allocation = false;
    if !state.structured {
        return err(REP_ERR_INVALID, "negotiate structured replies first");
    }
    if listening.exports.find(&request.name).is_none() {
        return unknown_export(&request.name);
    }
    let mut replies = Vec::new();
    if request
        .queries
        .iter()
        .any(|q| selects_base_allocation(q, false))
    {
        state.base_allocation = true;
        let name = META_BASE_ALLOCATION.into();
        replies.push(OptionReply::MetaContext {
            id: BASE_ALLOCATION_ID,
            name,
        });
    }
    replies.push(OptionReply::Ack);
    replies
}

async fn send<W: AsyncWrite + Unpin>(
    w: &mut W,
    option: u32,
    replies: &[OptionReply],
) -> Result<(), ConnError> {
    let mut bytes = Vec::new();
    for reply in replies {
        bytes.extend_from_slice(&reply.encode(option));
    }
    w.write_all(&bytes).await?;
    w.flush().await?;
    Ok(())
}
