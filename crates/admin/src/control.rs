//! [`VolumeControl`]: the admin API's actions on a running `volume::Volume`.

use std::sync::Arc;

use iostats::IoCounters;
use member::{OpenOptions, RemoteOptions};
use serde_json::{json, Value};
use volume::{SpeedLimits, Volume, VolumeError, VolumeStatus};

use crate::api::{ApiError, Request};
use crate::server::Control;
use crate::stats::{self, Snapshot};
use crate::status::{QosSection, Status};
use crate::Log;

/// Acts on one volume; members named by `add`/`replace` are opened here, on the server, with
/// the same options as the array's members. A read-only array (its members opened read-only)
/// answers status, stats and wait, and refuses every action with 409.
pub struct VolumeControl {
    volume: Arc<Volume>,
    open: OpenOptions,
    remote: RemoteOptions,
    status: StatusSource,
    /// The array's requests as its clients sent them, if the front end counts them.
    client: Option<Arc<IoCounters>>,
    /// Each action done is logged ("admin: member M marked faulty").
    log: Log,
    /// The array's fence: every member `add` and `replace` open is put behind it.
    fence: Option<member::Fence>,
    /// The daemon's QoS section of the status, read at each request.
    qos: Option<QosSource>,
}

/// Reads an array's QoS section (`VolumeControl::with_qos`).
pub type QosSource = Box<dyn Fn() -> QosSection + Send + Sync>;

/// Makes the served status from the volume's, read at each request: the front end adds what
/// it keeps outside the volume (the journal, the read cache).
pub type StatusSource = Box<dyn Fn(VolumeStatus) -> Status + Send + Sync>;

impl VolumeControl {
    pub fn new(
        volume: Arc<Volume>,
        open: OpenOptions,
        remote: RemoteOptions,
        log: Log,
    ) -> VolumeControl {
        VolumeControl {
            volume,
            open,
            remote,
            status: Box::new(|volume| Status {
                volume,
                journal: None,
                cache: None,
                qos: None,
            }),
            client: None,
            fence: None,
            qos: None,
            log,
        }
    }

    /// Serves `status(volume status)` as the status (default: the volume's status alone).
    pub fn with_status(mut self, status: StatusSource) -> VolumeControl {
        self.status = status;
        self
    }

    /// Puts every member `add` and `replace` open behind `fence` (the array's other members
    /// are), so that closing it stops every write to the array.
    pub fn with_fence(mut self, fence: member::Fence) -> VolumeControl {
        self.fence = Some(fence);
        self
    }

    /// Serves `client` in the stats as the array's requests as its clients sent them.
    pub fn with_client_counters(mut self, client: Arc<IoCounters>) -> VolumeControl {
        self.client = Some(client);
        self
    }

    /// Serves `qos()` as the status's QoS section (the daemon's arrays).
    pub fn with_qos(mut self, qos: QosSource) -> VolumeControl {
        self.qos = Some(qos);
        self
    }

    /// The served status: the front end's sections, and the QoS one.
    fn full_status(&self) -> Status {
        let mut status = (self.status)(self.volume.status());
        status.qos = self.qos.as_ref().map(|qos| qos());
        status
    }

    fn status(&self) -> Result<Value, ApiError> {
        encode(self.full_status())
    }

    /// The counters first, then the status (a status is slower to read).
    fn stats(&self) -> Snapshot {
        let client = self.client.as_ref().map(|c| c.snapshot());
        let members = self.volume.member_io_stats();
        Snapshot {
            unix_ms: stats::unix_ms(),
            status: self.full_status(),
            client,
            members,
        }
    }

    /// Opens the member `add`/`replace` names. One the array holds already (a member failed
    /// and given back to `add`) cannot be opened twice while held: the held one is used.
    fn open_member(&self, spec: &str) -> Result<Arc<dyn member::Member>, ApiError> {
        match member::open_with(spec, &self.open, &self.remote) {
            Ok(m) => Ok(match &self.fence {
                Some(fence) => fence.wrap(m),
                None => m,
            }),
            Err(e @ member::MemberError::InUse { .. }) => self
                .held_by_this_array(spec)
                .ok_or_else(|| ApiError::bad_request(format!("cannot open member {spec}: {e}"))),
            Err(e) => Err(ApiError::bad_request(format!(
                "cannot open member {spec}: {e}"
            ))),
        }
    }

    /// The member of this array that `spec` names, looked up by what it is.
    fn held_by_this_array(&self, spec: &str) -> Option<Arc<dyn member::Member>> {
        let look = member::OpenOptions {
            read_only: true,
            ..member::OpenOptions::default()
        };
        let identity = member::open(spec, &look).ok()?.identity()?;
        self.volume.held_member(&identity)
    }

    fn speed(&self, min: Option<u64>, max: Option<u64>) -> Result<Value, ApiError> {
        let old = self.volume.speed_limits();
        let limits = SpeedLimits {
            min_bytes_per_sec: min.unwrap_or(old.min_bytes_per_sec),
            max_bytes_per_sec: max.unwrap_or(old.max_bytes_per_sec),
        };
        if limits.min_bytes_per_sec > limits.max_bytes_per_sec {
            return Err(ApiError::bad_request(format!(
                "speed limits: min {} bytes/s would be above max {} bytes/s",
                limits.min_bytes_per_sec, limits.max_bytes_per_sec
            )));
        }
        self.volume.set_speed_limits(limits);
        Ok(json!({ "ok": true, "speed_limits": limits }))
    }

    /// Logs an action done and answers it.
    fn done(&self, message: String) -> Result<Value, ApiError> {
        (self.log)(&format!("admin: {message}"));
        Ok(json!({ "ok": true, "message": message }))
    }
}

fn encode(value: impl serde::Serialize) -> Result<Value, ApiError> {
    serde_json::to_value(value).map_err(|e| ApiError::new(500, format!("cannot encode: {e}")))
}

/// The HTTP status for each kind of volume error.
fn volume_error(e: VolumeError) -> ApiError {
    let status = match &e {
        VolumeError::NoSuchMember { .. } => 404,
        VolumeError::Refused { .. } => 409,
        VolumeError::BadMember { .. } => 400,
        VolumeError::Busy { .. } => 503,
        VolumeError::Array(_) | VolumeError::Superblock { .. } => 500,
    };
    ApiError::new(status, e.to_string())
}

impl Control for VolumeControl {
    fn snapshot(&self) -> Result<Snapshot, ApiError> {
        Ok(self.stats())
    }

    fn handle(&self, request: Request) -> Result<Value, ApiError> {
        let v = &self.volume;
        let reads = matches!(
            request,
            Request::Status | Request::Stats | Request::Wait { .. }
        );
        if self.open.read_only && !reads {
            return Err(ApiError::new(
                409,
                format!(
                    "array {:?} is served read-only: it takes no action (serve it without \
                     read-only to manage it)",
                    v.name()
                ),
            ));
        }
        match request {
            Request::Status => self.status(),
            Request::Stats => encode(self.stats()),
            Request::Fail { member } => {
                v.fail(&member).map_err(volume_error)?;
                self.done(format!("member {member} marked faulty"))
            }
            Request::Remove { member } => {
                v.remove(&member).map_err(volume_error)?;
                self.done(format!("member {member} removed"))
            }
            Request::Add { member } => {
                v.add(self.open_member(&member)?).map_err(volume_error)?;
                self.done(format!("member {member} added"))
            }
            Request::Replace { member, with } => {
                let new = self.open_member(&with)?;
                v.replace(&member, new).map_err(volume_error)?;
                self.done(format!("replacing member {member} with {with}"))
            }
            Request::Scrub { repair } => {
                v.scrub(repair).map_err(volume_error)?;
                let what = if repair { "scrub with repair" } else { "scrub" };
                self.done(format!("{what} started"))
            }
            Request::Speed { min, max } => self.speed(min, max),
            Request::Wait { timeout } => Ok(json!({ "idle": v.wait_idle(timeout) })),
        }
    }
}
