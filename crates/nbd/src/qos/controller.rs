//! The latency-target controller, pure: request latencies and the time in, throttle levels
//! out. No clock, no threads, no locks: [`super::QosGroup`] feeds it under its mutex, and the
//! unit tests drive it with made-up times.
//!
//! The model is Linux's io.latency (block/blk-iolatency.c), judged per window:
//! - A class with a latency target ("protected") has each request's latency recorded. It
//!   *misses* in a window when more than a tenth of its requests (`MISS_FRACTION`) took longer
//!   than its target — its p90 is above the target, io.latency's rule for solid-state devices.
//!   Its samples are judged once there are `MIN_SAMPLES` of them (a window of
//!   `WINDOW`), or after `MAX_WINDOW` with however many there are, so a lightly loaded array
//!   is judged too, only more slowly.
//! - When a protected class misses, every class with no target or a larger one is throttled one
//!   level further (at most one level per window); a class with a smaller target than the
//!   strictest miss is left alone (io.latency: peers with looser targets pay).
//! - A throttled class relaxes one level after `RELAX_WINDOWS` windows in a row in which no
//!   protected class that may throttle it missed: slower up than down, so the throttle
//!   settles instead of swinging (io.latency scales down by half and up by a sixteenth).
//! - The levels ([`LEVELS`]): first fewer requests of the class at once (8, 4, 2, 1), then, at
//!   one at a time, a pause after each request of 1, 3 and at most 9 times the time the
//!   request took (io.latency's induced delay at queue depth 1). So a throttled class always
//!   has one request admitted and runs at least a tenth of the time (`MIN_SHARE_PERCENT`):
//!   throttled, never starved.

use std::collections::BTreeMap;
use std::time::Duration;

/// The decision period.
pub const WINDOW: Duration = Duration::from_millis(100);
/// A protected class is judged once it has this many samples...
pub const MIN_SAMPLES: u32 = 5;
/// ...or once its samples are this old (if it has any).
pub const MAX_WINDOW: Duration = Duration::from_secs(1);
/// A window is missed when more than 1 in `MISS_FRACTION` requests were over the target.
pub const MISS_FRACTION: u32 = 10;
/// Good windows in a row before a throttled class relaxes one level.
pub const RELAX_WINDOWS: u32 = 3;
/// The longest pause after one request, whatever it took (a request that waited for a slow
/// member is not followed by minutes of pause).
pub const MAX_PAUSE: Duration = Duration::from_millis(100);

/// What a throttle level allows a class: requests admitted at once (`None`: no limit beyond
/// the export's own) and the pause after each request, as a multiple of the time it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_in_flight: Option<u32>,
    pub pause_factor: u32,
}

/// Level 0 is unthrottled; each further level is one step harder.
pub const LEVELS: [Limits; 8] = [
    Limits {
        max_in_flight: None,
        pause_factor: 0,
    },
    Limits {
        max_in_flight: Some(8),
        pause_factor: 0,
    },
    Limits {
        max_in_flight: Some(4),
        pause_factor: 0,
    },
    Limits {
        max_in_flight: Some(2),
        pause_factor: 0,
    },
    Limits {
        max_in_flight: Some(1),
        pause_factor: 0,
    },
    Limits {
        max_in_flight: Some(1),
        pause_factor: 1,
    },
    Limits {
        max_in_flight: Some(1),
        pause_factor: 3,
    },
    Limits {
        max_in_flight: Some(1),
        pause_factor: 9,
    },
];

/// The hardest level.
pub const MAX_LEVEL: usize = LEVELS.len() - 1;

/// The least a throttled class keeps: one request at a time, and at least this share of the
/// time (a request, then at most `pause_factor` times its length of pause).
pub const MIN_SHARE_PERCENT: u32 = 100 / (LEVELS[MAX_LEVEL].pause_factor + 1);

/// One window's judgement of a protected class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Judged {
    pub samples: u32,
    /// Of which over the target.
    pub over: u32,
}

impl Judged {
    pub fn missed(&self) -> bool {
        self.samples > 0 && self.over * MISS_FRACTION > self.samples
    }
}

/// The controller's view of one class.
#[derive(Debug, Clone, Default)]
pub struct ClassState {
    pub target: Option<Duration>,
    /// The current throttle level, an index into [`LEVELS`].
    pub level: usize,
    /// Protected classes: samples not yet judged, and since when.
    pending: Judged,
    pending_since: Option<Duration>,
    /// Windows in a row with no miss that may throttle this class.
    good: u32,
    /// The last judgement of this class's own target.
    pub last: Option<Judged>,
    /// Judgements of this class's target that missed.
    pub windows_missed: u64,
    /// Times this class was throttled one level further.
    pub scale_downs: u64,
}

/// See the module documentation. Classes are named by the caller's ids.
#[derive(Debug, Clone)]
pub struct Controller {
    classes: BTreeMap<u64, ClassState>,
    window_start: Duration,
}

impl Controller {
    pub fn new(now: Duration) -> Controller {
        Controller {
            classes: BTreeMap::new(),
            window_start: now,
        }
    }

    pub fn add(&mut self, id: u64, target: Option<Duration>) {
        self.classes.insert(
            id,
            ClassState {
                target,
                ..ClassState::default()
            },
        );
    }

    pub fn remove(&mut self, id: u64) {
        self.classes.remove(&id);
    }

    /// A new target (or none) for class `id`; its unjudged samples are dropped (they were
    /// counted against the old one).
    pub fn set_target(&mut self, id: u64, target: Option<Duration>) {
        if let Some(c) = self.classes.get_mut(&id) {
            c.target = target;
            c.pending = Judged::default();
            c.pending_since = None;
        }
    }

    pub fn class(&self, id: u64) -> Option<&ClassState> {
        self.classes.get(&id)
    }

    pub fn level(&self, id: u64) -> usize {
        self.classes.get(&id).map_or(0, |c| c.level)
    }

    /// Whether class `id` has a target (only those need their requests recorded).
    pub fn protected(&self, id: u64) -> bool {
        self.classes.get(&id).is_some_and(|c| c.target.is_some())
    }

    /// One request of class `id` took `latency`, finishing at `now`.
    pub fn record(&mut self, id: u64, latency: Duration, now: Duration) {
        let Some(c) = self.classes.get_mut(&id) else {
            return;
        };
        let Some(target) = c.target else {
            return;
        };
        c.pending_since.get_or_insert(now);
        c.pending.samples = c.pending.samples.saturating_add(1);
        if latency > target {
            c.pending.over = c.pending.over.saturating_add(1);
        }
    }

    /// When the current window ends (the caller ticks at or after it).
    pub fn window_end(&self) -> Duration {
        self.window_start + WINDOW
    }

    /// Decides, if the window is over: returns whether any level changed.
    pub fn tick(&mut self, now: Duration) -> bool {
        if now < self.window_end() {
            return false;
        }
        self.window_start = now;
        // The strictest target missed in this window.
        let mut missed: Option<Duration> = None;
        for c in self.classes.values_mut() {
            let (Some(target), Some(since)) = (c.target, c.pending_since) else {
                continue;
            };
            let ripe = c.pending.samples >= MIN_SAMPLES || now.saturating_sub(since) >= MAX_WINDOW;
            if !ripe {
                continue;
            }
            let judged = std::mem::take(&mut c.pending);
            c.pending_since = None;
            c.last = Some(judged);
            if judged.missed() {
                c.windows_missed += 1;
                missed = Some(missed.map_or(target, |m| m.min(target)));
            }
        }
        let mut changed = false;
        for c in self.classes.values_mut() {
            let throttled_by_miss = missed.is_some_and(|m| c.target.is_none_or(|t| t > m));
            if throttled_by_miss {
                c.good = 0;
                if c.level < MAX_LEVEL {
                    c.level += 1;
                    c.scale_downs += 1;
                    changed = true;
                }
            } else if c.level > 0 {
                c.good += 1;
                if c.good >= RELAX_WINDOWS {
                    c.good = 0;
                    c.level -= 1;
                    changed = true;
                }
            }
        }
        changed
    }
}

/// The pause after a request of a class at `level` that took `took`.
pub fn pause_after(level: usize, took: Duration) -> Duration {
    let factor = LEVELS[level.min(MAX_LEVEL)].pause_factor;
    took.saturating_mul(factor).min(MAX_PAUSE)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u64 = 1;
    const B: u64 = 2;
    const C: u64 = 3;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// A (target 100 µs) and B (none), at time 0.
    fn two() -> Controller {
        let mut c = Controller::new(Duration::ZERO);
        c.add(A, Some(us(100)));
        c.add(B, None);
        c
    }

    /// One window of A's requests, `over` of 20 above its target, then the tick at its end.
    fn window(c: &mut Controller, now: &mut Duration, over: u32) -> bool {
        for i in 0..20 {
            let latency = if i < over { us(500) } else { us(40) };
            c.record(A, latency, *now + ms(i as u64));
        }
        *now += WINDOW;
        c.tick(*now)
    }

    #[test]
    fn a_missed_target_throttles_the_untargeted_class_one_level_per_window_up_to_the_last() {
        let mut c = two();
        let mut now = Duration::ZERO;
        for expected in 1..=MAX_LEVEL {
            assert!(window(&mut c, &mut now, 10));
            assert_eq!(c.level(B), expected);
            assert_eq!(c.level(A), 0, "the protected class is not throttled");
        }
        // At the hardest level it stays there.
        assert!(!window(&mut c, &mut now, 10));
        assert_eq!(c.level(B), MAX_LEVEL);
        assert_eq!(c.class(B).unwrap().scale_downs, MAX_LEVEL as u64);
        assert_eq!(c.class(A).unwrap().windows_missed, MAX_LEVEL as u64 + 1);
        assert_eq!(
            c.class(A).unwrap().last,
            Some(Judged {
                samples: 20,
                over: 10
            })
        );
    }

    #[test]
    fn at_most_a_tenth_over_the_target_is_met_and_more_is_missed() {
        let mut c = two();
        let mut now = Duration::ZERO;
        window(&mut c, &mut now, 2); // 2 of 20: 10 %, met
        assert_eq!(c.level(B), 0);
        window(&mut c, &mut now, 3); // 3 of 20: missed
        assert_eq!(c.level(B), 1);
    }

    #[test]
    fn the_throttle_relaxes_one_level_per_three_good_windows_down_to_none() {
        let mut c = two();
        let mut now = Duration::ZERO;
        for _ in 0..MAX_LEVEL {
            window(&mut c, &mut now, 20);
        }
        assert_eq!(c.level(B), MAX_LEVEL);
        let mut levels = Vec::new();
        for _ in 0..(RELAX_WINDOWS as usize * MAX_LEVEL + 2) {
            window(&mut c, &mut now, 0);
            levels.push(c.level(B));
        }
        let expected: Vec<usize> = (0..levels.len())
            .map(|i| MAX_LEVEL.saturating_sub((i + 1) / RELAX_WINDOWS as usize))
            .collect();
        assert_eq!(levels, expected);
        assert_eq!(c.level(B), 0);
    }

    #[test]
    fn a_miss_in_between_resets_the_relaxing() {
        let mut c = two();
        let mut now = Duration::ZERO;
        window(&mut c, &mut now, 20);
        window(&mut c, &mut now, 20);
        assert_eq!(c.level(B), 2);
        window(&mut c, &mut now, 0);
        window(&mut c, &mut now, 0);
        window(&mut c, &mut now, 20); // missed again before the third good window
        assert_eq!(c.level(B), 3);
        window(&mut c, &mut now, 0);
        window(&mut c, &mut now, 0);
        assert_eq!(c.level(B), 3);
        window(&mut c, &mut now, 0);
        assert_eq!(c.level(B), 2);
    }

    #[test]
    fn an_idle_protected_class_lets_the_throttle_relax() {
        let mut c = two();
        let mut now = Duration::ZERO;
        window(&mut c, &mut now, 20);
        assert_eq!(c.level(B), 1);
        // No request of A at all: nothing is missed, B relaxes.
        for _ in 0..RELAX_WINDOWS {
            now += WINDOW;
            c.tick(now);
        }
        assert_eq!(c.level(B), 0);
    }

    #[test]
    fn few_samples_wait_for_the_long_window_then_count() {
        let mut c = two();
        let mut now = Duration::ZERO;
        // Two slow requests: fewer than MIN_SAMPLES, so no judgement yet...
        c.record(A, ms(5), now);
        c.record(A, ms(5), now);
        for _ in 0..9 {
            now += WINDOW;
            c.tick(now);
            assert_eq!(c.level(B), 0);
        }
        // ...until they are MAX_WINDOW old.
        now += WINDOW;
        c.tick(now);
        assert_eq!(c.level(B), 1);
        assert_eq!(
            c.class(A).unwrap().last,
            Some(Judged {
                samples: 2,
                over: 2
            })
        );
    }

    #[test]
    fn no_decision_before_the_window_ends() {
        let mut c = two();
        for i in 0..20 {
            c.record(A, ms(5), us(i));
        }
        assert!(!c.tick(WINDOW - us(1)));
        assert_eq!(c.level(B), 0);
        assert!(c.tick(WINDOW));
        assert_eq!(c.level(B), 1);
    }

    #[test]
    fn looser_targets_pay_for_a_stricter_miss_and_stricter_ones_do_not() {
        let mut c = Controller::new(Duration::ZERO);
        c.add(A, Some(us(100)));
        c.add(B, Some(ms(10))); // looser: throttled when A misses
        c.add(C, Some(us(50))); // stricter: not throttled for A
        let mut now = Duration::ZERO;
        window(&mut c, &mut now, 20);
        assert_eq!((c.level(A), c.level(B), c.level(C)), (0, 1, 0));
        // B missing its own target throttles nobody looser (there is none) and not A or C.
        for _ in 0..20 {
            c.record(B, ms(50), now);
        }
        now += WINDOW;
        c.tick(now);
        assert_eq!((c.level(A), c.level(C)), (0, 0));
    }

    #[test]
    fn a_new_target_drops_the_samples_taken_against_the_old_one() {
        let mut c = two();
        for i in 0..20 {
            c.record(A, ms(5), us(i));
        }
        c.set_target(A, Some(ms(10)));
        assert!(!c.tick(WINDOW));
        assert_eq!(c.level(B), 0);
        c.set_target(A, None);
        assert!(!c.protected(A));
    }

    #[test]
    fn the_minimum_share_holds_at_every_level() {
        assert_eq!(MIN_SHARE_PERCENT, 10);
        for (level, limits) in LEVELS.iter().enumerate() {
            assert!(limits.max_in_flight.is_none_or(|n| n >= 1), "level {level}");
            // A request of any length, then its pause: the request is >= 10 % of the time.
            for took in [us(1), us(300), ms(5), ms(50), Duration::from_secs(2)] {
                let pause = pause_after(level, took);
                assert!(
                    took.as_nanos() * 100 >= (took + pause).as_nanos() * MIN_SHARE_PERCENT as u128,
                    "level {level}, request {took:?}, pause {pause:?}"
                );
                assert!(pause <= MAX_PAUSE);
            }
        }
        assert_eq!(pause_after(MAX_LEVEL, us(300)), us(2700));
        assert_eq!(pause_after(MAX_LEVEL, ms(50)), MAX_PAUSE);
        assert_eq!(pause_after(0, ms(50)), Duration::ZERO);
    }

    #[test]
    fn removed_classes_are_forgotten() {
        let mut c = two();
        c.remove(B);
        assert!(c.class(B).is_none());
        assert_eq!(c.level(B), 0);
        let mut now = Duration::ZERO;
        window(&mut c, &mut now, 20);
    }
}
