//! RedLock's counting rules: how the replies of N independent masters to one call make the
//! call's reply (see `Config::redlock`; the masters' connections are `redlock`'s, the fan-out
//! is `Quorum::call`'s).
//!
//! A call counts as done only when a majority agreed: an acquire when a majority granted it
//! within its validity time (ttl − elapsed − the lease margin), a release when a majority
//! released it, a renewal when a majority renewed it. When the masters that did not answer
//! could still tip the count either way, the call fails as [`NoQuorum`] (a transient error:
//! the watchdog retries a renewal, a release is retried in the background, a waiting acquire
//! tries again). When they could not, the majority's answer is the reply: busy, gone or taken
//! by another owner, and the call returns without waiting for the others (`stragglers`).

use std::time::Duration;

use crate::lease::LEASE_MARGIN;
use crate::wire::calls::{
    AcquireCall, Acquired, FenceFloorCall, FencedAcquireCall, HandedAcquireCall, LeaveQueueCall,
    QueuedAcquireCall, ReleaseCall, Released, RenewCall, RenewItem, Renewed, SharedAcquireCall,
    SharedAcquired,
};
use crate::wire::request::Call;
use crate::wire::sets::{SetAcquireCall, SetAcquired, SetReleaseCall};

/// Masters a majority of `nodes` needs.
pub(crate) fn majority(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// Masters that must grant (and renew) one of `permits` permits over `nodes` masters:
/// `⌊permits·nodes/(permits+1)⌋ + 1`, the fewest `q` with `(permits+1)·q > permits·nodes`.
/// Each master grants at most `permits` holders, so `h` holders of `q` masters each need
/// `h·q ≤ permits·nodes`: with this `q`, `h ≤ permits`. One permit (or `permits` 0: a lock, a
/// read hold) is a majority; more tend to every master (2 of 5 masters: 4).
pub(crate) fn permit_quorum(nodes: usize, permits: u32) -> usize {
    match permits {
        0 => majority(nodes),
        n => {
            let n = n as usize;
            // `n·nodes` cannot overflow for any real count of masters (u32 permits × a few).
            n.saturating_mul(nodes) / n.saturating_add(1) + 1
        }
    }
}

/// Too few masters agreed for the call to count, and those that did not answer could still
/// have made a majority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NoQuorum {
    /// Masters that agreed in time.
    pub(crate) agreed: usize,
    /// Masters the call needs: a majority, or for a permit its [`permit_quorum`].
    pub(crate) required: usize,
}

/// A call that can be sent to every master of a quorum, with the rule that combines their
/// replies.
pub(crate) trait Quorate: Call {
    /// The call's reply over `nodes` masters, from the replies of those that answered, with
    /// `silent` masters that have not answered and could still (undecided while they could
    /// tip it); `elapsed`: since the requests were sent.
    fn count(
        &self,
        replies: &[Self::Reply],
        nodes: usize,
        silent: usize,
        elapsed: Duration,
    ) -> Result<Self::Reply, NoQuorum>;

    /// The call's reply with every master that has not answered (or failed) counted as
    /// possibly answering yet.
    fn tally(
        &self,
        replies: &[Self::Reply],
        nodes: usize,
        elapsed: Duration,
    ) -> Result<Self::Reply, NoQuorum> {
        self.count(replies, nodes, silent(replies, nodes, 0), elapsed)
    }

    /// The call's reply once every master answered or ran out of time: [`Quorate::tally`],
    /// except for calls that carry several locks (renewal batches), whose decided items stand
    /// even if others are still undecided.
    fn settle(
        &self,
        replies: &[Self::Reply],
        nodes: usize,
        elapsed: Duration,
    ) -> Result<Self::Reply, NoQuorum> {
        self.tally(replies, nodes, elapsed)
    }

    /// Ended early when the call is undecided only because of `down` masters that have not
    /// answered and are known to be down (their last request failed or timed out;
    /// `Quorum::call` still sends them this one): with them counted as refusing, a
    /// majority for the call is out of reach, so it fails at once with the `NoQuorum` it
    /// would end with when their requests fail, instead of waiting for that (an acquire with
    /// a `wait` tries again; what a down master grants late is released in order, see
    /// `stragglers`). `None`: still undecided, or a call that waits for them (see
    /// [`Quorate::gives_up_on_down`]).
    fn without_down(
        &self,
        replies: &[Self::Reply],
        nodes: usize,
        down: usize,
        elapsed: Duration,
    ) -> Option<Result<Self::Reply, NoQuorum>> {
        if !self.gives_up_on_down() {
            return None;
        }
        let plain = self.tally(replies, nodes, elapsed);
        let without = self.count(replies, nodes, silent(replies, nodes, down), elapsed);
        (plain.is_err() && without.is_ok()).then_some(plain)
    }

    /// True for calls that end as soon as only masters known to be down could still decide
    /// them ([`Quorate::without_down`]): acquires and releases. Renewals and fence floors
    /// wait for them.
    fn gives_up_on_down(&self) -> bool {
        false
    }

    /// The lock value whose requests to one master must run in the order they were sent:
    /// an acquire's and a release's (so the release of an attempt, or of a holder, runs after
    /// any late grant to it; see `stragglers`). `None`: renewals and fence floors, which
    /// create nothing (a renewal only extends a key that is there, a floor only rises).
    fn ordered_by(&self) -> Option<&[u8]> {
        None
    }
}

/// Acquires, plain or fenced: counted by [`acquired`], ordered by the lock value, ended once
/// only masters known to be down could still decide them.
macro_rules! quorate_acquire {
    ($call:ident, |$c:ident| $value:expr) => {
        impl Quorate for $call<'_> {
            fn ordered_by(&self) -> Option<&[u8]> {
                let $c = self;
                Some($value)
            }

            fn count(
                &self,
                replies: &[Acquired],
                nodes: usize,
                silent: usize,
                elapsed: Duration,
            ) -> Result<Acquired, NoQuorum> {
                acquired(replies, nodes, silent, self.ttl, elapsed)
            }

            fn gives_up_on_down(&self) -> bool {
                true
            }
        }
    };
}

quorate_acquire!(AcquireCall, |call| call.owner.as_bytes());
quorate_acquire!(FencedAcquireCall, |call| call.value);
quorate_acquire!(QueuedAcquireCall, |call| call.value);
// Sent on one server, Sentinel or a cluster only (a quorum's waiters use its own queue); counted
// as any acquire should that change.
quorate_acquire!(HandedAcquireCall, |call| call.value);

/// Best effort (the entries lapse by themselves): done once a majority answered. Ordered by the
/// lock value, so it runs after a late attempt of the same waiter on each master (which would
/// queue it again).
impl Quorate for LeaveQueueCall<'_> {
    fn ordered_by(&self) -> Option<&[u8]> {
        Some(self.value)
    }

    fn count(
        &self,
        replies: &[bool],
        nodes: usize,
        _silent: usize,
        _elapsed: Duration,
    ) -> Result<bool, NoQuorum> {
        answered(replies, nodes).map(|r| r.iter().any(|&removed| removed))
    }
}

impl Quorate for FenceFloorCall<'_> {
    /// The largest floor among a majority's (fewer answers: no quorum).
    fn count(
        &self,
        replies: &[u64],
        nodes: usize,
        _silent: usize,
        _elapsed: Duration,
    ) -> Result<u64, NoQuorum> {
        answered(replies, nodes).map(|r| r.iter().copied().max().unwrap_or(0))
    }
}

/// Releases, of one lock or of a set: counted by [`released`] (a set is released where a
/// majority released every lock of it), ordered by the lock value, ended once only masters
/// known to be down could still decide them.
macro_rules! quorate_release {
    ($call:ident) => {
        impl Quorate for $call<'_> {
            fn ordered_by(&self) -> Option<&[u8]> {
                Some(self.owner.as_bytes())
            }

            fn count(
                &self,
                replies: &[Released],
                nodes: usize,
                silent: usize,
                _elapsed: Duration,
            ) -> Result<Released, NoQuorum> {
                released(replies, nodes, silent)
            }

            fn gives_up_on_down(&self) -> bool {
                true
            }
        }
    };
}

quorate_release!(ReleaseCall);
quorate_release!(SetReleaseCall);

/// A shared hold over `nodes` masters, within the validity time: a permit taken by
/// [`permit_quorum`] of them (not a majority: see `lock/kind/permits`), a read or a write that met
/// readers by a majority (two majorities share a master, which granted only one kind); another
/// count among any master's live holders is a mismatch at once (nothing is taken: what a master
/// granted meanwhile is released by the failed acquire). Ordered by the lock value, ended once
/// only masters known to be down could still decide it, as a lock's acquire.
impl Quorate for SharedAcquireCall<'_> {
    fn ordered_by(&self) -> Option<&[u8]> {
        Some(self.value)
    }

    fn count(
        &self,
        replies: &[SharedAcquired],
        nodes: usize,
        silent: usize,
        elapsed: Duration,
    ) -> Result<SharedAcquired, NoQuorum> {
        let mut found = Vec::with_capacity(replies.len());
        for reply in replies {
            match *reply {
                SharedAcquired::Found(acquired) => found.push(acquired),
                mismatch @ SharedAcquired::Mismatch { .. } => return Ok(mismatch),
            }
        }
        let required = permit_quorum(nodes, self.shared.permits());
        acquired_by(&found, required, silent, self.ttl, elapsed).map(SharedAcquired::Found)
    }

    fn gives_up_on_down(&self) -> bool {
        true
    }
}

/// A set's acquire (`lock::kind::set`): each master grants all of the set or none, so the set is
/// taken when a majority granted it (within the validity time), as one lock is; busy at the
/// first lock a master found held. Fenced sets are refused over RedLock before any request.
impl Quorate for SetAcquireCall<'_> {
    fn ordered_by(&self) -> Option<&[u8]> {
        Some(self.value)
    }

    fn count(
        &self,
        replies: &[SetAcquired],
        nodes: usize,
        silent: usize,
        elapsed: Duration,
    ) -> Result<SetAcquired, NoQuorum> {
        let found: Vec<Acquired> = replies.iter().map(|r| r.found).collect();
        let found = acquired(&found, nodes, silent, self.ttl, elapsed)?;
        let at = replies
            .iter()
            .find(|r| !matches!(r.found, Acquired::Taken { .. }))
            .map_or(0, |r| r.at);
        Ok(SetAcquired {
            found,
            at,
            tokens: Vec::new(),
        })
    }

    fn gives_up_on_down(&self) -> bool {
        true
    }
}

impl Quorate for RenewCall<'_> {
    /// Every lock of the batch decided: each renewed by a majority, or out of a majority's
    /// reach (gone, or held by another owner somewhere); undecided while any lock's outcome
    /// could still change.
    fn count(
        &self,
        replies: &[Vec<Renewed>],
        nodes: usize,
        silent: usize,
        _elapsed: Duration,
    ) -> Result<Vec<Renewed>, NoQuorum> {
        renewals(self.items, replies, nodes, silent).collect()
    }

    /// The batch's outcome once nothing more will come: the undecided locks are
    /// [`Renewed::Undecided`] (a failed renewal for them alone: the watchdog retries each
    /// until its lease runs out), so one lock whose masters disagree (or whose majority cannot
    /// be heard) does not keep the others of its batch from being renewed. A batch with no
    /// decided lock fails as a whole, as one lock does.
    fn settle(
        &self,
        replies: &[Vec<Renewed>],
        nodes: usize,
        _elapsed: Duration,
    ) -> Result<Vec<Renewed>, NoQuorum> {
        let silent = silent(replies, nodes, 0);
        let outcomes: Vec<_> = renewals(self.items, replies, nodes, silent).collect();
        if !outcomes.iter().any(Result::is_ok) {
            if let Some(Err(no)) = outcomes.first() {
                return Err(*no);
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|o| o.unwrap_or(Renewed::Undecided))
            .collect())
    }
}

/// The replies of a call that needs only a majority to answer (whatever they say): `replies`
/// once a majority of `nodes` answered, else no quorum.
pub(super) fn answered<R>(replies: &[R], nodes: usize) -> Result<&[R], NoQuorum> {
    let required = majority(nodes);
    match replies.len() >= required {
        true => Ok(replies),
        false => Err(NoQuorum {
            agreed: replies.len(),
            required,
        }),
    }
}

/// Each lock's renewal over `nodes` masters: renewed by a majority (a permit: by its
/// [`permit_quorum`], as many as its acquire needed, or its lease is no longer guaranteed);
/// undecided while the masters that did not answer could still make that count; otherwise
/// what the others found.
fn renewals<'a>(
    items: &'a [RenewItem],
    replies: &'a [Vec<Renewed>],
    nodes: usize,
    silent: usize,
) -> impl Iterator<Item = Result<Renewed, NoQuorum>> + 'a {
    items.iter().enumerate().map(move |(i, item)| {
        let required = permit_quorum(nodes, item.permits);
        let column = replies.iter().filter_map(|r| r.get(i).copied());
        let yes = column.clone().filter(|&r| r == Renewed::Yes).count();
        if yes >= required {
            Ok(Renewed::Yes)
        } else if yes + silent >= required {
            Err(NoQuorum {
                agreed: yes,
                required,
            })
        } else if column
            .clone()
            .any(|r| matches!(r, Renewed::OtherOwner | Renewed::NotALock))
        {
            Ok(Renewed::OtherOwner)
        } else {
            Ok(Renewed::Gone)
        }
    })
}

/// The masters of `nodes` that have not answered (`replies` are the answers) and may still,
/// with `down` of them counted as refusing.
fn silent<R>(replies: &[R], nodes: usize, down: usize) -> usize {
    nodes.saturating_sub(replies.len()).saturating_sub(down)
}

/// An acquire: taken by a majority within the validity time; undecided (no quorum) while the
/// `silent` masters still out could make a majority; otherwise busy (or incompatible).
///
/// The token of a fenced take is the largest of the majority's; that alone is not larger than
/// an earlier holder's token from another majority, `lock/quorum_token` makes it so.
fn acquired(
    replies: &[Acquired],
    nodes: usize,
    silent: usize,
    ttl: Duration,
    elapsed: Duration,
) -> Result<Acquired, NoQuorum> {
    acquired_by(replies, majority(nodes), silent, ttl, elapsed)
}

/// [`acquired`] with `required` masters instead of a majority (a permit: [`permit_quorum`]).
fn acquired_by(
    replies: &[Acquired],
    required: usize,
    silent: usize,
    ttl: Duration,
    elapsed: Duration,
) -> Result<Acquired, NoQuorum> {
    let tokens: Vec<Option<u64>> = replies
        .iter()
        .filter_map(|r| match r {
            Acquired::Taken { token } => Some(*token),
            _ => None,
        })
        .collect();
    if tokens.len() >= required {
        // Validity: what is left of the lease once the acquire is done, less the margin for
        // timer rounding and clock-rate drift between the masters and this machine.
        if elapsed + LEASE_MARGIN + ttl / 100 >= ttl {
            return Err(NoQuorum {
                agreed: 0,
                required,
            });
        }
        return Ok(Acquired::Taken {
            token: tokens.into_iter().flatten().max(),
        });
    }
    if tokens.len() + silent >= required {
        // The masters still out could make a majority: undecided.
        return Err(NoQuorum {
            agreed: tokens.len(),
            required,
        });
    }
    if replies.contains(&Acquired::Incompatible) {
        return Ok(Acquired::Incompatible);
    }
    // So many masters hold it for others that a majority is out of reach: busy, and the
    // waiter looks again when the first of those leases runs out.
    let known: Vec<i64> = replies
        .iter()
        .filter_map(|r| match r {
            Acquired::Busy { pttl, .. } => *pttl,
            _ => None,
        })
        .collect();
    // The fewest waiters ahead any master has queued (one that lost an entry lets the waiter
    // look sooner, never later).
    let pass = replies
        .iter()
        .filter_map(|r| match r {
            Acquired::Busy { pass, .. } => Some(*pass),
            _ => None,
        })
        .min()
        .unwrap_or(0);
    let pttl = known
        .iter()
        .copied()
        .filter(|&ms| ms >= 0)
        .min()
        .or(known.first().copied());
    Ok(Acquired::Busy { pttl, pass })
}

/// A release: released by a majority, undecided while the `silent` masters still out could
/// make one, or (if that is out of reach) what the others found.
fn released(replies: &[Released], nodes: usize, silent: usize) -> Result<Released, NoQuorum> {
    let required = majority(nodes);
    let yes = replies.iter().filter(|&&r| r == Released::Yes).count();
    if yes >= required {
        Ok(Released::Yes)
    } else if yes + silent >= required {
        Err(NoQuorum {
            agreed: yes,
            required,
        })
    } else if replies.contains(&Released::Incompatible) {
        Ok(Released::Incompatible)
    } else if replies.contains(&Released::OtherOwner) {
        Ok(Released::OtherOwner)
    } else {
        Ok(Released::Absent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::calls::Shared;

    const TTL: Duration = Duration::from_secs(10);
    const FAST: Duration = Duration::from_millis(3);

    fn acq(
        replies: &[Acquired],
        nodes: usize,
        ttl: Duration,
        at: Duration,
    ) -> Result<Acquired, NoQuorum> {
        acquired(replies, nodes, silent(replies, nodes, 0), ttl, at)
    }

    fn rel(replies: &[Released], nodes: usize) -> Result<Released, NoQuorum> {
        released(replies, nodes, silent(replies, nodes, 0))
    }

    fn taken() -> Acquired {
        Acquired::Taken { token: None }
    }

    fn busy(ms: i64) -> Acquired {
        Acquired::Busy {
            pttl: Some(ms),
            pass: 0,
        }
    }

    #[test]
    fn an_acquire_needs_a_majority_within_the_validity_time() {
        assert_eq!(acq(&[taken(); 3], 5, TTL, FAST), Ok(taken()));
        let two = acq(&[taken(), taken()], 5, TTL, FAST);
        assert_eq!(
            two,
            Err(NoQuorum {
                agreed: 2,
                required: 3
            })
        );
        let late = acq(&[taken(); 5], 5, TTL, TTL - Duration::from_millis(50));
        assert_eq!(
            late,
            Err(NoQuorum {
                agreed: 0,
                required: 3
            })
        );
    }

    #[test]
    fn an_acquire_is_busy_once_a_majority_is_out_of_reach() {
        let found = acq(&[taken(), busy(300), busy(200), busy(900)], 5, TTL, FAST);
        assert_eq!(found, Ok(busy(200)));
        // Two busy and two unanswered: the unanswered could still have granted it.
        let open = acq(&[taken(), busy(300), busy(200)], 5, TTL, FAST);
        assert_eq!(
            open,
            Err(NoQuorum {
                agreed: 1,
                required: 3
            })
        );
    }

    #[test]
    fn a_fenced_take_hands_out_the_largest_token() {
        let replies = [
            Acquired::Taken { token: Some(7) },
            Acquired::Taken { token: Some(9) },
            Acquired::Taken { token: Some(8) },
        ];
        let found = acq(&replies, 3, TTL, FAST);
        assert_eq!(found, Ok(Acquired::Taken { token: Some(9) }));
    }

    #[test]
    fn a_permit_needs_more_than_a_majority_when_several_are_shared() {
        // (n+1)·q > n·m with the fewest q: at most n holders of q masters each.
        for (nodes, permits, q) in [(5, 1, 3), (5, 2, 4), (5, 3, 4), (5, 4, 5), (3, 1, 2)] {
            assert_eq!(permit_quorum(nodes, permits), q, "{permits} over {nodes}");
        }
        assert_eq!(permit_quorum(3, 2), 3);
        assert_eq!(permit_quorum(1, 7), 1);
        assert_eq!(permit_quorum(5, 0), 3, "a lock: a majority");
        for nodes in 1..=9 {
            for permits in 1..=20u32 {
                let (n, q) = (permits as usize, permit_quorum(nodes, permits));
                assert!(
                    (n + 1) * q > n * nodes && n * q <= n * nodes,
                    "{permits}/{nodes}"
                );
                assert!(q == 1 || (n + 1) * (q - 1) <= n * nodes, "the fewest");
                assert!(q >= majority(nodes));
            }
        }
    }

    #[test]
    fn a_permit_counts_by_its_quorum_a_read_by_majority_and_a_mismatch_anywhere_decides() {
        let keys = crate::wire::keys::LockKeys::new("distlock", "s").unwrap();
        let shared = |shared| SharedAcquireCall {
            keys: &keys,
            value: b"d2:o",
            id: b"a",
            ttl: TTL,
            shared,
            fenced: None,
            wait: None,
            turn: None,
        };
        let call = shared(Shared::Permits(2));
        let found = |a| SharedAcquired::Found(a);
        // 2 permits over 5 masters: 3 grants are a majority, not enough.
        let three = [
            found(taken()),
            found(taken()),
            found(taken()),
            found(busy(50)),
        ];
        let no = Err(NoQuorum {
            agreed: 3,
            required: 4,
        });
        assert_eq!(call.tally(&three, 5, FAST), no);
        let five = [&three[..], &[found(busy(40))]].concat();
        assert_eq!(call.tally(&five, 5, FAST), Ok(found(busy(40))));
        let four = [found(taken()); 4];
        assert_eq!(call.tally(&four, 5, FAST), Ok(found(taken())));
        let mismatch = [found(taken()), SharedAcquired::Mismatch { permits: 3 }];
        assert_eq!(
            call.tally(&mismatch, 5, FAST),
            Ok(SharedAcquired::Mismatch { permits: 3 })
        );
        // A read, or a write that met readers, through the same call: by majority.
        for kind in [Shared::Read, Shared::Write { waits: true }] {
            assert_eq!(shared(kind).tally(&three, 5, FAST), Ok(found(taken())));
        }
        // A renewal of that permit: renewed by 3 of 5 is not renewed.
        use Renewed::*;
        let items = [RenewItem {
            key: "s".into(),
            value: "d2:o".into(),
            ttl: TTL,
            permits: 2,
        }];
        let renew = RenewCall {
            id: b"r",
            items: &items,
            wait: None,
        };
        let short = [vec![Yes], vec![Yes], vec![Yes], vec![Gone], vec![Gone]];
        assert_eq!(renew.tally(&short, 5, FAST), Ok(vec![Gone]));
        let enough = [vec![Yes], vec![Yes], vec![Yes], vec![Yes], vec![Gone]];
        assert_eq!(renew.tally(&enough, 5, FAST), Ok(vec![Yes]));
    }

    #[test]
    fn a_release_counts_by_majority() {
        use Released::*;
        assert_eq!(rel(&[Yes, Yes, Yes], 5), Ok(Yes));
        assert_eq!(
            rel(&[Yes, Yes, Absent], 5),
            Err(NoQuorum {
                agreed: 2,
                required: 3
            })
        );
        assert_eq!(
            rel(&[Yes, Absent, Absent, OtherOwner, Absent], 5),
            Ok(OtherOwner)
        );
        assert_eq!(rel(&[Absent, Absent, Absent], 5), Ok(Absent));
    }

    #[test]
    fn a_renewal_batch_keeps_its_decided_locks_when_one_is_undecided() {
        use Renewed::*;
        let item = |key: &str| RenewItem {
            key: key.into(),
            value: "v".into(),
            ttl: TTL,
            permits: 0,
        };
        let items = [item("a"), item("b")];
        let call = RenewCall {
            id: b"r",
            items: &items,
            wait: None,
        };
        // 5 masters, 2 silent: `a` renewed by 3; `b` by 2 and gone on 1 (the silent two could
        // still make its majority).
        let replies = [vec![Yes, Yes], vec![Yes, Yes], vec![Yes, Gone]];
        let undecided = Err(NoQuorum {
            agreed: 2,
            required: 3,
        });
        assert_eq!(call.tally(&replies, 5, FAST), undecided);
        assert_eq!(call.settle(&replies, 5, FAST), Ok(vec![Yes, Undecided]));
        // Nothing decided: the batch fails as a whole.
        let replies = [vec![Yes, Yes], vec![Yes, Gone]];
        assert!(call.settle(&replies, 5, FAST).is_err());
        // One lock alone never settles as `Undecided`.
        let one = RenewCall {
            id: b"r",
            items: &items[1..],
            wait: None,
        };
        assert_eq!(
            one.settle(&[vec![Yes], vec![Yes], vec![Gone]], 5, FAST),
            undecided
        );
    }

    #[test]
    fn masters_known_to_be_down_decide_a_split_acquire_and_end_a_hopeless_release() {
        let keys = crate::wire::keys::LockKeys::new("distlock", "k").unwrap();
        let call = AcquireCall {
            keys: &keys,
            owner: &crate::wire::ids::ShortId::with_counter("d2:", b'o', 1),
            id: b"a",
            ttl: TTL,
            want_pttl: true,
            wait: None,
        };
        // 5 masters, 2 down: the 3 live split (1 granted, 2 busy). Undecided while the down
        // ones could still grant it; with them counted as refusing, no majority: `NoQuorum`
        // at once (not busy: the lock is not held by a majority of others).
        let split = [taken(), busy(300), busy(200)];
        assert!(call.tally(&split, 5, FAST).is_err());
        let no = |agreed| {
            Some(Err(NoQuorum {
                agreed,
                required: 3,
            }))
        };
        assert_eq!(call.without_down(&split, 5, 2, FAST), no(1));
        // One down only: the other silent master could still make the majority.
        assert_eq!(call.without_down(&split[..2], 5, 1, FAST), None);
        // A majority is never made of down masters.
        let two = [taken(), taken()];
        assert_eq!(
            call.without_down(&two, 5, 2, FAST),
            None,
            "one silent master left"
        );
        assert_eq!(call.without_down(&two, 5, 3, FAST), no(2));
        // A release that can no longer reach a majority without the down masters ends as the
        // `NoQuorum` it would end with once their requests fail; one they could not tip is
        // decided by the plain tally already.
        let release = ReleaseCall {
            keys: &keys,
            owner: call.owner,
            id: b"r",
            keep: Duration::ZERO,
            sharded: false,
            handoff: false,
            next: None,
        };
        use Released::*;
        let hopeless = [Yes, Absent, Absent];
        let no = Err(NoQuorum {
            agreed: 1,
            required: 3,
        });
        assert_eq!(release.tally(&hopeless, 5, FAST), no);
        assert_eq!(release.without_down(&hopeless, 5, 2, FAST), Some(no));
        // Two granted, one down, one silent: the silent one could still make the majority.
        assert_eq!(release.without_down(&[Yes, Yes, Absent], 5, 1, FAST), None);
        assert_eq!(release.without_down(&[Yes, Yes, Yes], 5, 2, FAST), None);
    }
}
