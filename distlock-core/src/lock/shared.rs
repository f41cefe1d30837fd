//! Shared (read) holds: `lock(name).read()` is a lock of another kind, held by any number of
//! readers at once and excluded by (and excluding) the lock itself, the write. Built, waited
//! for, renewed, held, run and released by the lock's machinery; what differs is the acquire
//! request (`SharedAcquireCall`: `ACQUIRE_READ` for a reader, `ACQUIRE_WRITE` for a writer that
//! met readers, which marks its intent so that new readers wait and writers do not starve)
//! and the re-entry rules across kinds.
//!
//! ## Over a RedLock quorum: majorities
//!
//! A read hold counts when a majority of the masters granted it (`ACQUIRE_READ` on each)
//! within the validity time, and a write when a majority granted it, exactly as a lock's
//! acquire (`quorum::acquired`). Any read majority and any write majority share a master,
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

use crate::error::{Error, Operation};
use crate::lock::acquire::{LockBuilder, Terms};
use crate::lock::guard::Hold;
use crate::lock::permits::Kind;
use crate::wire::calls::{Acquired, Shared, SharedAcquireCall, SharedAcquired};
use crate::wire::request::ReplicaWait;

impl LockBuilder {
    /// Takes a shared (read) hold instead of the lock: any number of read holders at once,
    /// while an ordinary (exclusive, "write") lock of the same name excludes them and is
    /// excluded by them. A reader meeting a writer, and a writer meeting readers, is busy
    /// ([`Error::Busy`], or waits with `.wait()`), never incompatible.
    ///
    /// **Writers do not starve**: a writer that waits for readers marks its intent next to the
    /// lock, and no new reader enters while it lives; the writer gets the lock when the readers
    /// inside leave (or their leases run out). The intent lasts one second unless the waiting
    /// writer renews it (it does, at each attempt), so a writer that went away holds new
    /// readers up for a second at most. The preference goes to writers: while writers keep
    /// waiting, one after another, new readers wait for them. A waiting writer is woken by
    /// each reader's release, and looks again at least every third of a second meanwhile (to
    /// renew its intent): one script call each.
    ///
    /// Every guarantee of a lock holds per read hold: each reader's share is its own lease (a
    /// reader that dies frees its share at its own ttl), renewed by `.renew(true)`, lost (the
    /// body of `run` cancelled, [`Error::Lost`]) when it can no longer be guaranteed, released
    /// on every exit path (waking waiters), fenced with `.fenced(true)` (tokens strictly
    /// increasing per name, across readers and writers).
    ///
    /// Re-entry in one call chain (same name, same client): a read inside a read takes no
    /// second share; a read inside a write re-enters the write (an exclusive hold covers
    /// reading); a write inside a read fails at once with [`Error::WriteInsideRead`] (a read
    /// hold is never upgraded: two readers upgrading would wait for each other).
    ///
    /// `read` applies to a lock, not to a semaphore (taking a semaphore's permit with `read`
    /// fails with [`Error::InvalidConfig`]). Over a RedLock quorum ([`crate::Config::redlock`])
    /// a read and a write each count when a majority of the masters granted them (any two such
    /// majorities share a master, which granted only one); readers and writers that wait there
    /// retry on releases, without the lock's FIFO queue.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), distlock_core::Error> {
    /// use std::time::Duration;
    /// let guard = distlock_core::lock("doc:7")
    ///     .read()
    ///     .ttl(Duration::from_secs(10))
    ///     .wait(Duration::from_secs(2))
    ///     .acquire()
    ///     .await?;
    /// assert!(guard.is_shared());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn read(self) -> Self {
        self.reading()
    }
}

/// The kind an acquisition takes once `read` is applied: a read hold of a lock; a semaphore
/// with `read` is refused.
pub(crate) fn read_kind(name: &str, kind: Kind) -> Result<Kind, Error> {
    match kind {
        Kind::Mutex | Kind::Read => Ok(Kind::Read),
        Kind::Permits(_) => Err(Error::InvalidConfig {
            reason: format!(
                "semaphore `{name}` is asked for with `read`: a semaphore's permits are not shared holds; use one or the other"
            ),
        }),
    }
}

/// One read hold's acquire request, or a writer's that met readers (see the module docs).
pub(crate) async fn try_acquire(
    hold: &Hold,
    terms: &Terms,
    side: Shared,
    (id, wait): (&[u8], Option<ReplicaWait>),
) -> Result<(Acquired, Option<usize>), Error> {
    let client = &hold.client;
    let call = SharedAcquireCall {
        keys: &hold.keys,
        value: hold.value.as_bytes(),
        id,
        ttl: terms.ttl,
        shared: side,
        fenced: terms.fenced.then_some(client.config().fence_retention),
        wait,
    };
    match client
        .call_acked(Operation::Acquire, hold.keys.name(), &call)
        .await?
    {
        (SharedAcquired::Found(found), acked) => Ok((found, acked)),
        // Only a permit's acquire reads a count: a read's or a write's never decodes as this.
        (SharedAcquired::Mismatch { .. }, acked) => Ok((Acquired::Incompatible, acked)),
    }
}
