//! Waiting for the server's background work, with a progress bar in a terminal.
//!
//! The wait itself is the server's `/v1/wait` (it returns as soon as no work runs or is due,
//! or after one second); between waits the status gives the bar its position, speed and ETA.
//! When stdout is not a terminal no bar is drawn (`status --watch` prints task lines instead).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::admin::client::Client;
use crate::cmd::status::{fetch, task_line, Task};

/// Each `/v1/wait` request blocks at most this long, so the bar moves.
const POLL_SECS: u64 = 1;

/// Waits until the server has no background work left, drawing the task in a terminal.
pub fn follow(client: &Client, label: &str) -> anyhow::Result<()> {
    follow_with(client, label, false)
}

/// [`follow`]; when stdout is not a terminal and `lines` is set, prints one task line per
/// second instead of the bar.
pub fn follow_with(client: &Client, label: &str, lines: bool) -> anyhow::Result<()> {
    let bar = std::io::stdout().is_terminal().then(|| new_bar(label));
    loop {
        let idle = client.post("/v1/wait", &json!({ "timeout_secs": POLL_SECS }))?;
        if idle.get("idle").and_then(|v| v.as_bool()) == Some(true) {
            break;
        }
        if bar.is_none() && !lines {
            continue;
        }
        let Some(task) = fetch(client)?.task else {
            continue;
        };
        match &bar {
            Some(bar) => show(bar, &task),
            None => println!("{}", task_line(&task)),
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(())
}

/// Draws a task of this process (no server) until `done`; nothing when stdout is not a
/// terminal.
pub fn follow_local(task: impl Fn() -> Option<Task>, done: impl Fn() -> bool) {
    let bar = std::io::stdout()
        .is_terminal()
        .then(|| new_bar("initial sync"));
    while !done() {
        if let (Some(bar), Some(task)) = (&bar, task()) {
            show(bar, &task);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
}

fn new_bar(label: &str) -> ProgressBar {
    let bar = ProgressBar::new(0);
    let style = ProgressStyle::with_template(
        "{msg:<16} [{bar:40}] {percent:>3}% {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(label.to_string());
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}

fn show(bar: &ProgressBar, task: &Task) {
    let role = task.role.map(|r| format!(" role {r}")).unwrap_or_default();
    bar.set_message(format!("{}{role}", task.kind));
    bar.set_length(task.total_bytes);
    bar.set_position(task.done_bytes.min(task.total_bytes));
}
