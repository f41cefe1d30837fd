//! How a shared hold's acquire counts over a RedLock quorum: a permit by its
//! [`permit_quorum`], a read or a write that met readers by a majority.

use std::time::Duration;

use crate::wire::calls::{SharedAcquireCall, SharedAcquired};

use super::{acquired_by, permit_quorum, NoQuorum, Quorate};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deploy::redlock::count::tests::{busy, taken, FAST, TTL};
    use crate::wire::calls::{RenewCall, RenewItem, Renewed, Shared};

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
}
