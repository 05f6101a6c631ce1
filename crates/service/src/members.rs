//! Opening an array's members for assembly: [`open_for_assembly`] leaves out a remote member
//! whose server cannot be reached (assembly then decides whether the array can start
//! degraded, and the reconnect thread retries it) but refuses a local one that cannot be
//! opened (a typo must not start the array degraded).

use std::fmt;
use std::sync::Arc;

use anyhow::bail;
use member::{Member, MemberError, OpenOptions, RemoteOptions};

/// A remote member left out at start; its `Display` is the warning.
#[derive(Debug)]
pub struct LeftOut {
    pub spec: String,
    pub error: MemberError,
}

impl fmt::Display for LeftOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "remote member {} left out: {}", self.spec, self.error)
    }
}

/// The members that opened, and the remote ones left out.
pub type Opened = (Vec<Arc<dyn Member>>, Vec<LeftOut>);

/// Opens the members named by `specs`. With `all` (creating an array) every one must open;
/// otherwise a remote (NBD URI) member that cannot be opened is left out. At least one member
/// must open.
pub fn open_for_assembly(
    specs: &[String],
    opts: &OpenOptions,
    remote: &RemoteOptions,
    all: bool,
) -> anyhow::Result<Opened> {
    let mut members = Vec::with_capacity(specs.len());
    let mut left_out = Vec::new();
    for spec in specs {
        match member::open_with(spec, opts, remote) {
            Ok(m) => members.push(m),
            Err(e) if all || !member::is_nbd_uri(spec) => return Err(e.into()),
            Err(error) => left_out.push(LeftOut {
                spec: spec.clone(),
                error,
            }),
        }
    }
    if members.is_empty() {
        bail!("no member could be opened");
    }
    Ok((members, left_out))
}
