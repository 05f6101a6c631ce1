//! [`Drive`]: one modelled drive as a discrete-event simulation, and [`Disk`]: a drive behind a
//! clock for callers that wait for each request.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::flash::Flash;
use crate::hdd::Hdd;
use crate::models::{Model, Options};
use crate::request::Request;
use crate::{Clock, Nanos};

/// Requests accepted and not yet dispatched, at most (the callers are threads, each waiting
/// for its request, so the bound is never reached by a bounded server; past it `submit` says
/// [`QueueFull`] and the caller waits for the next event).
pub const MAX_PENDING: usize = 4096;

/// A submitted request, to ask for its completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket(u64);

/// The drive holds [`MAX_PENDING`] requests already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFull;

#[derive(Debug)]
enum Engine {
    Hdd(Box<Hdd>),
    Flash(Flash),
}

/// One drive: requests go in at times on the caller's clock, completion times come out.
#[derive(Debug)]
pub struct Drive {
    engine: Engine,
    size: u64,
    now: Nanos,
    next_ticket: u64,
    /// Completion times known and not yet taken (bounded by the requests outstanding).
    completions: HashMap<Ticket, Nanos>,
    scratch: Vec<(u64, Nanos)>,
}

impl Drive {
    /// A drive of `size` bytes of `model` with `options`.
    pub fn new(model: &Model, options: &Options, size: u64) -> Drive {
        let engine = match model {
            Model::Hdd(p) => Engine::Hdd(Box::new(Hdd::new(
                p,
                size,
                options.order,
                options.queue_depth,
                options.write_cache,
            ))),
            Model::Flash(p) => Engine::Flash(Flash::new(p)),
        };
        Drive {
            engine,
            size,
            now: 0,
            next_ticket: 0,
            completions: HashMap::new(),
            scratch: Vec::new(),
        }
    }

    /// The drive's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The time the model has been advanced to.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Takes `req` arriving at `at` (not before [`Drive::now`]; an earlier `at` is taken as
    /// now). Panics on a request past the end (the member checks ranges first).
    pub fn submit(&mut self, at: Nanos, req: Request) -> Result<Ticket, QueueFull> {
        assert!(
            req.offset
                .checked_add(req.len)
                .is_some_and(|e| e <= self.size),
            "request {req:?} past the end of a {}-byte drive",
            self.size
        );
        self.advance(at);
        let at = self.now;
        let ticket = Ticket(self.next_ticket);
        match &mut self.engine {
            Engine::Hdd(hdd) => {
                if hdd.pending() >= MAX_PENDING {
                    return Err(QueueFull);
                }
                self.next_ticket += 1;
                hdd.submit(at, ticket.0, &req, &mut self.scratch);
                self.collect();
                // An idle mechanism starts on it at once.
                self.advance(at);
            }
            Engine::Flash(flash) => {
                self.next_ticket += 1;
                let done = flash.submit(at, &req);
                self.completions.insert(ticket, done);
            }
        }
        Ok(ticket)
    }

    fn collect(&mut self) {
        for (t, done) in self.scratch.drain(..) {
            self.completions.insert(Ticket(t), done);
        }
    }

    /// Runs the model up to `t`: every dispatch due by then happens.
    pub fn advance(&mut self, t: Nanos) {
        if let Engine::Hdd(hdd) = &mut self.engine {
            while let Some(e) = hdd.next_event().filter(|&e| e <= t) {
                hdd.step(e.max(self.now), &mut self.scratch);
            }
            self.collect();
        }
        self.now = self.now.max(t);
    }

    /// When `ticket` completes, once the model knows (flash: at once; a disk: when it starts
    /// the request).
    pub fn completion(&self, ticket: Ticket) -> Option<Nanos> {
        self.completions.get(&ticket).copied()
    }

    /// Forgets a completed ticket (each must be taken once, or the map grows).
    pub fn forget(&mut self, ticket: Ticket) {
        self.completions.remove(&ticket);
    }

    /// When the model next changes: the time to advance to before asking again about a request
    /// whose completion is not known yet. `None` when nothing is waiting.
    pub fn next_event(&self) -> Option<Nanos> {
        match &self.engine {
            Engine::Hdd(hdd) => hdd.next_event().map(|e| e.max(self.now)),
            Engine::Flash(_) => None,
        }
    }
}

/// A drive behind a clock: [`Disk::io`] waits until the request is done, sleeping (a real-time
/// clock) or moving the clock (a [`crate::VirtualClock`]). Safe from many threads.
#[derive(Debug)]
pub struct Disk<C: Clock> {
    drive: Mutex<Drive>,
    clock: C,
}

impl<C: Clock> Disk<C> {
    /// `drive` run on `clock`.
    pub fn new(drive: Drive, clock: C) -> Disk<C> {
        Disk {
            drive: Mutex::new(drive),
            clock,
        }
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Drive> {
        // The drive's state is plain numbers: a panic elsewhere cannot leave it unusable.
        self.drive.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Submits `req` now and returns when the model completes it: (arrival, completion).
    pub fn io(&self, req: Request) -> (Nanos, Nanos) {
        let (ticket, arrival) = self.submit(req);
        (arrival, self.wait(ticket))
    }

    /// Submits `req` now, without waiting: the drive has it queued from this instant (as a
    /// host's asynchronous submission, io_uring's or NCQ's). Returns its ticket and arrival;
    /// [`Disk::wait`] for it (each ticket once, or the drive keeps its completion).
    pub fn submit(&self, req: Request) -> (Ticket, Nanos) {
        loop {
            let mut drive = self.lock();
            let now = self.clock.now();
            match drive.submit(now, req) {
                Ok(ticket) => return (ticket, now),
                Err(QueueFull) => {
                    let next = drive.next_event().expect("a full drive has events");
                    drop(drive);
                    self.clock.wait_until(next);
                }
            }
        }
    }

    /// Returns when the model completes `ticket` (from [`Disk::submit`]): its completion time.
    pub fn wait(&self, ticket: Ticket) -> Nanos {
        loop {
            let mut drive = self.lock();
            drive.advance(self.clock.now());
            if let Some(done) = drive.completion(ticket) {
                drive.forget(ticket);
                drop(drive);
                self.clock.wait_until(done);
                return done;
            }
            let next = drive
                .next_event()
                .expect("a request without a completion has an event ahead");
            drop(drive);
            self.clock.wait_until(next);
        }
    }
}
