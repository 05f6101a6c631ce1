//! Waiting for the server's background work, with a progress bar in a terminal.
//!
//! The wait itself is the server's `/v1/wait` (it returns as soon as no work runs or is due,
//! or after one second); between waits the status gives the bar its position, speed and ETA.
//! When stdout is not a terminal no bar is drawn (`status --watch` prints task lines instead).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use crate::admin_client::Client;
use admin::status::wire_name;
use volume::TaskStatus;

use crate::units::{hms, human_bytes};

/// Each `/v1/wait` request blocks at most this long, so the bar moves.
const POLL_SECS: u64 = 1;

/// Waits until the server has no background work left, drawing the task in a terminal.
pub fn follow(client: &Client, label: &str) -> anyhow::Result<()> {
    follow_with(client, label, false)
}

/// [`follow`]; when stdout is not a terminal and `lines` is set, prints one task line per
/// second instead of the bar.
pub fn follow_with(client: &Client, label: &str, lines: bool) -> anyhow::Result<()> {
    let tty = std::io::stdout().is_terminal();
    // Created at the first task seen, so no empty bar is drawn while the work is starting.
    let mut bar: Option<ProgressBar> = None;
    loop {
        let idle = client.post("/v1/wait", &json!({ "timeout_secs": POLL_SECS }))?;
        if idle.get("idle").and_then(|v| v.as_bool()) == Some(true) {
            break;
        }
        if !tty && !lines {
            continue;
        }
        let Some(task) = client.status()?.volume.task else {
            continue;
        };
        if tty {
            show(bar.get_or_insert_with(|| new_bar(label)), &task);
        } else {
            println!("{}", task_line(&task));
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(())
}

/// Draws a task of this process (no server) until `done`; nothing when stdout is not a
/// terminal.
pub fn follow_local(task: impl Fn() -> Option<TaskStatus>, done: impl Fn() -> bool) {
    let tty = std::io::stdout().is_terminal();
    let mut bar: Option<ProgressBar> = None;
    while !done() {
        if let (true, Some(task)) = (tty, task()) {
            show(bar.get_or_insert_with(|| new_bar("initial sync")), &task);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
}

fn new_bar(label: &str) -> ProgressBar {
    // Hidden until the first task with a known size (no empty "0 B/0 B" frame).
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::hidden());
    // Speed and ETA come from the server (it measures the work); indicatif's own estimate
    // would see the once-a-second jumps of the position as bursts.
    let style = ProgressStyle::with_template(
        "{prefix:<16} [{bar:40}] {percent:>3}% {bytes}/{total_bytes} {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(label.to_string());
    bar
}

/// Updates the bar; the first call with a known total starts drawing it.
fn show(bar: &ProgressBar, task: &TaskStatus) {
    if task.total_bytes == 0 {
        return;
    }
    let first = bar.length().unwrap_or(0) == 0;
    let role = task.role.map(|r| format!(" role {r}")).unwrap_or_default();
    bar.set_prefix(format!("{}{role}", wire_name(task.kind)));
    bar.set_length(task.total_bytes);
    bar.set_position(task.done_bytes.min(task.total_bytes));
    let eta = task.eta_secs.map(hms).unwrap_or_else(|| "?".to_string());
    bar.set_message(format!(
        "at {}/s, ETA {eta}",
        human_bytes(task.bytes_per_sec)
    ));
    if first {
        bar.set_draw_target(ProgressDrawTarget::stdout());
        bar.enable_steady_tick(Duration::from_millis(250));
    }
}

/// `rebuild role 2: 45.0% (1.2 GiB of 2.7 GiB) at 150.0 MiB/s, ETA 0:00:12`; a rebuild or
/// replace of only the regions holding data says so: `..., copies 2.7 GiB of 10.0 GiB (the
/// regions holding data) at ...`.
pub fn task_line(t: &TaskStatus) -> String {
    let role = t.role.map(|r| format!(" role {r}")).unwrap_or_default();
    let percent = if t.total_bytes == 0 {
        100.0
    } else {
        t.done_bytes as f64 * 100.0 / t.total_bytes as f64
    };
    let mut done = format!(
        "{}{role}: {percent:.1}% ({} of {})",
        wire_name(t.kind),
        human_bytes(t.done_bytes),
        human_bytes(t.total_bytes),
    );
    if let Some(member) = t.of_member_bytes {
        done += &format!(
            ", copies {} of {} (the regions holding data)",
            human_bytes(t.total_bytes),
            human_bytes(member)
        );
    }
    if let Some(why) = &t.paused {
        return format!("{done}, paused: {why}");
    }
    let eta = t.eta_secs.map(hms).unwrap_or_else(|| "unknown".to_string());
    format!("{done} at {}/s, ETA {eta}", human_bytes(t.bytes_per_sec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use volume::TaskKind;

    #[test]
    fn a_paused_task_says_why_instead_of_its_speed() {
        let mut task = TaskStatus {
            kind: TaskKind::Scrub,
            role: None,
            done_bytes: 1 << 20,
            total_bytes: 4 << 20,
            bytes_per_sec: 1 << 20,
            eta_secs: Some(3),
            of_member_bytes: None,
            paused: None,
        };
        assert_eq!(
            task_line(&task),
            "scrub: 25.0% (1.0 MiB of 4.0 MiB) at 1.0 MiB/s, ETA 0:00:03"
        );
        task.paused = Some("outside the background window 19:00-05:00".into());
        assert_eq!(
            task_line(&task),
            "scrub: 25.0% (1.0 MiB of 4.0 MiB), paused: outside the background window 19:00-05:00"
        );
        task.paused = None;
        (task.kind, task.role, task.of_member_bytes) = (TaskKind::Rebuild, Some(2), Some(40 << 20));
        assert_eq!(
            task_line(&task),
            "rebuild role 2: 25.0% (1.0 MiB of 4.0 MiB), copies 4.0 MiB of 40.0 MiB (the regions \
             holding data) at 1.0 MiB/s, ETA 0:00:03"
        );
    }
}
