//! Opening an array's members for assembly: [`open_for_assembly`] leaves out a remote member
//! whose server cannot be reached (assembly then decides whether the array can start
//! degraded, and the reconnect thread retries it) but refuses a local one that cannot be
//! opened, and a URI that does not parse (a typo must not start the array degraded).

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
/// otherwise a remote (NBD URI) member whose URI parses but that cannot be opened is left out
/// (its server is down, or its TLS fails: the reconnect thread retries it). At least one member
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
            // A URI that does not parse (or names TLS settings that cannot work) will not
            // mend by itself: refused like a local typo.
            Err(e)
                if all || !member::is_nbd_uri(spec) || matches!(e, MemberError::BadUri { .. }) =>
            {
                return Err(e.into())
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn open(specs: &[&str]) -> anyhow::Result<Opened> {
        let specs: Vec<String> = specs.iter().map(|s| s.to_string()).collect();
        open_for_assembly(
            &specs,
            &OpenOptions::default(),
            &RemoteOptions::default(),
            false,
        )
    }

    #[test]
    fn an_unreachable_remote_member_is_left_out_but_a_bad_uri_is_refused() {
        let down = "nbd+unix:///?socket=/nonexistent/raidkit-members-test.sock";
        let (members, left_out) = open(&["mem:1M", down]).unwrap();
        assert_eq!(members.len(), 1);
        assert_eq!(left_out.len(), 1);
        assert_eq!(left_out[0].spec, down);
        // An nbds URI without certificates (and without tls-verify-peer=false) cannot work.
        let bad = "nbds+unix:///?socket=/nonexistent/raidkit-members-test.sock";
        let err = open(&["mem:1M", bad]).unwrap_err().to_string();
        assert!(
            err.contains(bad) && err.contains("tls-certificates=DIR"),
            "{err}"
        );
    }
}
