//! # distlock
//!
//! Redis-backed distributed locks as a one-line attribute, with the lock key checked against
//! the function's parameters **at compile time**.
//!
//! ```no_run
//! use distlock::distributed_lock;
//!
//! #[derive(Debug)]
//! enum AppError { Lock(distlock::Error) }
//! impl From<distlock::Error> for AppError {
//!     fn from(e: distlock::Error) -> Self { AppError::Lock(e) }
//! }
//!
//! /// At most one replica settles a given order at a time.
//! #[distributed_lock(key = "order:<id>", ttl = "10s", renew)]
//! async fn settle(id: u64) -> Result<u64, AppError> {
//!     // ... talk to the payment provider ...
//!     Ok(id)
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), AppError> {
//!     distlock::init("redis://127.0.0.1:6379/").await?; // once, at startup
//!     settle(42).await?;
//!     Ok(())
//! }
//! ```
//!
//! Each call builds the key (`order:42`), acquires the lock in one round trip, renews its lease
//! while the body runs (`renew`), and releases it on every exit path: return, `?`, panic, or
//! the caller dropping the future. A typo in the template is a compile error that names the
//! parameters you have:
//!
//! ```compile_fail
//! # use distlock::distributed_lock;
//! # struct E; impl From<distlock::Error> for E { fn from(_: distlock::Error) -> Self { E } }
//! #[distributed_lock(key = "order:<order_id>")] // error: unknown parameter `order_id`; the parameters allow `<id>`
//! async fn settle(id: u64) -> Result<(), E> { Ok(()) }
//! # fn main() {}
//! ```
//!
//! ## Add it to your project
//!
//! The crates are not published on crates.io yet: depend on the repository by git (pin a
//! `rev`), or on a checkout by path (the facade is the `distlock/` folder of the workspace).
//!
//! ```toml
//! [dependencies]
//! distlock = { git = "<the repository's URL>", rev = "<commit>" }
//! # or: distlock = { path = "../distlock/distlock" }
//! # The attribute's functions are `async`: any tokio runtime runs them (the lock's own renewal
//! # and release tasks run on a thread of the client's, whatever your runtime is).
//! tokio = { version = "1", features = ["rt-multi-thread", "macros"] }
//!
//! [dev-dependencies]
//! # Tests of code that takes locks, against a throwaway redis-server, and their faults (a lock
//! # taken mid-body, a paused server, a clock step, a Sentinel failover); the same source as above.
//! distlock = { git = "<the repository's URL>", rev = "<commit>", features = ["testing"] }
//! ```
//!
//! ## Features
//!
//! Every feature is off by default; the default build has the attribute, the runtime and every
//! deployment over plain TCP. What each one adds:
//!
//! | feature | what it adds | items |
//! | --- | --- | --- |
//! | `serde` | the lock settings from a configuration file (TOML, JSON, YAML), durations as text (`"10s"`; see [Configuration](#configuration)) | `impl Deserialize for Config` |
//! | `testing` | a throwaway `redis-server` per test process, with the default client installed on it, for the tests of code that takes locks; and the faults that take a lock from the code under test (expired or stolen now, the server paused, its clock stepped, a Sentinel failover), so a test asserts that the body was cancelled or a stale fenced write refused (`docs/testing.md`). Test-only hooks in the server check, compiled only with the feature | the module `distlock::testing`: `testing::init`, `testing::TestRedis`, `testing::TestSentinel`, `testing::NewHolder`, `testing::Paused`, `testing::Locks` |
//! | `tls` | `rediss://` URLs (one server, Cluster, Sentinel, RedLock masters) through rustls, with your roots or the system's, and client certificates for mutual TLS | none: [`Config::tls_root_certificates`] and [`Config::tls_client_certificate`] are always there; without the feature a `rediss://` URL is refused by [`Config::validate`] |
//! | `metrics` | counters, histograms and gauges through the `metrics` facade (see [Metrics](#metrics)); install any recorder to collect them | `distlock::describe_metrics` |
//! | `sqlx-postgres` | fenced writes in PostgreSQL through your sqlx (0.8) transaction (see [`fence`](mod@fence)) | the module `distlock::fence::sqlx`: `advance`, `advance_resource`, `LONGEST_BOUND`, `SCHEMA` |
//!
//! Items behind a feature are compiled, and so documented, only with it. docs.rs builds these
//! docs with every feature and marks each such item with the feature it needs; locally, run
//! `cargo doc -p distlock --all-features` (or `--features testing`, ...) to see them. In your
//! own project `cargo doc` documents the features you enabled.
//!
//! ## Options
//!
//! | option | meaning | default |
//! | --- | --- | --- |
//! | `key = "order:<id>"` | the lock name template (required) | — |
//! | `key = ["account:<from>", "account:<to>"]` | several locks taken together, all or none ([`lock_all`]): sorted and deduplicated before anything is sent (`from == to` is one lock), so callers naming them in any order never deadlock; at least two templates, none twice; not with `permits` or `read` (compile errors); `fenced`: a token per lock ([`fencing_token_of`]) | one lock |
//! | `permits = 5` | at most this many bodies at once, fleet-wide: one of a semaphore's permits instead of the lock ([`semaphore`]; an integer literal ≥ 1 or a `u32` constant, checked at compile time); combines with every other option | a lock: one body at a time |
//! | `read` | a shared (read) hold instead of the lock ([`LockBuilder::read`]): any number of `read` bodies at once, while a body holding the lock itself (no `read`: the write) excludes them and is excluded by them; a waiting writer stops new readers, so writers do not starve; not with `permits` (a compile error) | exclusive: one body at a time |
//! | `ttl = "10s"` | lease length, 100 ms ([`MIN_TTL`]) to 30 days ([`MAX_TTL`]), checked at compile time | the client's `Config::default_ttl` (30 s) |
//! | `renew` | watchdog: extend the lease every ttl/3 while the body runs | off |
//! | `wait = "2s"` | wait this long for a busy lock (woken by the holder's release); transient failures (a reset connection, a timeout, a failover) are retried within it, and the last one is returned when it runs out | fail at once with [`Error::Busy`] (or the first error) |
//! | `skip` | busy lock: return `Ok(Default::default())` without running the body | off |
//! | `min_hold = "1m"` | keep the lock at least this long after acquiring it (ShedLock's `lockAtLeastFor`) | release when the body ends |
//! | `fenced` | hand out a fencing token with the lock ([`fence()`] for the body's fenced writes, [`fencing_token()`], [`LockBuilder::fenced`]) | no token |
//! | `min_replicas = 1` | replicas that must acknowledge the acquire and each renewal ([`LockBuilder::min_replicas`]); too few: [`Error::Unreplicated`]; `min_replicas = all` over Redis Sentinel: every replica a failover could promote ([`ALL_REPLICAS`]) | the client's [`Config::min_replicas`] (0) |
//! | `client = "payments"` | a client installed with [`Config::install_as`] | the default client |
//! | `crate = "my::reexport"` | path to this crate, for re-exporters | `::distlock` |
//!
//! Durations are written as in a config file — `"500ms"`, `"10s"`, `"1m30s"`, `"1m 30s"`,
//! `"1.5s"`, `"2h"`, `"1d"` — and read by the attribute at compile time with the same rules as
//! [`parse_duration`] at run time: zero, and anything finer than a millisecond (`"250us"`), is
//! refused. Or name a [`Duration`](std::time::Duration) constant, so durations live with the
//! rest of a service's settings; its type is checked by the compiler and its value against the
//! same limits when the crate is built:
//!
//! ```no_run
//! # use distlock::distributed_lock;
//! # #[derive(Debug)] struct AppError;
//! # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
//! use std::time::Duration;
//!
//! const ORDER_TTL: Duration = Duration::from_secs(10);
//!
//! #[distributed_lock(key = "order:<id>", ttl = ORDER_TTL, wait = "1.5s")]
//! async fn settle(id: u64) -> Result<(), AppError> { Ok(()) }
//!
//! struct Orders;
//! impl Orders {
//!     const TTL: Duration = Duration::from_secs(5);
//!
//!     #[distributed_lock(key = "refund:<id>", ttl = Self::TTL, renew)]
//!     async fn refund(&self, id: u64) -> Result<(), AppError> { Ok(()) }
//! }
//! ```
//!
//! ```no_run
//! # use distlock::distributed_lock;
//! # #[derive(Debug)] struct AppError;
//! # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
//! # struct Request { user_id: u64 }
//! # struct Service { tenant: String }
//! impl Service {
//!     /// Waits up to 2 s for a concurrent update of the same user, on the "payments" client.
//!     #[distributed_lock(key = "user:<self.tenant>:<req.user_id>", ttl = "500ms", wait = "2s", client = "payments")]
//!     async fn update(&self, req: &Request) -> Result<(), AppError> { Ok(()) }
//! }
//!
//! /// Several replicas fire this; one runs it, the others return `Ok(())` at once. The lock
//! /// stays taken for at least a minute, so a replica whose scheduler fires late skips too.
//! #[distributed_lock(key = "nightly-report", ttl = "5m", skip, min_hold = "1m")]
//! async fn nightly() -> Result<(), AppError> { Ok(()) }
//! ```
//!
//! ```no_run
//! # use distlock::distributed_lock;
//! # #[derive(Debug)] struct AppError;
//! # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
//! /// At most five calls to the partner API at once per tenant, across every process; a caller
//! /// waits up to 2 s for a permit. Each permit is leased and renewed on its own: a process that
//! /// dies frees its permit at its own ttl.
//! #[distributed_lock(key = "api:<tenant>", permits = 5, ttl = "10s", renew, wait = "2s")]
//! async fn call_partner(tenant: &str) -> Result<(), AppError> { Ok(()) }
//! ```
//!
//! ```no_run
//! # use distlock::distributed_lock;
//! # #[derive(Debug)] struct AppError;
//! # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
//! /// Any number of readers of one document at once; `save` (the same key, no `read`) waits
//! /// for them to leave, and new readers wait for it.
//! #[distributed_lock(key = "doc:<id>", read, ttl = "10s", renew, wait = "2s")]
//! async fn render(id: u64) -> Result<String, AppError> { Ok(String::new()) }
//!
//! #[distributed_lock(key = "doc:<id>", ttl = "10s", wait = "5s")]
//! async fn save(id: u64, text: String) -> Result<(), AppError> { Ok(()) }
//! ```
//!
//! ```no_run
//! # use distlock::distributed_lock;
//! # #[derive(Debug)] struct AppError;
//! # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
//! /// Both accounts, all or none: two transfers naming them in opposite orders never deadlock,
//! /// and `from == to` takes the one lock once.
//! #[distributed_lock(key = ["account:<from>", "account:<to>"], ttl = "5s", wait = "2s")]
//! async fn transfer(from: u64, to: u64, cents: i64) -> Result<(), AppError> { Ok(()) }
//! ```
//!
//! ## Key templates
//!
//! `<name>` is a parameter, `<name.field.sub>` a field path, `<self.field>` a field of the
//! receiver; everything else is literal text, and `<<` is a literal `<`. A name bound by a
//! parameter's pattern is a parameter too, so handlers keep the shape axum gives them:
//!
//! ```no_run
//! # use distlock::distributed_lock;
//! # #[derive(Debug)] struct AppError;
//! # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
//! # mod axum { pub mod extract { pub struct Path<T>(pub T); pub struct State<T>(pub T); } }
//! # #[derive(Clone)] struct App { region: &'static str }
//! use axum::extract::{Path, State};
//!
//! #[distributed_lock(key = "order:<id>", ttl = "10s", wait = "2s", fenced)]
//! async fn settle(Path(id): Path<u64>, State(app): State<App>) -> Result<String, AppError> {
//!     Ok(format!("settled order {id} in {}", app.region))
//! }
//! # fn main() {}
//! ```
//!
//! (`Json(Order { id: order_id, .. })`, `(a, b)`, nested patterns and `ref`/`mut` bindings
//! likewise; `examples/axum_service.rs` serves this handler and answers a busy order `409`.) Braces cannot appear
//! in the literal text: distlock puts the whole lock name in a Redis Cluster hash tag itself, so
//! `key = "order:{id}"` is a compile error that shows the `<id>` form. Values are rendered
//! with `Display`. So that two different arguments can never produce the same key, and a value
//! can never choose the Redis Cluster hash slot, a value's `%`, `{`, `}` and the character that
//! follows its placeholder in the template are written as `%XX`; plain values such as `42` or
//! `abc-1` render unchanged and keys stay readable in `redis-cli`. The key is built once per
//! call, before acquiring, into one `String`.
//!
//! ## What it expands to, written by hand
//!
//! ```no_run
//! # #[derive(Debug)] struct AppError;
//! # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
//! # use std::time::Duration;
//! async fn settle(id: u64) -> Result<u64, AppError> {
//!     distlock::lock(format!("order:{id}"))
//!         .label("order:<id>") // the metrics label: the template, never the key
//!         .ttl(Duration::from_secs(10))
//!         .renew(true)
//!         .run(async move {
//!             // the original body
//!             Ok::<_, AppError>(id)
//!         })
//!         .await? // acquire failure or loss: Err(AppError::from(distlock::Error))
//! }
//! ```
//!
//! [`LockBuilder::run`] is also the manual API's way to hold a lock around a future. For full
//! control, take a guard:
//!
//! ```no_run
//! # async fn demo() -> Result<(), distlock::Error> {
//! # use std::time::Duration;
//! let guard = distlock::lock("order:42")
//!     .ttl(Duration::from_secs(10)).renew(true).wait(Duration::from_secs(2))
//!     .acquire().await?;
//! let token = guard.token(); // fencing token for the protected resource
//! # let _ = token;
//! guard.release().await?;   // dropping the guard also releases, in the background
//! # Ok(()) }
//! ```
//!
//! ## Guarantees
//!
//! The one promise: **while you believe you hold a lock, nobody else does; when that can no
//! longer be guaranteed, you are told.**
//!
//! * **`Ok` means "ran exclusively".** An annotated function (or [`LockBuilder::run`]) returns
//!   the body's own result only if the body *completed inside its lease*: no loss was reported
//!   while it ran, and the lease had not run out when it completed. That is the whole rule: the
//!   result is decided when the body completes, before the release is sent.
//! * **Which calls wait for what.** An annotated function and [`LockBuilder::run`] wait for the
//!   acquire's answer (the body must not start before the lock is known to be held) and *not*
//!   for the release's: once the body completed inside its lease the release is sent at once
//!   (queued on the client's command connection, so it reaches Redis before anything the same
//!   client sends next: taking the lock again right after `run` returns finds it free) and
//!   `run` returns. An uncontended call costs its caller one round trip. The release's answer
//!   is handled off the caller's path (by the task that sends it, a failure on the client's own
//!   runtime): retried on transient failures until the lease's
//!   end, reported through `tracing` and `distlock_sent_releases_total`, and never needed for
//!   the lock to go (it expires at its ttl in any case). A release that finds the lock gone
//!   or another owner's (deleted by hand or `distlock release --force`, evicted, lost in a
//!   failover while nothing renewed it) is reported there, not in the result: a theft that
//!   renewal did not see while the body ran is caught by fencing, not by the release. Over a
//!   RedLock quorum ([`Config::redlock`]) `run` still waits for the release's answer, until the
//!   lease's end at most (a majority's answers are not ordered with the client's next
//!   requests), and an answer inside the lease that finds the lock not ours is `Err(Lost)`.
//!   A process that returns from `main` right after a locked call leaves no lock behind, with
//!   no call of its own: the runtime's shutdown waits for the releases its tasks sent (see
//!   [Shutting down](#shutting-down)). One that exits otherwise (`std::process::exit`, a
//!   signal handler) awaits [`shutdown`] first: a release not yet written when the process
//!   ends is lost, and its lock expires at its ttl, as after a crash.
//!   [`LockGuard::release`] (manual API) always waits for the answer and returns `Ok(())`
//!   only if Redis confirmed the lock was still ours and released it; dropping a guard
//!   releases in the background.
//! * **Waiters take turns.** With `wait`, a plain lock's waiters queue in Redis (one server,
//!   Sentinel, a cluster), and a release hands the lock to the first of them: waiters of every
//!   client and process get it in the order they came, each starting on the release's message.
//!   One exception, found by the protocol's model (`docs/protocol.md`): a lock freed by an
//!   expiry (its holder died or stalled past its lease, so no release hands it on) is taken by
//!   the first attempt to reach it until the queued waiters look again (within the holder's
//!   remaining ttl, at most 1 s), and a newcomer's first attempt can be that one.
//!   A handed lock carries the same promise: the waiter trusts it for a grant window (1 s, or
//!   the ttl if shorter) counted from its last attempt that found the lock held, before the
//!   grant, and the watchdog extends it to its ttl early in that window; a grant heard too late
//!   to trust costs one more round trip. A waiter that went away costs the lock its window at
//!   most, never its ttl, and the waiters of a process that was killed cost the living one
//!   window in all, however many of them stand ahead (a grant that lapsed in a gone client's
//!   hands takes that client's other entries out of the queue; an entry also lapses when its
//!   waiter's wait ends, or 3 s after its last look, so a waiter whose wait is over is never
//!   handed the lock: `tests/crashed_waiters.rs`). Tasks of one client that wait for the same lock queue through that
//!   client's own releases, so a handoff between them costs Redis a single script. Fenced
//!   waiters and waiters with `min_replicas` are handed the lock in their turn too, and confirm
//!   the grant with one more round trip (their token is raised, or their replicas waited for,
//!   while the lock is theirs). A semaphore's waiters queue the same way: a release hands the
//!   permit it frees to the first of them, on the same terms; a set's
//!   waiters queue at the lock they find held, are handed it, and take the whole set with one
//!   more round trip if its other locks are free. Readers and writers wait in one line (below,
//!   shared holds). In a cluster, sets that span several hash slots are woken by the release
//!   and try again instead; over RedLock the masters
//!   keep a queue of a lock's waiters.
//! * **`Err(Lost)` means "this may not have run exclusively".** The lease ran out or was lost:
//!   renewal found the lock expired or taken ([`LossReason::Expired`], [`LossReason::Stolen`]),
//!   Redis stayed unreachable or refused renewal until the lease ran out
//!   ([`LossReason::Unreachable`], [`LossReason::Refused`]), or, without renewal, the ttl
//!   elapsed — also when the *process* stalled (a GC-like pause, `SIGSTOP`, a blocked executor
//!   thread) past the lease and the body finished after waking up ([`LossReason::LeaseElapsed`]).
//!   The body is cancelled at its next `.await` when the loss is noticed while it runs; a body
//!   whose lease ran out before its first poll never starts; a body that finished after its
//!   lease has its result dropped. Some of its side effects may already have happened while
//!   another holder ran: treat them as unprotected.
//! * **Side effects need fencing.** Code between two `.await` points cannot be interrupted, and
//!   a stall can strike between your last check and a write. Write the resource you protect
//!   through [`fence`](mod@fence) (Redis data, Postgres through sqlx) with [`fence()`] (or
//!   [`LockGuard::fence`]), or pass [`fencing_token()`] to a store that rejects a token lower
//!   than one it has seen: that is what keeps a stale holder's write out, whatever the timing. The
//!   tokens' exact guarantee (and when it weakens to "as monotonic as the Redis server's clock")
//!   is in [Fencing tokens](#fencing-tokens).
//! * **Before an irreversible step**, call [`LockGuard::ensure_held`] (manual API) — it fails
//!   once the lease can no longer be guaranteed — and still fence the step itself.
//! * **What Redis must provide**: a single primary (with asynchronous replication a failover
//!   can lose a just-taken lock), server clocks that do not step forward and servers that keep
//!   their keys across restarts (a step expires locks early, a restart without persistence
//!   loses them: the holder is told within [`Config::server_check`], not before), and
//!   `maxmemory-policy noeviction`
//!   (see [`Config::require_noeviction`]); leases are measured from when the command was sent,
//!   minus a safety margin of [`LEASE_MARGIN`] + 1% of the ttl, with a ttl between [`MIN_TTL`]
//!   and [`MAX_TTL`].
//!
//! **Permits** ([`semaphore`], `permits = n`): the same promise, per permit — while you
//! believe you hold one of the `n` permits, at most `n` holders (you among them) do; when
//! that can no longer be guaranteed, you are told. Each permit is its own lease (a holder that
//! dies frees its permit at its own ttl, never the others'), renewed on its own, released on
//! every exit path (a release wakes a waiter); loss cancels the body and gives `Err(Lost)`,
//! fencing tokens strictly increase per name across the permits' holders (so a resource that
//! keeps the highest token seen serves the latest holder, not all `n`: fence per holder if
//! several must write), re-entry takes no second permit. Every user of a name must agree on
//! `n` ([`Error::PermitsMismatch`] otherwise, never a resize), and a lock and a semaphore of
//! one name exclude each other ([`Error::Incompatible`]). Every deployment serves them. Over
//! [`Config::redlock`] a permit is taken and renewed by `⌊n·m/(n+1)⌋ + 1` of the `m` masters,
//! not by a majority: each master grants at most `n`, and with fewer masters per holder more
//! than `n` holders could each find enough of them. One permit needs a majority, 2 permits
//! over 5 masters need 4 (one master down is tolerated, not two: [`Error::NoQuorum`]), many
//! permits nearly every master. Waiters there retry on releases (the FIFO queue is the lock's
//! only); fencing tokens stay unique and increasing per name.
//!
//! **Shared holds** ([`LockBuilder::read`], `read`): while you believe you hold a read, no
//! writer (an exclusive hold of the name) does, and while you believe you hold the write,
//! nobody else holds anything of the name; when that can no longer be guaranteed, you are
//! told. Each reader's share is its own lease (a reader that dies frees its share at its own
//! ttl), renewed on its own, released on every exit path (a release wakes waiting writers and
//! readers); loss cancels the body and gives `Err(Lost)`; fencing tokens strictly increase per
//! name across readers and writers. A writer meeting readers, or a reader meeting a writer, is
//! busy (it waits with `wait`), never [`Error::Incompatible`]. **Nobody starves**: readers and
//! writers wait in one line (a queue next to the lock, in the same hash slot) and take their
//! turns in the order they came: a writer's release hands the lock to the next writer, or to
//! every reader at the head of the line together; the last reader's release hands it to the
//! writer behind; no new reader enters past a writer waiting before it, so a writer waits only
//! for the readers already inside. A writer whose process died holds new readers up for 2 s at
//! most. Re-entry: a read inside a read takes no second share, a read inside a write
//! re-enters the write, a write inside a read is [`Error::WriteInsideRead`] at once (a read
//! hold is never upgraded). Since a waiting writer stops new readers, a body holding a read must
//! not wait for another task that reads the same name (it could wait behind the writer that
//! waits for it; each gives up at its `wait`). A semaphore and readers of one name are
//! [`Error::Incompatible`]. Over [`Config::redlock`] a read and a write each count when a
//! majority of the masters granted them (two majorities share a master, which granted only
//! one of them); a waiting writer marks its intent (a key renewed while it waits) on every
//! master where readers are, and one that went away holds new readers up for a second at most.
//!
//! **Sets of locks** ([`lock_all`], `key = [...]`): while you believe you hold a set, you hold
//! every lock of it and nobody else holds any; when that can no longer be guaranteed for any
//! one of them, you are told. A set is taken **all or none**: on one server, through Sentinel
//! and on each RedLock master by one script that checks every lock and then takes all of them
//! (the set is held when a majority of the masters granted all of it); a lock found busy, and
//! the set waits (woken by that lock's release) holding nothing. **No deadlock**, whatever
//! order callers name the locks in (or the same lock twice): the names are sorted and
//! deduplicated before anything is sent, and a caller never waits while holding part of a set.
//! In a **Redis Cluster**, where one script cannot span hash slots, the set is taken one slot
//! group at a time in a fixed global order (slot, then name); a later group found busy first
//! releases the groups already taken, then waits: it costs one round trip per slot group
//! (plus a release per group taken when a later one is busy), and a set waiting for several
//! busy locks can be overtaken by single-lock callers. One lease for the set: until the
//! earliest of its locks' deadlines; renewal extends every lock, and a renewal that finds any
//! lock gone or another owner's is the loss of the set (`Err(Lost)`, the body cancelled), as is
//! a stall past the lease. A cancelled acquire leaves none of the set held (what it may have
//! taken is released in the background), a dropped guard releases all of it, `skip` and
//! `min_hold` apply to the set, and each lock is an ordinary lock to everyone else (the CLI
//! shows each, with the other locks of its set). `fenced`: each lock gets its own token from its
//! own fence floor, strictly increasing per name as for a lock ([`LockGuard::token_of`],
//! [`fencing_token_of`]; [`LockGuard::token`] is the first lock's). A set is taken inside a
//! body that holds the whole set in one hold by re-entry, and refused ([`Error::InvalidConfig`])
//! inside a body that holds only some of it (waiting for the rest while holding those could
//! deadlock). Sets are exclusive locks only (with `read` or a semaphore: [`Error::InvalidConfig`]
//! at run time, a compile error in the attribute); a lock of the set held by readers is busy, a
//! semaphore's key [`Error::Incompatible`]. Over [`Config::redlock`] fenced sets are not
//! supported yet ([`Error::InvalidConfig`]), and a waiting set takes no place in the masters'
//! queue (it retries at each release).
//!
//! The reliability suite's stall row checks exactly this: holders in separate processes are
//! `SIGSTOP`ped inside their critical sections for longer than their lease while others take
//! the lock, and no two sections that returned `Ok` may overlap.
//!
//! ## Re-entry and tasks
//!
//! A nested annotated call (or a manual `lock(..)`) on the same key, in the same call chain and
//! through the same client, re-enters instead of deadlocking. A task spawned inside the body is
//! a different owner. [`fencing_token()`] returns the innermost held lock's token.
//!
//! ## Using it with `#[async_trait]`
//!
//! Put `#[async_trait]` on the `impl` block and `#[distributed_lock]` on the method, as with
//! any method attribute; `async_trait` expands first and the lock wraps the boxed body.
//!
//! ## Mistakes are compile errors
//!
//! The function must be `async`:
//!
//! ```compile_fail
//! # use distlock::distributed_lock;
//! # struct E; impl From<distlock::Error> for E { fn from(_: distlock::Error) -> Self { E } }
//! #[distributed_lock(key = "job")] // error: the `async` keyword is missing
//! fn job() -> Result<(), E> { Ok(()) }
//! # fn main() {}
//! ```
//!
//! Its error type must be able to carry a lock failure:
//!
//! ```compile_fail
//! # use distlock::distributed_lock;
//! struct PlainError; // no `From<distlock::Error>`
//! #[distributed_lock(key = "job")]
//! async fn job() -> Result<(), PlainError> { Ok(()) }
//! # fn main() {}
//! ```
//!
//! Values in the key must implement `Display`, options must be spelled right, and durations must
//! be valid and non-zero:
//!
//! ```compile_fail
//! # use distlock::distributed_lock;
//! # struct E; impl From<distlock::Error> for E { fn from(_: distlock::Error) -> Self { E } }
//! struct Opaque;
//! #[distributed_lock(key = "item:<item>")] // error: `Opaque` does not implement `Display`
//! async fn take(item: Opaque) -> Result<(), E> { Ok(()) }
//! # fn main() {}
//! ```
//!
//! ```compile_fail
//! # use distlock::distributed_lock;
//! # struct E; impl From<distlock::Error> for E { fn from(_: distlock::Error) -> Self { E } }
//! #[distributed_lock(key = "job", ttl = "0s")] // error: zero duration
//! async fn job() -> Result<(), E> { Ok(()) }
//! # fn main() {}
//! ```
//!
//! ```compile_fail
//! # use distlock::distributed_lock;
//! # struct E; impl From<distlock::Error> for E { fn from(_: distlock::Error) -> Self { E } }
//! #[distributed_lock(key = "job", wait = "250us")] // error: not a whole number of milliseconds
//! async fn job() -> Result<(), E> { Ok(()) }
//! # fn main() {}
//! ```
//!
//! Braces written as in `format!` are refused, with the `<id>` form in the message:
//!
//! ```compile_fail
//! # use distlock::distributed_lock;
//! # struct E; impl From<distlock::Error> for E { fn from(_: distlock::Error) -> Self { E } }
//! #[distributed_lock(key = "order:{id}")] // error: placeholders are written `<id>`
//! async fn settle(id: u64) -> Result<(), E> { Ok(()) }
//! # fn main() {}
//! ```
//!
//! A misspelt parameter gets a suggestion ("unknown parameter `idd` ...: did you mean
//! `<id>`?"), and the generated code never warns: an annotated function compiles under
//! `#![deny(warnings, clippy::all, clippy::pedantic)]`.
//!
//! ## Metrics
//!
//! With feature `metrics`, the runtime records these through the
//! [`metrics`](https://docs.rs/metrics) facade. Libraries link only the facade: install any
//! recorder (such as `metrics-exporter-prometheus`) in the application; without one nothing is
//! recorded, and without the feature no metric code is compiled in at all.
//! `distlock::describe_metrics()` (with the feature) registers their units and descriptions.
//!
//! | name | kind | labels | what |
//! | --- | --- | --- | --- |
//! | `distlock_acquire_total` | counter | `lock`, `kind`, `outcome` | acquire calls (every annotated call, `run`, `acquire`) by how they ended: `acquired` (at once or after waiting), `reentered` (a lock the call chain held), `busy` (no `wait`), `skipped` (busy on a `skip` function), `timeout` (busy until `wait` ran out), `error` (anything else: Redis, [`Error::Timeout`], configuration, a lost outer hold). A call dropped before it ends counts nothing. |
//! | `distlock_acquire_retries_total` | counter | `lock`, `kind` | transient failures (a reset connection, a timeout, `NoQuorum`, `LOADING`, `READONLY` in a failover, …) that acquires with a `wait` retried after a pause, within their wait; a failure that ends the wait is counted in `distlock_acquire_total` (`error`) instead |
//! | `distlock_wait_seconds` | histogram, seconds | `lock`, `kind` | from the call to the lock, only for acquires that waited for a busy lock |
//! | `distlock_hold_seconds` | histogram, seconds | `lock`, `kind` | from acquiring to releasing or dropping the guard (outer holds; re-entries add nothing) |
//! | `distlock_lost_total` | counter | `lock`, `kind`, `reason` | held locks lost, once each: `expired`, `stolen`, `unreachable`, `lease_elapsed`, `refused`, `unreplicated` (see [`LossReason`]); also a release waited for ([`LockGuard::release`], `run` over RedLock) that finds the lock gone (`expired`) or another owner's (`stolen`) |
//! | `distlock_sent_releases_total` | counter | `lock`, `kind`, `outcome` | releases `run` (and every annotated call) sent without waiting, by what their confirmation on the client's runtime found: `released`, `expired` (gone), `stolen` (another owner's), `failed` (no answer within the lease, retries included: the lock expires at its ttl) |
//! | `distlock_renewals_total` | counter | `outcome` | lease renewals by the watchdog, one per lease per attempt: `ok`, `failed` (no answer in time, an error reply, too few replicas; retried), `lost` (the lock was gone or another owner's) |
//! | `distlock_renewal_batch_size` | histogram | — | leases per renewal round trip |
//! | `distlock_renewal_margin_ratio` | histogram, ratio | `lock`, `kind` | the part of its ttl a renewed lease had left when a renewal of it was answered: about 2/3 when renewals come on time (every ttl/3), near 0 when they come so late that the lease is about to be lost (a slow or overloaded Redis, a starved runtime); one per lease per renewal (a handed-over lock's first extension, which ends its grant window rather than a ttl, is not counted) |
//! | `distlock_hold_ttl_ratio` | histogram, ratio | `lock`, `kind` | a renewed hold's age in ttls, at each of its renewals: a hold that outlives many of its ttls (a body that never ends) shows here while it is still held |
//! | `distlock_server_events_total` | counter | `event` | what a client saw happen to its servers ([`Config::server_check`], Sentinel): `clock_step` (a server's clock stepped forward: its locks expire early), `restart` (a server restarted: its locks may be gone), `master_switch` (Sentinel switched the master); each event's series starts at 0 when a client starts watching for it, and each client that sees an event counts it |
//! | `distlock_held` | gauge | `lock`, `kind` | locks held now: up at the acquire, down when the guard is released or dropped or the lock is lost, whichever comes first (re-entries are not counted again) |
//! | `distlock_waiting` | gauge | `lock`, `kind` | acquire calls waiting for a busy lock now: down when they take it, give up, fail or are dropped |
//! | `distlock_leader` | gauge | `name` | 1 while this process leads the election `name` ([`leader`](mod@leader)): up when a term starts, down when its `Leadership` is resigned, dropped or ended by `run` (election names are few: the name is the label) |
//! | `distlock_leader_terms_total` | counter | `name` | terms this process started as leader |
//! | `distlock_leader_lost_total` | counter | `name`, `reason` | terms of this process lost (not resigned), counted when the loss happens (not when the `Leadership` goes), by [`LossReason`] as `distlock_lost_total` |
//!
//! The rare counters are there at 0 before their first event, so that Prometheus'
//! `increase()` and `rate()` see it (a series that first appears at 1 shows no increase):
//! `distlock_lost_total` for every reason and `distlock_sent_releases_total` for every outcome
//! from the process's first hold of a lock's labels, `distlock_leader_lost_total` for every
//! reason from an election's first term here, `distlock_server_events_total` from when a client
//! watches for the event.
//!
//! **The `lock` label is the lock's template, never its key**, so the number of series stays
//! bounded however many orders or users there are: `#[distributed_lock(key = "order:<id>")]`
//! labels with `order:<id>` exactly as written; the manual API labels with
//! [`LockBuilder::label`] (a `&'static str`), and without it with `"unlabeled"`; a leader
//! election's lock with the election's name. The `kind` label says what the acquisition takes:
//! `lock` (a lock, or the write of a read/write lock), `permit` (one of a semaphore's), `read`
//! (a shared hold), `set` (several locks at once) or `leader` (a leader election's lock).
//!
//! ```no_run
//! # async fn demo(id: u64) -> Result<(), distlock::Error> {
//! // distlock_acquire_total{lock="order:<id>",kind="lock",outcome="acquired"}, not {lock="order:42",…}
//! let guard = distlock::lock(format!("order:{id}")).label("order:<id>").acquire().await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! `examples/metrics.rs` in the repository exports them in Prometheus' text format, with the
//! histogram buckets that the repository's operator's kit (`ops/`: Prometheus recording rules,
//! alerts with their runbook, a Grafana dashboard) expects.
//!
//! ## Fencing tokens
//!
//! A lock alone cannot stop a holder that was paused past its lease (a GC-like pause, a
//! stopped VM, `SIGSTOP`, a slow disk) from writing after someone else took the lock: when it
//! wakes up it still believes it holds the lock until it next looks, and a write it had
//! already started goes out anyway. A **fencing token** closes that gap. It is a number handed
//! out with the lock, strictly greater than every token handed out before for the same name.
//! The holder sends it with each write to the resource it protects; the resource keeps the
//! highest token it has accepted and refuses a lower one. Holder A takes the lock with token
//! 33 and is paused; its lease runs out; B takes the lock with token 34 and writes; A wakes up
//! and writes with 33: the resource has seen 34 and refuses it.
//!
//! Tokens are opt-in: `fenced` in the attribute, [`LockBuilder::fenced`] by hand. Inside the
//! body [`fencing_token()`] returns the lock's token ([`fencing_token_of`] each lock's of a set);
//! a guard has [`LockGuard::token`] and [`LockGuard::token_of`]. A lock taken without one has
//! no token (`None`). A fenced acquire runs a script that reads the server's clock and raises
//! the name's fence floor: about 13 µs of Redis CPU per acquire + release against about 5 µs
//! for a plain lock (`scripts/profile-scripts.sh` in the repository).
//!
//! The store must check the token, or it protects nothing: [`fence`](mod@fence) does it for
//! you. A `fence::redis::FencedStore` (over any redis-rs 1.x connection, the lock's server or
//! another: open it through [`distlock::redis`](crate::redis), the redis-rs distlock is built
//! on, as a redis 0.x connection fails to compile with E0277) writes your own Redis data only
//! if no newer holder of the lock has written any of the lock's keys there or claimed them
//! (`claim`, the moment a holder or a leader takes over); every key it writes under lock `L`
//! carries the hash tag `{L}`, on every deployment (any other key is refused with
//! [`Error::FenceCrossSlot`], nothing sent). `fence::sqlx::advance` (feature `sqlx-postgres`)
//! does the same for a resource in your Postgres transaction, ending a holder frozen in it
//! after a bound you give. A stale write fails with [`Error::Fenced`] and changes nothing
//! (reliability row 23: holders frozen past their lease and writing with old tokens land 0
//! stale writes in either store, where plain writes in the same run land them).
//!
//! ```no_run
//! # use distlock::distributed_lock;
//! # #[derive(Debug)] struct AppError;
//! # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
//! # use distlock::{fence::redis::FencedStore, redis::aio::MultiplexedConnection};
//! # async fn ledger() -> FencedStore<MultiplexedConnection> { unimplemented!() }
//! /// The balance is written only by the newest holder of `account:<id>`.
//! #[distributed_lock(key = "account:<id>", ttl = "5s", renew, fenced)]
//! async fn post(id: u64, cents: i64) -> Result<i64, AppError> {
//!     let fence = distlock::fence()?; // the lock's name and token
//!     let mut store = ledger().await; // FencedStore::new(connection, how long fences arrive)
//!     let key = format!("balance:{{account:{id}}}"); // the lock's hash tag: required
//!     let balance = store.get::<i64>(&key).await?.map_or(0, |stored| stored.value);
//!     // Err(Fenced) and nothing written if a newer holder wrote since: this one was paused
//!     // past its lease after its read.
//!     store.set(&key, balance + cents, &fence).await?;
//!     Ok(balance + cents)
//! }
//! ```
//!
//! **What is guaranteed.** A token is the Redis server's clock in microseconds, raised above
//! the last token handed out for the name. That last token (the *fence floor*) is kept in a
//! small key per name that expires [`Config::fence_retention`] (10 minutes by default) after
//! the name's last acquisition, so memory does not grow with names such as `order:<id>`.
//! While a name's fence floor exists, every fresh token for that name is strictly greater than
//! every earlier one: a re-entry shares its outer hold's token, and holders at once (a
//! semaphore's permits, readers) never share one. The floor is gone when the retention passes
//! without an acquisition, when Redis evicts it, after `FLUSHDB`/`FLUSHALL`, after a restart
//! without persistence, and after a failover to a replica that had not received it. From then
//! on, tokens are monotonic only as far as the server's clock is: a backwards clock step can
//! hand out a token smaller than an earlier one. Keep server clocks slewing (NTP), the
//! retention above your largest clock step and gap between uses of a name, and Redis
//! persistent if tokens must survive a restart. Over a RedLock quorum a fenced acquire reads
//! the fence floors of a majority of the masters, takes a token above all of them and raises a
//! majority's floors to it before it hands the token out, so tokens increase across holders
//! whichever majorities granted them (while a majority keeps its fence floors).
//!
//! ## Configuration
//!
//! [`init`] takes one server's URL. [`Config`] builds any deployment in code;
//! [`Config::from_env`] reads the `DISTLOCK_*` environment variables, and with feature `serde`
//! `Config` implements `serde::Deserialize`, so it loads from TOML, YAML, JSON or the `config`
//! crate. Both check the result exactly as connecting does ([`Config::validate`]), so a bad
//! value fails at start-up, naming its setting:
//!
//! | file field | variable | value (default) |
//! | --- | --- | --- |
//! | `url` | `DISTLOCK_URL` | `redis://[:password@]host[:port][/db]`: one server ([`Config::new`]) |
//! | `cluster_nodes` | `DISTLOCK_CLUSTER_NODES` | seed node URLs of a Redis Cluster ([`Config::cluster`]; a list, comma-separated in the variable) |
//! | `sentinels`, `sentinel_service` | `DISTLOCK_SENTINELS`, `DISTLOCK_SENTINEL_SERVICE` | sentinel URLs ([`Config::sentinel`]; a list, comma-separated in the variable) and the master's name at the sentinels |
//! | `sentinel_master_username`, `sentinel_master_password` | `DISTLOCK_SENTINEL_MASTER_USERNAME`, `DISTLOCK_SENTINEL_MASTER_PASSWORD` | the Sentinel master's credentials ([`Config::sentinel_master_auth`]; none) |
//! | `redlock_masters` | `DISTLOCK_REDLOCK_MASTERS` | URLs of the independent masters of a RedLock quorum ([`Config::redlock`]; a list, comma-separated in the variable; each with its own password, never shown) |
//! | `key_prefix` | `DISTLOCK_KEY_PREFIX` | 1–128 bytes without braces (`distlock`) |
//! | `default_ttl` | `DISTLOCK_DEFAULT_TTL` | a duration (`30s`) |
//! | `connect_timeout` | `DISTLOCK_CONNECT_TIMEOUT` | a duration (`5s`) |
//! | `response_timeout` | `DISTLOCK_RESPONSE_TIMEOUT` | a duration (`2s`) |
//! | `fence_retention` | `DISTLOCK_FENCE_RETENTION` | a duration (`10m`) |
//! | `renew_batch_size` | `DISTLOCK_RENEW_BATCH_SIZE` | a positive integer (`256`) |
//! | `max_hold` | `DISTLOCK_MAX_HOLD` | a duration (no cap) |
//! | `require_noeviction` | `DISTLOCK_REQUIRE_NOEVICTION` | `true`/`false`, also `1`/`0`, `yes`/`no`, `on`/`off` (`false`) |
//! | `min_replicas` | `DISTLOCK_MIN_REPLICAS` | replicas that acknowledge each acquire and renewal (`0`) |
//! | `replica_timeout` | `DISTLOCK_REPLICA_TIMEOUT` | a duration (`500ms`) |
//! | `server_check` | `DISTLOCK_SERVER_CHECK` | a duration, or `off` (`250ms`): how often each server is checked for clock steps and restarts ([`Config::server_check`]) |
//!
//! Exactly one of `url`, `cluster_nodes`, `sentinels` and `redlock_masters` says where Redis
//! is (`redlock_masters` next to another one, or with `min_replicas` above 0, is refused,
//! naming both settings). Durations are written as in the attribute (`"500ms"`, `"10s"`,
//! `"1m30s"`, `"1.5s"`) and read by [`parse_duration`]; unknown fields in a file are errors,
//! other `DISTLOCK_*` variables are ignored. TLS certificates are set in code
//! ([`Config::tls_root_certificates`], [`Config::tls_client_certificate`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), distlock::Error> {
//! // DISTLOCK_URL=redis://127.0.0.1:6379/ DISTLOCK_DEFAULT_TTL=10s ./my-service
//! let client = distlock::Config::from_env()?.install().await?;
//! // ... the service runs, then returns from `main`: nothing to call.
//! # let _ = client;
//! # Ok(()) }
//! ```
//!
//! ```toml
//! # app.toml, read into `struct AppConfig { locks: distlock::Config }` (feature `serde`)
//! [locks]
//! url = "redis://:secret@10.0.0.5:6379/0"
//! key_prefix = "payments-lock"
//! default_ttl = "10s"
//! response_timeout = "500ms"
//! ```
//!
//! ## Shutting down
//!
//! `run` and the attribute do not wait for their release's answer: it is sent as the body
//! completes and confirmed in the background. A runtime that shuts down — what
//! `#[tokio::main]` does as `main` returns — waits for the releases its tasks sent (and those
//! of guards dropped as it drops its tasks) before it is gone, within the client's connect
//! timeout plus twice its response timeout; with nothing in flight it waits for nothing. So a
//! `main` that returns right after a locked call leaves no lock behind, on a multi-threaded
//! or a current-thread runtime (`tests/shutdown.rs`: a child process per case, its releases
//! 200 ms from Redis).
//!
//! The exits that skip the runtime's shutdown — [`std::process::exit`], a signal handler that
//! exits, `Runtime::shutdown_background` — await [`shutdown`] first (every installed client's
//! background work; [`Client::settle`] for a client that is not installed). With axum, serve
//! with `with_graceful_shutdown` and return from `main` (`examples/axum_service.rs`).
//!
//! ## Deployments
//!
//! One [`Client`] type, one API, whichever deployment: annotated code and the manual API stay
//! as they are, only the start-up configuration changes.
//!
//! | deployment | configuration | what a lock guarantees under failover |
//! | --- | --- | --- |
//! | one Redis server | `distlock::Config::new("redis://host:6379/")` | no failover: a restart without persistence frees every lock (the holder is told, [`Config::server_check`]) |
//! | a master with replicas | `Config::new(url).min_replicas(1)`, or per lock [`LockBuilder::min_replicas`] and the attribute's `min_replicas = 1` | a lock acknowledged by `n` replicas (`WAIT`, bounded by [`Config::replica_timeout`]; too few: [`Error::Unreplicated`]) survives a failover to any of them; a failover to a replica that had not acknowledged it can lose it |
//! | Redis Sentinel | `Config::sentinel(["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"], "locks").min_replicas(1)` ([`Config::sentinel`]) | locks live on the master the sentinels name, and the client follows a failover by itself (waiters too); `SENTINEL FAILOVER` keeps a lock that asked for `min_replicas`; `min_replicas = all` ([`ALL_REPLICAS`]): every replica a failover could promote acknowledges; asynchronous replication as above otherwise |
//! | Redis Cluster | `Config::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])` ([`Config::cluster`]) | each lock lives on the master of its hash slot (`MOVED`/`ASK` followed, sharded pub/sub for waiters); a coordinated `CLUSTER FAILOVER` and a migration of its slot keep it; an unplanned failover keeps it if it was taken with `min_replicas`, and can lose a lock just taken without; a master frozen past the node timeout loses its renewed locks, the holder told in time |
//! | RedLock over independent masters | `Config::redlock(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])` ([`Config::redlock`]; 3 or 5 masters) | held while a majority of the masters keeps it: survives the loss (or restart with persistence) of a minority; an acquire counts only if a majority granted it while enough of the ttl is left, renewal and release by majority, [`Error::NoQuorum`] when too few answer; a semaphore's permit needs `⌊n·m/(n+1)⌋ + 1` of the `m` masters |
//!
//! Every deployment takes `rediss://` URLs with feature `tls`. What RedLock does not buy: its
//! safety rests on timing (the masters' clocks and this machine's running at about the same
//! rate, masters that keep their keys across a restart or stay down for a ttl, a holder not
//! paused past its lease); a pause or a clock jump can let two holders believe they hold the
//! lock, so protect the resource with fencing tokens there too. The runtime crate's own docs
//! (`distlock_core`, re-exported below) give the longer arguments: Sentinel's failover window,
//! the Cluster cases, RedLock's counting and waiting.
//!
//! ## Least privilege
//!
//! The lock's Redis user needs its keys (`<prefix>:{<name>}` and the keys next to it, all
//! starting `<prefix>:{`), its release channels (`<prefix>:{<name>}:released`), the scripts
//! (`EVALSHA`, and `SCRIPT LOAD` after a restart or `SCRIPT FLUSH`) and every command they
//! run (a script runs its commands as the caller's user), `SET`/`PTTL`/`ECHO` (a plain
//! acquire is no script), `WAIT` (`min_replicas`), `PING` (a health probe after a timeout)
//! and the pub/sub its waiters use. These lines give exactly that, for the default prefix
//! `distlock` (write yours in the `~` and `&` patterns; add `+select` for a database other
//! than 0). `AUTH` and `HELLO` need no permission:
//!
//! ```text
//! # One server, and every master of a RedLock quorum:
//! ACL SETUSER distlock reset resetchannels on >PASSWORD ~distlock:{* &distlock:{* +ping +echo +evalsha +script|load +wait +set +get +del +exists +type +pttl +pexpire +time +hget +hmget +hset +hdel +lpush +lrange +ltrim +zadd +zcard +zcount +zrange +zrangebyscore +zrem +zremrangebyscore +zscore +publish +subscribe +unsubscribe
//! # Sentinel, on the master and on every replica (ACL users are not replicated; a failover promotes a replica):
//! ACL SETUSER distlock reset resetchannels on >PASSWORD ~distlock:{* &distlock:{* +ping +echo +evalsha +script|load +wait +set +get +del +exists +type +pttl +pexpire +time +hget +hmget +hset +hdel +lpush +lrange +ltrim +zadd +zcard +zcount +zrange +zrangebyscore +zrem +zremrangebyscore +zscore +publish +subscribe +unsubscribe +role
//! # Sentinel, on every sentinel (their own ACL; the sentinel URLs log in as this user, `Config::sentinel_master_auth` as the one above):
//! ACL SETUSER distlock reset resetchannels on >PASSWORD &+switch-master +sentinel|get-master-addr-by-name +sentinel|replicas +subscribe
//! # Redis Cluster, on every node (masters and replicas):
//! ACL SETUSER distlock reset resetchannels on >PASSWORD ~distlock:{* &distlock:{* +ping +echo +evalsha +script|load +wait +set +get +del +exists +type +pttl +pexpire +time +hget +hmget +hset +hdel +lpush +lrange +ltrim +zadd +zcard +zcount +zrange +zrangebyscore +zrem +zremrangebyscore +zscore +cluster|slots +spublish +ssubscribe +sunsubscribe
//! # The optional checks, on every server above (not on the sentinels):
//! ACL SETUSER distlock ~distlock:client:* +info +config|get
//! ```
//!
//! The optional checks degrade quietly when their permissions are withheld, and the locks
//! work the same: without `~distlock:client:*` no client identity record is written (the CLI
//! shows a holder's owner id, not its process); without `CONFIG GET` the eviction policy is
//! not looked at (no warning for a server that may evict lock keys, and
//! [`Config::require_noeviction`] cannot refuse one); without `INFO` the server check
//! ([`Config::server_check`]) notices clock steps but not restarts. `+sentinel|replicas` is
//! needed by [`ALL_REPLICAS`] only. Over RedLock, masters that refuse `SUBSCRIBE` (too many to
//! count on the others) make the waiters look every 250 ms instead of being woken. (redis-rs
//! also sends `CLIENT SETINFO` at connect, from Redis 7.2 on, and ignores its refusal.)
//!
//! A user without a permission the lock needs gets [`Error::PermissionDenied`], naming the
//! operation, the lock and Redis's refusal (`NOPERM this user has no permissions to run the
//! 'evalsha' command`; inside a script Redis 7.0 does not name the command, and `ACL LOG`
//! does) at once, never retried, not even within a `wait`: an acquire whose attempt or whose
//! subscription (a waiter's) is refused fails with it, and so does a release. A renewal that
//! Redis refuses is retried until the lease runs out, and the holder is told
//! [`LossReason::Refused`]. The `distlock` CLI needs a user of its own: its lines are in its
//! docs (`docs/cli.md`). [`fence::redis`] writes through your own
//! connection, whose user needs `EVALSHA`, `SCRIPT LOAD`, `HSET`, `HMGET`, `HDEL`, `TYPE`,
//! `PEXPIRE` and `PERSIST` on the keys it writes, `TYPE`, `GET` and `SET` on the lock
//! watermarks (`distlock:{*}:watermark`), and `INFO` (or `CONFIG GET`) for the store's
//! first-write check of the eviction policy.
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[doc(inline)]
pub use distlock_core::{
    ensure_held, fence, fence_of, fencing_token, fencing_token_of, hash_slot, init, leader, lock,
    lock_all, semaphore, shutdown, Client, Config, Error, Fence, HeldBy, Leader, LeaderBuilder,
    LeaderWatch, Leadership, LockBuilder, LockGuard, LossReason, Observed, Operation, Result, Run,
    ALL_REPLICAS, LEASE_MARGIN, MAX_NAME_LEN, MAX_TTL, MIN_TTL,
};

#[doc(inline)]
pub use distlock_core::{parse_duration, DurationError};

#[doc(inline)]
pub use distlock_macros::distributed_lock;

#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
#[doc(inline)]
pub use distlock_core::{describe_metrics, HISTOGRAM_BUCKETS};

#[doc(inline)]
pub use distlock_core::assert_locked;

// The module's own docs are its summary: a doc comment here would be shown before them.
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
#[doc(inline)]
pub use distlock_core::testing;

/// The runtime crate behind this one. Everything above is re-exported from it and documented
/// here; its own docs add how it works inside (the wire protocol, the Sentinel, Cluster and
/// RedLock arguments in full).
pub use distlock_core;

/// The redis-rs crate distlock is built on (1.x): match [`Error::Redis`]'s source with it, and
/// open the connections of [`fence::redis::FencedStore`] with it
/// (`distlock::redis::Client::open(url)?`): a connection of another redis-rs version (0.32 and
/// earlier) is not the `ConnectionLike` the store takes (E0277).
pub use distlock_core::redis;

/// The Lua scripts. **Not public API**: for the repository's tests and benchmarks.
#[doc(hidden)]
pub use distlock_core::scripts;

/// Support for generated code. **Not public API**: may change in any release without notice.
#[doc(hidden)]
pub mod __private {
    pub use distlock_core::__private::*;
}
