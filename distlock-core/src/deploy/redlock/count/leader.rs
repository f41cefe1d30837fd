//! How a leader election's record calls (`ProclaimCall`, `CurrentCall`; see `leader`) count
//! over a RedLock quorum: a term counts once a majority wrote it; a majority's records must
//! name one held owner with that term for a leader to be read.

use std::time::Duration;

use crate::wire::calls::{
    CandidateCall, CandidatesCall, CurrentCall, Line, ProclaimCall, Proclaimed, Record, TermEntry,
};

use super::{answered, majority, NoQuorum, Quorate};

/// A leader's proclaim, once every master that can answer has (those known to be down, and
/// those that did not answer within the response timeout, aside), so that the largest term any
/// of them carries counts, and a majority still holds the lock for it: that largest term any of
/// them wrote or asked for (each master's own is the token, or above its own last term),
/// `written` only if a majority wrote that very term. Otherwise the leader proclaims again with
/// it as `exact`, so that a majority's records and fence floors carry the leader's term: a later
/// majority, which shares a master with this one, then elects a term above it even if the master
/// that held the highest term is down. Refused (`None`) once a majority can no longer hold it.
/// Asked for `exact` (another round, or a leader keeping or showing its term), a master's
/// record of this very hold above `exact` (a round it answered after the call's timeout, never
/// lowered) is passed over: it neither counts for `exact` nor asks for a term above it, so a
/// leader's record ahead on a minority does not keep the majority's term from counting.
impl Quorate for ProclaimCall<'_> {
    fn count(
        &self,
        replies: &[Option<Proclaimed>],
        nodes: usize,
        silent: usize,
        _elapsed: Duration,
    ) -> Result<Option<Proclaimed>, NoQuorum> {
        let required = majority(nodes);
        let held: Vec<&Proclaimed> = replies.iter().flatten().collect();
        if held.len() + silent < required {
            return Ok(None);
        }
        // Every master's answer counts: one still out may carry a term above the others'.
        if silent > 0 {
            return Err(NoQuorum {
                agreed: held.len(),
                required,
            });
        }
        // Asked for `exact`, a master writes exactly it, or answers that it needs a term above
        // it (not written), or keeps this hold's own record where that is already above it
        // (written): a round of this hold answered after its call's timeout wrote the master's
        // own term there, which no count took in, and a proclaim never lowers. That record
        // neither counts for `exact` nor asks for a term above it.
        let ahead = |p: &Proclaimed| self.exact != 0 && p.written && p.term > self.exact;
        let top = held.iter().filter(|p| !ahead(p)).map(|p| p.term).max();
        let Some(top) = top.or((self.exact != 0).then_some(self.exact)) else {
            return Err(NoQuorum {
                agreed: 0,
                required,
            });
        };
        let at_top: Vec<&&Proclaimed> =
            held.iter().filter(|p| p.written && p.term == top).collect();
        if at_top.len() >= required {
            return Ok(Some(Proclaimed {
                term: top,
                since_ms: at_top.iter().map(|p| p.since_ms).max().unwrap_or(0),
                written: true,
            }));
        }
        // A majority holds the lock but has not written one term (yet): another round, unless
        // the masters still out could make this one agree.
        if held.len() >= required && at_top.len() + silent < required {
            return Ok(Some(Proclaimed {
                term: top,
                since_ms: 0,
                written: false,
            }));
        }
        Err(NoQuorum {
            agreed: at_top.len(),
            required,
        })
    }

    /// Every master answered or ran out of time: decided by those that answered.
    fn settle(
        &self,
        replies: &[Option<Proclaimed>],
        nodes: usize,
        elapsed: Duration,
    ) -> Result<Option<Proclaimed>, NoQuorum> {
        self.count(replies, nodes, 0, elapsed)
    }

    /// Every master not known to be down answered: decided without waiting for those.
    fn without_down(
        &self,
        replies: &[Option<Proclaimed>],
        nodes: usize,
        _down: usize,
        elapsed: Duration,
    ) -> Option<Result<Option<Proclaimed>, NoQuorum>> {
        Some(self.count(replies, nodes, 0, elapsed))
    }
}

/// The current leader over a quorum: a majority answered, and a majority's records name one
/// owner whose lock they hold **with one term** — the term that owner's proclaim counted (a
/// majority wrote it) and the leader fences with; the terms a majority of the answers
/// recorded, merged. A record of the same hold ahead of that term on a minority (a master
/// that wrote its own term in a round it answered too late for, which a proclaim never lowers)
/// is not the leader's term and is never shown. No owner and term named by a majority yet is
/// undecided while the masters still out could make one: a leader whose proclaim has reached a
/// bare majority is read as such even when the first majority to answer holds only one of
/// those masters (the third gets it a moment later), or holds one that is ahead. Every master
/// answered and none named by a majority: no leader (its records disagree on its term only
/// while a proclaim round is under way, or when a master of the term's majority is down and
/// another is ahead).
impl Quorate for CurrentCall<'_> {
    fn count(
        &self,
        replies: &[Record],
        nodes: usize,
        silent: usize,
        _elapsed: Duration,
    ) -> Result<Record, NoQuorum> {
        let replies = answered(replies, nodes)?;
        let required = majority(nodes);
        // The records that name `owner` as the leader with `term`.
        let naming = |owner: &str, term: u64| {
            replies
                .iter()
                .filter(|r| r.owner == owner && r.leader.as_ref().is_some_and(|l| l.term == term))
                .collect::<Vec<_>>()
        };
        // The owner and term most records name, with those records.
        let most = replies
            .iter()
            .filter_map(|r| r.leader.as_ref().map(|l| naming(&r.owner, l.term)))
            .max_by_key(Vec::len);
        let leading = match most {
            Some(named) if named.len() >= required => Some(named),
            Some(named) if named.len() + silent >= required => {
                return Err(NoQuorum {
                    agreed: named.len(),
                    required,
                })
            }
            _ => None,
        };
        // Only terms a majority of masters recorded: a proclaim that reached a minority (its
        // candidate lost the lock before a majority wrote it) elected nobody.
        let mut terms: Vec<_> = replies
            .iter()
            .flat_map(|r| r.terms.iter().cloned())
            .filter(|t| {
                replies
                    .iter()
                    .filter(|r| r.terms.iter().any(|o| o.term == t.term))
                    .count()
                    >= required
            })
            .collect();
        terms.sort_by_key(|t| std::cmp::Reverse(t.term));
        terms.dedup_by_key(|t| t.term);
        let Some(held) = leading else {
            return Ok(Record {
                terms,
                pttl: -2,
                ..Record::default()
            });
        };
        let owner = held[0].owner.clone();
        let entries: Vec<&TermEntry> = held.iter().filter_map(|r| r.leader.as_ref()).collect();
        // What most of them show (an identity proclaimed for the term reaches one master after
        // the other), and the term's start as the leader counted it (the latest of its masters).
        let identity = entries
            .iter()
            .map(|e| &e.identity)
            .max_by_key(|i| entries.iter().filter(|e| &e.identity == *i).count())
            .cloned()
            .unwrap_or_default();
        let leader = TermEntry {
            term: entries[0].term,
            since_ms: entries.iter().map(|e| e.since_ms).max().unwrap_or(0),
            identity,
        };
        // The lease as the soonest of the owner's locks to run out says.
        let pttl = replies
            .iter()
            .filter(|r| r.leader.is_some() && r.owner == owner)
            .map(|r| r.pttl)
            .min()
            .unwrap_or(-2);
        Ok(Record {
            leader: Some(leader),
            owner,
            pttl,
            terms,
        })
    }
}

/// A candidate entering or leaving: best effort (an entry only names a waiter the queue holds,
/// and lapses by itself), done once a majority answered.
impl Quorate for CandidateCall<'_> {
    fn count(
        &self,
        replies: &[()],
        nodes: usize,
        _silent: usize,
        _elapsed: Duration,
    ) -> Result<(), NoQuorum> {
        answered(replies, nodes).map(|_| ())
    }
}

/// An election's line over a quorum, once a majority answered: the holder a majority's locks
/// hold (none otherwise), the waiters a majority queued, in the order the first answer has them,
/// and every identity any master has.
impl Quorate for CandidatesCall<'_> {
    fn count(
        &self,
        replies: &[Line],
        nodes: usize,
        _silent: usize,
        _elapsed: Duration,
    ) -> Result<Line, NoQuorum> {
        let replies = answered(replies, nodes)?;
        let required = majority(nodes);
        let holder = replies
            .iter()
            .map(|r| &r.holder)
            .find(|h| {
                !h.is_empty() && replies.iter().filter(|r| &r.holder == *h).count() >= required
            })
            .cloned()
            .unwrap_or_default();
        let mut queue: Vec<String> = Vec::new();
        for reply in replies {
            for waiter in &reply.queue {
                let queued = replies.iter().filter(|r| r.queue.contains(waiter)).count();
                if queued >= required && !queue.contains(waiter) {
                    queue.push(waiter.clone());
                }
            }
        }
        let mut identities: Vec<(String, String)> = Vec::new();
        for pair in replies.iter().flat_map(|r| r.identities.iter()) {
            if !identities.iter().any(|(client, _)| *client == pair.0) {
                identities.push(pair.clone());
            }
        }
        Ok(Line {
            holder,
            queue,
            identities,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::keys::LockKeys;

    fn led(owner: &str, term: u64) -> Record {
        let entry = TermEntry {
            term,
            since_ms: 1,
            identity: "b".to_owned(),
        };
        Record {
            leader: Some(entry.clone()),
            owner: owner.to_owned(),
            pttl: 1_000,
            terms: vec![entry],
        }
    }

    #[test]
    fn a_proclaim_waits_for_every_master_and_agrees_on_the_largest_term() {
        let keys = LockKeys::new("p", "quorum").unwrap();
        let call = ProclaimCall {
            keys: &keys,
            id: b"r1",
            value: b"d2:a:1",
            token: 7,
            identity: "a",
            retention: Duration::from_secs(60),
            sharded: false,
            known: 0,
            exact: 0,
            mode: crate::wire::calls::ProclaimMode::Term,
            wait: None,
        };
        let written = |term| {
            Some(Proclaimed {
                term,
                since_ms: 1,
                written: true,
            })
        };
        let never = Duration::ZERO;
        // Two of three wrote 7: the third may carry a larger term, so it is waited for.
        let two = [written(7), written(7)];
        assert!(call.count(&two, 3, 1, never).is_err(), "undecided");
        // It answered (or ran out of time): 7 on a majority.
        let agreed = call.settle(&two, 3, never).unwrap().unwrap();
        assert_eq!((agreed.term, agreed.written), (7, true));
        // The third carries 9: another round, at 9.
        let three = [written(7), written(7), written(9)];
        let again = call.count(&three, 3, 0, never).unwrap().unwrap();
        assert_eq!((again.term, again.written), (9, false));
        // A majority no longer holds the lock: nothing written.
        assert_eq!(call.count(&[None, None], 3, 1, never).unwrap(), None);
    }

    #[test]
    fn a_leaders_own_record_ahead_on_a_minority_does_not_block_its_term() {
        let keys = LockKeys::new("p", "quorum").unwrap();
        let call = |exact| ProclaimCall {
            keys: &keys,
            id: b"r1",
            value: b"d2:a:1",
            token: 7,
            identity: "a",
            retention: Duration::from_secs(60),
            sharded: false,
            known: 0,
            exact,
            mode: crate::wire::calls::ProclaimMode::Value,
            wait: None,
        };
        let reply = |term, written| {
            Some(Proclaimed {
                term,
                since_ms: 1,
                written,
            })
        };
        let never = Duration::ZERO;
        let counted = |exact, replies: &[Option<Proclaimed>], nodes| {
            call(exact)
                .count(replies, nodes, 0, never)
                .unwrap()
                .map(|p| (p.term, p.written))
        };
        // Asked for 7: two wrote it, the third kept this hold's record at 9 (a round it
        // answered too late for): 7 is written on a majority.
        let ahead = [reply(7, true), reply(7, true), reply(9, true)];
        assert_eq!(counted(7, &ahead, 3), Some((7, true)));
        // With no `exact` (a first round), a written 9 is a term the others must reach.
        assert_eq!(counted(0, &ahead, 3), Some((9, false)));
        // A master that needs a term above 7 (not written) still asks for it.
        let needs = [reply(7, true), reply(7, true), reply(9, false)];
        assert_eq!(counted(7, &needs, 3), Some((9, false)));
        // The master ahead does not count for 7: one wrote it, the third is down.
        let split = [reply(7, true), reply(9, true)];
        assert_eq!(counted(7, &split, 3), Some((7, false)));
        // Five masters, two ahead: 7 on three.
        let five = [
            reply(9, true),
            reply(11, true),
            reply(7, true),
            reply(7, true),
            reply(7, true),
        ];
        assert_eq!(counted(7, &five, 5), Some((7, true)));
        assert_eq!(counted(7, &five[1..], 5), Some((7, true)));
        assert_eq!(counted(7, &five[..4], 5), Some((7, false)));
    }

    #[test]
    fn a_leader_on_a_bare_majority_is_read_once_the_masters_out_could_name_it() {
        let keys = LockKeys::new("p", "quorum").unwrap();
        let call = CurrentCall {
            keys: &keys,
            id: b"r1",
        };
        let never = Duration::ZERO;
        // Two of three answered, one names the leader: the third could make it a majority.
        let one = [led("d2:b", 7), Record::default()];
        assert!(call.count(&one, 3, 1, never).is_err(), "undecided");
        // Every master answered and only one names it: no leader.
        let settled = call.count(&one, 3, 0, never).unwrap();
        assert_eq!(settled.leader, None);
        // The third answered naming it too: the leader.
        let two = [led("d2:b", 7), Record::default(), led("d2:b", 7)];
        let read = call.count(&two, 3, 0, never).unwrap();
        assert_eq!(read.leader.map(|l| l.term), Some(7));
        // Nobody named anywhere: no leader at once (the one out cannot make a majority).
        let none = [Record::default(), Record::default()];
        assert_eq!(call.count(&none, 3, 1, never).unwrap().leader, None);
    }

    #[test]
    fn a_leaders_record_ahead_on_a_minority_is_not_its_term() {
        let keys = LockKeys::new("p", "quorum").unwrap();
        let call = CurrentCall {
            keys: &keys,
            id: b"r1",
        };
        let never = Duration::ZERO;
        // The leader holds 7 (a majority wrote it); one master wrote its own 9 for the same
        // hold, in a round it answered too late for.
        let ahead = [led("d2:b", 9), led("d2:b", 7)];
        // The third could name 7 too: undecided, not 9.
        assert!(call.count(&ahead, 3, 1, never).is_err(), "undecided");
        // It does: 7, and only the terms a majority recorded.
        let all = [led("d2:b", 9), led("d2:b", 7), led("d2:b", 7)];
        let read = call.count(&all, 3, 0, never).unwrap();
        assert_eq!(read.leader.map(|l| l.term), Some(7));
        assert_eq!(read.owner, "d2:b");
        assert_eq!(read.terms.iter().map(|t| t.term).collect::<Vec<_>>(), [7]);
        // The third is down: the two that answered disagree on the term, and no term is shown.
        let split = call.count(&ahead, 3, 0, never).unwrap();
        assert_eq!((split.leader, split.pttl), (None, -2));
        // Five masters, two of them ahead: 7 on three is the leader's.
        let five = [
            led("d2:b", 9),
            led("d2:b", 9),
            led("d2:b", 7),
            led("d2:b", 7),
            led("d2:b", 7),
        ];
        assert_eq!(
            call.count(&five, 5, 0, never)
                .unwrap()
                .leader
                .map(|l| l.term),
            Some(7)
        );
        assert!(call.count(&five[..4], 5, 1, never).is_err(), "undecided");
    }
}
