//! One array run for a front end: what `raidkit serve` (and the daemon that serves several
//! arrays) does around a `volume::Volume`, except parsing options and printing. Nothing here
//! prints: what an operator should hear is returned (warnings as values with `Display`,
//! refusals as errors with their cause chain).
//!
//! - [`array_journal`]: the array's journal from outside the data path: writing a new one and
//!   recording it ([`array_journal::add`]), the checks before assembly (a lost write-back
//!   journal refuses to start, a lost write-through one is detached, a journal on RAM is
//!   refused or warned about), attaching it after assembly (replay, hooks; through
//!   [`stack`]), and removing it from a stopped array (replay, then forget).
//! - [`members`]: opening the members for assembly (a remote one that cannot be reached is
//!   left out, a local one refused).
//! - [`unlock`]: an encrypted array's cipher, from its members' key slots and the key given.
//! - [`start`]: assembling an array with its journal checked ([`start::assemble`]).
//! - [`stack`]: what serves an assembled array ([`stack::ArrayStack`]): the journal attached
//!   with its replay, the read cache in front, the export, the admin control whose status
//!   carries the journal and cache sections, and the close.
//! - [`lifecycle`]: around serving: the background resync of a dirty array, the owner lease
//!   renewal, and the close in its safe order (through [`stack::ArrayStack::close`]).
//! - [`running`]: one array from its members to serving and back ([`running::RunningArray`]):
//!   members opened, the array assembled and its stack built, the resync, reconnect and lease
//!   around it, the close; what happens is told to the front end as [`running::Happening`]s.
//! - [`schedule`]: scheduled scrubs and the background window ([`schedule::Scheduler`], one
//!   thread for the daemon's arrays, driven by a [`schedule::Clock`]).
//! - [`reconnect`]: the remote-member reconnect policy and its thread ([`reconnect::Reconnector`]):
//!   a remote member whose server disconnected is added back once it answers again with this
//!   array's superblock.
//! - [`monitor`]: mdadm's `--monitor` events from each array's status, on a thread of its own,
//!   which also moves spares within spare groups as [`spares`] decides.
//! - [`spares`]: spare groups: which spare of a group moves to a degraded array ([`spares::decide`]).
//! - [`mdstat_file`]: the file in /proc/mdstat's format a process keeps for its arrays
//!   ([`mdstat_file::MdstatFile`]), for node_exporter, telegraf and md's scripts.
//! - [`periodic`]: the thread that does one thing every interval until dropped
//!   ([`periodic::Periodic`]), which the monitor, scheduler, mdstat file and lease run on.
//!
//! Errors are `anyhow::Error`: every one ends as a message to an operator with its cause
//! chain, and no caller decides anything by its kind.

pub mod array_journal;
pub mod lifecycle;
pub mod mdstat_file;
pub mod members;
pub mod monitor;
pub mod periodic;
pub mod reconnect;
pub mod running;
pub mod schedule;
pub mod spares;
pub mod stack;
pub mod start;
pub mod unlock;
