//! `raidkit daemon`: every array of a configuration file served by one process, with alerts.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use admin::server::{AdminSocket, Arrays};
use alerts::{Alert, Alerter, Event, Targets};
use anyhow::{anyhow, bail, Context};
use cache::{CacheConfig, ReadAhead};
use config::{ArrayConfig, Config};
use member::{OpenOptions, RemoteOptions};
use sd_notify::NotifyState;
use service::array_journal::JournalOptions;
use service::mdstat_file::{self, MdstatFile};
use service::monitor::Monitor;
use service::periodic::Periodic;
use service::reconnect;
use service::running::{self, ArrayOptions, Happening, RunningArray};
use service::schedule::{self, Scheduler};
use service::stack::StackOptions;
use service::start::StartNotice;
use volume::{AssembleOptions, FaultPolicy, SpeedLimits};

use super::manage::rate_arg;
use super::serve::{self, defaults};
use crate::client_limits::ClientLimits;
use arrays::{ArraySet, Routes};
use reload::Reloader;

mod arrays;
mod reload;

/// The admin socket when the configuration names none.
pub(crate) const ADMIN_DEFAULT: &str = "/run/raidkit/admin.sock";
/// Time queued alerts get to go out at shutdown.
const ALERT_GRACE: Duration = Duration::from_secs(5);

/// Serve every array a configuration file names, until SIGINT or SIGTERM.
///
/// Each [[array]] is assembled from its members' superblocks and served under its export name
/// on the daemon's listeners (or its own), as `raidkit serve` would serve it; an array that
/// cannot start is reported and the others are served. The admin socket serves them all
/// (`raidkit status --admin PATH --array NAME`). Every event (a member failing, an array
/// degraded, a rebuild's progress) is logged and sent to the [alerts] targets. The arrays are
/// also described in a file in /proc/mdstat's format, for node_exporter and telegraf
/// (`[daemon] mdstat`; default `mdstat` beside the admin socket, /run/raidkit/mdstat). SIGHUP
/// (or `raidkit reload`) reads the file again: new arrays are served, removed ones drained and
/// closed, speed and error limits and scrub schedules changed live, other changes reported.
/// With --check-config the file is only checked: every problem is printed with its line and key,
/// and nothing is opened.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The configuration file (TOML; `raidkit examine --scan` prints entries for it).
    #[arg(long, value_name = "PATH", default_value = config::DEFAULT_PATH)]
    config: PathBuf,

    /// Check the configuration and exit: 0 when it has no problem.
    #[arg(long)]
    check_config: bool,

    /// How log lines are written to stderr: `text` (for people) or `json` (one object per
    /// line: time, level, array, event, message). Default: [daemon] log_format, else text.
    #[arg(long, value_name = "FORMAT")]
    log_format: Option<LogFormatArg>,
}

/// `--log-format`'s values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormatArg {
    Text,
    Json,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let config = Config::load(&args.config).map_err(|problems| {
        let count = problems.list.len();
        anyhow!("{problems}\n{count} problem(s) in the configuration: nothing was started")
    })?;
    let json = match args.log_format {
        Some(format) => matches!(format, LogFormatArg::Json),
        None => config.daemon.log_format == config::LogFormat::Json,
    };
    crate::log::set_format(match json {
        true => crate::log::Format::Json,
        false => crate::log::Format::Text,
    });
    crate::log::forward_library_warnings();
    if args.check_config {
        println!(
            "{}: {} array(s), no problem found",
            args.config.display(),
            config.arrays.len()
        );
        return Ok(());
    }
    if config.arrays.is_empty() {
        bail!(
            "{} names no [[array]]: nothing to serve (`raidkit examine --scan` prints entries \
             for the arrays on your disks)",
            args.config.display()
        );
    }
    serve::fix_mmap_threshold();
    crate::log::note_member_io();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let log: admin::Log = Arc::new(crate::log::emit);
    let admin_path = config
        .daemon
        .admin
        .as_ref()
        .map_or_else(|| PathBuf::from(ADMIN_DEFAULT), |p| p.get_ref().clone());
    let admin = bind_admin(&admin_path, &log)?;
    let admin_tcp = (config.daemon.admin_listen.as_ref())
        .map(|addr| {
            serve::bind_admin_tcp(
                addr.get_ref(),
                config
                    .daemon
                    .admin_tls_certificates
                    .as_ref()
                    .map(|d| d.get_ref().as_path()),
                config
                    .daemon
                    .admin_token_file
                    .as_ref()
                    .map(|f| f.get_ref().as_path()),
                config
                    .daemon
                    .admin_tls_verify_peer
                    .as_ref()
                    .is_some_and(|v| *v.get_ref()),
            )
        })
        .transpose()?;
    let metrics = (config.daemon.metrics.as_ref())
        .map(|addr| serve::bind_metrics(addr.get_ref()))
        .transpose()?;
    let token = (config.daemon.dashboard_token_file.as_ref())
        .map(|path| {
            dashboard::token::Token::from_file(path.get_ref(), dashboard::token::TOKEN_FILE)
        })
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let mdstat_path = config.daemon.mdstat_path(&admin_path);
    if let Some(dir) = mdstat_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create {} for the mdstat file", dir.display()))?;
    }
    // The arrays on the admin socket, listed in the mdstat file under the same names.
    let admin_arrays = Arc::new(Arrays::default());
    let mdstat = MdstatFile::start(
        &mdstat_path,
        mdstat_file::served_by(Arc::clone(&admin_arrays)),
        Arc::clone(&log),
    )?;
    let alerter = Arc::new(Alerter::start(&targets(&config), Arc::clone(&log)));
    let monitor = Arc::new(Monitor::start(Arc::clone(&alerter)));
    let scheduler = Arc::new(start_scheduler());
    // Before any array starts or is announced: from here on SIGINT/SIGTERM stop the daemon
    // cleanly (a signal during the start is acted on once serving begins) and SIGHUP cannot
    // kill it.
    let signals = {
        let _runtime = runtime.enter();
        Signals::register()
    };
    let (listeners, routes) = runtime.block_on(Listeners::bind(&config))?;

    // Before any array starts: its events are the alerter's, every one from the first (the
    // status changes it samples are not turned into events too, so none shows twice).
    let dashboard = (metrics.as_ref()).map(|_| {
        Arc::new(dashboard::Dashboard::start_with(
            Arc::clone(&admin_arrays),
            token,
            dashboard::EventSource::Alerts,
        ))
    });
    if let Some(dashboard) = &dashboard {
        alerter.tap(dashboard.tap());
    }
    admin_arrays.set_test_alerts(test_alerts(&alerter));
    let reloader = Arc::new_cyclic(|me: &Weak<Reloader>| {
        let me = me.clone();
        let taken: arrays::TakenOverHook = Arc::new(move |name: &str| {
            let (me, name) = (me.clone(), name.to_string());
            // Not on the lease renewal's thread that tells it: abandoning waits for that one.
            std::thread::spawn(move || {
                if let Some(reloader) = me.upgrade() {
                    reloader.abandon(&name);
                }
            });
        });
        let mut arrays = ArraySet::new(arrays::Services {
            routes,
            admin: Arc::clone(&admin_arrays),
            monitor: Arc::clone(&monitor),
            scheduler: Arc::clone(&scheduler),
            alerter: Arc::clone(&alerter),
            log: Arc::clone(&log),
            runtime: runtime.handle().clone(),
            limits: ClientLimits::of_daemon(&config.daemon),
            qos: nbd::QosGroup::new(),
        });
        arrays.on_taken_over(taken);
        arrays.know_peers(&config.arrays);
        Reloader::new(args.config.clone(), &config, arrays, Arc::clone(&alerter))
    });
    let started = reloader.start_all(&config.arrays);
    if started == 0 {
        drop(reloader);
        drop(monitor);
        if let Ok(alerter) = Arc::try_unwrap(alerter) {
            alerter.shutdown(ALERT_GRACE);
        }
        bail!("no array of {} could be started", args.config.display());
    }
    crate::log::emit(&format!("admin API on {}", admin_path.display()));
    let watchdog = start_watchdog(Arc::clone(&monitor));
    let ready = format!("serving {started} of {} arrays", config.arrays.len());
    admin_arrays.set_reload(reload::admin_hook(Arc::clone(&reloader)));
    let metrics = metrics.map(|listener| {
        let served = Arc::clone(&admin_arrays);
        let log = Arc::clone(&log);
        let pages = dashboard.clone().map(|d| d as Arc<dyn admin::pages::Pages>);
        runtime.spawn(serve::serve_metrics(
            listener,
            served,
            log,
            pages,
            std::future::pending(),
        ))
    });
    if let Some(tcp) = &admin_tcp {
        serve::announce_admin_tcp(tcp)?;
    }
    systemd(&[NotifyState::Ready, NotifyState::Status(&ready)]);

    let served = runtime.block_on(listeners.serve(
        &admin,
        admin_tcp,
        Arc::clone(&admin_arrays),
        Arc::clone(&log),
        signals,
        Arc::clone(&reloader),
    ));
    systemd(&[NotifyState::Stopping]);
    if let Some(metrics) = metrics {
        metrics.abort();
    }
    drop(dashboard);
    drop(watchdog);
    drop(admin);
    // No reload can run any more: the admin socket and the SIGHUP task are gone.
    drop(admin_arrays);
    let mut failed = served.err();
    if let Some(e) = reloader.remove_all() {
        failed.get_or_insert(e);
    }
    drop(reloader);
    drop(scheduler);
    if let Err(e) = mdstat.finish() {
        failed.get_or_insert(e);
    }
    drop(monitor);
    if let Ok(alerter) = Arc::try_unwrap(alerter) {
        alerter.shutdown(ALERT_GRACE);
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The signals the daemon handles, registered before it starts any array: SIGINT and SIGTERM
/// stop it, SIGHUP reloads the configuration (once serving began; until then its default
/// action, which would kill the daemon without closing its arrays, is held off).
struct Signals {
    shutdown: serve::ShutdownSignals,
    hangups: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Must run inside the runtime.
    fn register() -> Signals {
        let hangup = tokio::signal::unix::SignalKind::hangup();
        Signals {
            shutdown: serve::ShutdownSignals::register(),
            hangups: tokio::signal::unix::signal(hangup).ok(),
        }
    }
}

/// Tells systemd (when it started the daemon as `Type=notify`; else nothing happens).
fn systemd(state: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(state) {
        crate::log::emit(&format!("warning: cannot notify systemd: {e}"));
    }
}

/// The systemd watchdog (`WatchdogSec=`): pinged at half its interval while the monitor keeps
/// looking at every array, so a daemon stuck on an array is restarted by systemd. `None`
/// without a watchdog; stops when dropped.
fn start_watchdog(monitor: Arc<Monitor>) -> Option<Periodic> {
    let interval = sd_notify::watchdog_enabled()?;
    let ping = move || {
        if monitor.alive(interval / 2) {
            systemd(&[NotifyState::Watchdog]);
        } else {
            crate::log::emit("warning: the monitor is stuck: not pinging the watchdog");
        }
        ControlFlow::Continue(())
    };
    let watchdog = Periodic::start("watchdog", interval / 2, ping);
    Some(watchdog.expect("spawning the watchdog thread"))
}

fn bind_admin(path: &Path, log: &admin::Log) -> anyhow::Result<AdminSocket> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create {} for the admin socket", dir.display()))?;
    }
    AdminSocket::bind(path, log)
        .with_context(|| format!("cannot create the admin socket {}", path.display()))
}

/// The [alerts] table as the alerter takes it.
fn targets(config: &Config) -> Targets {
    let alerts = &config.alerts;
    let defaults = Targets::default();
    Targets {
        program: alerts.program.as_ref().map(|p| p.get_ref().clone()),
        mail_to: alerts.mail_to.as_ref().map(|m| m.get_ref().clone()),
        mail_command: alerts
            .mail_command
            .as_ref()
            .map_or(defaults.mail_command.clone(), |c| c.get_ref().clone()),
        webhook: alerts.webhook.as_ref().map(|w| w.get_ref().clone()),
        syslog: alerts.syslog,
        ..defaults
    }
}

/// `raidkit monitor --test`: a `TestMessage` for each array, through the daemon's alerter;
/// answers what was raised and the targets it goes to.
fn test_alerts(alerter: &Arc<Alerter>) -> admin::server::TestAlerts {
    let alerter = Arc::clone(alerter);
    Box::new(move |names| {
        for name in names {
            let message = "a test requested by `raidkit monitor --test`";
            alerter.raise(Alert::new(Event::TestMessage, name, None, message));
        }
        Ok(serde_json::json!({
            "event": Event::TestMessage.name(),
            "arrays": names,
            "targets": alerter.target_kinds(),
        }))
    })
}

/// The scheduler of the arrays' scrub schedules and background windows, on the system's
/// clock and time zone; what it does is logged under each array's name.
fn start_scheduler() -> Scheduler {
    let tell: schedule::Tell =
        Arc::new(|array: &str, note| crate::log::emit(&format!("array \"{array}\": {note}")));
    Scheduler::start(Arc::new(schedule::SystemClock), tell, schedule::TICK)
}

/// What the scheduler does for array `a`: its `scrub_schedule` (default off) and
/// `background_window` (default none).
fn scrub_plan(a: &ArrayConfig) -> schedule::Plan {
    schedule::Plan {
        schedule: a
            .scrub_schedule
            .as_ref()
            .map_or(config::Schedule::Off, |s| s.get_ref().clone()),
        window: a.background_window.as_ref().map(|w| *w.get_ref()),
    }
}

/// Starts one array, its happenings logged under its name; a takeover is alerted and handed
/// to `taken` (which stops serving the array).
fn start_array(
    a: &ArrayConfig,
    peers: &[ArrayConfig],
    alerter: &Arc<Alerter>,
    taken: &arrays::TakenOverHook,
) -> anyhow::Result<RunningArray> {
    let mut opts = array_options(a)?;
    opts.group_spares = group_spares(a, peers);
    RunningArray::start(opts, None, tell(a.name.get_ref(), alerter, taken))
}

fn tell(array: &str, alerter: &Arc<Alerter>, taken: &arrays::TakenOverHook) -> running::Tell {
    let array = array.to_string();
    let alerter = Arc::clone(alerter);
    let taken = Arc::clone(taken);
    Arc::new(move |happening| {
        let line = match happening {
            Happening::LeftOut(left) => {
                alerter.raise(Alert::new(
                    Event::DeviceDisappeared,
                    &array,
                    Some(&left.spec),
                    format!("cannot be reached at start: {}", left.error),
                ));
                format!("warning: {left}")
            }
            Happening::Start(StartNotice::JournalDropped(dropped)) => format!("warning: {dropped}"),
            Happening::Start(StartNotice::JournalVolatile(volatile)) => {
                alerter.raise(Alert::new(
                    Event::VolatileJournal,
                    &array,
                    None,
                    volatile.to_string(),
                ));
                return;
            }
            Happening::Encrypted(implementation) => serve::encrypted(implementation),
            Happening::Warning(line) => format!("warning: {line}"),
            Happening::Replayed(replayed) => replayed.to_string(),
            Happening::ResyncStarted(_) => {
                "was not shut down cleanly: resyncing in the background".to_string()
            }
            Happening::ResyncFinished(_, Ok(())) => "resync finished".to_string(),
            Happening::ResyncFinished(_, Err(e)) => format!("resync failed: {e}"),
            Happening::Reconnect(event) => {
                if let reconnect::Event::Probed {
                    uri,
                    change: reconnect::Change::Unreachable(why),
                } = &event
                {
                    let message = format!("its server cannot be reached: {why}");
                    alerter.raise(Alert::new(
                        Event::DeviceDisappeared,
                        &array,
                        Some(uri),
                        message,
                    ));
                }
                event.to_string()
            }
            Happening::ReconnectUnavailable(e) => format!(
                "warning: cannot start the reconnect thread ({e}): remote members will not come \
                 back by themselves"
            ),
            Happening::TakenOver(_, by) => {
                // Its members are fenced already: nothing more reaches them. Two writers would
                // corrupt the array: this one stops serving it; the other arrays go on.
                let message =
                    format!("{by}; this daemon stopped serving it and writes nothing more to it");
                alerter.raise(Alert::new(Event::TakenOver, &array, None, message.clone()));
                taken(&array);
                format!("error: {message}")
            }
        };
        crate::log::emit(&format!("array \"{array}\": {line}"));
    })
}

fn open_options(a: &ArrayConfig) -> OpenOptions {
    OpenOptions {
        create_size: None,
        read_only: a.read_only,
        ..OpenOptions::default()
    }
}

fn remote_options(a: &ArrayConfig) -> RemoteOptions {
    RemoteOptions {
        io_timeout: Duration::from_secs(io_timeout_secs(a)),
        local_deadline: a.local_io_deadline,
        // Checked when the file was read (config::check).
        member_cache: a
            .member_cache
            .as_ref()
            .and_then(|c| c.get_ref().parse().ok())
            .unwrap_or_default(),
        member_io: a
            .member_io
            .as_ref()
            .and_then(|c| c.get_ref().parse().ok())
            .unwrap_or_default(),
        ..RemoteOptions::default()
    }
}

fn io_timeout_secs(a: &ArrayConfig) -> u64 {
    a.io_timeout_secs
        .as_ref()
        .map_or(defaults::IO_TIMEOUT_SECS, |v| *v.get_ref())
}

fn buffer_memory(a: &ArrayConfig) -> u64 {
    a.buffer_memory.as_ref().map_or_else(
        || member::parse_size(defaults::BUFFER_MEMORY).expect("the default parses"),
        |v| v.get_ref().0,
    )
}

/// The spares the other arrays of `a`'s spare group list (in `peers`, the configuration's
/// arrays): one lent to `a` carries its superblock and is assembled as its member.
fn group_spares(a: &ArrayConfig, peers: &[ArrayConfig]) -> Vec<String> {
    let Some(group) = &a.spare_group else {
        return Vec::new();
    };
    peers
        .iter()
        .filter(|p| p.name != a.name && p.spare_group.as_ref() == Some(group))
        .flat_map(|p| p.spares.iter().map(|s| s.get_ref().clone()))
        .collect()
}

/// What `raidkit serve` would run with the same options (the file's checks already passed).
fn array_options(a: &ArrayConfig) -> anyhow::Result<ArrayOptions> {
    let rate = |value: &Option<config::Spanned<config::Rate>>, default: &str| {
        value.as_ref().map_or_else(
            || rate_arg(default).expect("the default parses"),
            |v| v.get_ref().0,
        )
    };
    let read_ahead: ReadAhead = match &a.read_ahead {
        Some(text) => text.get_ref().parse()?,
        None => ReadAhead::default(),
    };
    let cache_size = a.cache_size.as_ref().map_or_else(
        || member::parse_size(defaults::CACHE_SIZE).expect("the default parses"),
        |v| v.get_ref().0,
    );
    let window = a.read_ahead_window.as_ref().map(|w| w.get_ref().0);
    let cache = CacheConfig::sized(cache_size, read_ahead, window)?;
    let secs = |value: &Option<config::Spanned<u64>>, default: u64| {
        Duration::from_secs(value.as_ref().map_or(default, |v| *v.get_ref()))
    };
    Ok(ArrayOptions {
        uuid: match &a.uuid {
            Some(uuid) => Some(uuid.get_ref().parse()?),
            None => None,
        },
        members: a.members.iter().map(|m| m.get_ref().clone()).collect(),
        spares: a.spares.iter().map(|m| m.get_ref().clone()).collect(),
        group_spares: Vec::new(),
        journal: JournalOptions {
            path: a.journal.as_ref().map(|j| j.get_ref().clone()),
            allow_volatile: a.allow_volatile_journal,
            ..JournalOptions::default()
        },
        read_only: a.read_only,
        open: open_options(a),
        remote: remote_options(a),
        assemble: AssembleOptions {
            fault_policy: FaultPolicy {
                read_errors_max: a
                    .read_errors_max
                    .as_ref()
                    .map_or(defaults::READ_ERRORS_MAX, |v| *v.get_ref()),
                read_error_window: secs(
                    &a.read_error_window_secs,
                    defaults::READ_ERROR_WINDOW_SECS,
                ),
                io_timeout: Duration::from_secs(io_timeout_secs(a)),
            },
            speed_limits: SpeedLimits {
                min_bytes_per_sec: rate(&a.speed_min, defaults::SPEED_MIN),
                max_bytes_per_sec: rate(&a.speed_max, defaults::SPEED_MAX),
            },
            owner: (!a.read_only).then(ondisk::owner::ThisHost::get),
            ..AssembleOptions::default()
        },
        stack: StackOptions {
            read_only: a.read_only,
            gather_wait: Duration::from_millis(
                a.gather_wait_ms
                    .as_ref()
                    .map_or(defaults::GATHER_WAIT_MS, |v| *v.get_ref()),
            ),
            cache,
            write_mostly: a.write_mostly.iter().map(|m| m.get_ref().clone()).collect(),
            // Checked when the file was read (config::check).
            read_balance: a
                .read_balance
                .as_ref()
                .and_then(|b| b.get_ref().parse().ok())
                .unwrap_or_default(),
        },
        // Never a prompt: the daemon has no terminal.
        key: match (&a.key_file, &a.passphrase_file) {
            (None, None) => None,
            (key, pass) => Some(crypt::KeySource::from_args(
                key.as_ref().map(|f| f.get_ref().as_path()),
                pass.as_ref().map(|f| f.get_ref().as_path()),
            )),
        },
        key_how: "key_file = \"PATH\" or passphrase_file = \"PATH\" in its [[array]] entry",
        reconnect: a.reconnect.unwrap_or(true).then(|| reconnect::Config {
            interval_max: secs(
                &a.reconnect_interval_max_secs,
                defaults::RECONNECT_INTERVAL_MAX_SECS,
            ),
            open: open_options(a),
            remote: remote_options(a),
        }),
    })
}

/// `[daemon] tls`, `tls_certificates`, `tls_verify_peer`: the certificates read at start.
fn daemon_tls(daemon: &config::Daemon) -> anyhow::Result<Option<nbd::Tls>> {
    let mode = match daemon.tls.as_ref().map(|t| *t.get_ref()) {
        None | Some(config::TlsMode::Off) => nbd::TlsMode::Off,
        Some(config::TlsMode::On) => nbd::TlsMode::On,
        Some(config::TlsMode::Require) => nbd::TlsMode::Require,
    };
    let certificates = daemon
        .tls_certificates
        .as_ref()
        .map(|d| d.get_ref().as_path());
    serve::tls_config(mode, certificates, daemon.tls_verify_peer).context("[daemon] tls")
}

/// The daemon's listeners with their export sets: the shared ones (every array without a
/// listener of its own) and each array's own.
struct Listeners {
    bound: Vec<(nbd::Listener, Arc<nbd::Exports>)>,
    /// `[daemon] tls`, for every listener.
    tls: Option<nbd::Tls>,
    /// `[daemon]`'s client limits, for every listener.
    limits: ClientLimits,
}

impl Listeners {
    /// Binds every listener the configuration names; where each array's export goes.
    async fn bind(config: &Config) -> anyhow::Result<(Listeners, Routes)> {
        let mut routes = Routes {
            shared: nbd::Exports::new(),
            shared_at: None,
            own: BTreeMap::new(),
        };
        let mut bound = Vec::new();
        let daemon = &config.daemon;
        let tls = daemon_tls(daemon)?;
        let mut tcp: Vec<String> = daemon.listen.iter().map(|l| l.get_ref().clone()).collect();
        if tcp.is_empty() && daemon.unix.is_none() {
            tcp.push(serve::DEFAULT_LISTEN.to_string());
        }
        let needs_shared = config.arrays.iter().any(|a| !a.has_own_listener());
        if needs_shared {
            for addr in &tcp {
                bound.push((bind_tcp(addr).await?, Arc::clone(&routes.shared)));
            }
            if let Some(path) = &daemon.unix {
                bound.push((bind_unix(path.get_ref())?, Arc::clone(&routes.shared)));
            }
            routes.shared_at = bound.first().and_then(|(l, _)| l.address());
        }
        for a in config.arrays.iter().filter(|a| a.has_own_listener()) {
            let own = nbd::Exports::new();
            let first = bound.len();
            for addr in a.listen.iter().flatten() {
                bound.push((bind_tcp(addr.get_ref()).await?, Arc::clone(&own)));
            }
            if let Some(path) = &a.unix {
                bound.push((bind_unix(path.get_ref())?, Arc::clone(&own)));
            }
            let at = bound.get(first).and_then(|(l, _)| l.address());
            routes.own.insert(a.name.get_ref().clone(), (own, at));
        }
        let limits = ClientLimits::of_daemon(daemon);
        Ok((Listeners { bound, tls, limits }, routes))
    }

    /// Serves every listener and the admin socket (and the TCP admin listener, if any) until
    /// SIGINT or SIGTERM; then the admin listeners stop (their open connections are closed;
    /// the TCP one's socket too) and every NBD listener drains its connections, as `serve`
    /// does: no admin request (a reload, a member added) acts on arrays the daemon is closing.
    async fn serve(
        self,
        admin: &AdminSocket,
        admin_tcp: Option<admin::tcp::AdminTcp>,
        arrays: Arc<Arrays>,
        log: admin::Log,
        signals: Signals,
        reloader: Arc<Reloader>,
    ) -> anyhow::Result<()> {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let Signals { shutdown, hangups } = signals;
        let hangup_task = tokio::spawn(async move {
            let Some(mut hangups) = hangups else { return };
            while hangups.recv().await.is_some() {
                crate::log::emit("SIGHUP: reloading the configuration");
                // Starting and closing arrays blocks: off the runtime's workers. The result
                // is logged by the reload.
                let reloader = Arc::clone(&reloader);
                let _ = tokio::task::spawn_blocking(move || reloader.reload()).await;
            }
        });
        let signal_task = tokio::spawn(async move {
            shutdown.recv().await;
            let _ = stop_tx.send(true);
        });
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let mut servers = tokio::task::JoinSet::new();
        for (listener, exports) in self.bound {
            let config = self.limits.listener(nbd::ServerConfig {
                max_request_bytes: serve::MAX_REQUEST_BYTES as u32,
                tls: self.tls.clone(),
                ..nbd::ServerConfig::default()
            });
            let stop = stopped(stop_rx.clone());
            servers.spawn(async move { nbd::serve_exports(listener, exports, config, stop).await });
        }
        let (tcp_arrays, tcp_log) = (Arc::clone(&arrays), Arc::clone(&log));
        let stop = stopped(stop_rx.clone());
        let admin_tcp_served = async move {
            let Some(tcp) = admin_tcp else { return };
            let served = admin::tcp::serve(&tcp, tcp_arrays, Arc::clone(&tcp_log), stop).await;
            // Closed at the stop (as serve's): a client is refused during the drain.
            drop(tcp);
            if let Err(e) = served {
                tcp_log(&format!("TCP admin listener: {e}"));
            }
        };
        let admin_served = admin::server::serve(admin, arrays, log, stopped(stop_rx.clone()));
        let (admin_result, ()) = tokio::join!(admin_served, admin_tcp_served);
        let mut result = admin_result.context("admin socket");
        while let Some(done) = servers.join_next().await {
            let served = done.context("an NBD listener task failed")?;
            if let Err(e) = served {
                result = result.and(Err(e.into()));
            }
        }
        signal_task.abort();
        hangup_task.abort();
        result
    }
}

async fn bind_tcp(text: &str) -> anyhow::Result<nbd::Listener> {
    let addr = tokio::net::lookup_host(text)
        .await
        .with_context(|| format!("listen {text:?}: not a HOST:PORT address"))?
        .next()
        .with_context(|| format!("listen {text:?}: the host has no address"))?;
    nbd::Listener::bind_tcp(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))
}

fn bind_unix(path: &Path) -> anyhow::Result<nbd::Listener> {
    nbd::Listener::bind_unix(path)
        .with_context(|| format!("cannot listen on Unix socket {}", path.display()))
}
