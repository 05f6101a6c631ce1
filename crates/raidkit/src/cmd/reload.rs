//! `raidkit reload`: makes the running daemon read its configuration file again (as SIGHUP
//! does) and prints what changed, or why nothing did.

use std::path::PathBuf;

use anyhow::{bail, Context};
use serde::Deserialize;

use crate::admin_client::Client;

/// Make the running daemon read its configuration file again and apply what changed.
///
/// New arrays are assembled and served; arrays no longer in the file are drained (their
/// clients' requests answered, then their connections closed) and closed cleanly; the speed
/// limits, read-error limits, gather wait, scrub schedule and background window of a running
/// array change at once; other changes
/// to a running array or to [daemon] are reported as needing a restart; [alerts] changes apply
/// at once. Arrays whose entry did not change are not touched. A file with any problem changes
/// nothing: its problems are printed with their line and key and the exit status is 1, as it is
/// when an array could not be started or closed. `kill -HUP` does the same (logged only).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The daemon's admin socket ([daemon] admin in its configuration).
    #[arg(long, value_name = "PATH", default_value = super::daemon::ADMIN_DEFAULT)]
    admin: PathBuf,
}

/// The daemon's answer to `POST /v1/reload`.
#[derive(Deserialize)]
struct Reloaded {
    config: PathBuf,
    changes: Vec<Change>,
    unchanged: Vec<String>,
}

#[derive(Deserialize)]
struct Change {
    array: Option<String>,
    change: String,
    message: String,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let client = Client::new(&args.admin, None)?;
    let reply = client
        .process("POST", admin::api::RELOAD_PATH)
        .with_context(|| format!("the daemon at {} did not reload", args.admin.display()))?;
    let reloaded: Reloaded =
        serde_json::from_value(reply).context("the daemon's reply does not decode")?;
    print!("{}", report(&reloaded));
    let failed = reloaded
        .changes
        .iter()
        .filter(|c| c.change == "failed")
        .count();
    if failed > 0 {
        bail!("{failed} change(s) of the reload failed (see above and the daemon's log)");
    }
    Ok(())
}

/// One line per change, then a summary.
fn report(r: &Reloaded) -> String {
    let mut out = String::new();
    for c in &r.changes {
        let what = match &c.array {
            Some(name) => format!("array \"{name}\""),
            None => "daemon".to_string(),
        };
        out += &format!("{what}: {}: {}\n", c.change.replace('_', " "), c.message);
    }
    out += &format!(
        "{} reloaded: {} change(s), {} array(s) unchanged\n",
        r.config.display(),
        r.changes.len(),
        r.unchanged.len()
    );
    out
}
