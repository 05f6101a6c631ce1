//! One array from its members to serving and back: everything `raidkit serve` and the daemon
//! do for an array besides the NBD listener and the admin socket. [`RunningArray::start`]
//! opens the members (a remote one that cannot be reached is left out), lets the front end
//! create the array first if it asked to, assembles it with its journal checked, builds what
//! serves it ([`ArrayStack`]: journal replayed and attached, read cache), then starts the
//! background work around it — the resync of an array found dirty, the reconnect of remote
//! members, the owner lease. [`RunningArray::close`] stops them and closes the stack in its
//! safe order.
//!
//! Nothing here prints: what an operator should hear arrives as a [`Happening`] through the
//! front end's [`Tell`], from this thread or from the background threads.

use std::sync::Arc;

use anyhow::Context;
use member::{Member, OpenOptions};
use volume::{AssembleOptions, TakenOver, Volume, VolumeError};

use crate::array_journal::{JournalAtStart, JournalOptions, Replayed};
use crate::lifecycle::{self, Closed, LeaseRenewal};
use crate::members::{self, LeftOut};
use crate::reconnect::{self, Reconnector};
use crate::stack::{ArrayStack, StackOptions};
use crate::start::{self, StartNotice};

/// How to run one array.
pub struct ArrayOptions {
    /// The array the members must belong to (the configuration's `uuid`): a member whose
    /// superblock names another array is refused before anything is written.
    pub uuid: Option<ondisk::Uuid>,
    pub members: Vec<String>,
    pub spares: Vec<String>,
    /// Devices other arrays of its spare group list as spares: one that carries this array's
    /// superblock (a spare lent to it, rebuilt onto) is assembled as its member; the others
    /// are left alone (closed at once, nothing written).
    pub group_spares: Vec<String>,
    pub journal: JournalOptions,
    /// Serve without writing anything (no resync, no reconnect, no owner record).
    pub read_only: bool,
    /// How members (and those `add` and `replace` name later) are opened.
    pub open: OpenOptions,
    pub remote: member::RemoteOptions,
    /// Fault policy, background speed limits, owner; its spares and journal replay are
    /// filled in here.
    pub assemble: AssembleOptions,
    pub stack: StackOptions,
    /// What unlocks an encrypted array (`None`: no key given; an encrypted array is then
    /// refused, naming `key_how`).
    pub key: Option<crypt::KeySource>,
    /// Where the operator gives a key, for the message when none was given.
    pub key_how: &'static str,
    /// The reconnect of remote members; `None`: off (read-only arrays and levels without
    /// redundancy never reconnect).
    pub reconnect: Option<reconnect::Config>,
}

/// What an operator should hear about one array, as it happens.
pub enum Happening {
    /// A remote member could not be reached at start: the array starts without it.
    LeftOut(LeftOut),
    /// About the journal at assembly.
    Start(StartNotice),
    /// The array is encrypted: its data goes through this XTS implementation (VAES where the
    /// processor has it; `RAIDKIT_CRYPT` chooses).
    Encrypted(crypt::Implementation),
    /// A warning from the volume (at assembly or later: a refused action, a member fault).
    Warning(String),
    /// The journal was replayed.
    Replayed(Replayed),
    /// The array (named) was not shut down cleanly: it is resynced in the background.
    ResyncStarted(String),
    ResyncFinished(String, Result<(), VolumeError>),
    Reconnect(reconnect::Event),
    /// The reconnect thread could not start: remote members will not come back by themselves.
    ReconnectUnavailable(std::io::Error),
    /// Another process took the array (named) over. Its members are fenced already (every
    /// write to them fails from then on: [`member::Fence`]); the front end stops serving it
    /// ([`RunningArray::abandon`], or the process exits).
    TakenOver(String, TakenOver),
}

/// Where [`Happening`]s go; called from several threads.
pub type Tell = Arc<dyn Fn(Happening) + Send + Sync>;

/// This array's uuid: the configuration's, else the first member superblock's.
fn our_uuid(opts: &ArrayOptions, members: &[Arc<dyn Member>]) -> Option<ondisk::Uuid> {
    opts.uuid.or_else(|| {
        members
            .iter()
            .find_map(|m| ondisk::read_superblock(m.as_ref()).ok())
            .map(|sb| sb.array_uuid)
    })
}

/// The devices of `opts.group_spares` that carry this array's superblock: spares another
/// array of the spare group lent it. One that cannot be opened (held by the array it belongs
/// to, or gone) or belongs to another array is skipped without a word: it is not ours.
fn lent_to_us(
    opts: &ArrayOptions,
    members: &[Arc<dyn Member>],
    tell: &Tell,
) -> Vec<Arc<dyn Member>> {
    let Some(ours) = our_uuid(opts, members) else {
        return Vec::new();
    };
    let mut lent = Vec::new();
    for spec in &opts.group_spares {
        let Ok(device) = member::open_with(spec, &opts.open, &opts.remote) else {
            continue;
        };
        if ondisk::read_superblock(device.as_ref()).is_ok_and(|sb| sb.array_uuid == ours) {
            tell(Happening::Warning(format!(
                "{spec} is assembled as a member: it carries this array's superblock (a spare \
                 its spare group lent it; the configuration lists it under another array)"
            )));
            lent.push(device);
        }
    }
    lent
}

/// The spares an existing array starts with: a spare that cannot be opened (a dead disk) or
/// that carries another array's superblock (lent to another array of its spare group, or a
/// device name that moved) is left out with a warning: the array starts without it, and
/// nothing is written to it.
fn usable_spares(
    opts: &ArrayOptions,
    members: &[Arc<dyn Member>],
    tell: &Tell,
) -> Vec<Arc<dyn Member>> {
    let ours = our_uuid(opts, members);
    let mut usable = Vec::new();
    for spec in &opts.spares {
        let spare = match member::open_with(spec, &opts.open, &opts.remote) {
            Ok(spare) => spare,
            Err(e) => {
                tell(Happening::Warning(format!(
                    "spare {spec} left out: it cannot be opened: {e}"
                )));
                continue;
            }
        };
        match ondisk::read_superblock(spare.as_ref()) {
            Ok(sb) if Some(sb.array_uuid) != ours => tell(Happening::Warning(format!(
                "spare {spec} left out: it belongs to array {:?} ({}) now (lent to it by a \
                 spare group, or the device name moved); nothing was written to it",
                sb.name, sb.array_uuid
            ))),
            _ => usable.push(spare),
        }
    }
    usable
}

/// Creates the array on the opened members and spares before it is assembled.
/// Creates the array on its members and spares; returns the new data key when it is
/// encrypted (so the key is not asked for a second time).
pub type Create<'a> =
    &'a dyn Fn(&[Arc<dyn Member>], &[Arc<dyn Member>]) -> anyhow::Result<Option<crypt::DataKey>>;

/// An array being served; see the module documentation.
pub struct RunningArray {
    stack: ArrayStack,
    fence: member::Fence,
    reconnector: Option<Reconnector>,
    lease: LeaseRenewal,
    tell: Tell,
}

impl RunningArray {
    /// Opens, (creates,) assembles and starts serving the array `opts` describes.
    pub fn start(
        opts: ArrayOptions,
        create: Option<Create>,
        tell: Tell,
    ) -> anyhow::Result<RunningArray> {
        let (mut members, left_out) =
            members::open_for_assembly(&opts.members, &opts.open, &opts.remote, create.is_some())?;
        if create.is_none() {
            members.extend(lent_to_us(&opts, &members, &tell));
        }
        let left_out: Vec<String> = left_out
            .into_iter()
            .map(|left| {
                let spec = left.spec.clone();
                tell(Happening::LeftOut(left));
                spec
            })
            .collect();
        let spares = match create {
            Some(_) => opts
                .spares
                .iter()
                .map(|spec| {
                    member::open_with(spec, &opts.open, &opts.remote)
                        .with_context(|| format!("cannot open spare {spec}"))
                })
                .collect::<anyhow::Result<Vec<_>>>()?,
            None => usable_spares(&opts, &members, &tell),
        };
        if let Some(uuid) = opts.uuid {
            for m in members.iter().chain(&spares) {
                if let Ok(sb) = ondisk::read_superblock(m.as_ref()) {
                    anyhow::ensure!(
                        sb.array_uuid == uuid,
                        "{} belongs to array {:?} ({}), not to {uuid}: check the device names \
                         (they can change between boots; /dev/disk/by-id names do not)",
                        m.name(),
                        sb.name,
                        sb.array_uuid
                    );
                }
            }
        }
        let cipher = match create {
            Some(create) => create(&members, &spares)?.map(|key| crypt::DataCipher::new(&key)),
            None => crate::unlock::unlock(&members, opts.key.as_ref(), opts.key_how)?,
        };
        if let Some(cipher) = &cipher {
            tell(Happening::Encrypted(cipher.implementation()));
        }
        // Every member the array will hold, behind one fence: closed when another process
        // takes the array over, after which nothing more reaches them.
        let fence = member::Fence::new();
        let members: Vec<_> = members.into_iter().map(|m| fence.wrap(m)).collect();
        let spares: Vec<_> = spares.into_iter().map(|m| fence.wrap(m)).collect();
        let notice = |notice: StartNotice| tell(Happening::Start(notice));
        let assembled = start::assemble(
            members,
            spares,
            opts.assemble,
            &opts.journal,
            opts.read_only,
            create.is_some(),
            &notice,
        )?;
        let volume = assembled.volume;
        for warning in volume.warnings() {
            tell(Happening::Warning(warning.clone()));
        }
        let hook_tell = Arc::clone(&tell);
        volume.set_notice_hook(Box::new(move |line| {
            hook_tell(Happening::Warning(line.to_string()))
        }));
        // The journal is replayed before anything else writes (resync included).
        let journal = match assembled.journal {
            JournalAtStart::Use(jm, jsb) => JournalAtStart::Use(fence.wrap(jm), jsb),
            other => other,
        };
        let (stack, replayed) =
            ArrayStack::build(volume, journal, &opts.stack, cipher, fence.clone())?;
        if let Some(replayed) = replayed {
            tell(Happening::Replayed(replayed));
        }
        let volume = Arc::clone(stack.volume());
        let name = volume.name().to_string();
        if assembled.needs_resync {
            tell(Happening::ResyncStarted(name.clone()));
            let (done, name) = (Arc::clone(&tell), name.clone());
            lifecycle::start_resync(&volume, move |result| {
                done(Happening::ResyncFinished(name, result))
            });
        }
        let reconnector = match opts.reconnect {
            Some(config) if !opts.read_only && volume.level().has_redundancy() => {
                let events = Arc::clone(&tell);
                let sink = Box::new(move |event| events(Happening::Reconnect(event)));
                let fenced = fence.clone();
                match Reconnector::start(Arc::clone(&volume), left_out, config, fenced, sink) {
                    Ok(reconnector) => Some(reconnector),
                    Err(e) => {
                        tell(Happening::ReconnectUnavailable(e));
                        None
                    }
                }
            }
            _ => None,
        };
        let (taken, fenced) = (Arc::clone(&tell), fence.clone());
        let lease = LeaseRenewal::start(&volume, move |t| {
            fenced.close();
            taken(Happening::TakenOver(name, t))
        });
        Ok(RunningArray {
            stack,
            fence,
            reconnector,
            lease,
            tell,
        })
    }

    pub fn stack(&self) -> &ArrayStack {
        &self.stack
    }

    pub fn volume(&self) -> &Arc<Volume> {
        self.stack.volume()
    }

    /// Stops the reconnect and the lease renewal, then closes the stack (drain, flush, clean
    /// mark, journal checkpoint, owner released). Every export clone must be dropped first.
    pub fn close(self) -> Closed {
        if let Some(reconnector) = self.reconnector {
            if reconnector.stop().is_err() {
                (self.tell)(Happening::Warning(
                    "the reconnect thread panicked".to_string(),
                ));
            }
        }
        drop(self.lease);
        self.stack.close()
    }

    /// True once the array was taken over (its fence closed): it must be [`abandon`]ed, not
    /// closed.
    ///
    /// [`abandon`]: RunningArray::abandon
    pub fn taken_over(&self) -> bool {
        self.fence.is_closed()
    }

    /// Lets go of an array another process took over, writing nothing more to it: closes the
    /// fence (if the lease renewal has not), stops the reconnect and the lease renewal, and
    /// drops the stack without closing it (no flush, no clean mark, no owner release: the
    /// members are the other process's now). Every export clone should be dropped first; a
    /// request still running fails at the fence. Not from the lease renewal's own thread (the
    /// `Tell` of `TakenOver`): it waits for that thread to end.
    pub fn abandon(self) {
        self.fence.close();
        if let Some(reconnector) = self.reconnector {
            let _ = reconnector.stop();
        }
        drop(self.lease);
        drop(self.stack);
    }
}
