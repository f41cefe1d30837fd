//! Shared (read) holds: `lock(name).read()` is a kind of hold, held by any number of
//! readers at once and excluded by (and excluding) the lock itself, the write. Built, waited
//! for, renewed, held, run and released by the common machinery; what is its own is the acquire
//! request (`SharedAcquireCall`: `ACQUIRE_READ` for a reader, `ACQUIRE_WRITE` for a writer that
//! met readers, which marks its intent so that new readers wait and writers do not starve)
//! and the re-entry rules across kinds.
//!
//! ## Over a RedLock quorum: majorities
//!
//! A read hold counts when a majority of the masters granted it (`ACQUIRE_READ` on each)
//! within the validity time, and a write when a majority granted it, exactly as a lock's
//! acquire (`count::acquired`). Any read majority and any write majority share a master,
//! which granted only one of them (a master's key is either a writer's string or a set of
//! readers): readers never overlap a writer, and writers never overlap each other. A writer
//! whose queued acquire (`ACQUIRE_QUEUED`) met readers (their sets answer it as incompatible)
//! is asked again as `ACQUIRE_WRITE` on every master, which marks its intent on each master
//! where readers are, so new readers cannot make a majority while it waits (they meet the
//! intent on a majority, or the writer's lock): writers do not starve there either. Renewal
//! and release count by majority, as a lock's. A grant short of a majority is released again
//! (ordered after any late grant, `stragglers`), and so is what a cancelled acquire may have
//! been granted. Waiting readers, and writers that met readers, retry on each release and at
//! the first lease's (or intent's) end: the RedLock FIFO queue is the lock's only. Fencing
//! tokens come from the quorum's fence floors (`fence`): unique, and above every token handed
//! out before the acquire started.

use crate::client::waiting::queue::Place;
use crate::client::Client;
use crate::error::{Error, Operation};
use crate::lock::kind::exclusive;
use crate::lock::kind::variant::{Kind, Target};
use crate::lock::terms::Terms;
use crate::wire::calls::{Acquired, Shared, SharedAcquireCall, SharedAcquired, Turn};
use crate::wire::request::ReplicaWait;

/// The kind an acquisition takes once `read` is applied: a read hold of a lock; a semaphore
/// or a set with `read` is refused.
pub(crate) fn read(kind: Kind, name: &str) -> Result<Kind, Error> {
    match kind {
        Kind::Exclusive | Kind::Read => Ok(Kind::Read),
        Kind::Permits(_) => Err(Error::InvalidConfig {
            reason: format!(
                "semaphore `{name}` is asked for with `read`: a semaphore's permits are not shared holds; use one or the other"
            ),
        }),
        Kind::Set => Err(Error::InvalidConfig {
            reason: format!("the set of locks starting with `{name}` is asked for as a semaphore or a shared (read) hold: sets of locks are exclusive locks only"),
        }),
    }
}

/// What re-enters a read hold: another read (no second share is taken). A write never does
/// (a read hold is never upgraded in place: two readers upgrading would deadlock), nor a
/// permit.
pub(crate) fn admits(name: &str, inner: Kind) -> Result<(), Error> {
    match inner {
        Kind::Read => Ok(()),
        Kind::Exclusive | Kind::Set => Err(Error::WriteInsideRead {
            key: name.to_owned(),
        }),
        Kind::Permits(_) => Err(Error::Incompatible {
            key: name.to_owned(),
        }),
    }
}

/// The place of a permit's or a reader's waiter (`waits`): on one server, Sentinel and a
/// cluster it queues in Redis (a reader in one line with the lock's writers) and a release hands
/// it a permit or a share, for its grant window, as a lock's waiter is handed the lock
/// (`exclusive::handed`: trusted for that window and extended by the watchdog; fenced or
/// asking for replicas, confirmed by one more attempt, which extends it to the ttl, raises its
/// token and waits for its replicas: see `scripts::ACQUIRE_PERMIT`, `scripts::ACQUIRE_READ`).
/// Over RedLock such a waiter is not queued (see the module docs).
pub(crate) fn place(client: &Client, terms: &Terms, waits: bool) -> Place {
    match waits && client.hands_over() {
        true => exclusive::handed(terms),
        false => Place::default(),
    }
}

/// One read hold's acquire request (`ACQUIRE_READ`): where a release hands the lock over (not
/// over RedLock), with the queue, so that it never passes a writer queued before it, and in
/// its turn from a waiter's queued `place`.
pub(crate) async fn send_read(
    target: Target<'_>,
    terms: &Terms,
    place: Place,
    request: (&[u8], Option<ReplicaWait>),
) -> Result<(Acquired, Option<usize>), Error> {
    let client = target.client;
    // An unqueued read still carries the queue (ticket 0), so it never passes a writer
    // queued before it.
    let sharded = client.publishes_sharded();
    let turn = client.hands_over().then(|| {
        place.turn(sharded).unwrap_or(Turn {
            ticket: 0,
            sharded,
            life: 0,
        })
    });
    found(send(target, terms, (Shared::Read, turn), request).await?)
}

/// A write's acquire request once it met readers (`ACQUIRE_WRITE`, marking its intent while
/// it waits).
pub(crate) async fn send_write(
    target: Target<'_>,
    terms: &Terms,
    request: (&[u8], Option<ReplicaWait>),
) -> Result<(Acquired, Option<usize>), Error> {
    let write = Shared::Write {
        waits: terms.wait.is_some(),
    };
    found(send(target, terms, (write, None), request).await?)
}

/// A read's or a write's answer (only a permit's acquire reads a count: theirs never decodes
/// as a mismatch).
fn found(
    (found, acked): (SharedAcquired, Option<usize>),
) -> Result<(Acquired, Option<usize>), Error> {
    match found {
        SharedAcquired::Found(found) => Ok((found, acked)),
        SharedAcquired::Mismatch { .. } => Ok((Acquired::Incompatible, acked)),
    }
}

/// One acquire request of a hold several holders share (`shared`: a permit, in its `turn` if
/// it waits so; a read) or of a write that met them: `SharedAcquireCall`.
pub(crate) async fn send(
    target: Target<'_>,
    terms: &Terms,
    (shared, turn): (Shared, Option<Turn>),
    (id, wait): (&[u8], Option<ReplicaWait>),
) -> Result<(SharedAcquired, Option<usize>), Error> {
    let client = target.client;
    let call = SharedAcquireCall {
        keys: target.key(),
        value: target.value.as_bytes(),
        id,
        ttl: terms.ttl,
        shared,
        fenced: terms.fenced.then_some(client.config().fence_retention),
        wait,
        turn,
    };
    client
        .call_acked(Operation::Acquire, target.key().name(), &call)
        .await
}
