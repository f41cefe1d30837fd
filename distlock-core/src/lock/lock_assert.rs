//! [`assert_locked!`](crate::assert_locked): code that must only run under a distributed lock
//! says so, in the spirit of ShedLock's `LockAssert.assertLocked()`. **Not public API** apart
//! from the macro: the module is visible (doc-hidden) only for the macro's expansion.

/// Panics unless the current task runs inside a body held under a lock (a
/// `#[distributed_lock]` function, or [`LockBuilder::run`](crate::LockBuilder::run)); returns
/// the innermost lock's fencing token, `Some` for a lock taken with `fenced`.
///
/// Put it at the top of code that must never run unlocked, so that a caller who forgot the lock
/// (or a refactoring that moved the code out of its body) fails loudly in tests instead of
/// racing in production. It reads a task-local value and talks to no server. A task spawned
/// inside the body is not under the lock (it is a different owner), and the assertion fails there
/// too.
///
/// Any lock satisfies it, fenced or not; the token it returns is what a body should pass to the
/// resource it protects (see [`fencing_token`](crate::fencing_token)).
///
/// ```
/// # use distlock_core as distlock;
/// async fn settle(order: u64) {
///     let token = distlock::assert_locked!("settle({order}) needs the order lock");
///     // ... write with `token` (`Some` under a `fenced` lock)
/// #   let _ = token;
/// }
/// ```
///
/// Outside a locked body it panics:
///
/// ```should_panic
/// # use distlock_core as distlock;
/// distlock::assert_locked!(); // panics: not running under a lock
/// ```
#[macro_export]
macro_rules! assert_locked {
    () => {
        $crate::__private::locked_token(::core::option::Option::None)
    };
    ($($message:tt)+) => {
        $crate::__private::locked_token(::core::option::Option::Some(
            ::std::format!($($message)+),
        ))
    };
}

/// What [`assert_locked!`](crate::assert_locked) expands to. **Not public API.**
///
/// The fencing token of the lock the current task runs under (`None` for a lock taken without
/// one); panics (with `message`) outside a locked body.
#[doc(hidden)]
#[track_caller]
pub fn locked_token(message: Option<String>) -> Option<u64> {
    match crate::lock::context::held_token() {
        Some(token) => token,
        None => panic!(
            "{}not running under a distributed lock: call this inside a `#[distributed_lock]` function or a `lock(..).run(..)` body (a task spawned inside the body is not under the lock)",
            message.map(|m| format!("{m}: ")).unwrap_or_default()
        ),
    }
}
