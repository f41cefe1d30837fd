//! The pauses of a waiting acquire between attempts that failed with a transient error: short
//! at first, doubling to a cap, randomised, and never past the caller's wait.

use std::time::Duration;

use tokio::time::Instant;

/// The first pause after a transient failure.
const FIRST: Duration = Duration::from_millis(15);

/// The longest pause: a failover or a restart is usually over within a few of these, and a
/// waiter should notice soon after.
const CAP: Duration = Duration::from_millis(200);

/// The pauses of one acquire call. Each pause is drawn between half and all of the current step
/// (so waiters that failed together do not retry together), and the step doubles up to [`CAP`].
#[derive(Debug)]
pub(crate) struct Backoff {
    step: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { step: FIRST }
    }
}

impl Backoff {
    /// When to try again after a failure at `now`, at the latest `give_up`.
    pub(crate) fn next(&mut self, now: Instant, give_up: Instant) -> Instant {
        let step = self.step;
        self.step = (step * 2).min(CAP);
        let half = step / 2;
        let random = uuid::Uuid::new_v4().as_u128() as u64;
        let extra = Duration::from_micros(random % (half.as_micros() as u64).max(1));
        (now + half + extra).min(give_up)
    }

    /// The lock answered (busy): the next failure starts from the first step again.
    pub(crate) fn reset(&mut self) {
        self.step = FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_to_the_cap_and_stop_at_the_wait() {
        let now = Instant::now();
        let far = now + Duration::from_secs(60);
        let mut backoff = Backoff::default();
        let mut steps = Vec::new();
        for _ in 0..8 {
            let step = backoff.step;
            let at = backoff.next(now, far);
            assert!(at >= now + step / 2 && at <= now + step, "{step:?}");
            steps.push(step);
        }
        assert_eq!(steps[0], FIRST);
        assert_eq!(steps[1], FIRST * 2);
        assert_eq!(*steps.last().unwrap(), CAP);
        let near = now + Duration::from_millis(3);
        assert_eq!(backoff.next(now, near), near, "never past the wait");
        backoff.reset();
        assert_eq!(backoff.step, FIRST);
    }
}
