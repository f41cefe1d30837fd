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
mod template;

use proc_macro::TokenStream;

/// Runs an `async fn` while holding a Redis-backed distributed lock.
///
/// ```ignore
/// use distlock::distributed_lock;
///
/// #[distributed_lock(key = "order:<id>", ttl = "10s", renew)]
/// async fn settle(id: u64) -> Result<Receipt, AppError> {
///     // Runs on at most one replica at a time for a given `id`.
///     # todo!()
/// }
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
/// comments, `self` receivers, `impl Trait` arguments, and the `async fn` signature that
/// rustdoc shows.
///
/// The examples here are marked `ignore` because this crate cannot depend on `distlock`; the
/// test suite compiles each of these shapes (`tests/ui/pass`) and pins the error of each
/// misuse (`tests/ui/fail`).
///
/// # Options
///
/// | option | value | default |
/// | --- | --- | --- |
/// | `key` | key template (required) | — |
/// | `ttl` | lease length | the client's `Config::default_ttl` (30 s unless configured) |
/// | `renew` | flag: extend the lease while the body runs | off |
/// | `wait` | how long to wait for a busy lock | don't wait |
/// | `skip` | flag: if busy, return `Ok(Default::default())` | off |
/// | `min_hold` | keep the lock at least this long after acquiring it | release when the body ends |
/// | `client` | name of a client installed with `Config::install_as` | the default client |
/// | `crate` | path to `distlock`, for crates that re-export it | `"::distlock"` |
///
/// Durations are an integer followed by a unit: `ms`, `s`, `m` or `h` (`"500ms"`, `"10s"`,
/// `"5m"`, `"1h"`). Zero, fractions, spaces and other units are compile errors. Each option may
/// be given once, in any order.
///
/// ## `key = "..."`
///
/// The name of the lock: literal text with placeholders (see [Key templates](#key-templates)).
///
/// ```ignore
/// #[distributed_lock(key = "order:<id>")]
/// async fn settle(id: u64) -> Result<(), AppError> { Ok(()) }
/// ```
///
/// ## `ttl = "..."`
///
/// How long the lock is leased for. Without `renew`, the body must finish within the lease:
/// once it runs out another caller may take the lock, so the body is cancelled (see
/// [Losing the lock](#losing-the-lock)).
///
/// ```ignore
/// #[distributed_lock(key = "invoice:<id>", ttl = "500ms")]
/// async fn number_invoice(id: u64) -> Result<u64, AppError> { Ok(id) }
/// ```
///
/// ## `renew`
///
/// A watchdog renews the lease every `ttl / 3` while the body runs, so a body may run longer
/// than `ttl`; the lock still expires within `ttl` after a crashed process stops renewing it.
///
/// ```ignore
/// #[distributed_lock(key = "import:<batch>", ttl = "10s", renew)]
/// async fn import(batch: String) -> Result<(), AppError> { Ok(()) }
/// ```
///
/// ## `wait = "..."`
///
/// When the lock is busy, wait up to this long for it to be released (the waiter is woken when
/// it is) before failing with `distlock::Error::Busy`. Without `wait`, a busy lock fails at once.
///
/// ```ignore
/// #[distributed_lock(key = "account:<account_id>", wait = "2s")]
/// async fn debit(account_id: u64, cents: u64) -> Result<(), AppError> { Ok(()) }
/// ```
///
/// ## `skip`
///
/// When the lock is busy, don't run the body and return `Ok(Default::default())`: for jobs that
/// several replicas schedule and one of them should run. The success type must implement
/// `Default` (`()`, `Option<T>`, `Vec<T>`, ...). `skip` cannot be combined with `wait`.
///
/// ```ignore
/// #[distributed_lock(key = "nightly-report", ttl = "5m", skip)]
/// async fn nightly() -> Result<(), AppError> { Ok(()) }
/// ```
///
/// ## `min_hold = "..."`
///
/// Keep the lock at least this long after acquiring it, even when the body finishes sooner
/// (ShedLock's `lockAtLeastFor`): the lock is then left to expire at that point instead of
/// being deleted. With `skip`, this is what stops a fast scheduled job from running twice when
/// the replicas' schedulers fire a little apart.
///
/// ```ignore
/// #[distributed_lock(key = "nightly-report", ttl = "5m", skip, min_hold = "1m")]
/// async fn nightly() -> Result<(), AppError> { Ok(()) }
/// ```
///
/// ## `client = "..."`
///
/// Use a named client, installed at startup with
/// `distlock::Config::new(url).install_as("payments").await`, instead of the default one.
///
/// ```ignore
/// #[distributed_lock(key = "payout:<id>", client = "payments")]
/// async fn payout(id: u64) -> Result<(), AppError> { Ok(()) }
/// ```
///
/// ## `crate = "..."`
///
/// The generated code refers to `::distlock`. A crate that re-exports distlock under another
/// path, for users who don't depend on `distlock` directly, names that path:
///
/// ```ignore
/// // In `my_framework`: `pub use distlock;`
/// #[my_framework::distlock::distributed_lock(key = "job:<id>", crate = "my_framework::distlock")]
/// async fn job(id: u64) -> Result<(), AppError> { Ok(()) }
/// ```
///
/// # Key templates
///
/// * `<name>` is replaced by the value of the parameter `name`;
/// * `<name.field.sub>` by a field of it (tuple fields too: `<pair.0>`);
/// * `<self.field>` by a field of the receiver (`<self>` renders the receiver itself);
/// * everything else is literal text. `<<` is a literal `<`; a `>` outside a placeholder is
///   literal as it is (`"a>b"` is the key `a>b`).
///
/// ```ignore
/// #[distributed_lock(key = "user:<self.tenant>:<req.user_id>", ttl = "500ms")]
/// async fn update(&self, req: &Request) -> Result<(), AppError> { Ok(()) }
/// ```
///
/// Values are rendered with `Display` (a value without it is a compile error at the key) and
/// escaped so that different arguments can never produce the same key, and a value cannot pick
/// the Redis Cluster hash slot: in a value, `%`, `{`, `}` and the first character of the
/// literal text right after the placeholder (`:` in `"<a>:<b>"`) are written as `%XX`, the
/// character's UTF-8 bytes in upper-case hex. Plain values such as `42` or `abc-1` render
/// unchanged; the literal text is never escaped, so `{...}` in it sets a hash tag.
///
/// The template is checked at compile time; each of these is an error at the key:
///
/// * a placeholder naming no parameter (the message lists the ones there are);
/// * a placeholder naming a variable bound by a destructuring pattern (`(a, b): (u32, u32)`):
///   bind the parameter to a name and use `<pair.0>`;
/// * `<self.field>` in a function without a `self` parameter;
/// * an empty placeholder `<>` or an unclosed `<`;
/// * two placeholders with nothing between them (`<a><b>`), whose values could run together:
///   put a separator between them (`<a>:<b>`);
/// * a placeholder that is not a `name.field` path (`<a b>`, `<1x>`).
///
/// # With `#[async_trait]`
///
/// Native `async fn` in traits just works: put the attribute on the method in the `impl`. With
/// the `async-trait` crate, put `#[async_trait]` on the impl block (as always) and
/// `#[distributed_lock]` on the method. `#[async_trait]` expands first and turns the method
/// into a `fn` returning `Pin<Box<dyn Future>>`; `#[distributed_lock]` recognizes that shape
/// and locks the boxed future, building the key when the method is called.
///
/// ```ignore
/// #[async_trait::async_trait]
/// impl Settle for Orders {
///     #[distributed_lock(key = "order:<self.region>:<id>", ttl = "10s")]
///     async fn settle(&self, id: u64) -> Result<(), AppError> { Ok(()) }
/// }
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
/// ```ignore
/// #[distributed_lock(key = "order:<id>", ttl = "10s", renew)]
/// async fn settle(id: u64) -> Result<Receipt, AppError> {
///     charge(id).await?;
///     Ok(Receipt::new(id))
/// }
/// ```
///
/// behaves like this use of the manual API:
///
/// ```ignore
/// async fn settle(id: u64) -> Result<Receipt, AppError> {
///     let key = format!("order:{id}"); // values escaped as described above
///     let guard = distlock::lock(key)
///         .ttl(Duration::from_secs(10))
///         .renew(true)
///         .acquire()
///         .await?; // Busy, NotInitialized, ... become AppError here
///     let result = async {
///         charge(id).await?;
///         Ok(Receipt::new(id))
///     }
///     .await; // cancelled with `Err(Lost)` if the lease can't be guaranteed
///     // The attribute logs a failed release rather than failing the call: the body's result
///     // stands and the lease runs out by itself. By hand, `guard.release().await?` is yours
///     // to choose.
///     let _ = guard.release().await;
///     result
/// }
/// ```
///
/// (`distlock::lock(key).ttl(..).renew(true).run(body)` does the same in one call; it is what
/// the attribute uses.)
///
/// The generated code calls `distlock::__private::run` (`run_or_skip` with `skip`) with the
/// options, the rendered key and the body as an `async move` block, plus type-level checks of
/// the return type so that an error type without `From<distlock::Error>` (or, with `skip`, a
/// success type without `Default`) is reported at the return type.
///
/// # Errors
///
/// Every misuse is a compile error at the offending token: the option name or value, the key
/// literal, the `fn` token of a function that is not `async`, the return type. The function is
/// still emitted unchanged next to the error, so one mistake gives one error and IDEs keep
/// working.
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    let original = proc_macro2::TokenStream::from(item.clone());
    match lock_fn(args.into(), original.clone()) {
        Ok(tokens) => tokens.into(),
        Err(error) => {
            let mut tokens = error.to_compile_error();
            tokens.extend(original);
            tokens.into()
        }
    }
}

fn lock_fn(
    args: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> syn::Result<proc_macro2::TokenStream> {
    let args = syn::parse2::<attr::LockArgs>(args);
    let item = match syn::parse2::<item::LockFn>(item) {
        Ok(item) => item,
        Err(mut error) => {
            if let Err(args_error) = args {
                error.combine(args_error);
            }
            return Err(error);
        }
    };
    let model = model::build(args, &item)?;
    Ok(expand::expand(item, model))
}
