//! Reload: the configuration file read again (SIGHUP, `raidkit reload`, `POST /v1/reload`) and
//! what changed applied without disturbing what did not.
//!
//! A file with any problem changes nothing: the problems are logged and returned, each with
//! its file, line and key. Otherwise arrays are matched by name against the set being served
//! (not against the last file read, so an array that failed to start is tried again):
//! arrays no longer named are removed first (drained and closed: their members may be named by
//! a new entry), then each served array's changed keys are applied live when the running array
//! can take them ([`LIVE_KEYS`]) and reported as needing that array's restart otherwise, then
//! new arrays are started and served. Unchanged arrays are not touched. `[daemon]` changes
//! need a daemon restart; `[alerts]` changes are applied at once (`Alerter::retarget`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use admin::api::ApiError;
use alerts::Alerter;
use config::Config;
use sd_notify::NotifyState;
use serde::Serialize;

use super::arrays::{ArraySet, LIVE_KEYS};
use super::{systemd, targets};

/// What a reload did to one array, or to the daemon (`array` none).
#[derive(Debug, Serialize)]
pub(super) struct Change {
    pub array: Option<String>,
    pub change: Kind,
    pub message: String,
}

/// What kind of change: on the wire `added`, `removed`, `changed` (applied live),
/// `restart_needed` or `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Kind {
    Added,
    Removed,
    Changed,
    RestartNeeded,
    Failed,
}

impl Kind {
    /// The change and the level word of its log line.
    fn log_words(self) -> (&'static str, &'static str) {
        match self {
            Kind::Added => ("added", ""),
            Kind::Removed => ("removed", ""),
            Kind::Changed => ("changed", ""),
            Kind::RestartNeeded => ("restart needed", "warning: "),
            Kind::Failed => ("failed", "error: "),
        }
    }
}

impl Change {
    /// What a step on array `array` did: `done` (the change and its message) when `result` is
    /// `Ok`; else `failed`, the message `failed: ` and the error.
    fn outcome(
        array: String,
        result: anyhow::Result<()>,
        done: (Kind, String),
        failed: &str,
    ) -> Change {
        let (change, message) = match result {
            Ok(()) => done,
            Err(e) => (Kind::Failed, format!("{failed}: {e:#}")),
        };
        Change {
            array: Some(array),
            change,
            message,
        }
    }
}

/// What a reload did.
#[derive(Debug, Serialize)]
pub(super) struct Reloaded {
    pub config: PathBuf,
    pub changes: Vec<Change>,
    /// Arrays served before and after, untouched.
    pub unchanged: Vec<String>,
}

/// The configuration as the daemon runs it, and the arrays it serves.
pub(super) struct Reloader {
    path: PathBuf,
    alerter: Arc<Alerter>,
    state: Mutex<State>,
}

struct State {
    arrays: ArraySet,
    /// `[daemon]` as the daemon started with it (its changes need a restart).
    daemon: config::Daemon,
    /// `[alerts]` in force.
    alerts: config::Alerts,
}

impl Reloader {
    pub fn new(path: PathBuf, config: &Config, arrays: ArraySet, alerter: Arc<Alerter>) -> Self {
        Reloader {
            path,
            alerter,
            state: Mutex::new(State {
                arrays,
                daemon: config.daemon.clone(),
                alerts: config.alerts.clone(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts and serves each array of the file the daemon started with; those that cannot
    /// start are reported. Returns how many are served.
    pub fn start_all(&self, arrays: &[config::ArrayConfig]) -> usize {
        let mut state = self.lock();
        for a in arrays {
            if let Err(e) = state.arrays.add(a) {
                let name = a.name.get_ref();
                crate::log::emit(&format!("error: array {name:?} not started: {e:#}"));
            }
        }
        state.arrays.len()
    }

    /// Stops serving array `name`, which another process took over.
    pub fn abandon(&self, name: &str) {
        self.lock().arrays.abandon(name);
    }

    /// Removes every array (the daemon is stopping); the first error is returned.
    pub fn remove_all(&self) -> Option<anyhow::Error> {
        self.lock().arrays.remove_all()
    }

    /// Reads the file again and applies it (see the module documentation), one log line per
    /// change. `Err`: the file's problems, one `FILE:LINE: key `KEY`: ...` line each; nothing
    /// changed. Reloads run one at a time.
    pub fn reload(&self) -> Result<Reloaded, String> {
        let mut state = self.lock();
        // systemd's reload protocol: RELOADING=1 with the time, READY=1 when done.
        let mut reloading = vec![NotifyState::Reloading];
        reloading.extend(NotifyState::monotonic_usec_now().ok());
        systemd(&reloading);
        let result = self.apply(&mut state);
        let status = format!("serving {} arrays", state.arrays.len());
        systemd(&[NotifyState::Ready, NotifyState::Status(&status)]);
        result
    }

    fn apply(&self, state: &mut State) -> Result<Reloaded, String> {
        let path = self.path.display();
        crate::log::emit(&format!("reload: reading {path}"));
        let refused = |problems: String| {
            for line in problems.lines() {
                crate::log::emit(&format!("reload: {line}"));
            }
            crate::log::emit("reload: refused, nothing changed");
            Err(problems)
        };
        let new = match Config::load(&self.path) {
            Ok(config) => config,
            Err(problems) => {
                let count = problems.list.len();
                return refused(format!(
                    "{problems}\n{count} problem(s) in the configuration: nothing changed"
                ));
            }
        };
        if new.arrays.is_empty() {
            return refused(format!(
                "{path} names no [[array]]: nothing changed (stop the daemon to stop serving \
                 every array)"
            ));
        }
        let mut changes = Vec::new();
        let mut daemon_change = |message: String| {
            changes.push(Change {
                array: None,
                change: Kind::RestartNeeded,
                message,
            })
        };
        for key in state.daemon.changed_keys(&new.daemon) {
            daemon_change(format!(
                "[daemon] {key} changed: restart the daemon for it to take effect (the running \
                 daemon keeps the old value)"
            ));
        }
        let alert_keys = state.alerts.changed_keys(&new.alerts);
        if !alert_keys.is_empty() {
            self.alerter.retarget(&targets(&new));
            state.alerts = new.alerts.clone();
            changes.push(Change {
                array: None,
                change: Kind::Changed,
                message: format!("[alerts] {} changed: applied", alert_keys.join(", ")),
            });
        }

        let arrays = &mut state.arrays;
        let named: Vec<&str> = new
            .arrays
            .iter()
            .map(|a| a.name.get_ref().as_str())
            .collect();
        for name in arrays.names() {
            if named.contains(&name.as_str()) {
                continue;
            }
            let result = arrays.remove(&name);
            changes.push(Change::outcome(
                name,
                result,
                (
                    Kind::Removed,
                    "no longer in the file: drained and closed cleanly".into(),
                ),
                "no longer in the file: did not close cleanly",
            ));
        }
        let mut unchanged = Vec::new();
        let mut to_add = Vec::new();
        for a in &new.arrays {
            let name = a.name.get_ref().clone();
            let Some(served) = arrays.config_of(&name) else {
                to_add.push(a);
                continue;
            };
            let keys = served.changed_keys(a);
            if keys.is_empty() {
                unchanged.push(name);
                continue;
            }
            let (live, restart): (Vec<&str>, Vec<&str>) =
                keys.iter().partition(|k| LIVE_KEYS.contains(k));
            if !live.is_empty() {
                let live = live.join(", ");
                changes.push(Change::outcome(
                    name.clone(),
                    arrays.retune(a),
                    (Kind::Changed, format!("{live} applied")),
                    &format!("{live} not applied"),
                ));
            }
            if !restart.is_empty() {
                changes.push(Change {
                    array: Some(name.clone()),
                    change: Kind::RestartNeeded,
                    message: format!(
                        "{} changed: the running array cannot take {} without a restart; it \
                         keeps running as before. To apply: take the entry out of the file and \
                         reload (the array is drained and closed), put it back and reload \
                         again; or restart the daemon",
                        restart.join(", "),
                        if restart.len() == 1 { "it" } else { "them" },
                    ),
                });
            }
        }
        // An added array of a spare group looks for spares lent to it among the new file's.
        arrays.know_peers(&new.arrays);
        for a in to_add {
            let name = a.name.get_ref().clone();
            let result = arrays.add(a);
            changes.push(Change::outcome(
                name,
                result,
                (Kind::Added, "assembled and served".into()),
                "not started",
            ));
        }
        for c in &changes {
            let what = match &c.array {
                Some(name) => format!("array \"{name}\""),
                None => "daemon".to_string(),
            };
            let (change, word) = c.change.log_words();
            crate::log::emit(&format!("reload: {word}{what}: {change}: {}", c.message));
        }
        crate::log::emit(&format!(
            "reload of {path} done: {} change(s), {} array(s) unchanged",
            changes.len(),
            unchanged.len()
        ));
        Ok(Reloaded {
            config: self.path.clone(),
            changes,
            unchanged,
        })
    }
}

/// `POST /v1/reload` on the admin socket: what changed, or (422) the file's problems.
pub(super) fn admin_hook(reloader: Arc<Reloader>) -> admin::server::Reload {
    Box::new(move || match reloader.reload() {
        Ok(reloaded) => serde_json::to_value(reloaded)
            .map_err(|e| ApiError::new(500, format!("cannot encode the reload: {e}"))),
        Err(problems) => Err(ApiError::new(422, problems)),
    })
}
