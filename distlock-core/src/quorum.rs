//! RedLock's counting rules: how the replies of N independent masters to one call make the
//! call's reply (see `Config::redlock`; the masters' connections are `redlock`'s, the fan-out
//! is `Connection::call`'s).
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
use crate::scripts::{
    AcquireCall, Acquired, Call, FenceFloorCall, FencedAcquireCall, ReleaseCall, ReleaseManyCall,
    Released, RenewCall, Renewed,
};

/// Masters a majority of `nodes` needs.
pub(crate) fn majority(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// Too few masters agreed for the call to count, and those that did not answer could still
/// have made a majority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NoQuorum {
    /// Masters that agreed in time.
    pub(crate) agreed: usize,
    /// Masters a majority needs.
    pub(crate) required: usize,
}

/// A call that can be sent to every master of a quorum, with the rule that combines their
/// replies.
pub(crate) trait Quorate: Call {
    /// The call's reply over `nodes` masters, from the replies of those that answered in time;
    /// `elapsed`: since the requests were sent.
    fn tally(
        &self,
        replies: &[Self::Reply],
        nodes: usize,
        elapsed: Duration,
    ) -> Result<Self::Reply, NoQuorum>;

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

    /// True if the call returns as soon as its outcome is decided, its requests to the masters
    /// that have not answered yet finishing in the background (`stragglers`): every call sent
    /// to a quorum (acquires, releases, renewals, fence floors).
    fn settles_early(&self) -> bool {
        true
    }

    /// The lock value whose requests to one master must run in the order they were sent:
    /// an acquire's and a release's (so the release of an attempt, or of a holder, runs after
    /// any late grant to it; see `stragglers`). `None`: renewals and fence floors, which
    /// create nothing (a renewal only extends a key that is there, a floor only rises).
    fn ordered_by(&self) -> Option<&[u8]> {
        None
    }
}

impl Quorate for AcquireCall<'_> {
    fn ordered_by(&self) -> Option<&[u8]> {
        Some(self.owner.as_bytes())
    }

    fn tally(
        &self,
        replies: &[Acquired],
        nodes: usize,
        elapsed: Duration,
    ) -> Result<Acquired, NoQuorum> {
        acquired(replies, nodes, self.ttl, elapsed)
    }
}

impl Quorate for FencedAcquireCall<'_> {
    fn ordered_by(&self) -> Option<&[u8]> {
        Some(self.value)
    }

    fn tally(
        &self,
        replies: &[Acquired],
        nodes: usize,
        elapsed: Duration,
    ) -> Result<Acquired, NoQuorum> {
        acquired(replies, nodes, self.ttl, elapsed)
    }
}

impl Quorate for FenceFloorCall<'_> {
    /// The largest floor among a majority's (fewer answers: no quorum).
    fn tally(&self, replies: &[u64], nodes: usize, _elapsed: Duration) -> Result<u64, NoQuorum> {
        let required = majority(nodes);
        match replies.iter().max() {
            Some(&floor) if replies.len() >= required => Ok(floor),
            _ => Err(NoQuorum {
                agreed: replies.len(),
                required,
            }),
        }
    }
}

impl Quorate for ReleaseCall<'_> {
    fn ordered_by(&self) -> Option<&[u8]> {
        Some(self.owner.as_bytes())
    }

    fn tally(
        &self,
        replies: &[Released],
        nodes: usize,
        _elapsed: Duration,
    ) -> Result<Released, NoQuorum> {
        released(replies, nodes)
    }
}

/// Never sent to a quorum (a quorum has no group commit), so it neither settles early nor
/// orders its requests behind stragglers; if it were, it would wait for every master.
impl Quorate for ReleaseManyCall<'_> {
    fn settles_early(&self) -> bool {
        false
    }

    fn tally(
        &self,
        replies: &[Vec<Released>],
        nodes: usize,
        _elapsed: Duration,
    ) -> Result<Vec<Released>, NoQuorum> {
        let items = replies.iter().map(Vec::len).max().unwrap_or(0);
        (0..items)
            .map(|i| {
                let column: Vec<Released> =
                    replies.iter().filter_map(|r| r.get(i).copied()).collect();
                released(&column, nodes)
            })
            .collect()
    }
}

impl Quorate for RenewCall<'_> {
    /// Every lock of the batch decided: each renewed by a majority, or out of a majority's
    /// reach (gone, or held by another owner somewhere); undecided while any lock's outcome
    /// could still change.
    fn tally(
        &self,
        replies: &[Vec<Renewed>],
        nodes: usize,
        _elapsed: Duration,
    ) -> Result<Vec<Renewed>, NoQuorum> {
        renewals(self.items.len(), replies, nodes).collect()
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
        let outcomes: Vec<_> = renewals(self.items.len(), replies, nodes).collect();
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

/// Each lock's renewal over `nodes` masters: renewed by a majority; undecided while the
/// masters that did not answer could still make a majority; otherwise the majority's finding.
fn renewals(
    items: usize,
    replies: &[Vec<Renewed>],
    nodes: usize,
) -> impl Iterator<Item = Result<Renewed, NoQuorum>> + '_ {
    let required = majority(nodes);
    let unanswered = nodes - replies.len().min(nodes);
    (0..items).map(move |i| {
        let column = replies.iter().filter_map(|r| r.get(i).copied());
        let yes = column.clone().filter(|&r| r == Renewed::Yes).count();
        if yes >= required {
            Ok(Renewed::Yes)
        } else if yes + unanswered >= required {
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

/// An acquire: taken by a majority within the validity time; undecided (no quorum) while the
/// masters still out could make a majority; otherwise busy (or incompatible).
///
/// The token of a fenced take is the largest of the majority's; that alone is not larger than
/// an earlier holder's token from another majority, `redlock_fence` makes it so.
fn acquired(
    replies: &[Acquired],
    nodes: usize,
    ttl: Duration,
    elapsed: Duration,
) -> Result<Acquired, NoQuorum> {
    let required = majority(nodes);
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
    let unanswered = nodes - replies.len().min(nodes);
    if tokens.len() + unanswered >= required {
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
            Acquired::Busy { pttl } => *pttl,
            _ => None,
        })
        .collect();
    let pttl = known
        .iter()
        .copied()
        .filter(|&ms| ms >= 0)
        .min()
        .or(known.first().copied());
    Ok(Acquired::Busy { pttl })
}

/// A release: released by a majority, or (if that is out of reach) what the others found.
fn released(replies: &[Released], nodes: usize) -> Result<Released, NoQuorum> {
    let required = majority(nodes);
    let unanswered = nodes - replies.len().min(nodes);
    let yes = replies.iter().filter(|&&r| r == Released::Yes).count();
    if yes >= required {
        Ok(Released::Yes)
    } else if yes + unanswered >= required {
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
    use crate::scripts::RenewItem;

    const TTL: Duration = Duration::from_secs(10);
    const FAST: Duration = Duration::from_millis(3);

    fn taken() -> Acquired {
        Acquired::Taken { token: None }
    }

    fn busy(ms: i64) -> Acquired {
        Acquired::Busy { pttl: Some(ms) }
    }

    #[test]
    fn an_acquire_needs_a_majority_within_the_validity_time() {
        assert_eq!(acquired(&[taken(); 3], 5, TTL, FAST), Ok(taken()));
        let two = acquired(&[taken(), taken()], 5, TTL, FAST);
        assert_eq!(
            two,
            Err(NoQuorum {
                agreed: 2,
                required: 3
            })
        );
        let late = acquired(&[taken(); 5], 5, TTL, TTL - Duration::from_millis(50));
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
        let found = acquired(&[taken(), busy(300), busy(200), busy(900)], 5, TTL, FAST);
        assert_eq!(found, Ok(busy(200)));
        // Two busy and two unanswered: the unanswered could still have granted it.
        let open = acquired(&[taken(), busy(300), busy(200)], 5, TTL, FAST);
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
        let found = acquired(&replies, 3, TTL, FAST);
        assert_eq!(found, Ok(Acquired::Taken { token: Some(9) }));
    }

    #[test]
    fn a_release_counts_by_majority() {
        use Released::*;
        assert_eq!(released(&[Yes, Yes, Yes], 5), Ok(Yes));
        assert_eq!(
            released(&[Yes, Yes, Absent], 5),
            Err(NoQuorum {
                agreed: 2,
                required: 3
            })
        );
        assert_eq!(
            released(&[Yes, Absent, Absent, OtherOwner, Absent], 5),
            Ok(OtherOwner)
        );
        assert_eq!(released(&[Absent, Absent, Absent], 5), Ok(Absent));
    }

    #[test]
    fn a_renewal_batch_keeps_its_decided_locks_when_one_is_undecided() {
        use Renewed::*;
        let item = |key: &str| RenewItem {
            key: key.into(),
            value: "v".into(),
            ttl: TTL,
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
}
