//! What `raidkit grow` shows while `volume::grow` works: the reshape's messages, and its
//! progress as an indicatif bar in a terminal, else a line a second.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use volume::grow::GrowEvent;

pub struct Progress {
    tty: bool,
    bar: Option<ProgressBar>,
    started: Instant,
    last_line: Option<Instant>,
}

impl Progress {
    pub fn new() -> Progress {
        Progress {
            tty: std::io::stdout().is_terminal(),
            bar: None,
            started: Instant::now(),
            last_line: None,
        }
    }

    pub fn event(&mut self, event: GrowEvent<'_>) {
        match event {
            GrowEvent::Repaired(name) => println!(
                "raidkit: member {name}: its superblock, torn by a stop during the grow, was \
                 rewritten from the other members'"
            ),
            GrowEvent::Resuming(state) => println!(
                "raidkit: array {} is in the middle of a reshape ({} -> {} members) at array \
                 byte {}: resuming",
                state.array,
                state.record.old_member_count,
                state.fresh.member_count,
                state.record.position_bytes
            ),
            GrowEvent::Recorded(state) => println!(
                "raidkit: array {} reshape recorded ({} -> {} members, events {}): moving the data",
                state.array,
                state.record.old_member_count,
                state.fresh.member_count,
                state.fresh.events
            ),
            GrowEvent::Moving { at, end } => {
                self.started = Instant::now();
                if self.tty {
                    let bar = ProgressBar::new(end);
                    let style = ProgressStyle::with_template(
                        "{prefix:<16} [{bar:40}] {percent:>3}% {bytes}/{total_bytes} at \
                         {bytes_per_sec}, ETA {eta}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> ");
                    bar.set_style(style);
                    bar.set_prefix("reshape");
                    bar.set_position(at);
                    self.bar = Some(bar);
                }
            }
            GrowEvent::Moved { at, end } => match &self.bar {
                Some(bar) => bar.set_position(at),
                None => {
                    if self
                        .last_line
                        .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
                    {
                        self.last_line = Some(Instant::now());
                        println!(
                            "raidkit: reshape at array byte {at} of {end} ({:.1}%, {:.1} s)",
                            at as f64 * 100.0 / end as f64,
                            self.started.elapsed().as_secs_f64()
                        );
                    }
                }
            },
        }
    }

    /// The bar is cleared (the command prints what it did next, or its error).
    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}
