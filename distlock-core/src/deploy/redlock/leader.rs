//! How a leader election's record calls (`ProclaimCall`, `CurrentCall`; see `leader`) count
//! over a RedLock quorum: a term counts once a majority wrote it; a majority's records must
//! name one held owner for a leader to be read.

use std::time::Duration;

use crate::wire::calls::{CurrentCall, ProclaimCall, Proclaimed, Record};

use super::quorum::{answered, majority, NoQuorum, Quorate};

/// A leader's proclaim: it counts once a majority wrote the term (the largest term written is
/// the leader's: each master's is the token, or above its own last term); refused (`None`)
/// once a majority can no longer write it.
impl Quorate for ProclaimCall<'_> {
    fn count(
        &self,
        replies: &[Option<Proclaimed>],
        nodes: usize,
        silent: usize,
        _elapsed: Duration,
    ) -> Result<Option<Proclaimed>, NoQuorum> {
        let required = majority(nodes);
        let written: Vec<&Proclaimed> = replies.iter().flatten().collect();
        if written.len() >= required {
            return Ok(written.into_iter().max_by_key(|p| p.term).copied());
        }
        if written.len() + silent < required {
            return Ok(None);
        }
        Err(NoQuorum {
            agreed: written.len(),
            required,
        })
    }
}

/// The current leader over a quorum: a majority answered, and a majority's records name one
/// owner whose lock they hold (its largest term); the terms of every answer, merged.
impl Quorate for CurrentCall<'_> {
    fn count(
        &self,
        replies: &[Record],
        nodes: usize,
        _silent: usize,
        _elapsed: Duration,
    ) -> Result<Record, NoQuorum> {
        let replies = answered(replies, nodes)?;
        let required = majority(nodes);
        let leading = replies
            .iter()
            .filter(|r| r.leader.is_some())
            .find(|candidate| {
                replies
                    .iter()
                    .filter(|r| r.leader.is_some() && r.owner == candidate.owner)
                    .count()
                    >= required
            });
        let mut terms: Vec<_> = replies
            .iter()
            .flat_map(|r| r.terms.iter().cloned())
            .collect();
        terms.sort_by_key(|t| std::cmp::Reverse(t.term));
        terms.dedup_by_key(|t| t.term);
        let Some(leading) = leading else {
            return Ok(Record {
                terms,
                pttl: -2,
                ..Record::default()
            });
        };
        let held: Vec<&Record> = replies
            .iter()
            .filter(|r| r.leader.is_some() && r.owner == leading.owner)
            .collect();
        Ok(Record {
            leader: held
                .iter()
                .filter_map(|r| r.leader.clone())
                .max_by_key(|l| l.term),
            owner: leading.owner.clone(),
            pttl: held.iter().map(|r| r.pttl).min().unwrap_or(-2),
            terms,
        })
    }
}
