//! What changed between two readings of the file, key by key (a reload): values are compared,
//! not where they stand in the file. Which changes a running service can apply is the
//! service's business; this only names the keys.

use crate::model::{Alerts, ArrayConfig, Daemon};

/// The names of the fields of `$a` (a `$ty`) whose values differ from `$b`'s. The pattern is
/// exhaustive: a field added to `$ty` and not listed here fails to compile, so no key can be
/// left out of a reload's diff.
macro_rules! changed_keys {
    ($a:expr, $b:expr, $ty:ident { $($field:ident),* $(,)? }) => {{
        let $ty { $($field: _),* } = $a;
        let mut keys: Vec<&'static str> = Vec::new();
        $(
            if $a.$field != $b.$field {
                keys.push(stringify!($field));
            }
        )*
        keys
    }};
}

impl ArrayConfig {
    /// The keys of this `[[array]]` whose values differ in `new` (members and spares compared
    /// as sets: their order in the file means nothing).
    pub fn changed_keys(&self, new: &ArrayConfig) -> Vec<&'static str> {
        let (old, new) = (self.normalized(), new.normalized());
        changed_keys!(
            &old,
            &new,
            ArrayConfig {
                name,
                uuid,
                export,
                members,
                spares,
                spare_group,
                journal,
                allow_volatile_journal,
                read_only,
                listen,
                unix,
                cache_size,
                read_ahead,
                read_ahead_window,
                buffer_memory,
                speed_min,
                speed_max,
                gather_wait_ms,
                latency_target_us,
                max_bandwidth,
                max_iops,
                nice,
                read_errors_max,
                read_error_window_secs,
                io_timeout_secs,
                local_io_deadline,
                member_cache,
                write_mostly,
                read_balance,
                member_io,
                reconnect,
                reconnect_interval_max_secs,
                scrub_schedule,
                background_window,
                key_file,
                passphrase_file,
            }
        )
    }

    /// A copy with members and spares in one order.
    fn normalized(&self) -> ArrayConfig {
        let mut copy = self.clone();
        copy.members.sort_by(|a, b| a.get_ref().cmp(b.get_ref()));
        copy.spares.sort_by(|a, b| a.get_ref().cmp(b.get_ref()));
        copy.write_mostly
            .sort_by(|a, b| a.get_ref().cmp(b.get_ref()));
        copy
    }
}

impl Daemon {
    /// The keys of `[daemon]` whose values differ in `new`.
    pub fn changed_keys(&self, new: &Daemon) -> Vec<&'static str> {
        changed_keys!(
            self,
            new,
            Daemon {
                listen,
                unix,
                admin,
                admin_listen,
                admin_tls_certificates,
                admin_token_file,
                admin_tls_verify_peer,
                metrics,
                mdstat,
                dashboard_token_file,
                log_format,
                tls,
                tls_certificates,
                tls_verify_peer,
                handshake_timeout_secs,
                max_connections,
                max_connections_per_client,
                max_option_size,
                idle_timeout_secs,
                reply_timeout_secs,
                max_requests_per_connection,
            }
        )
    }
}

impl Alerts {
    /// The keys of `[alerts]` whose values differ in `new`.
    pub fn changed_keys(&self, new: &Alerts) -> Vec<&'static str> {
        changed_keys!(
            self,
            new,
            Alerts {
                program,
                mail_to,
                mail_command,
                webhook,
                syslog,
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::Config;

    fn parse(text: &str) -> Config {
        Config::parse(text, Path::new("test.toml")).unwrap()
    }

    #[test]
    fn names_the_keys_whose_values_changed_and_ignores_layout_and_member_order() {
        let old = parse(
            "[daemon]\nlisten = [\"127.0.0.1:1\"]\n\n[[array]]\nname = \"a\"\n\
             members = [\"x\", \"y\"]\nspeed_max = \"10M\"\n",
        );
        // Comments, blank lines, another order of members and keys: no change.
        let same = parse(
            "# moved around\n[[array]]\n\nspeed_max = \"10M\"\nmembers = [\"y\", \"x\"]\n\
             name = \"a\"\n[daemon]\nlisten = [\"127.0.0.1:1\"]\n",
        );
        assert!(old.arrays[0].changed_keys(&same.arrays[0]).is_empty());
        assert!(old.daemon.changed_keys(&same.daemon).is_empty());
        assert!(old.alerts.changed_keys(&same.alerts).is_empty());

        let new = parse(
            "[daemon]\nlisten = [\"127.0.0.1:2\"]\n[alerts]\nsyslog = true\n\n[[array]]\n\
             name = \"a\"\nmembers = [\"x\", \"z\"]\nspeed_max = \"20M\"\nread_only = true\n",
        );
        assert_eq!(
            old.arrays[0].changed_keys(&new.arrays[0]),
            ["members", "read_only", "speed_max"]
        );
        assert_eq!(old.daemon.changed_keys(&new.daemon), ["listen"]);
        assert_eq!(old.alerts.changed_keys(&new.alerts), ["syslog"]);
    }
}
