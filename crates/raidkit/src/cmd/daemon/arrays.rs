//! The daemon's running arrays as one set that can change while the daemon serves: an array
//! is added (started from its [[array]] entry, its export added to its listener's export set,
//! its control to the admin socket, its volume to the monitor) and removed (taken off the
//! admin socket and the monitor, its export removed and drained — the clients' requests
//! already read are answered, then their connections close —, then closed cleanly).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use admin::server::Arrays;
use admin::status::QosSection;
use alerts::Alerter;
use anyhow::{anyhow, Context};
use config::ArrayConfig;
use service::monitor::{Monitor, WatchOptions};
use service::running::RunningArray;
use service::schedule::Scheduler;

use super::{array_options, buffer_memory, open_options, remote_options, start_array};
use crate::client_limits::ClientLimits;
use crate::cmd::serve;

/// Declares [`LIVE_KEYS`] and `with_live_keys` from one list of `[[array]]` fields, so the
/// keys a reload reports as applied live are exactly the ones `ArraySet::retune` copies.
macro_rules! live_keys {
    ($(#[$doc:meta])* $($key:ident),* $(,)?) => {
        $(#[$doc])*
        pub(super) const LIVE_KEYS: &[&str] = &[$(stringify!($key)),*];

        /// `config` with `new`'s values of the [`LIVE_KEYS`] (from the same list: a key added
        /// there is copied too).
        fn with_live_keys(config: &ArrayConfig, new: &ArrayConfig) -> ArrayConfig {
            ArrayConfig {
                $($key: new.$key.clone(),)*
                ..config.clone()
            }
        }
    };
}

live_keys!(
    /// The `[[array]]` keys a running array takes without a restart: the background rate limits
    /// (`Volume::set_speed_limits`), the fault policy's read-error count and window
    /// (`Volume::set_fault_policy`), the RAID 5/6 partial-stripe wait (`Volume::set_gather_wait`),
    /// the write-mostly members (`Volume::set_write_mostly`), the read balance
    /// (`Volume::set_read_balance`),
    /// the scrub schedule and background window (the scheduler follows the new plan from now:
    /// the next run counts from the reload, the window is applied at once), and the QoS latency
    /// target (`nbd::QosClass::set_target`: judged from the next window on) and caps
    /// (`nbd::QosClass::set_caps`: the buckets start full).
    /// The others are fixed when the array starts: its members, spares and journal, how members
    /// are opened (`io_timeout_secs` is also each remote member's client deadline), the read cache
    /// and its read-ahead threads, the export's name, listener and buffer budget, read-only.
    speed_min,
    speed_max,
    read_errors_max,
    read_error_window_secs,
    gather_wait_ms,
    write_mostly,
    read_balance,
    scrub_schedule,
    background_window,
    latency_target_us,
    max_bandwidth,
    max_iops,
);

/// Told the name of an array another process took over (its members are fenced already), from
/// the array's lease renewal thread.
pub(super) type TakenOverHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Where each array's export is added: the export set of the daemon's shared listeners, or
/// that of the array's own listeners (bound at start).
pub(super) struct Routes {
    pub shared: Arc<nbd::Exports>,
    /// The first shared listener (`None`: none is bound, every array had its own at start).
    pub shared_at: Option<nbd::Address>,
    /// By array name: its own listeners' export set and where the first one is reached.
    pub own: BTreeMap<String, (Arc<nbd::Exports>, Option<nbd::Address>)>,
}

impl Routes {
    /// The export set `a` is served in and where clients reach it.
    fn of(&self, a: &ArrayConfig) -> anyhow::Result<(&Arc<nbd::Exports>, Option<&nbd::Address>)> {
        let name = a.name.get_ref();
        if a.has_own_listener() {
            let (exports, at) = self.own.get(name).ok_or_else(|| {
                anyhow!(
                    "it has a listener of its own (listen/unix), and those are bound when the \
                     daemon starts: restart the daemon to serve it"
                )
            })?;
            return Ok((exports, at.as_ref()));
        }
        match &self.shared_at {
            Some(at) => Ok((&self.shared, Some(at))),
            None => Err(anyhow!(
                "the daemon has no shared listener (every array had its own when it started): \
                 restart the daemon to serve it"
            )),
        }
    }
}

/// One array being served.
struct Served {
    /// The entry it runs with (a reload that changes a tunable live updates it).
    config: ArrayConfig,
    array: RunningArray,
    exports: Arc<nbd::Exports>,
    /// Its class in the daemon's QoS group (also in its export's server configuration).
    qos: Arc<nbd::QosClass>,
}

/// What every array of the set is hooked into while it is served.
pub(super) struct Services {
    pub routes: Routes,
    pub admin: Arc<Arrays>,
    pub monitor: Arc<Monitor>,
    /// Scheduled scrubs and the background window.
    pub scheduler: Arc<Scheduler>,
    pub alerter: Arc<Alerter>,
    pub log: admin::Log,
    /// Where a removed export's drain is awaited (from a thread outside the runtime's tasks).
    pub runtime: tokio::runtime::Handle,
    /// `[daemon]`'s client limits as the daemon started with them (requests in flight per
    /// connection is each export's).
    pub limits: ClientLimits,
    /// Every array's export is a class of this group: the arrays' latency targets and the
    /// throttle of the others while one is missed (`nbd::qos`).
    pub qos: Arc<nbd::QosGroup>,
}

/// The arrays the daemon serves, by name; see the module documentation.
pub(super) struct ArraySet {
    services: Services,
    taken: TakenOverHook,
    served: BTreeMap<String, Served>,
    /// Every array of the configuration, served or not: where an array of a spare group
    /// looks for the spares lent to it.
    peers: Vec<ArrayConfig>,
}

impl ArraySet {
    pub fn new(services: Services) -> ArraySet {
        ArraySet {
            services,
            // Until `on_taken_over`: the array stays fenced and listed until the daemon stops.
            taken: Arc::new(|_| {}),
            served: BTreeMap::new(),
            peers: Vec::new(),
        }
    }

    /// `taken` hears each array another process takes over (see [`TakenOverHook`]).
    pub fn on_taken_over(&mut self, taken: TakenOverHook) {
        self.taken = taken;
    }

    /// The configuration's arrays (all of them, served or not), for spare groups.
    pub fn know_peers(&mut self, arrays: &[ArrayConfig]) {
        self.peers = arrays.to_vec();
    }

    pub fn len(&self) -> usize {
        self.served.len()
    }

    /// The names of the arrays served, in order.
    pub fn names(&self) -> Vec<String> {
        self.served.keys().cloned().collect()
    }

    /// The entry array `name` runs with.
    pub fn config_of(&self, name: &str) -> Option<&ArrayConfig> {
        self.served.get(name).map(|s| &s.config)
    }

    /// Gives the served array of `new`'s name the values of `new`'s [`LIVE_KEYS`] (its other
    /// keys are left as they run).
    pub fn retune(&mut self, new: &ArrayConfig) -> anyhow::Result<()> {
        let name = new.name.get_ref();
        let served = self
            .served
            .get_mut(name)
            .with_context(|| format!("no array {name:?} is served"))?;
        let config = with_live_keys(&served.config, new);
        let opts = array_options(&config)?;
        let volume = served.array.volume();
        volume.set_speed_limits(opts.assemble.speed_limits);
        volume.set_fault_policy(opts.assemble.fault_policy);
        volume.set_gather_wait(opts.stack.gather_wait);
        volume
            .set_write_mostly(&opts.stack.write_mostly)
            .with_context(|| format!("array {name:?}: write_mostly"))?;
        volume.set_read_balance(opts.stack.read_balance);
        served.qos.set_target(latency_target(&config));
        served.qos.set_caps(caps(&config).0, caps(&config).1);
        let plan = super::scrub_plan(&config);
        if plan != super::scrub_plan(&served.config) {
            self.services.scheduler.forget(volume);
            self.services.scheduler.watch(name, volume, plan);
        }
        served.config = config;
        Ok(())
    }

    /// Starts the array `a` describes and serves it: its export on its listeners, its
    /// control on the admin socket, its volume watched by the monitor (what it finds at
    /// start raised at once). Prints the "serving" line. If it cannot be served, nothing of
    /// it is left running.
    pub fn add(&mut self, a: &ArrayConfig) -> anyhow::Result<()> {
        let name = a.name.get_ref().clone();
        anyhow::ensure!(
            !self.served.contains_key(&name),
            "an array named {name:?} is served already"
        );
        let (exports, at) = self.services.routes.of(a)?;
        let (exports, uri) = (Arc::clone(exports), at.map(|at| at.uri(a.export_name())));
        let nice = a.nice.as_ref().map(|n| *n.get_ref());
        if let Some(n) = nice {
            nbd::check_thread_nice(n).map_err(|e| {
                anyhow!(
                    "nice = {n}: the daemon cannot run threads at that niceness ({e}): one \
                     below the daemon's own needs CAP_SYS_NICE (AmbientCapabilities= in its \
                     unit); raise the value or grant it"
                )
            })?;
        }
        let array = start_array(a, &self.peers, &self.services.alerter, &self.taken)?;
        let volume = Arc::clone(array.volume());
        let export = a.export_name().to_string();
        let limits = &self.services.limits;
        let qos = self.services.qos.join(latency_target(a));
        qos.set_caps(caps(a).0, caps(a).1);
        let server = nbd::ServerConfig {
            qos: Some(Arc::clone(&qos)),
            thread_nice: nice,
            ..serve::server_config(
                export.clone(),
                &volume,
                a.read_only,
                buffer_memory(a),
                limits,
            )
        };
        if let Err(e) = exports.add(array.stack().export(), server) {
            let not_served = anyhow!(e).context(format!("serving export {export:?}"));
            return Err(match close(array) {
                Ok(()) => not_served,
                Err(closing) => not_served.context(format!("then closing it: {closing:#}")),
            });
        }
        let class = Arc::clone(&qos);
        let control = array
            .stack()
            .control(
                open_options(a),
                remote_options(a),
                Arc::clone(&self.services.log),
            )
            .with_qos(Box::new(move || qos_section(&class.snapshot())));
        self.services.admin.insert(&name, Arc::new(control));
        let watch = WatchOptions {
            name: name.clone(),
            spares_listed: a.spares.len(),
            // A read-only array writes no superblock: it neither lends nor borrows.
            spare_group: (a.spare_group.as_ref())
                .filter(|_| !a.read_only)
                .map(|g| g.get_ref().clone()),
        };
        for alert in self.services.monitor.watch(array.stack(), watch) {
            self.services.alerter.raise(alert);
        }
        self.services
            .scheduler
            .watch(&name, &volume, super::scrub_plan(a));
        println!(
            "raidkit: serving \"{export}\" ({}) at {}",
            serve::describe(&volume),
            uri.unwrap_or_default()
        );
        use std::io::Write;
        let _ = std::io::stdout().flush();
        self.served.insert(
            name,
            Served {
                config: a.clone(),
                array,
                exports,
                qos,
            },
        );
        Ok(())
    }

    /// Stops serving array `name` and closes it: off the admin socket and the monitor, its
    /// export removed (new clients cannot select it; the requests its clients sent are
    /// answered, then their connections close), then closed in its safe order (journal
    /// drained, members flushed, superblocks marked clean, owner released). Prints how it
    /// closed; the error says what did not close cleanly.
    pub fn remove(&mut self, name: &str) -> anyhow::Result<()> {
        let served = self
            .served
            .remove(name)
            .with_context(|| format!("no array {name:?} is served"))?;
        self.services.admin.remove(name);
        self.services.monitor.forget(served.array.volume());
        self.services.scheduler.forget(served.array.volume());
        if let Some(removed) = served.exports.remove(served.config.export_name()) {
            self.services.runtime.block_on(removed.drained());
        }
        if served.array.taken_over() {
            served.array.abandon();
            crate::log::emit(&format!(
                "array \"{name}\" no longer served: another process took it over \
                 (nothing more was written to it)"
            ));
            return Ok(());
        }
        let closed = close(served.array);
        match &closed {
            Ok(()) => crate::log::emit(&format!("array \"{name}\" closed cleanly")),
            Err(e) => crate::log::emit(&format!(
                "error: array \"{name}\" did not close cleanly: {e:#}"
            )),
        }
        closed
    }

    /// Stops serving array `name`, which another process took over (its fence is closed),
    /// writing nothing more to it; nothing if it is not served (a reload removed it).
    pub fn abandon(&mut self, name: &str) {
        if self.served.get(name).is_some_and(|s| s.array.taken_over()) {
            let _ = self.remove(name);
        }
    }

    /// Removes every array (the daemon is stopping); the first error is returned.
    pub fn remove_all(&mut self) -> Option<anyhow::Error> {
        let names: Vec<String> = self.served.keys().cloned().collect();
        let mut failed = None;
        for name in names {
            if let Err(e) = self.remove(&name) {
                failed.get_or_insert(e);
            }
        }
        failed
    }
}

/// The latency target of `a` (`latency_target_us`).
fn latency_target(a: &ArrayConfig) -> Option<Duration> {
    (a.latency_target_us.as_ref()).map(|us| Duration::from_micros(*us.get_ref()))
}

/// The caps of `a` (`max_bandwidth`, `max_iops`).
fn caps(a: &ArrayConfig) -> (Option<u64>, Option<u64>) {
    (
        a.max_bandwidth.as_ref().map(|b| b.get_ref().0),
        a.max_iops.as_ref().map(|n| *n.get_ref()),
    )
}

/// The status's QoS section of a class.
fn qos_section(s: &nbd::QosSnapshot) -> QosSection {
    QosSection {
        latency_target_us: s.latency_target.map(|t| t.as_micros() as u64),
        throttle_level: s.level as u32,
        max_level: nbd::qos::controller::MAX_LEVEL as u32,
        max_in_flight: s.max_in_flight,
        pause_factor: s.pause_factor,
        throttled_requests: s.throttled_requests,
        throttled_us: s.throttled.as_micros() as u64,
        scale_downs: s.scale_downs,
        windows_missed: s.windows_missed,
        last_window_requests: s.last_window.map(|w| w.samples),
        last_window_over_target: s.last_window.map(|w| w.over),
        max_bandwidth_bytes_per_sec: s.max_bytes_per_sec,
        max_iops: s.max_iops,
        capped_requests: s.capped_requests,
        capped_us: s.capped.as_micros() as u64,
    }
}

/// Closes `array` (no export clone of it left), its steps' first error returned.
fn close(array: RunningArray) -> anyhow::Result<()> {
    let closed = array.close();
    closed
        .drained
        .and(closed.volume)
        .and(closed.journal.map(|_| ()))
}
