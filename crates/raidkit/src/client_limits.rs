//! What one NBD client may hold of the server: `serve`'s flags (`--handshake-timeout`,
//! `--max-connections`, ...) and the daemon's `[daemon]` keys of the same names, as the
//! `nbd::ServerConfig` fields they set (docs/DESIGN.md "Queues, connections, threads and
//! other bounds").

use std::time::Duration;

/// The defaults, shown in `serve --help` and taken by the daemon for a key left out.
pub mod defaults {
    pub const HANDSHAKE_TIMEOUT_SECS: u64 = 10;
    pub const MAX_CONNECTIONS: u32 = 64;
    pub const MAX_CONNECTIONS_PER_CLIENT: u32 = 16;
    pub const MAX_OPTION_SIZE: &str = "64K";
    pub const IDLE_TIMEOUT_SECS: u64 = 0;
    pub const REPLY_TIMEOUT_SECS: u64 = 60;
    pub const MAX_REQUESTS_PER_CONNECTION: u32 = 64;
}

/// Upper ends of the ranges (threads and memory grow with them: DESIGN "Memory bounds").
pub const MAX_CONNECTIONS_MAX: u32 = 1024;
pub const MAX_REQUESTS_PER_CONNECTION_MAX: u32 = 1024;
pub const HANDSHAKE_TIMEOUT_SECS_MAX: u64 = 3600;

/// The client limits of `raidkit serve`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ClientLimits {
    /// A client must finish the whole NBD handshake (TLS and option haggling included)
    /// within this many seconds of connecting, or it is disconnected: a connection that
    /// sends nothing, or one byte at a time, holds its slot no longer (qemu-nbd's
    /// --handshake-limit).
    #[arg(long, value_name = "SECS", default_value_t = defaults::HANDSHAKE_TIMEOUT_SECS,
          value_parser = clap::value_parser!(u64).range(1..=HANDSHAKE_TIMEOUT_SECS_MAX))]
    pub handshake_timeout: u64,

    /// Connections open at once on the listener; more are closed at once, with a log line
    /// (at most one per 10 s) naming the client.
    #[arg(long, value_name = "N", default_value_t = defaults::MAX_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1..=MAX_CONNECTIONS_MAX as i64))]
    pub max_connections: u32,

    /// Connections open at once from one client address (an IPv4 address or an IPv6 /64;
    /// Unix-socket clients count in --max-connections only): silent or slow connections
    /// from one address cannot take every slot. More are closed at once, logged as above.
    #[arg(long, value_name = "N", default_value_t = defaults::MAX_CONNECTIONS_PER_CLIENT,
          value_parser = clap::value_parser!(u32).range(1..=MAX_CONNECTIONS_MAX as i64))]
    pub max_connections_per_client: u32,

    /// Largest data of one handshake option (8K to 1M): a longer option is refused with
    /// NBD_REP_ERR_TOO_BIG and the client disconnected, its data never read.
    #[arg(long, value_name = "SIZE", default_value = defaults::MAX_OPTION_SIZE,
          value_parser = option_size_arg)]
    pub max_option_size: u32,

    /// Disconnect a client that had no request in flight and sent none for this many
    /// seconds (0 = never). Off by default: the Linux kernel's client and a mounted
    /// filesystem legitimately stay idle for hours, and an idle connection costs one
    /// sleeping thread and a slot of --max-connections.
    #[arg(long, value_name = "SECS", default_value_t = defaults::IDLE_TIMEOUT_SECS)]
    pub idle_timeout: u64,

    /// Disconnect a client that takes no byte of a reply for this many seconds (0 = never):
    /// one that sends requests and never reads the replies would otherwise hold their
    /// buffers (--buffer-memory) and threads for ever. A slow client that keeps reading is
    /// not affected.
    #[arg(long, value_name = "SECS", default_value_t = defaults::REPLY_TIMEOUT_SECS,
          value_parser = clap::value_parser!(u64).range(0..=HANDSHAKE_TIMEOUT_SECS_MAX))]
    pub reply_timeout: u64,

    /// Requests of one connection in flight at once (1 to 1024; each has its own thread):
    /// at the limit the server reads no more from that client until one is answered
    /// (back-pressure, not an error).
    #[arg(long, value_name = "N", default_value_t = defaults::MAX_REQUESTS_PER_CONNECTION,
          value_parser = clap::value_parser!(u32).range(1..=MAX_REQUESTS_PER_CONNECTION_MAX as i64))]
    pub max_requests_per_connection: u32,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            handshake_timeout: defaults::HANDSHAKE_TIMEOUT_SECS,
            max_connections: defaults::MAX_CONNECTIONS,
            max_connections_per_client: defaults::MAX_CONNECTIONS_PER_CLIENT,
            max_option_size: option_size_arg(defaults::MAX_OPTION_SIZE)
                .expect("the default option size is valid"),
            idle_timeout: defaults::IDLE_TIMEOUT_SECS,
            reply_timeout: defaults::REPLY_TIMEOUT_SECS,
            max_requests_per_connection: defaults::MAX_REQUESTS_PER_CONNECTION,
        }
    }
}

/// `--max-option-size`: a size from 8K to 1M.
fn option_size_arg(text: &str) -> Result<u32, String> {
    let bytes = crate::cmd::size_arg(text)?;
    let range = u64::from(nbd::MIN_OPTION_BYTES)..=u64::from(nbd::MAX_OPTION_BYTES);
    if !range.contains(&bytes) {
        return Err(format!("{text} is not from 8K to 1M"));
    }
    Ok(bytes as u32)
}

impl ClientLimits {
    /// The limits of the daemon's `[daemon]` keys, serve's default for each key left out
    /// (`raidkit daemon --check-config` has checked their ranges).
    pub fn of_daemon(daemon: &config::Daemon) -> ClientLimits {
        let default = ClientLimits::default();
        ClientLimits {
            handshake_timeout: (daemon.handshake_timeout_secs.as_ref())
                .map_or(default.handshake_timeout, |v| *v.get_ref()),
            max_connections: (daemon.max_connections.as_ref())
                .map_or(default.max_connections, |v| *v.get_ref()),
            max_connections_per_client: (daemon.max_connections_per_client.as_ref())
                .map_or(default.max_connections_per_client, |v| *v.get_ref()),
            max_option_size: (daemon.max_option_size.as_ref())
                .map_or(default.max_option_size, |v| v.get_ref().0 as u32),
            idle_timeout: (daemon.idle_timeout_secs.as_ref())
                .map_or(default.idle_timeout, |v| *v.get_ref()),
            reply_timeout: (daemon.reply_timeout_secs.as_ref())
                .map_or(default.reply_timeout, |v| *v.get_ref()),
            max_requests_per_connection: (daemon.max_requests_per_connection.as_ref())
                .map_or(default.max_requests_per_connection, |v| *v.get_ref()),
        }
    }

    /// `config` with the listener's limits (connections, handshake, options, idle) set.
    pub fn listener(&self, config: nbd::ServerConfig) -> nbd::ServerConfig {
        nbd::ServerConfig {
            handshake_timeout: Duration::from_secs(self.handshake_timeout),
            max_connections: self.max_connections as usize,
            max_connections_per_client: self.max_connections_per_client as usize,
            max_option_bytes: self.max_option_size,
            idle_timeout: (self.idle_timeout > 0).then(|| Duration::from_secs(self.idle_timeout)),
            reply_timeout: (self.reply_timeout > 0)
                .then(|| Duration::from_secs(self.reply_timeout)),
            ..config
        }
    }

    /// `config` with the export's limit of requests in flight per connection set.
    pub fn export(&self, config: nbd::ServerConfig) -> nbd::ServerConfig {
        nbd::ServerConfig {
            max_in_flight_per_conn: self.max_requests_per_connection as usize,
            ..config
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_nbd_servers_and_the_daemon_keys_override_them() {
        let limits = ClientLimits::default();
        let nbd_default = nbd::ServerConfig::default();
        let listener = limits.export(limits.listener(nbd::ServerConfig::default()));
        assert_eq!(listener.handshake_timeout, nbd_default.handshake_timeout);
        assert_eq!(listener.max_connections, nbd_default.max_connections);
        assert_eq!(
            listener.max_connections_per_client,
            nbd_default.max_connections_per_client
        );
        assert_eq!(listener.max_option_bytes, nbd_default.max_option_bytes);
        assert_eq!(listener.idle_timeout, None);
        assert_eq!(listener.reply_timeout, nbd_default.reply_timeout);
        assert_eq!(
            listener.max_in_flight_per_conn,
            nbd_default.max_in_flight_per_conn
        );

        let text = "[daemon]\nhandshake_timeout_secs = 3\nmax_connections = 9\n\
                    max_connections_per_client = 2\nmax_option_size = \"16K\"\n\
                    idle_timeout_secs = 600\nmax_requests_per_connection = 8\n\
                    reply_timeout_secs = 0\n";
        let config = config::Config::parse(text, std::path::Path::new("t.toml")).unwrap();
        let set = ClientLimits::of_daemon(&config.daemon);
        let listener = set.export(set.listener(nbd::ServerConfig::default()));
        assert_eq!(listener.handshake_timeout, Duration::from_secs(3));
        assert_eq!(
            (
                listener.max_connections,
                listener.max_connections_per_client
            ),
            (9, 2)
        );
        assert_eq!(listener.max_option_bytes, 16 << 10);
        assert_eq!(listener.idle_timeout, Some(Duration::from_secs(600)));
        assert_eq!(listener.max_in_flight_per_conn, 8);
        assert_eq!(listener.reply_timeout, None);
        let empty = config::Config::parse("", std::path::Path::new("t.toml")).unwrap();
        assert_eq!(ClientLimits::of_daemon(&empty.daemon), limits);
    }

    #[test]
    fn option_size_is_checked() {
        assert_eq!(option_size_arg("8K"), Ok(8 << 10));
        assert_eq!(option_size_arg("1M"), Ok(1 << 20));
        assert!(option_size_arg("4K").is_err());
        assert!(option_size_arg("2M").is_err());
    }
}
