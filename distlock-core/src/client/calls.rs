//! A client's calls: one script call with the response timeout, through the group commit
//! where it runs (`batch`), its failures mapped to [`Error`]; and a fenced take's token over
//! RedLock.

use std::time::Duration;

use tokio::time::Instant;

use crate::client::batch::OnAnswer;
use crate::client::state::Client;
use crate::deploy::redlock::count::Quorate;
use crate::deploy::redlock::Taken;
use crate::deploy::CallError;
use crate::error::{Error, Operation};
use crate::lease::{fence_kept, guaranteed_until};
use crate::wire::calls::{AcquireCall, Acquired, ReleaseCall, Released};
use crate::wire::keys::LockKeys;
use crate::wire::request::Call;
use crate::wire::request::ReplicaWait;

impl Client {
    /// Runs one script call with the client's response timeout, mapping failures to [`Error`]
    /// for the `op` of lock `name`.
    ///
    /// A reply for another request, a reply of the wrong shape or a timeout retires the
    /// connection (its reply stream is out of step) and fails as a connection error or
    /// [`Error::Timeout`].
    pub(crate) async fn call<C: Quorate>(
        &self,
        op: Operation,
        name: &str,
        call: &C,
    ) -> Result<C::Reply, Error> {
        self.call_acked(op, name, call)
            .await
            .map(|(reply, _)| reply)
    }

    /// [`Client::call`], with the number of replicas that acknowledged the call's write when it
    /// asked for a `WAIT`.
    pub(crate) async fn call_acked<C: Quorate>(
        &self,
        op: Operation,
        name: &str,
        call: &C,
    ) -> Result<(C::Reply, Option<usize>), Error> {
        self.sent(op, name, |left| self.inner.deployment.call(call, left))
            .await
    }

    /// [`Client::call_acked`] for a call sent on one server, Sentinel or a cluster only, which
    /// has no RedLock counting rule (`Deployment::call_one`).
    pub(crate) async fn call_acked_one<C: Call>(
        &self,
        op: Operation,
        name: &str,
        call: &C,
    ) -> Result<(C::Reply, Option<usize>), Error> {
        self.sent(op, name, |left| self.inner.deployment.call_one(call, left))
            .await
    }

    /// A call outside the group commit (`send`, given what is left of the response timeout),
    /// behind the releases `run` queued there.
    async fn sent<R, F>(
        &self,
        op: Operation,
        name: &str,
        send: impl FnOnce(Duration) -> F,
    ) -> Result<R, Error>
    where
        F: std::future::Future<Output = Result<R, CallError>>,
    {
        let after = self.inner.config.response_timeout;
        // Sent outside the group commit: behind the releases `run` queued there. The wait for
        // them counts in the call's one response timeout (a group stuck on a frozen server
        // must not make the caller wait twice); nothing is sent if it runs out.
        let started = tokio::time::Instant::now();
        if let Some(batcher) = &self.inner.batcher {
            if !batcher.behind_releases().await {
                return Err(self.call_error(op, name, CallError::Timeout));
            }
        }
        let left = after.saturating_sub(started.elapsed());
        send(left.max(Duration::from_millis(1)))
            .await
            .map_err(|e| self.call_error(op, name, e))
    }

    /// A plain acquire: grouped with others that arrive while one is in flight (see `batch`),
    /// unless it asks for a `WAIT` (which must follow its own write) or the backend is a
    /// cluster. With the number of replicas that acknowledged it, as [`Client::call_acked`].
    pub(crate) async fn take(
        &self,
        name: &str,
        call: &AcquireCall<'_>,
    ) -> Result<(Acquired, Option<usize>), Error> {
        match (&self.inner.batcher, call.wait) {
            (Some(batcher), None) => batcher
                .acquire(call)
                .await
                .map(|acquired| (acquired, None))
                .map_err(|e| self.call_error(Operation::Acquire, name, e)),
            _ => self.call_acked(Operation::Acquire, name, call).await,
        }
    }

    /// A release, grouped like [`Client::take`].
    pub(crate) async fn release(
        &self,
        name: &str,
        call: &ReleaseCall<'_>,
    ) -> Result<Released, Error> {
        match &self.inner.batcher {
            Some(batcher) => batcher
                .release(call)
                .await
                .map_err(|e| self.call_error(Operation::Release, name, e)),
            None => self.call(Operation::Release, name, call).await,
        }
    }

    /// True where the group commit runs (standalone Redis, Sentinel): see
    /// [`Client::queue_release`].
    pub(crate) fn groups_releases(&self) -> bool {
        self.inner.batcher.is_some()
    }

    /// A release sent without waiting (`run`), where the group commit runs (standalone Redis):
    /// queued now, behind nothing this client sends next; `on_answer` gets its answer in the
    /// task that sends its group (see `batch::OnAnswer`). Without a group commit (a cluster, a
    /// RedLock quorum) `on_answer` comes back unused.
    pub(crate) fn queue_release<F>(
        &self,
        name: &str,
        call: &ReleaseCall<'_>,
        on_answer: F,
    ) -> Result<(), F>
    where
        F: FnOnce(Result<Released, Error>) + Send + 'static,
    {
        let Some(batcher) = &self.inner.batcher else {
            return Err(on_answer);
        };
        let (client, name) = (self.clone(), name.to_owned());
        // In `background_tasks` (and `settle`) until answered.
        let running = self.inner.background.track();
        let handler = OnAnswer::new(move |answer: Result<Released, CallError>| {
            // A retry it starts is still its caller's work (see `background::callers`).
            running.scope(|| {
                on_answer(answer.map_err(|e| client.call_error(Operation::Release, &name, e)));
            });
            drop(running);
        });
        batcher.queue_release(call, handler);
        Ok(())
    }

    /// The fencing token of a take of `keys` whose acquire (sent at `sent_at`, for `ttl`)
    /// returned `taken` as its largest token: over RedLock raised above every earlier
    /// holder's (`Deployment::fence_token`), within the lease's validity. Fails with
    /// [`Error::NoQuorum`] when a round does not reach a majority, when the validity ran out
    /// meanwhile, or when every raise met another acquire's; the caller then releases the
    /// lock.
    pub(crate) async fn fence_token(
        &self,
        keys: &LockKeys,
        taken: u64,
        ttl: Duration,
        sent_at: Instant,
    ) -> Result<u64, Error> {
        let config = &self.inner.config;
        let taken = Taken {
            keys,
            token: taken,
            retention: fence_kept(config.fence_retention, ttl),
            valid_until: guaranteed_until(sent_at, ttl),
        };
        let new_id = || self.new_request_id();
        self.inner
            .deployment
            .fence_token(taken, config.response_timeout, new_id)
            .await
            .map_err(|e| self.call_error(Operation::Acquire, keys.name(), e))
    }

    /// `error` of a call for the `op` of lock `key`, as the caller sees it.
    pub(super) fn call_error(&self, op: Operation, key: &str, error: CallError) -> Error {
        match error {
            // `Deployment::call` reports a timed-out reply (whichever timer saw it) as `Timeout`.
            CallError::Timeout => Error::Timeout {
                op,
                key: key.to_owned(),
                after: self.inner.config.response_timeout,
            },
            CallError::Redis(source) => Error::from_redis(op, key, source),
            CallError::NoQuorum { agreed, required } => Error::NoQuorum {
                op,
                key: key.to_owned(),
                agreed,
                required,
            },
        }
    }

    /// The `WAIT` for a lock that asks `replicas` replicas to acknowledge it (none for 0).
    pub(crate) fn replica_wait(&self, replicas: usize) -> Option<ReplicaWait> {
        (replicas > 0).then(|| ReplicaWait {
            replicas: self.inner.deployment.replicas_to_wait_for(replicas),
            timeout: self.inner.config.replica_timeout,
        })
    }
}
