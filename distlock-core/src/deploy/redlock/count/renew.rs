//! How a renewal batch counts over a RedLock quorum: each lease by a majority (a permit by
//! its [`permit_quorum`]), the decided ones standing when others of the batch are undecided.

use std::time::Duration;

use crate::wire::calls::{RenewCall, RenewItem, Renewed};

use super::{permit_quorum, silent, NoQuorum, Quorate};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deploy::redlock::count::tests::{FAST, TTL};

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
}
