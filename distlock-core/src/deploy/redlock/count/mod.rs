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
//!
//! One file per family of calls, named as the calls' file in `wire::calls`: `lock` (a lock's
//! acquires, leaving the queue, its release), `shared` (a permit, a read, a write that met
//! readers), `set` (a set's acquire and release), `renew` (renewal batches), `fence_floor`
//! (the fencing token rounds' reads and raises) and `leader` (an election's record and
//! candidates). Here: the [`Quorate`] trait and the rules several families count by (a
//! majority, a permit's quorum, an acquire's and a release's count).

use std::time::Duration;

use crate::lease::LEASE_MARGIN;
use crate::wire::calls::{Acquired, Released};
use crate::wire::request::Call;

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

// Declared after `quorate_release!`, which `lock` and `set` use.
mod fence_floor;
mod leader;
mod lock;
mod renew;
mod set;
mod shared;

/// The replies of a call that needs only a majority to answer (whatever they say): `replies`
/// once a majority of `nodes` answered, else no quorum.
fn answered<R>(replies: &[R], nodes: usize) -> Result<&[R], NoQuorum> {
    let required = majority(nodes);
    match replies.len() >= required {
        true => Ok(replies),
        false => Err(NoQuorum {
            agreed: replies.len(),
            required,
        }),
    }
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
/// an earlier holder's token from another majority, `deploy/redlock/token` makes it so.
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

    pub(super) const TTL: Duration = Duration::from_secs(10);
    pub(super) const FAST: Duration = Duration::from_millis(3);

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

    pub(super) fn taken() -> Acquired {
        Acquired::Taken { token: None }
    }

    pub(super) fn busy(ms: i64) -> Acquired {
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
}
