//! The operator commands that change a running array through its admin socket: `fail`,
//! `remove`, `add`, `replace`, `scrub` and `speed-limit`.

use serde_json::{json, Value};

use crate::admin_client::{Admin, Client};
use crate::cmd::status::{render, scrub_report};
use crate::units::human_bytes;

/// Mark a member faulty: the array stops using it and continues degraded.
///
/// Refused when the array would lose data without it. MEMBER is the name shown by `raidkit
/// status` (the path or URI given to serve) or "role N".
#[derive(Debug, clap::Args)]
pub struct FailArgs {
    #[command(flatten)]
    admin: Admin,
    /// The member (as shown by status) or "role N".
    #[arg(value_name = "MEMBER")]
    member: String,
}

/// Take a faulty member, a spare or a replacement target out of the array.
///
/// An active (in-sync or rebuilding) member is refused: `raidkit fail` it first.
#[derive(Debug, clap::Args)]
pub struct RemoveArgs {
    #[command(flatten)]
    admin: Admin,
    /// The member (as shown by status) or "role N".
    #[arg(value_name = "MEMBER")]
    member: String,
}

/// Add a member: it becomes a hot spare, or, when a role is missing or faulty, the rebuild of
/// that role starts on it at once (throttled by the speed limits).
///
/// The server opens MEMBER (a file, block device or NBD URI such as nbd://HOST/EXPORT or
/// nbd+unix:///EXPORT?socket=PATH) and writes a spare superblock of this array on it; its data
/// is overwritten by the rebuild.
#[derive(Debug, clap::Args)]
pub struct AddArgs {
    #[command(flatten)]
    admin: Admin,
    /// The new member, as the server should open it.
    #[arg(value_name = "MEMBER")]
    member: String,
    /// Wait until the rebuild (if one starts) has finished, with a progress bar in a terminal.
    #[arg(long)]
    wait: bool,
}

/// Replace a member without losing redundancy: NEW is filled while MEMBER keeps serving, then
/// NEW takes MEMBER's role and MEMBER leaves the array.
#[derive(Debug, clap::Args)]
pub struct ReplaceArgs {
    #[command(flatten)]
    admin: Admin,
    /// The member to replace (as shown by status) or "role N".
    #[arg(value_name = "MEMBER")]
    member: String,
    /// The new member, as the server should open it (file, block device, NBD URI).
    #[arg(long, value_name = "NEW")]
    with: String,
    /// Wait until the copy has finished and NEW has taken the role.
    #[arg(long)]
    wait: bool,
}

/// Check every stripe: mirrors agree, parity matches the data. Reports how many stripes
/// disagree and where (stripe, array offset, member and data-area offset).
///
/// Runs in the background, throttled by the speed limits; `raidkit status` shows its progress
/// and the last report.
#[derive(Debug, clap::Args)]
pub struct ScrubArgs {
    #[command(flatten)]
    admin: Admin,
    /// Make mismatches consistent: recompute parity from the data, copy mirrors from the first
    /// readable copy (as md does); RAID 6: when P and Q name one wrong data member, fix that
    /// member instead.
    #[arg(long)]
    repair: bool,
    /// Wait for the scrub to finish (progress bar in a terminal) and print its report.
    #[arg(long)]
    wait: bool,
}

/// Change the background (rebuild, resync, scrub) speed limits while the server runs.
///
/// Rates are per member, in bytes per second with K, M, G suffixes (powers of 1024), e.g.
/// "50M" or "50M/s". The minimum is kept even while clients are busy; the maximum is never
/// exceeded. Server defaults: min 1M/s, max 200M/s (`raidkit serve --speed-min/--speed-max`).
/// Without --min and --max, prints the current limits.
#[derive(Debug, clap::Args)]
pub struct SpeedArgs {
    #[command(flatten)]
    admin: Admin,
    /// Minimum background rate per member.
    #[arg(long, value_name = "SIZE/s", value_parser = rate_arg)]
    min: Option<u64>,
    /// Maximum background rate per member.
    #[arg(long, value_name = "SIZE/s", value_parser = rate_arg)]
    max: Option<u64>,
}

/// Parses "50M", "50M/s", "1048576" as bytes per second (at least 1).
pub fn rate_arg(text: &str) -> Result<u64, String> {
    let size = text.strip_suffix("/s").unwrap_or(text);
    let bytes = member::parse_size(size).map_err(|e| e.to_string())?;
    if bytes == 0 {
        return Err("a rate must be at least 1 byte/s".to_string());
    }
    Ok(bytes)
}

fn message(reply: &Value) -> String {
    reply
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("done")
        .to_string()
}

pub fn fail(args: FailArgs) -> anyhow::Result<()> {
    let client = args.admin.client()?;
    let reply = client.post("/v1/fail", &json!({ "member": args.member }))?;
    println!("{}", message(&reply));
    Ok(())
}

pub fn remove(args: RemoveArgs) -> anyhow::Result<()> {
    let client = args.admin.client()?;
    let reply = client.post("/v1/remove", &json!({ "member": args.member }))?;
    println!("{}", message(&reply));
    Ok(())
}

pub fn add(args: AddArgs) -> anyhow::Result<()> {
    let client = args.admin.client()?;
    let reply = client.post("/v1/add", &json!({ "member": args.member }))?;
    answered(&client, &reply, args.wait.then_some("rebuild"))
}

/// Prints the server's answer; with `follow`, follows that task to its end (a progress line)
/// and prints the status then.
fn answered(client: &Client, reply: &Value, follow: Option<&str>) -> anyhow::Result<()> {
    println!("{}", message(reply));
    if let Some(task) = follow {
        crate::progress::follow(client, task)?;
        print!("{}", render(&client.status()?));
    }
    Ok(())
}

pub fn replace(args: ReplaceArgs) -> anyhow::Result<()> {
    let client = args.admin.client()?;
    let body = json!({ "member": args.member, "with": args.with });
    let reply = client.post("/v1/replace", &body)?;
    answered(&client, &reply, args.wait.then_some("replace"))
}

pub fn scrub(args: ScrubArgs) -> anyhow::Result<()> {
    let client = args.admin.client()?;
    let reply = client.post("/v1/scrub", &json!({ "repair": args.repair }))?;
    println!("{}", message(&reply));
    if !args.wait {
        println!(
            "`raidkit status --admin {}` shows its progress and report",
            args.admin.admin
        );
        return Ok(());
    }
    crate::progress::follow(&client, if args.repair { "repair" } else { "scrub" })?;
    let status = client.status()?.volume;
    if let Some(why) = status.task.as_ref().and_then(|t| t.paused.as_ref()) {
        // The wait ends when nothing runs or is due: a scrub waiting for the background
        // window is neither. It goes on by itself.
        println!(
            "the scrub is paused ({why}); it goes on by itself when the window opens: \
             `raidkit status --admin {}` shows its progress and report",
            args.admin.admin
        );
        return Ok(());
    }
    match status.last_scrub {
        Some(report) => print!("{}", scrub_report(&report)),
        None => anyhow::bail!("the scrub ended without a report (was it interrupted?)"),
    }
    Ok(())
}

pub fn speed(args: SpeedArgs) -> anyhow::Result<()> {
    let client = args.admin.client()?;
    if args.min.is_none() && args.max.is_none() {
        let limits = client.status()?.volume.speed_limits;
        println!(
            "speed limits: min {}/s, max {}/s per member",
            human_bytes(limits.min_bytes_per_sec),
            human_bytes(limits.max_bytes_per_sec)
        );
        return Ok(());
    }
    let reply = client.post("/v1/speed", &json!({ "min": args.min, "max": args.max }))?;
    let limits = &reply["speed_limits"];
    let get = |k: &str| limits.get(k).and_then(Value::as_u64).unwrap_or(0);
    println!(
        "speed limits now: min {}/s, max {}/s per member",
        human_bytes(get("min_bytes_per_sec")),
        human_bytes(get("max_bytes_per_sec"))
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::rate_arg;

    #[test]
    fn rates_take_sizes_with_or_without_per_second() {
        assert_eq!(rate_arg("50M").unwrap(), 50 << 20);
        assert_eq!(rate_arg("50M/s").unwrap(), 50 << 20);
        assert_eq!(rate_arg("4096").unwrap(), 4096);
        assert!(rate_arg("0").is_err());
        assert!(rate_arg("fast").is_err());
    }
}
