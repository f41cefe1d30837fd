//! The kinds of hold, one module each, and the one interface the common machinery (the
//! builder, the wait loop, one attempt, the hold and its guard, re-entry) calls: what a kind
//! sends to take it and to let it go, what it renews, what a busy answer means, what re-entry
//! allows, and how its metrics and guard describe it.
//!
//! * `exclusive`: the lock, one holder at a time; its waiters are queued and handed the lock
//!   by the release where the deployment allows it.
//! * `permits`: one of a semaphore's `n` permits.
//! * `shared`: a shared (read) hold of the lock (the lock itself is the write).
//! * `set`: several locks taken together, all or none.
//!
//! Every `match` on [`Kind`] is in this folder: a new kind is a new variant and a new module,
//! and the compiler points at every method below that must say what it does.

use std::ops::Range;
use std::time::Duration;

use crate::client::waiting::queue::Place;
use crate::client::Client;
use crate::error::{Error, HeldBy};
use crate::lock::terms::Terms;
use crate::wire::calls::{Acquired, NextWaiter, ReleaseCall, Released, RenewItem};
use crate::wire::ids::ShortId;
use crate::wire::keys::LockKeys;
use crate::wire::request::ReplicaWait;

pub(crate) mod exclusive;
pub(crate) mod one_or_many;
pub(crate) mod permits;
pub(crate) mod set;
pub(crate) mod shared;
pub(crate) mod variant;

pub(crate) use one_or_many::OneOrMany;
pub(crate) use variant::{Found, Kind, Target};

impl Kind {
    /// The `kind` label of this acquisition's metrics.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Exclusive => "lock",
            Kind::Permits(_) => "permit",
            Kind::Read => "read",
            Kind::Set => "set",
        }
    }

    /// The semaphore's count of a permit (what its renewal checks, `RenewItem::permits`);
    /// `None` for every other kind.
    pub(crate) fn permits(self) -> Option<u32> {
        match self {
            Kind::Permits(n) => Some(n),
            Kind::Exclusive | Kind::Read | Kind::Set => None,
        }
    }

    /// What renews (or checks, for a re-entry) the lock `keys` of this hold of `value` for
    /// `ttl`: a permit's renewal checks its semaphore's count.
    pub(crate) fn renew_item(self, keys: &LockKeys, value: &ShortId, ttl: Duration) -> RenewItem {
        RenewItem {
            key: keys.lock().into(),
            value: value.as_str().into(),
            ttl,
            permits: self.permits().unwrap_or(0),
        }
    }

    /// True for a shared (read) hold.
    pub(crate) fn is_shared(self) -> bool {
        self == Kind::Read
    }

    /// The kind once the builder's `read` is applied (see `shared::read`).
    pub(crate) fn read(self, name: &str) -> Result<Kind, Error> {
        shared::read(self, name)
    }

    /// The locks an acquisition of this kind takes, in the order it takes them, and the kind
    /// it takes them as: `first` alone, or a set's (`first` and `others`) in their canonical
    /// order, a set of one distinct name taken as that lock (`set::keys`).
    pub(crate) fn keys(
        self,
        client: &Client,
        first: LockKeys,
        others: &[String],
    ) -> Result<(Kind, OneOrMany<LockKeys>), Error> {
        match self {
            Kind::Set => set::keys(client, first.name(), others),
            Kind::Exclusive | Kind::Permits(_) | Kind::Read => Ok((self, OneOrMany::one(first))),
        }
    }

    /// The calls one request about every lock of a hold of this kind goes in (`keys`, in the
    /// hold's order; ranges of it): a set's slot groups (`set::slot_groups`: one per hash
    /// slot in a cluster); one call for one lock.
    pub(crate) fn groups(self, client: &Client, keys: &[LockKeys]) -> OneOrMany<Range<usize>> {
        match self {
            Kind::Set => set::slot_groups(keys, client.routes_by_slot()).into(),
            Kind::Exclusive | Kind::Permits(_) | Kind::Read => OneOrMany::one(0..keys.len()),
        }
    }

    /// The checks of this kind against its terms and client, before anything is sent.
    pub(crate) fn check(self, name: &str, terms: &Terms, client: &Client) -> Result<(), Error> {
        match self {
            Kind::Permits(permits) => permits::check(name, permits),
            Kind::Set => set::check(name, terms, client),
            Kind::Exclusive | Kind::Read => Ok(()),
        }
    }

    /// Whether a hold of this kind (`self`, the outer hold) lets an acquisition of `inner`
    /// re-enter it in one call chain.
    pub(crate) fn admits(self, name: &str, inner: Kind) -> Result<(), Error> {
        match self {
            Kind::Exclusive | Kind::Set => exclusive::admits(name, inner),
            Kind::Permits(held) => permits::admits(name, held, inner),
            Kind::Read => shared::admits(name, inner),
        }
    }

    /// What a busy answer to this kind means (`met_readers`: a write that met readers).
    pub(crate) fn held_by(self, met_readers: bool) -> HeldBy {
        match self {
            Kind::Exclusive | Kind::Set if met_readers => HeldBy::Readers,
            Kind::Exclusive | Kind::Set => HeldBy::Owner,
            Kind::Permits(permits) => HeldBy::Permits { permits },
            Kind::Read => HeldBy::Writer,
        }
    }

    /// A waiter's place in the waiters' queue (`waits`: it waits for a busy hold; a set's
    /// attempts go in `groups` calls): queued in Redis and handed the lock (a permit, a lock of
    /// its set) by the release, queued on the RedLock masters, or not queued.
    pub(crate) fn place(self, client: &Client, terms: &Terms, waits: bool, groups: usize) -> Place {
        match self {
            Kind::Exclusive => exclusive::place(client, terms, waits),
            Kind::Permits(_) | Kind::Read => shared::place(client, terms, waits),
            Kind::Set => set::place(client, terms, waits, groups),
        }
    }

    /// One attempt at the hold: a set's (`set::attempt`, one call per slot group of
    /// `groups`), or one request of a lock, permit or read hold (request id `id`) from the
    /// waiter's `place` (two if the connection dropped, or if a write that does not wait in its
    /// turn met readers: `met_readers`, from then on asked as such, with a request id of its
    /// own; one in its turn queues behind them instead).
    pub(crate) async fn attempt(
        self,
        target: Target<'_>,
        terms: &Terms,
        (place, id): (Place, ShortId),
        groups: &[Range<usize>],
        met_readers: &mut bool,
    ) -> Result<Found, Error> {
        if self == Kind::Set {
            return set::attempt(target, (groups, place), terms).await;
        }
        let replicas = target.client.replica_wait(terms.min_replicas);
        // A writer waiting in its turn (`place.window`) queues behind readers like any other
        // waiter (`ACQUIRE_HANDED`); any other writer that met readers is asked as a write
        // where readers may hold the lock from then on.
        let in_turn = place.window.is_some();
        let readers = *met_readers && !in_turn;
        let asked = (place, replicas);
        let mut found = self.request(target, terms, asked, id, readers).await?;
        if !readers && self.meets_readers(&found.0) {
            *met_readers = true;
            if in_turn && !place.queue {
                // Its first attempt, not queued yet: it queues behind them by the next.
                found.0 = Acquired::Busy {
                    pttl: None,
                    pass: 0,
                };
            } else if !in_turn {
                let id = target.client.new_request_id();
                found = self.request(target, terms, asked, id, true).await?;
            }
        }
        let (found, acked) = found;
        let required = replicas.map_or(0, |w| w.replicas);
        let acked = replicas.map(|_| (acked.unwrap_or(0), required));
        Ok(match found {
            Acquired::Taken { token } => Found::Taken {
                tokens: token.into_iter().collect(),
                acked,
            },
            Acquired::Busy { pttl, pass } => Found::NotTaken {
                at: 0,
                pttl,
                pass,
                incompatible: false,
                partial: false,
            },
            Acquired::Readers { pttl } => {
                *met_readers = true;
                Found::NotTaken {
                    at: 0,
                    pttl: Some(pttl),
                    pass: 0,
                    incompatible: false,
                    partial: false,
                }
            }
            Acquired::Incompatible => Found::NotTaken {
                at: 0,
                pttl: None,
                pass: 0,
                incompatible: true,
                partial: false,
            },
        })
    }

    /// One acquire request of a lock, permit or read hold from the waiter's `place`, with the
    /// `WAIT` of its replicas (`readers`: a write that met readers), retried once with the
    /// same request id and value if the connection dropped.
    async fn request(
        self,
        target: Target<'_>,
        terms: &Terms,
        asked: (Place, Option<ReplicaWait>),
        id: ShortId,
        readers: bool,
    ) -> Result<(Acquired, Option<usize>), Error> {
        let send = || self.send_acquire(target, terms, asked, id.as_bytes(), readers);
        // A dropped connection fails fast and the connection reconnects: retry once, with the
        // same value so a reply lost after the lock was taken reads as our own take. A timeout
        // is not retried (the caller's bound is one response timeout); the caller's cleanup
        // releases the lock in case the request was applied.
        match send().await {
            Err(error) if error.is_connection_failure() => {
                tracing::debug!(%error, "acquire reply lost; retrying with the same value");
                send().await
            }
            other => other,
        }
    }

    /// One acquire request of a lock, permit or read hold (`readers`: a write that met
    /// readers, asked as such; a set's lock asked alone is a lock).
    async fn send_acquire(
        self,
        target: Target<'_>,
        terms: &Terms,
        (place, replicas): (Place, Option<ReplicaWait>),
        id: &[u8],
        readers: bool,
    ) -> Result<(Acquired, Option<usize>), Error> {
        match self {
            Kind::Exclusive | Kind::Set if readers => {
                shared::send_write(target, terms, (id, replicas)).await
            }
            Kind::Exclusive | Kind::Set => {
                exclusive::send(target, terms, place, (id, replicas)).await
            }
            Kind::Permits(permits) => {
                permits::send(target, terms, (permits, place), (id, replicas)).await
            }
            Kind::Read => shared::send_read(target, terms, place, (id, replicas)).await,
        }
    }

    /// True if what an attempt that did not take the hold may have taken is released before
    /// the waiter waits or tries again: a minority's grants over RedLock; for a set also its
    /// earlier slot groups (`partial`) and whatever a failed attempt took (a set never waits
    /// holding a part of itself).
    pub(crate) fn releases_untaken(self, quorum: bool, partial: bool, failed: bool) -> bool {
        match self {
            Kind::Set => quorum || partial || failed,
            Kind::Exclusive | Kind::Permits(_) | Kind::Read => quorum,
        }
    }

    /// True if an attempt that did not take the hold, answered, may still leave part of it
    /// held (a set over several slot groups, or over RedLock, whose release of the part may
    /// not reach every master): its cleanup stays armed until the acquire ends.
    pub(crate) fn may_hold_part(self, quorum: bool, groups: usize) -> bool {
        match self {
            Kind::Set => quorum || groups > 1,
            Kind::Exclusive | Kind::Permits(_) | Kind::Read => false,
        }
    }

    /// True if an answer `found` to this kind's request may mean readers hold the lock: the
    /// request is asked again as a write where readers may hold it.
    fn meets_readers(self, found: &Acquired) -> bool {
        match self {
            Kind::Exclusive => *found == Acquired::Incompatible,
            Kind::Permits(_) | Kind::Read | Kind::Set => false,
        }
    }

    /// True if a release of this kind may carry its client's next waiter of the lock and hand
    /// the lock over (`client::waiting::cohort`; not over RedLock).
    pub(crate) fn carries_waiters(self, client: &Client) -> bool {
        self == Kind::Exclusive && client.hands_over()
    }

    /// The release of one lock, permit or read hold, with request id `id` (kept until `keep`
    /// for `min_hold`), queuing the client's next waiter `next` (the release script tells the
    /// kinds apart by the key's type); `None` for a set, released by [`Kind::release`] alone
    /// (one call per hash slot group).
    pub(crate) fn release_call<'a>(
        self,
        target: Target<'a>,
        id: &'a ShortId,
        keep: Duration,
        next: Option<NextWaiter>,
    ) -> Option<ReleaseCall<'a>> {
        match self {
            Kind::Set => None,
            Kind::Exclusive | Kind::Permits(_) | Kind::Read => Some(ReleaseCall {
                keys: target.key(),
                owner: target.value,
                id: id.as_bytes(),
                keep,
                sharded: target.client.publishes_sharded(),
                handoff: target.client.hands_over(),
                next,
            }),
        }
    }

    /// The release in Redis of what `target` holds (kept until `keep` for `min_hold`), queuing
    /// the client's next waiter `next` where the kind carries waiters.
    pub(crate) async fn release(
        self,
        target: Target<'_>,
        keep: Duration,
        next: Option<NextWaiter>,
    ) -> Result<Released, Error> {
        let id = target.client.new_request_id();
        match self.release_call(target, &id, keep, next) {
            Some(call) => target.client.release(target.key().name(), &call).await,
            None => set::release(target, keep).await,
        }
    }
}
