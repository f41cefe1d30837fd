//! The acquire/wait loop of one lock: attempts until taken, busy or failed; a busy lock waits
//! for its release (or its holder's ttl); a transient failure pauses (`backoff`) and tries
//! again within the wait; an attempt that may have been applied is released if the acquire
//! gives up or is dropped.

use std::time::Duration;

use tokio::time::Instant;

use crate::client::waiters::Subscription;
use crate::client::Client;
use crate::error::Error;
use crate::lease::{deadline_after, millis_ceil};
use crate::lock::acquire::Terms;
use crate::lock::attempt::{into_guard, try_acquire, unreplicated};
use crate::lock::backoff::Backoff;
use crate::lock::context;
use crate::lock::fence;
use crate::lock::guard::{Hold, LockGuard, ReleaseOnDrop};
use crate::lock::permits::{self, Kind};
use crate::lock::queue::{self, QueueEntry};
use crate::lock::reenter::reenter;
use crate::metrics::{self, Labels, Waiting};
use crate::wire::calls::Acquired;
use crate::wire::keys::LockKeys;

/// How often a waiter looks again at a lock whose key has no expiry (someone created it by
/// hand): such a holder never publishes a release and has no ttl to wait out.
pub(crate) const NO_EXPIRY_RECHECK: Duration = Duration::from_secs(1);

pub(crate) async fn acquire(
    client: Client,
    keys: LockKeys,
    terms: Terms,
) -> Result<LockGuard, Error> {
    let started = Instant::now();
    if let Some(outer) = context::reentry(client.identity(), keys.name()) {
        return reenter(outer, &terms, started).await;
    }
    let give_up = terms.wait.map(|w| deadline_after(started, w));
    let owner = client.new_owner();
    let hold = Hold::new(client.clone(), keys, owner, terms.kind);
    let keys = &hold.keys;
    let mut subscription: Option<Subscription> = None;
    let mut waiting = Waiting::default();
    // Tasks of this client already wait for the lock: queue behind them instead of barging.
    let mut queue_first = give_up.is_some() && client.has_waiters(keys.channel());
    // The last attempt's transient failure (a reset or timed-out connection, `NoQuorum`, a
    // server loading or failing over), if it failed so: what the waiter is told when its wait
    // runs out, and the reason to pause (`backoff`) instead of waiting for a release.
    let mut failed: Option<Error> = None;
    let mut backoff = Backoff::default();
    // Armed from the first attempt that failed transiently on one server until the lock is
    // taken: that request may still take the lock (its reply lost, or it arrives late). A later
    // attempt (same value) reads such a take as its own; giving up, or being dropped, releases
    // it in the background (owner-checked: another owner's lock is left alone).
    let mut unanswered: Option<ReleaseOnDrop> = None;
    // RedLock: a waiter's place in the masters' queues (0: it does not wait, or it takes a
    // permit or a read hold, which retry without a queue: see `permits`), and its entry
    // there once it queued (from its first attempt after subscribing: an acquire that takes
    // the lock at once never queues), taken out again when the acquire ends.
    let ticket = match client.is_quorum() && give_up.is_some() && hold.kind == Kind::Mutex {
        true => queue::ticket(),
        false => 0,
    };
    let mut queued: Option<QueueEntry> = None;
    // A write that met readers: this and every later attempt goes as `ACQUIRE_WRITE`.
    let mut met_readers = false;
    loop {
        let mut pttl = None;
        // RedLock: release wakes to let pass (the waiters queued ahead take those turns).
        let mut pass_wakes = 0;
        if !std::mem::take(&mut queue_first) {
            if let Some(sub) = subscription.as_mut() {
                sub.mark_seen();
            }
            // Armed while the request may have been applied: cancelled or failed here, the lock
            // is released in the background.
            let unanswered_before = unanswered.is_some();
            let mut pending = unanswered
                .take()
                .unwrap_or_else(|| ReleaseOnDrop::new(hold.clone()));
            let queue = ticket > 0 && subscription.is_some();
            if queue {
                queued.get_or_insert_with(|| QueueEntry::new(hold.clone()));
            }
            let sent_at = Instant::now();
            let switches = client.switches();
            let (attempt, acked) =
                match try_acquire(&hold, &terms, (ticket, queue), &mut met_readers).await {
                    // A waiter tries again, after a pause, until its wait runs out. (RedLock's
                    // `NoQuorum` included: a split vote, masters that did not answer.)
                    Err(error) if give_up.is_some() && error.is_transient() => {
                        failed = Some(error);
                        (
                            Acquired::Busy {
                                pttl: None,
                                pass: 0,
                            },
                            None,
                        )
                    }
                    other => {
                        failed = None;
                        other?
                    }
                };
            let attempt = match attempt {
                // RedLock: a token above every earlier holder's (failing, the lock is released).
                Acquired::Taken { token: Some(taken) } if client.is_quorum() => Acquired::Taken {
                    token: Some(fence::token(&client, keys, taken, terms.ttl, sent_at).await?),
                },
                other => other,
            };
            if client.is_quorum() && !matches!(attempt, Acquired::Taken { .. }) {
                // A minority of the RedLock masters may have granted it: release it there
                // before anything else (a later attempt reuses the value).
                if let Err(error) = hold.release(None).await {
                    tracing::debug!(%error, "release after a RedLock attempt without a majority failed");
                }
            }
            let stale = failed.is_some() || unanswered_before;
            if stale && !client.is_quorum() && !matches!(attempt, Acquired::Taken { .. }) {
                unanswered = Some(pending);
            } else {
                pending.disarm();
            }
            match attempt {
                Acquired::Taken { .. } if acked.is_some_and(|(n, required)| n < required) => {
                    let (n, required) = acked.unwrap_or_default();
                    return Err(unreplicated(hold, n, required).await);
                }
                Acquired::Taken { token } => {
                    waiting.acquired(started);
                    return Ok(into_guard(
                        hold,
                        token,
                        false,
                        &terms,
                        (sent_at, switches),
                        started,
                    ));
                }
                Acquired::Busy { pttl: left, pass } => {
                    pttl = left;
                    pass_wakes = pass;
                }
                Acquired::Incompatible => {
                    return Err(Error::Incompatible {
                        key: keys.name().to_owned(),
                    })
                }
            }
        }
        let now = Instant::now();
        let busy = || {
            // Without `wait` the caller did not wait, whatever the round trip took.
            let waited = match terms.wait {
                Some(_) => Instant::now() - started,
                None => Duration::ZERO,
            };
            tracing::debug!(waited_ms = millis_ceil(waited), "busy");
            Err(Error::Busy {
                key: keys.name().to_owned(),
                waited,
                held_by: permits::held_by(terms.kind, met_readers),
            })
        };
        let Some(give_up) = give_up.filter(|&g| now < g) else {
            return match failed {
                Some(error) => Err(error),
                None => busy(),
            };
        };
        if let Some(error) = &failed {
            pause(&mut backoff, error, terms.label, now, give_up).await;
            continue;
        }
        backoff.reset();
        match subscription.as_mut() {
            // Subscribed and at the head of the queue: try again at once, the lock may have
            // been released meanwhile.
            None => {
                let sub = match client.subscribe(keys.channel(), keys.name()).await {
                    Ok(sub) => subscription.insert(sub),
                    Err(error) if error.is_transient() => {
                        pause(&mut backoff, &error, terms.label, Instant::now(), give_up).await;
                        failed = Some(error);
                        continue;
                    }
                    Err(error) => return Err(error),
                };
                waiting.start(terms.label);
                if !sub.take_turn(give_up).await {
                    return busy();
                }
            }
            Some(sub) => {
                // A holder that crashed never publishes: look again when its lease runs out
                // (a key without expiry, -1, has no lease to wait out).
                let recheck = match pttl.and_then(|ms| u64::try_from(ms).ok()) {
                    Some(ms) => deadline_after(now, Duration::from_millis(ms.max(1))),
                    None => now + NO_EXPIRY_RECHECK,
                };
                sub.wait_until(recheck.min(give_up), pass_wakes).await;
            }
        }
    }
}

/// A waiter's pause after an attempt (or a subscription) that failed with a transient error:
/// the next attempt is made when it ends, if the wait has not run out by then.
pub(crate) async fn pause(
    backoff: &mut Backoff,
    error: &Error,
    labels: Labels,
    now: Instant,
    give_up: Instant,
) {
    metrics::acquire_retry(labels);
    let retry_at = backoff.next(now, give_up);
    tracing::debug!(%error, retry_in_ms = millis_ceil(retry_at - now), "acquire failed transiently; retrying within the wait");
    tokio::time::sleep_until(retry_at).await;
}
