//! Which accepted connections a listener keeps: at most `max_connections` in all and at most
//! `max_connections_per_client` from one client address, so that silent or slow connections
//! from one address cannot take every slot. A refused connection is closed at once and logged
//! on one line at most every [`REFUSAL_LOG_INTERVAL`] (the lines in between are counted).
//!
//! A client address is a TCP peer's IPv4 address, or the /64 prefix of its IPv6 address (one
//! IPv6 host is normally given a whole /64 and can take any address in it). Unix-socket
//! clients have no address to tell apart: they count in the total only.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// At most one refusal line per listener this often.
pub(crate) const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Where a connection comes from, as the per-address limit counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Client {
    V4(std::net::Ipv4Addr),
    /// The first 64 bits of an IPv6 address.
    V6Prefix(u64),
    /// A Unix-socket client (or a TCP peer whose address could not be read).
    Local,
}

impl Client {
    pub fn of(peer: Option<SocketAddr>) -> Client {
        match peer.map(|p| p.ip().to_canonical()) {
            Some(IpAddr::V4(ip)) => Client::V4(ip),
            Some(IpAddr::V6(ip)) => Client::V6Prefix((ip.to_bits() >> 64) as u64),
            None => Client::Local,
        }
    }
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Client::V4(ip) => write!(f, "{ip}"),
            Client::V6Prefix(prefix) => {
                write!(f, "{}/64", Ipv6Addr::from_bits(u128::from(*prefix) << 64))
            }
            Client::Local => write!(f, "a Unix-socket client"),
        }
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `max_connections` are open.
    Total(usize),
    /// The client's address has `max_connections_per_client` open.
    PerClient(usize),
}

/// The connection counts of one listener.
pub(crate) struct Admission {
    max_total: usize,
    max_per_client: usize,
    state: Mutex<State>,
}

struct State {
    total: usize,
    /// Open connections by client address; an address leaves the map with its last
    /// connection, so it holds at most `max_total` entries.
    per_client: HashMap<Client, usize>,
    refusals: RateLimit,
}

/// A connection's place in the counts, given back when dropped.
pub(crate) struct Admitted {
    admission: Arc<Admission>,
    client: Client,
}

impl Admission {
    pub fn new(max_total: usize, max_per_client: usize) -> Arc<Admission> {
        Arc::new(Admission {
            max_total,
            max_per_client,
            state: Mutex::new(State {
                total: 0,
                per_client: HashMap::new(),
                refusals: RateLimit::new(REFUSAL_LOG_INTERVAL),
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a new connection from `client`, or says which limit refuses it.
    pub fn admit(self: &Arc<Self>, client: Client) -> Result<Admitted, Refusal> {
        let mut state = self.lock();
        if state.total >= self.max_total {
            return Err(Refusal::Total(self.max_total));
        }
        if client != Client::Local {
            let open = state.per_client.entry(client).or_insert(0);
            if *open >= self.max_per_client {
                return Err(Refusal::PerClient(self.max_per_client));
            }
            *open += 1;
        }
        state.total += 1;
        Ok(Admitted {
            admission: Arc::clone(self),
            client,
        })
    }

    /// Logs `refusal` of a connection from `client`, at most once per interval.
    pub fn log_refusal(&self, client: Client, refusal: Refusal) {
        let Some(suppressed) = self.lock().refusals.allow(Instant::now()) else {
            return;
        };
        let more = match suppressed {
            0 => String::new(),
            n => format!(" ({n} more refused since the last such message)"),
        };
        match refusal {
            Refusal::Total(max) => log::warn!(
                "nbd: refused a connection from {client}: {max} connections are open, the \
                 most this listener takes; raise it with --max-connections (daemon: \
                 max_connections){more}"
            ),
            Refusal::PerClient(max) => log::warn!(
                "nbd: refused a connection from {client}: it has {max} connections open, the \
                 most one client address may have; raise it with --max-connections-per-client \
                 (daemon: max_connections_per_client){more}"
            ),
        }
    }

    /// Open connections: in all, and from `client`.
    #[cfg(test)]
    fn open(&self, client: Client) -> (usize, usize) {
        let state = self.lock();
        let of_client = state.per_client.get(&client).copied().unwrap_or(0);
        (state.total, of_client)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut state = self.admission.lock();
        state.total -= 1;
        if self.client != Client::Local {
            let open = state
                .per_client
                .get_mut(&self.client)
                .expect("an admitted client is counted");
            *open -= 1;
            if *open == 0 {
                state.per_client.remove(&self.client);
            }
        }
    }
}

/// Lets one event through per interval and counts the ones held back.
pub(crate) struct RateLimit {
    interval: Duration,
    last: Option<Instant>,
    held_back: u64,
}

impl RateLimit {
    pub fn new(interval: Duration) -> RateLimit {
        RateLimit {
            interval,
            last: None,
            held_back: 0,
        }
    }

    /// `Some(events held back since the last one let through)` if the event at `now` may be
    /// logged, `None` (and counted) if not.
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < self.interval)
        {
            self.held_back += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.held_back))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(addr: &str) -> Client {
        Client::of(Some(addr.parse().expect("socket address")))
    }

    #[test]
    fn limits_the_total_and_each_address_and_gives_slots_back() {
        let admission = Admission::new(5, 2);
        let a = tcp("192.0.2.1:1000");
        let b = tcp("192.0.2.2:1000");
        let a1 = admission.admit(a).expect("first");
        let a2 = admission
            .admit(tcp("192.0.2.1:1001"))
            .expect("second, other port");
        assert_eq!(admission.admit(a).err(), Some(Refusal::PerClient(2)));
        let b1 = admission.admit(b).expect("another address");
        let l1 = admission.admit(Client::Local).expect("unix");
        let l2 = admission.admit(Client::Local).expect("unix: total only");
        assert_eq!(admission.open(a), (5, 2));
        assert_eq!(
            admission.admit(Client::Local).err(),
            Some(Refusal::Total(5))
        );
        assert_eq!(
            admission.admit(tcp("192.0.2.3:1")).err(),
            Some(Refusal::Total(5))
        );
        drop(a1);
        assert_eq!(admission.open(a), (4, 1));
        let a3 = admission.admit(a).expect("a slot given back");
        drop((a2, a3, b1, l1, l2));
        assert_eq!(admission.open(a), (0, 0));
        assert!(
            admission.lock().per_client.is_empty(),
            "no address left behind"
        );
    }

    #[test]
    fn ipv6_clients_count_by_64_prefix_and_mapped_ipv4_as_ipv4() {
        let one = tcp("[2001:db8:1:2::1]:1");
        assert_eq!(one, tcp("[2001:db8:1:2:ffff::9]:2"));
        assert_ne!(one, tcp("[2001:db8:1:3::1]:1"));
        assert_eq!(one.to_string(), "2001:db8:1:2::/64");
        assert_eq!(tcp("[::ffff:192.0.2.7]:1"), tcp("192.0.2.7:9"));
        assert_eq!(tcp("192.0.2.7:9").to_string(), "192.0.2.7");
        assert_eq!(Client::of(None), Client::Local);
    }

    #[test]
    fn rate_limit_lets_one_through_per_interval_and_counts_the_rest() {
        let mut limit = RateLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(limit.allow(t0), Some(0));
        for i in 1..=5 {
            assert_eq!(limit.allow(t0 + Duration::from_secs(i)), None);
        }
        assert_eq!(limit.allow(t0 + Duration::from_secs(10)), Some(5));
        assert_eq!(limit.allow(t0 + Duration::from_secs(11)), None);
        assert_eq!(limit.allow(t0 + Duration::from_secs(25)), Some(1));
    }
}
