//! The `#[distributed_lock]` attribute of [distlock](https://docs.rs/distlock).
//!
//! Use it through the `distlock` crate (`use distlock::distributed_lock;`): the generated code
//! refers to `distlock`'s runtime, and this crate is versioned in lockstep with it.
//!
//! The macro works in stages, one module each: `attr` parses the options, `item` the function,
//! `template` the key template; `model` checks them against each other; `expand` generates the
//! code.
#![deny(missing_docs)]

mod attr;
mod expand;
mod item;
mod model;
mod similar;
mod template;

use proc_macro::TokenStream;

/// Runs an `async fn` while holding a Redis-backed distributed lock.
///
/// ```no_run
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// # pub struct Receipt;
/// use distlock::distributed_lock;
///
/// #[distributed_lock(key = "order:<id>", ttl = "10s", renew)]
/// async fn settle(id: u64) -> Result<Receipt, AppError> {
///     // Runs on at most one replica at a time for a given `id`.
///     # todo!()
/// }
/// # fn main() {}
/// ```
///
/// Each call takes the lock named by `key` (its placeholders filled in from the arguments),
/// runs the body while holding it, and releases it when the body finishes, whether it returns
/// `Ok`, `Err`, or early with `?`. If the lock cannot be taken the body does not run and the
/// function returns `Err(distlock::Error::Busy { .. }.into())` (or waits, with `wait`, or
/// returns `Ok(Default::default())`, with `skip`).
///
/// The function must be an `async fn` returning `Result<T, E>` where
/// `E: From<distlock::Error>`: lock failures come back through the function's own error type.
/// Aliases named `Result` work too (`anyhow::Result<T>`, `crate::Result<T>`), as long as their
/// error type has that `From` impl.
/// Everything else stays as written: visibility, generics, where-clauses, attributes, doc
/// comments, `self` receivers, `impl Trait` arguments, parameters written as patterns
/// (`Path(id): Path<u64>`), and the `async fn` signature that rustdoc shows.
///
/// Every example here is compiled (its set-up hidden); the test suite also compiles each of
/// these shapes (`tests/ui/pass`) and pins the error of each misuse (`tests/ui/fail`).
///
/// # Options
///
/// | option | value | default |
/// | --- | --- | --- |
/// | `key` | key template (required); or a list of them, `key = ["account:<from>", "account:<to>"]`: several locks taken together, all or none | — |
/// | `permits` | at most this many bodies at once, fleet-wide (one of a semaphore's permits, `distlock::semaphore`): an integer literal ≥ 1 or a `u32` constant | a lock: one body at a time |
/// | `read` | flag: a shared (read) hold — any number of `read` bodies at once, excluded by (and excluding) the lock itself; not with `permits` | exclusive |
/// | `ttl` | lease length: a duration | the client's `Config::default_ttl` (30 s unless configured) |
/// | `renew` | flag: extend the lease while the body runs | off |
/// | `wait` | how long to wait for a busy lock: a duration | don't wait |
/// | `skip` | flag: if busy, return `Ok(Default::default())` | off |
/// | `min_hold` | keep the lock at least this long after acquiring it: a duration | release when the body ends |
/// | `fenced` | flag: hand out a fencing token with the lock (`distlock::fence()`, for writes through `distlock::fence`) | no token |
/// | `min_replicas` | replicas that must acknowledge the acquire and each renewal (`WAIT`): an integer, 0 to 1000, or `all` (Redis Sentinel: every replica a failover could promote, `distlock::ALL_REPLICAS`) | the client's `Config::min_replicas` (0 unless configured) |
/// | `client` | name of a client installed with `Config::install_as` | the default client |
/// | `crate` | path to `distlock`, for crates that re-export it | `"::distlock"` |
///
/// Each option may be given once, in any order.
///
/// ## Durations
///
/// `ttl`, `wait` and `min_hold` take a string literal, written as in a config file and checked
/// at compile time: numbers with units, summed, optionally spaced, with decimal fractions
/// (`"500ms"`, `"10s"`, `"1m30s"`, `"1m 30s"`, `"1.5s"`, `"2h"`, `"1d"`; the grammar of the
/// `humantime` crate, the same as `distlock::parse_duration` reads at run time). Zero, and
/// anything that is not a whole number of milliseconds (`"250us"`), is a compile error: Redis
/// expires locks with millisecond resolution. `ttl` must be between `distlock::MIN_TTL` (100 ms)
/// and `distlock::MAX_TTL` (30 days), `min_hold` at most 30 days.
///
/// Or they take a path to a `std::time::Duration` constant, so durations can live with the rest
/// of a service's settings; the compiler checks its type, and its value against the same limits
/// where the constant is evaluated (when the crate is built):
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # use std::time::Duration;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// # pub struct Orders { region: String }
/// const ORDER_TTL: Duration = Duration::from_secs(10);
///
/// #[distributed_lock(key = "order:<id>", ttl = ORDER_TTL)]
/// async fn settle(id: u64) -> Result<(), AppError> { Ok(()) }
///
/// impl Orders {
///     const TTL: Duration = Duration::from_secs(5);
///
///     #[distributed_lock(key = "order:<self.region>:<id>", ttl = Self::TTL)]
///     async fn refund(&self, id: u64) -> Result<(), AppError> { Ok(()) }
/// }
/// # fn main() {}
/// ```
///
/// A path must name a constant (or an immutable `static`), not a parameter or a call: define a
/// constant for a computed duration.
///
/// ## `key = "..."`
///
/// The name of the lock: literal text with placeholders (see [Key templates](#key-templates)).
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # use std::time::Duration;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// #[distributed_lock(key = "order:<id>")]
/// async fn settle(id: u64) -> Result<(), AppError> { Ok(()) }
/// # fn main() {}
/// ```
///
/// ## `ttl = "..."` or `ttl = CONSTANT`
///
/// How long the lock is leased for. Without `renew`, the body must finish within the lease:
/// once it runs out another caller may take the lock, so the body is cancelled (see
/// [Losing the lock](#losing-the-lock)).
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # use std::time::Duration;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// #[distributed_lock(key = "invoice:<id>", ttl = "500ms")]
/// async fn number_invoice(id: u64) -> Result<u64, AppError> { Ok(id) }
/// # fn main() {}
/// ```
///
/// ## `renew`
///
/// A watchdog renews the lease every `ttl / 3` while the body runs, so a body may run longer
/// than `ttl`; the lock still expires within `ttl` after a crashed process stops renewing it.
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # use std::time::Duration;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// #[distributed_lock(key = "import:<batch>", ttl = "10s", renew)]
/// async fn import(batch: String) -> Result<(), AppError> { Ok(()) }
/// # fn main() {}
/// ```
///
/// ## `wait = "..."` or `wait = CONSTANT`
///
/// When the lock is busy, wait up to this long for it to be released (the waiter is woken when
/// it is) before failing with `distlock::Error::Busy`. Without `wait`, a busy lock fails at once.
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # use std::time::Duration;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// #[distributed_lock(key = "account:<account_id>", wait = "2s")]
/// async fn debit(account_id: u64, cents: u64) -> Result<(), AppError> { Ok(()) }
/// # fn main() {}
/// ```
///
/// ## `skip`
///
/// When the lock is busy, don't run the body and return `Ok(Default::default())`: for jobs that
/// several replicas schedule and one of them should run. The success type must implement
/// `Default` (`()`, `Option<T>`, `Vec<T>`, ...). `skip` cannot be combined with `wait`.
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # use std::time::Duration;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// #[distributed_lock(key = "nightly-report", ttl = "5m", skip)]
/// async fn nightly() -> Result<(), AppError> { Ok(()) }
/// # fn main() {}
/// ```
///
/// With `()` the caller cannot tell "ran" from "skipped". When it needs to, return something
/// whose default says "skipped": `Ok(true)` from the body of a `Result<bool, _>` fn (a skip
/// returns `false`), or `Some(..)` from a `Result<Option<T>, _>` one (a skip returns `None`).
/// The `skipped` outcome of `distlock_acquire_total` counts skips either way (feature
/// `metrics`).
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// #[distributed_lock(key = "nightly-report", ttl = "5m", skip)]
/// async fn nightly() -> Result<bool, AppError> {
///     // ... the report ...
///     Ok(true) // ran; a busy lock returns Ok(false)
/// }
/// # fn main() {}
/// ```
///
/// ## `min_hold = "..."` or `min_hold = CONSTANT`
///
/// Keep the lock at least this long after acquiring it, even when the body finishes sooner
/// (ShedLock's `lockAtLeastFor`): the lock is then left to expire at that point instead of
/// being deleted. With `skip`, this is what stops a fast scheduled job from running twice when
/// the replicas' schedulers fire a little apart.
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # use std::time::Duration;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// #[distributed_lock(key = "nightly-report", ttl = "5m", skip, min_hold = "1m")]
/// async fn nightly() -> Result<(), AppError> { Ok(()) }
/// # fn main() {}
/// ```
///
/// ## `fenced`
///
/// Take the lock with a fencing token, which the body reads with `distlock::fence()` (the
/// lock's name and token) and writes the resource it protects with, so that a holder whose
/// lease ran out cannot write after the next holder: `distlock::fence::redis::FencedStore` (your
/// own Redis data) or `distlock::fence::sqlx::advance` (a Postgres transaction) refuse its write
/// with `Error::Fenced` (see `LockBuilder::fenced` for the guarantee and its price: a fenced
/// acquire runs a script where a plain one is a single `SET NX PX GET`). A nested call that
/// re-enters the lock shares its token.
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// # use distlock::{fence::redis::FencedStore, redis::aio::MultiplexedConnection};
/// # async fn store() -> FencedStore<MultiplexedConnection> { unimplemented!() }
/// #[distributed_lock(key = "ledger:<account>", ttl = "10s", fenced)]
/// async fn post(account: u64, entry: String) -> Result<(), AppError> {
///     let fence = distlock::fence()?;
///     let mut store = store().await;
///     let key = format!("last:{{ledger:{account}}}"); // the lock's hash tag, `{ledger:<account>}`
///     // Refused (Error::Fenced), nothing written, if a newer holder has written or claimed.
///     store.set(&key, entry, &fence).await?;
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// ## `min_replicas = N` or `min_replicas = all`
///
/// After the acquire and after each renewal, wait (`WAIT N`, up to `Config::replica_timeout`)
/// until `N` replicas of the lock's node have the write. Fewer acknowledgements release the
/// lock again and fail the call with `distlock::Error::Unreplicated` (which says how many
/// acknowledged); an unacknowledged renewal counts as a failed renewal. Per lock, so only the
/// locks that must survive a failover pay the replication round trip. Over Redis Sentinel,
/// `min_replicas = all` waits for every replica a failover could promote
/// (`distlock::ALL_REPLICAS`): the holder's deadline is then never later than the promoted
/// replica's copy of the lock; elsewhere it is refused at run time with `InvalidConfig`.
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # use std::time::Duration;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// #[distributed_lock(key = "ledger:<account>", ttl = "10s", renew, min_replicas = 1)]
/// async fn settle(account: u64) -> Result<(), AppError> { Ok(()) }
/// # fn main() {}
/// ```
///
/// ## `permits = N`
///
/// Instead of the lock, take one of the `N` permits of a semaphore of that name: at most `N`
/// bodies run at once across every process (`distlock::semaphore(name, N)` by hand). Each
/// permit is its own lease, renewed, released and lost as a lock is; every option of a lock
/// applies. `N` is an integer literal of at least 1, or a path to a `u32` constant (checked
/// when it is evaluated, at compile time): every user of the name must agree on it, or the
/// call fails with `distlock::Error::PermitsMismatch`.
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// #[distributed_lock(key = "api:<tenant>", permits = 5, ttl = "10s", renew, wait = "2s")]
/// async fn call_partner(tenant: &str) -> Result<(), AppError> { Ok(()) }
/// # fn main() {}
/// ```
///
/// ## `read`
///
/// Take a shared (read) hold of the lock (`distlock::lock(name).read()` by hand): any number of
/// `read` bodies run at once; a function on the same key without `read` (the write) waits for
/// them, and while it waits no new reader enters (writers do not starve). Each read hold is its
/// own lease, renewed, released and lost as a lock is; every option of a lock applies. `read`
/// with `permits` is an error.
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// #[distributed_lock(key = "doc:<id>", read, ttl = "10s", renew, wait = "2s")]
/// async fn render(id: u64) -> Result<(), AppError> { Ok(()) }
/// # fn main() {}
/// ```
///
/// ## `key = [...]`
///
/// Take several locks at once, all or none (`distlock::lock_all([..])` by hand): the body runs
/// holding every one of them. The rendered names are sorted and deduplicated before anything
/// is sent, so two calls naming the same locks in any order never deadlock, and `from == to`
/// takes that one lock. At least two templates, none twice, each checked as a single `key`;
/// not with `permits` or `read`. With `fenced` each lock gets its own token
/// (`distlock::fencing_token_of(name)`).
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// #[distributed_lock(key = ["account:<from>", "account:<to>"], ttl = "5s", wait = "2s")]
/// async fn transfer(from: u64, to: u64, cents: i64) -> Result<(), AppError> { Ok(()) }
/// # fn main() {}
/// ```
///
/// ## `client = "..."`
///
/// Use a named client, installed at startup with
/// `distlock::Config::new(url).install_as("payments").await`, instead of the default one.
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # use std::time::Duration;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// #[distributed_lock(key = "payout:<id>", client = "payments")]
/// async fn payout(id: u64) -> Result<(), AppError> { Ok(()) }
/// # fn main() {}
/// ```
///
/// ## `crate = "..."`
///
/// The generated code refers to `::distlock`. A crate that re-exports distlock under another
/// path, for users who don't depend on `distlock` directly, names that path:
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # use std::time::Duration;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// # mod my_framework { pub use distlock; }
/// // In `my_framework`: `pub use distlock;`
/// #[my_framework::distlock::distributed_lock(key = "job:<id>", crate = "my_framework::distlock")]
/// async fn job(id: u64) -> Result<(), AppError> { Ok(()) }
/// # fn main() {}
/// ```
///
/// # Key templates
///
/// * `<name>` is replaced by the value of the parameter `name`, or of a name that a
///   parameter's pattern binds (see [Parameters written as patterns](#parameters-written-as-patterns));
/// * `<name.field.sub>` by a field of it (tuple fields too: `<pair.0>`);
/// * `<self.field>` by a field of the receiver (`<self>` renders the receiver itself);
/// * everything else is literal text. `<<` is a literal `<`; a `>` outside a placeholder is
///   literal as it is (`"a>b"` is the key `a>b`). `{` and `}` cannot appear in literal text
///   (see below).
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # use std::time::Duration;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// # pub struct Request { user_id: u64 }
/// # pub struct Service { tenant: String }
/// # impl Service {
/// #[distributed_lock(key = "user:<self.tenant>:<req.user_id>", ttl = "500ms")]
/// async fn update(&self, req: &Request) -> Result<(), AppError> { Ok(()) }
/// # }
/// # fn main() {}
/// ```
///
/// Values are rendered with `Display` (a value without it is a compile error at the key) and
/// escaped so that different arguments can never produce the same key, and a value cannot pick
/// the Redis Cluster hash slot: in a value, `%`, `{`, `}` and the first character of the
/// literal text right after the placeholder (`:` in `"<a>:<b>"`) are written as `%XX`, the
/// character's UTF-8 bytes in upper-case hex. Plain values such as `42` or `abc-1` render
/// unchanged; the literal text is never escaped.
///
/// The runtime puts the whole lock name in a Redis Cluster hash tag itself (so that every key
/// of one lock shares a slot), and refuses names with braces: a lock cannot choose its own hash
/// tag, and `{` or `}` in the template's literal text is a compile error (`"order:{id}"`, written
/// as in `format!`, is answered with the `<id>` form).
///
/// The template is checked at compile time; each of these is an error at the key:
///
/// * a placeholder naming no parameter (the message lists the ones there are, names bound by
///   patterns included, and suggests the closest: `<idd>` gets "did you mean `<id>`?"); a
///   misspelt field (`<order.idx>`) is rustc's error at the key ("no field `idx` on type
///   `Order`");
/// * `{` or `}` in the literal text;
/// * `<self.field>` in a function without a `self` parameter;
/// * an empty placeholder `<>` or an unclosed `<`;
/// * two placeholders with nothing between them (`<a><b>`), whose values could run together:
///   put a separator between them (`<a>:<b>`);
/// * a placeholder that is not a `name.field` path (`<a b>`, `<1x>`).
///
/// ## Parameters written as patterns
///
/// A name bound by a parameter's pattern is a parameter like any other for the key: `id` in
/// `Path(id): Path<u64>` (a tuple struct, as axum handlers take their extractors), `order_id`
/// and `customer` in `Json(Order { id: order_id, customer, .. }): Json<Order>` (a struct's
/// fields, renamed or not), `a` and `b` in `(a, b): (u64, u64)`, nested patterns, `ref`, `mut`
/// and `ref mut` bindings, `whole @ (x, _)`; with its fields too (`<order.customer>` for
/// `Json(order)`). `_` and `..` bind nothing. The key is built from them before the body runs,
/// as from any parameter; the unknown-name error lists them and suggests them.
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// # mod axum { pub mod extract { pub struct Path<T>(pub T); pub struct State<T>(pub T); } }
/// # #[derive(Clone)] pub struct App { region: String }
/// use axum::extract::{Path, State};
///
/// // An axum handler as written (`examples/axum_service.rs` serves it).
/// #[distributed_lock(key = "order:<app.region>:<id>", ttl = "10s", wait = "2s", fenced)]
/// async fn settle(Path(id): Path<u64>, State(app): State<App>) -> Result<String, AppError> {
///     Ok(format!("settled order {id}"))
/// }
/// # fn main() {}
/// ```
///
/// With `#[async_trait]` too: it renames such a parameter (`__arg1`) and destructures it inside
/// its boxed block, so the key destructures a borrow of the parameter the same way, before it
/// moves there.
///
/// # With `#[async_trait]`
///
/// Native `async fn` in traits just works: put the attribute on the method in the `impl`. With
/// the `async-trait` crate, put `#[async_trait]` on the impl block (as always) and
/// `#[distributed_lock]` on the method. `#[async_trait]` expands first and turns the method
/// into a `fn` returning `Pin<Box<dyn Future>>`; `#[distributed_lock]` recognizes that shape
/// and locks the boxed future, building the key when the method is called.
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # use std::time::Duration;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// # #[async_trait::async_trait]
/// # trait Settle { async fn settle(&self, id: u64) -> Result<(), AppError>; }
/// # pub struct Orders { region: String }
/// #[async_trait::async_trait]
/// impl Settle for Orders {
///     #[distributed_lock(key = "order:<self.region>:<id>", ttl = "10s")]
///     async fn settle(&self, id: u64) -> Result<(), AppError> { Ok(()) }
/// }
/// # fn main() {}
/// ```
///
/// The attribute cannot go on a trait's method *declaration* (it has no body); put it on
/// each implementation, or on a default method body.
///
/// # Losing the lock
///
/// If the lease can no longer be guaranteed while the body runs (renewal found the key gone or
/// taken over, Redis was unreachable until the lease ran out, or the `ttl` elapsed without
/// `renew`), the body's future is dropped at its next `.await` and the function returns
/// `Err(distlock::Error::Lost { .. }.into())`: the work must not be trusted to have run
/// exclusively. Write bodies so that stopping at an `.await` is safe (transactions, idempotent
/// steps), and use `distlock::fencing_token` where the protected resource can check it.
///
/// # What this expands to, written by hand
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # use std::time::Duration;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// # pub struct Receipt;
/// # impl Receipt { fn new(_: u64) -> Self { Receipt } }
/// # async fn charge(_: u64) -> Result<(), AppError> { Ok(()) }
/// #[distributed_lock(key = "order:<id>", ttl = "10s", renew)]
/// async fn settle(id: u64) -> Result<Receipt, AppError> {
///     charge(id).await?;
///     Ok(Receipt::new(id))
/// }
/// # fn main() {}
/// ```
///
/// is this use of the manual API:
///
/// ```no_run
/// # use distlock::distributed_lock;
/// # use std::time::Duration;
/// # #[derive(Debug)] pub struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// # pub struct Receipt;
/// # impl Receipt { fn new(_: u64) -> Self { Receipt } }
/// # async fn charge(_: u64) -> Result<(), AppError> { Ok(()) }
/// async fn settle(id: u64) -> Result<Receipt, AppError> {
///     let key = format!("order:{id}"); // values escaped as described above
///     match distlock::lock(key)
///         .label("order:<id>") // the metrics label: the template as written, never the key
///         .ttl(Duration::from_secs(10))
///         .renew(true)
///         .run(async move {
///             charge(id).await?;
///             Ok(Receipt::new(id))
///         })
///         .await
///     {
///         // The body's own result: it completed inside its lease.
///         Ok(result) => result,
///         // With `skip`: `Err(error) if error.is_busy() => Ok(Default::default()),`
///         // Busy, NotInitialized, Lost (the body was cancelled or its lease ran out), ...
///         Err(error) => Err(AppError::from(error)),
///     }
/// }
/// # fn main() {}
/// ```
///
/// The generated code differs only in how it is spelled: the key is built by one call to
/// `distlock::__private::key` (each value through `__private::part`); with `skip` the builder
/// starts from `__private::lock_skipping` (a busy lock counts as `skipped` in the metrics,
/// not `busy`); the body's statements go
/// into the `async move` block after an unreachable typed `return`, so that `?` and early
/// `return`s keep the declared return type; and the conversion is a call to
/// `__private::lock_error` (`lock_error_param` for an error type that is a type parameter of
/// the function; with `skip`, `__private::skip_default`) placed at the error type
/// (the success type), so that an error type without `From<distlock::Error>` (a success type
/// without `Default`) is exactly one error, at that type. It triggers no rustc warning and no
/// `clippy::all` or `clippy::pedantic` lint in the crate that uses it.
///
/// # Errors
///
/// Every misuse is a compile error at the offending token: the option name or value, the key
/// literal, the `fn` token of a function that is not `async`, the error or success type. The
/// function is still emitted as written next to the error, so one mistake gives one error and
/// IDEs keep working (its parameters are marked as possibly unused there, so that a parameter
/// only the key reads does not warn on top of the error).
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    lock_fn(args.into(), item.into()).into()
}

fn lock_fn(
    args: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> proc_macro2::TokenStream {
    let args = syn::parse2::<attr::LockArgs>(args);
    let parsed = match syn::parse2::<item::LockFn>(item.clone()) {
        Ok(parsed) => parsed,
        Err(mut error) => {
            if let Err(args_error) = args {
                error.combine(args_error);
            }
            let mut tokens = error.to_compile_error();
            tokens.extend(item);
            return tokens;
        }
    };
    match model::build(args, &parsed) {
        Ok(model) => expand::expand(parsed, model),
        Err(error) => {
            let mut tokens = error.to_compile_error();
            tokens.extend(expand::fallback(parsed));
            tokens
        }
    }
}
