//! `raidkit monitor --test`: proves the running daemon's alerts reach someone (`mdadm
//! --monitor --test`).

use std::path::PathBuf;

use anyhow::Context;
use serde::Deserialize;

use crate::admin_client::Client;

/// Send a TestMessage alert for every array of the running daemon (mdadm --monitor --test).
///
/// The daemon raises the alerts (`raidkit daemon` watches its arrays itself; there is no
/// separate monitor process): each goes to every [alerts] target of its configuration and to
/// its log, as any event would. Prints what was sent and to which targets.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Send a TestMessage for every array (the only action: the monitoring itself runs in
    /// `raidkit daemon`).
    #[arg(long, required = true)]
    test: bool,

    /// The daemon's admin socket ([daemon] admin in its configuration).
    #[arg(long, value_name = "PATH", default_value = super::daemon::ADMIN_DEFAULT)]
    admin: PathBuf,
}

/// The daemon's answer to `POST /v1/monitor/test`.
#[derive(Deserialize)]
struct Sent {
    event: String,
    arrays: Vec<String>,
    targets: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    debug_assert!(args.test, "clap requires --test");
    let client = Client::new(&args.admin, None)?;
    let reply = client
        .process("POST", admin::api::TEST_ALERTS_PATH)
        .with_context(|| format!("no test alert was sent through {}", args.admin.display()))?;
    let sent: Sent = serde_json::from_value(reply).context("the daemon's reply does not decode")?;
    print!("{}", report(&sent));
    Ok(())
}

/// One line per array, then where the alerts went.
fn report(sent: &Sent) -> String {
    let mut out = String::new();
    for array in &sent.arrays {
        out += &format!("{} sent for array \"{array}\"\n", sent.event);
    }
    if sent.targets.is_empty() {
        out += "warning: the daemon has no alert target ([alerts] program, mail_to, webhook or \
                syslog): the alerts are only in its log\n";
    } else {
        out += &format!("to: {} (and the daemon's log)\n", sent.targets.join(", "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_each_array_and_the_targets() {
        let mut sent = Sent {
            event: "TestMessage".into(),
            arrays: vec!["home".into(), "media".into()],
            targets: vec!["program".into(), "webhook".into()],
        };
        assert_eq!(
            report(&sent),
            "TestMessage sent for array \"home\"\nTestMessage sent for array \"media\"\n\
             to: program, webhook (and the daemon's log)\n"
        );
        sent.targets.clear();
        assert!(report(&sent).contains("the alerts are only in its log"));
    }
}
