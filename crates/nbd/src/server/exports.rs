//! The exports one listener serves, by name, added and removed while it serves (the daemon's
//! arrays; `NBD_OPT_LIST` lists them). Each export keeps its own limits — request size,
//! requests per connection, export calls and buffer bytes at once — so one export's load
//! cannot take another's budget.
//!
//! Removing an export is clean: new clients can no longer select it, its connections stop
//! reading requests, the requests they already read are answered, and
//! [`Removed::drained`] returns once the last of them closed — then its export may be closed.
//! A connection whose client reads no reply is cut after the export's `shutdown_grace`, so the
//! drain is bounded (by the grace and the export calls still running).
//! Selection and removal take the same lock, so a connection either never selected the
//! export or is counted before `remove` looks.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use super::config::{ConfigError, ServerConfig};
use super::shared::Shared;
use crate::export::Export;

/// Most exports one listener serves.
pub const MAX_EXPORTS: usize = 1024;

/// The exports of a listener; see the module documentation.
pub struct Exports {
    by_name: Mutex<BTreeMap<String, Arc<Shared>>>,
}

/// Why an export was not added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddError {
    Config(ConfigError),
    /// An export with this name is served already.
    Duplicate(String),
    /// [`MAX_EXPORTS`] are served already.
    Full,
}

impl fmt::Display for AddError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddError::Config(e) => write!(f, "{e}"),
            AddError::Duplicate(name) => write!(f, "an export named {name:?} is served already"),
            AddError::Full => write!(f, "{MAX_EXPORTS} exports are served already (the maximum)"),
        }
    }
}

impl std::error::Error for AddError {}

/// A removed export whose connections are finishing.
pub struct Removed {
    live: watch::Receiver<usize>,
}

impl Removed {
    /// Waits until every connection that had selected the export has closed (their
    /// requests read before the removal answered).
    pub async fn drained(mut self) {
        // The sender lives in the export's state, held by these connections: if it is gone,
        // so are they.
        let _ = self.live.wait_for(|live| *live == 0).await;
    }
}

/// A connection's hold on the export it selected: counted while it lives.
pub(crate) struct Selected {
    pub shared: Arc<Shared>,
}

impl Drop for Selected {
    fn drop(&mut self) {
        self.shared.live.send_modify(|live| *live -= 1);
    }
}

impl Exports {
    pub fn new() -> Arc<Exports> {
        Arc::new(Exports {
            by_name: Mutex::new(BTreeMap::new()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Shared>>> {
        self.by_name.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Serves `export` under `config.export_name`, with `config`'s per-export limits
    /// (`read_only`, `description`, `max_request_bytes`, `max_in_flight_per_conn`,
    /// `max_blocking_calls`, `max_buffer_bytes`, `max_idle_buffer_bytes`; the listener's own
    /// configuration decides the rest).
    pub fn add(&self, export: Arc<dyn Export>, config: ServerConfig) -> Result<(), AddError> {
        config.validate().map_err(AddError::Config)?;
        let mut by_name = self.lock();
        if by_name.contains_key(&config.export_name) {
            return Err(AddError::Duplicate(config.export_name));
        }
        if by_name.len() >= MAX_EXPORTS {
            return Err(AddError::Full);
        }
        let name = config.export_name.clone();
        by_name.insert(name, Arc::new(Shared::new(export, config)));
        Ok(())
    }

    /// Stops serving `name` (see the module documentation); `None` if it is not served.
    pub fn remove(&self, name: &str) -> Option<Removed> {
        let shared = self.lock().remove(name)?;
        shared.stop.send_replace(true);
        Some(Removed {
            live: shared.live.subscribe(),
        })
    }

    /// The names served, in order.
    pub fn names(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Stops every export's connections (the listener is shutting down).
    pub(crate) fn stop_all(&self) {
        for shared in self.lock().values() {
            shared.stop.send_replace(true);
        }
    }

    /// The export a client names: its own name, or the empty default name when one export
    /// is served (or one is named ""). Not counted: for the options that only describe it.
    pub(crate) fn find(&self, name: &str) -> Option<Arc<Shared>> {
        Self::lookup(&self.lock(), name).cloned()
    }

    /// The export a client selects for transmission, counted until the hold is dropped.
    pub(crate) fn select(&self, name: &str) -> Option<Selected> {
        let by_name = self.lock();
        let shared = Self::lookup(&by_name, name)?.clone();
        shared.live.send_modify(|live| *live += 1);
        Some(Selected { shared })
    }

    fn lookup<'a>(
        by_name: &'a BTreeMap<String, Arc<Shared>>,
        name: &str,
    ) -> Option<&'a Arc<Shared>> {
        match by_name.get(name) {
            Some(shared) => Some(shared),
            None if name.is_empty() && by_name.len() == 1 => by_name.values().next(),
            None => None,
        }
    }

    /// (name, description) of every export, for `NBD_OPT_LIST`.
    pub(crate) fn list(&self) -> Vec<(String, String)> {
        self.lock()
            .values()
            .map(|s| (s.config.export_name.clone(), s.config.description.clone()))
            .collect()
    }
}
