//! How a lock's calls count over a RedLock quorum: an acquire, plain, fenced, queued or a
//! handed waiter's, by [`acquired`] (a majority within the validity time); leaving the queue
//! once a majority answered; a release by [`released`] (a majority released it).

use std::time::Duration;

use crate::wire::calls::{
    AcquireCall, Acquired, FencedAcquireCall, LeaveQueueCall, QueuedAcquireCall, ReleaseCall,
    Released,
};

use super::{acquired, answered, released, NoQuorum, Quorate};

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

quorate_release!(ReleaseCall);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deploy::redlock::count::tests::{busy, taken, FAST, TTL};

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
