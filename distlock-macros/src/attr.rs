//! Parsing of the attribute's options: `key = "...", ttl = "10s", renew, wait = "2s", skip, ...`.
//!
//! Only syntax and per-option values are checked here; combinations of options and the key
//! template are checked against the function in `model.rs`.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{ExprPath, Ident, Lit, LitFloat, LitInt, LitStr, Path, Token};

use crate::similar;

mod kw {
    syn::custom_keyword!(key);
    syn::custom_keyword!(ttl);
    syn::custom_keyword!(renew);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(min_hold);
    syn::custom_keyword!(skip);
    syn::custom_keyword!(fenced);
    syn::custom_keyword!(client);
    syn::custom_keyword!(min_replicas);
    syn::custom_keyword!(all);
    syn::custom_keyword!(permits);
    syn::custom_keyword!(read);
}

/// Every option's name.
const OPTIONS: [&str; 12] = [
    "key",
    "permits",
    "read",
    "ttl",
    "renew",
    "wait",
    "skip",
    "min_hold",
    "fenced",
    "min_replicas",
    "client",
    "crate",
];

const VALID_OPTIONS: &str =
    "`key`, `permits`, `read`, `ttl`, `renew`, `wait`, `skip`, `min_hold`, `fenced`, `min_replicas`, `client` and `crate`";

/// The options as written, each with the span of its name for later errors.
#[derive(Default)]
pub(crate) struct LockArgs {
    /// `key = "..."` (the template literal) or `key = ["...", "..."]` (a set of locks).
    pub(crate) key: Option<KeyArg>,
    /// `permits = N` or `permits = CONST`: a semaphore of that many permits.
    pub(crate) permits: Option<PermitsArg>,
    /// The span of the `permits` name, when given.
    pub(crate) permits_span: Option<Span>,
    /// `read`: a shared (read) hold; the span of the flag.
    pub(crate) read: Option<Span>,
    /// `ttl = "..."` or `ttl = CONST`.
    pub(crate) ttl: Option<DurationArg>,
    /// `renew`: the span of the flag.
    pub(crate) renew: Option<Span>,
    /// `wait = "..."` or `wait = CONST`.
    pub(crate) wait: Option<DurationArg>,
    /// `min_hold = "..."` or `min_hold = CONST`.
    pub(crate) min_hold: Option<DurationArg>,
    /// `skip`: the span of the flag.
    pub(crate) skip: Option<Span>,
    /// `fenced`: the span of the flag.
    pub(crate) fenced: Option<Span>,
    /// `min_replicas = N` (checked: at most [`MAX_REPLICAS`]) or `min_replicas = all`.
    pub(crate) min_replicas: Option<Replicas>,
    /// `client = "..."`.
    pub(crate) client: Option<LitStr>,
    /// `crate = "..."`.
    pub(crate) krate: Option<Path>,
}

/// The value of a duration option (`ttl`, `wait`, `min_hold`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DurationArg {
    /// A string literal, parsed and checked against the option's limits here: milliseconds.
    Millis(u64),
    /// A path to a constant (`ORDER_TTL`, `Self::TTL`): the compiler checks that it is a
    /// `Duration`, and the generated code checks its value against the runtime's limits when
    /// the constant is evaluated.
    Const(ExprPath),
}

/// The value of `key`.
#[derive(Debug, Clone)]
pub(crate) enum KeyArg {
    /// `key = "order:<id>"`: one lock.
    One(LitStr),
    /// `key = ["account:<from>", "account:<to>"]`: several locks taken together (checked here:
    /// at least two templates, no two the same).
    List(Vec<LitStr>),
}

impl KeyArg {
    /// Every template, in the order written.
    pub(crate) fn templates(&self) -> &[LitStr] {
        match self {
            KeyArg::One(lit) => std::slice::from_ref(lit),
            KeyArg::List(templates) => templates,
        }
    }
}

/// The value of `permits`.
#[derive(Debug, Clone)]
pub(crate) enum PermitsArg {
    /// An integer literal, checked here: 1 to `u32::MAX`.
    Count(u32),
    /// A path to a `u32` constant: the compiler checks its type, and the generated code checks
    /// its value (at least 1) when the constant is evaluated.
    Const(ExprPath),
}

impl Parse for LockArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = LockArgs::default();
        // Value mistakes (duplicates, bad durations) don't stop parsing, so independent mistakes
        // are all reported; a syntax error does, since nothing after it can be trusted.
        let mut errors = Errors::default();
        while !input.is_empty() {
            if let Err(error) = args.parse_option(input, &mut errors) {
                errors.push(error);
                break;
            }
            if input.is_empty() {
                break;
            }
            if let Err(error) = input.parse::<Token![,]>() {
                errors.push(error);
                break;
            }
        }
        errors.finish()?;
        Ok(args)
    }
}

impl LockArgs {
    fn parse_option(&mut self, input: ParseStream<'_>, errors: &mut Errors) -> syn::Result<()> {
        if input.peek(kw::key) {
            let name = input.parse::<kw::key>()?;
            let value = key_value(input, errors)?;
            set_once(&mut self.key, value, "key", name.span, errors);
        } else if input.peek(kw::permits) {
            let name = input.parse::<kw::permits>()?.span;
            if let Some(value) = permits_value(input, errors)? {
                set_once(&mut self.permits, value, "permits", name, errors);
                self.permits_span.get_or_insert(name);
            }
        } else if input.peek(kw::ttl) {
            let name = input.parse::<kw::ttl>()?.span;
            duration_option(input, &mut self.ttl, "ttl", "10s", name, errors)?;
        } else if input.peek(kw::wait) {
            let name = input.parse::<kw::wait>()?.span;
            duration_option(input, &mut self.wait, "wait", "2s", name, errors)?;
        } else if input.peek(kw::min_hold) {
            let name = input.parse::<kw::min_hold>()?.span;
            duration_option(input, &mut self.min_hold, "min_hold", "1m", name, errors)?;
        } else if input.peek(kw::renew) {
            let name = input.parse::<kw::renew>()?;
            no_value(input, "renew", name.span)?;
            set_once(&mut self.renew, name.span, "renew", name.span, errors);
        } else if input.peek(kw::read) {
            let name = input.parse::<kw::read>()?;
            no_value(input, "read", name.span)?;
            set_once(&mut self.read, name.span, "read", name.span, errors);
        } else if input.peek(kw::skip) {
            let name = input.parse::<kw::skip>()?;
            no_value(input, "skip", name.span)?;
            set_once(&mut self.skip, name.span, "skip", name.span, errors);
        } else if input.peek(kw::fenced) {
            let name = input.parse::<kw::fenced>()?;
            no_value(input, "fenced", name.span)?;
            set_once(&mut self.fenced, name.span, "fenced", name.span, errors);
        } else if input.peek(kw::min_replicas) {
            let name = input.parse::<kw::min_replicas>()?;
            if let Some(value) = replicas_value(input, errors)? {
                set_once(
                    &mut self.min_replicas,
                    value,
                    "min_replicas",
                    name.span,
                    errors,
                );
            }
        } else if input.peek(kw::client) {
            let name = input.parse::<kw::client>()?;
            let value = string_value(input, "a client name, e.g. `client = \"payments\"`")?;
            if value.value().is_empty() {
                errors.push(syn::Error::new(
                    value.span(),
                    "the client name is empty: name a client installed with `Config::install_as`, or remove `client` to use the default client",
                ));
            } else {
                set_once(&mut self.client, value, "client", name.span, errors);
            }
        } else if input.peek(Token![crate]) {
            let name = input.parse::<Token![crate]>()?;
            let value = string_value(input, "a path, e.g. `crate = \"::distlock\"`")?;
            match value.parse::<Path>() {
                Ok(path) => set_once(&mut self.krate, path, "crate", name.span, errors),
                Err(_) => errors.push(syn::Error::new(
                    value.span(),
                    format!(
                        "`crate = {:?}` is not a path: write the path under which the `distlock` crate is reachable, e.g. `crate = \"::distlock\"` or `crate = \"my_crate::distlock\"`",
                        value.value()
                    ),
                )),
            }
        } else if input.peek(LitStr) {
            return Err(input.error(
                "the lock key is a named option: write `key = \"...\"`, e.g. `#[distributed_lock(key = \"order:<id>\")]`",
            ));
        } else {
            let name = input
                .call(Ident::parse_any)
                .map_err(|_| input.error(format!("expected an option: one of {VALID_OPTIONS}")))?;
            return Err(syn::Error::new(name.span(), unknown_option_message(&name)));
        }
        Ok(())
    }
}

fn unknown_option_message(name: &Ident) -> String {
    let name = name.unraw().to_string();
    let hint = match name.as_str() {
        "name" | "lock" | "resource" => " (did you mean `key`?)",
        "lease" | "expire" | "expiry" | "expires" | "timeout" | "duration" => {
            " (did you mean `ttl`?)"
        }
        "renewal" | "watchdog" | "auto_renew" | "extend" => " (did you mean `renew`?)",
        "wait_for" | "wait_timeout" | "block" | "retry" => " (did you mean `wait`?)",
        "skip_if_busy" | "try_lock" | "skip_if_locked" | "nowait" => " (did you mean `skip`?)",
        "lock_at_least_for" | "at_least" | "hold_at_least" | "min_ttl" => {
            " (did you mean `min_hold`?)"
        }
        "fence" | "fencing" | "fencing_token" | "token" => " (did you mean `fenced`?)",
        "connection" | "redis" | "pool" => " (did you mean `client`?)",
        "replicas" | "min_replicas_to_write" | "wait_replicas" | "acks" | "durable" => {
            " (did you mean `min_replicas`?)"
        }
        "shared" | "readonly" | "read_only" | "reader" | "rw" => " (did you mean `read`?)",
        "semaphore" | "limit" | "concurrency" | "max_concurrent" | "slots" | "count" => {
            " (did you mean `permits`?)"
        }
        _ => "",
    };
    // A typo of a real option: the closest one, as rustc would suggest it.
    let typo = (hint.is_empty())
        .then(|| {
            similar::closest(
                &name,
                OPTIONS.iter().map(|o| (o.to_string(), o.to_string())),
            )
        })
        .flatten()
        .map(|option| format!(" (did you mean `{option}`?)"));
    let hint = typo.as_deref().unwrap_or(hint);
    format!("unknown option `{name}`{hint}; valid options are {VALID_OPTIONS}")
}

/// `distlock_core::config::MAX_REPLICAS`: the most replicas a lock may ask for.
pub(crate) const MAX_REPLICAS: u64 = 1000;

/// What `min_replicas` asks for.
#[derive(Clone)]
pub(crate) enum Replicas {
    /// A count (an integer literal up to [`MAX_REPLICAS`]).
    Count(LitInt),
    /// `all`: every replica a failover could promote (`distlock::ALL_REPLICAS`, Sentinel).
    All,
}

/// Parses `= N` or `= all` after `min_replicas`: an integer literal up to [`MAX_REPLICAS`]. A
/// bad number is recorded in `errors` (parsing goes on) and gives `None`.
fn replicas_value(input: ParseStream<'_>, errors: &mut Errors) -> syn::Result<Option<Replicas>> {
    let what = "the number of replicas that must acknowledge the lock, e.g. `min_replicas = 1`, or `min_replicas = all` (Redis Sentinel: every replica a failover could promote)";
    if !input.peek(Token![=]) {
        return Err(input.error(format!("expected `=` and {what}")));
    }
    input.parse::<Token![=]>()?;
    if input.peek(kw::all) {
        input.parse::<kw::all>()?;
        return Ok(Some(Replicas::All));
    }
    if !input.peek(LitInt) {
        return Err(input.error(format!("expected an integer literal: {what}")));
    }
    let value: LitInt = input.parse()?;
    match value.base10_parse::<u64>() {
        Ok(n) if n <= MAX_REPLICAS && value.suffix().is_empty() => Ok(Some(Replicas::Count(value))),
        _ => {
            errors.push(syn::Error::new(
                value.span(),
                format!("`min_replicas = {value}` is not a replica count: write a whole number from 0 to {MAX_REPLICAS} without a suffix, e.g. `min_replicas = 1`, or `min_replicas = all`"),
            ));
            Ok(None)
        }
    }
}

/// Parses `= N` or `= PATH` after `permits`: an integer literal from 1 to `u32::MAX`, or a
/// path to a `u32` constant. A bad number is recorded in `errors` (parsing goes on) and gives
/// `None`.
fn permits_value(input: ParseStream<'_>, errors: &mut Errors) -> syn::Result<Option<PermitsArg>> {
    let what = "the number of permits (bodies that may run at once), e.g. `permits = 5`, or a path to a `u32` constant, e.g. `permits = API_PERMITS`";
    if !input.peek(Token![=]) {
        return Err(input.error(format!("expected `=` and {what}")));
    }
    input.parse::<Token![=]>()?;
    if input.peek(LitInt) {
        let value: LitInt = input.parse()?;
        let message = match value.base10_parse::<u32>() {
            Ok(0) => "`permits = 0` lets no body run: a semaphore needs at least 1 permit (1 is a lock held by one body at a time)".to_owned(),
            Ok(n) if matches!(value.suffix(), "" | "u32") => return Ok(Some(PermitsArg::Count(n))),
            _ => format!("`permits = {value}` is not a number of permits: write a whole number from 1 to {} without a suffix, e.g. `permits = 5`", u32::MAX),
        };
        errors.push(syn::Error::new(value.span(), message));
        return Ok(None);
    }
    if input.peek(Token![::]) || input.peek(Token![<]) || input.peek(Ident::peek_any) {
        let path: ExprPath = input.parse()?;
        if input.peek(syn::token::Paren) || input.peek(Token![.]) {
            return Err(syn::Error::new(
                path.span(),
                "`permits` takes an integer literal such as `5` or a path to a `u32` constant; to compute it, define a constant (`const API_PERMITS: u32 = ...;`) and write `permits = API_PERMITS`",
            ));
        }
        return Ok(Some(PermitsArg::Const(path)));
    }
    Err(input.error(format!("expected {what}")))
}

/// Parses `= "string"` after an option name.
fn string_value(input: ParseStream<'_>, what: &str) -> syn::Result<LitStr> {
    if !input.peek(Token![=]) {
        return Err(input.error(format!("expected `=` and {what}")));
    }
    input.parse::<Token![=]>()?;
    if input.peek(LitStr) {
        input.parse()
    } else {
        Err(input.error(format!("expected a string literal: {what}")))
    }
}

/// `key = "..."` or `key = ["...", "..."]`; a list of fewer than two templates, or with one
/// twice, is an error at the brackets or at the repeated template (the value is still kept, so
/// the templates are checked too).
fn key_value(input: ParseStream<'_>, errors: &mut Errors) -> syn::Result<KeyArg> {
    const WHAT: &str = "the lock key, e.g. `key = \"order:<id>\"`, or several locks taken together, e.g. `key = [\"account:<from>\", \"account:<to>\"]`";
    if !input.peek(Token![=]) {
        return Err(input.error(format!("expected `=` and {WHAT}")));
    }
    input.parse::<Token![=]>()?;
    if input.peek(LitStr) {
        return Ok(KeyArg::One(input.parse()?));
    }
    if !input.peek(syn::token::Bracket) {
        return Err(input.error(format!("expected a string literal: {WHAT}")));
    }
    let content;
    let bracket = syn::bracketed!(content in input);
    let list = content.parse_terminated(
        |item: ParseStream<'_>| {
            item.parse::<LitStr>().map_err(|_| {
                item.error("expected a string literal: each lock of a key list is a key template, e.g. `\"account:<from>\"`")
            })
        },
        Token![,],
    )?;
    let templates: Vec<LitStr> = list.into_iter().collect();
    match templates.as_slice() {
        [] => errors.push(syn::Error::new(
            bracket.span.join(),
            "the key list is empty: name at least two locks, e.g. `key = [\"account:<from>\", \"account:<to>\"]`, or one with `key = \"...\"`",
        )),
        [one] => errors.push(syn::Error::new(
            one.span(),
            format!(
                "a key list of one lock: use `key = {:?}`; a list takes several locks together",
                one.value()
            ),
        )),
        _ => {}
    }
    for (i, lit) in templates.iter().enumerate() {
        if templates[..i].iter().any(|t| t.value() == lit.value()) {
            errors.push(syn::Error::new(
                lit.span(),
                format!(
                    "`{}` is in the key list twice: name each lock once (two parameters with equal values, such as `from == to`, are fine: the set takes that lock once)",
                    lit.value()
                ),
            ));
        }
    }
    Ok(KeyArg::List(templates))
}

/// Rejects `flag = value` for the flags `renew`, `read` and `skip`.
fn no_value(input: ParseStream<'_>, name: &str, name_span: Span) -> syn::Result<()> {
    if input.peek(Token![=]) {
        return Err(syn::Error::new(
            name_span,
            format!("`{name}` is a flag and takes no value: write just `{name}` to turn it on, or leave it out"),
        ));
    }
    Ok(())
}

fn set_once<T>(slot: &mut Option<T>, value: T, name: &str, name_span: Span, errors: &mut Errors) {
    if slot.is_some() {
        errors.push(syn::Error::new(
            name_span,
            format!("`{name}` set multiple times"),
        ));
    } else {
        *slot = Some(value);
    }
}

/// Parses `= "<duration>"` or `= PATH` after a duration option's name into `slot`.
fn duration_option(
    input: ParseStream<'_>,
    slot: &mut Option<DurationArg>,
    name: &str,
    example: &str,
    name_span: Span,
    errors: &mut Errors,
) -> syn::Result<()> {
    let what = format!(
        "a duration, e.g. `{name} = \"{example}\"`, or a path to a `Duration` constant, e.g. `{name} = {}`",
        const_example(name)
    );
    if !input.peek(Token![=]) {
        return Err(input.error(format!("expected `=` and {what}")));
    }
    input.parse::<Token![=]>()?;
    let value = if input.peek(LitStr) {
        let text: LitStr = input.parse()?;
        match literal_millis(name, &text) {
            Ok(millis) => DurationArg::Millis(millis),
            Err(error) => {
                errors.push(error);
                return Ok(());
            }
        }
    } else if input.peek(LitInt) || input.peek(LitFloat) {
        let number: Lit = input.parse()?;
        let digits = quote::ToTokens::to_token_stream(&number).to_string();
        errors.push(syn::Error::new(
            number.span(),
            format!("a duration needs a unit: write `{name} = \"{digits}s\"` (or \"{digits}ms\"), or name a `Duration` constant"),
        ));
        return Ok(());
    } else if input.peek(Token![::]) || input.peek(Token![<]) || input.peek(Ident::peek_any) {
        let path: ExprPath = input.parse()?;
        if input.peek(syn::token::Paren) || input.peek(Token![.]) {
            return Err(syn::Error::new(
                path.span(),
                format!("`{name}` takes a string literal such as \"{example}\" or a path to a `Duration` constant; to compute it, define a constant (`const {}: Duration = ...;`) and write `{name} = {}`", const_example(name), const_example(name)),
            ));
        }
        DurationArg::Const(path)
    } else {
        return Err(input.error(format!("expected {what}")));
    };
    set_once(slot, value, name, name_span, errors);
    Ok(())
}

/// The constant name used in messages about a duration option.
fn const_example(name: &str) -> &'static str {
    match name {
        "ttl" => "ORDER_TTL",
        "wait" => "ORDER_WAIT",
        _ => "ORDER_MIN_HOLD",
    }
}

/// `distlock::MIN_TTL` and `distlock::MAX_TTL` in milliseconds (the macro crate cannot import
/// the runtime; a unit test compares them with the runtime's, and the UI cases `ttl_too_short`
/// and `ttl_bounds` pin both sides).
pub(crate) const MIN_TTL_MS: u64 = 100;
pub(crate) const MAX_TTL_MS: u64 = 30 * 24 * 3_600_000;

/// A duration literal in milliseconds, checked against the option's limits.
fn literal_millis(name: &str, value: &LitStr) -> syn::Result<u64> {
    let text = value.value();
    let millis = parse_duration(&text).map_err(|error| {
        let message = match error {
            DurationError::Malformed(reason) => format!(
                "invalid duration {text:?} for `{name}`: {reason}; write numbers with units, e.g. \"500ms\", \"10s\", \"1m30s\", \"1.5h\""
            ),
            DurationError::Zero if name == "wait" => format!(
                "`wait = {text:?}` waits for nothing: remove `wait` to fail at once when the lock is busy, or give a positive duration such as \"2s\""
            ),
            DurationError::Zero => format!(
                "`{name}` must be longer than zero: a zero lease would expire at once; give a positive duration such as \"30s\""
            ),
            DurationError::SubMillisecond => format!(
                "`{name} = {text:?}` is not a whole number of milliseconds: Redis expires locks with millisecond resolution, so a finer duration means nothing for a lock; use whole milliseconds, e.g. \"1ms\""
            ),
            DurationError::TooLarge => format!(
                "duration {text:?} for `{name}` is too large: it must fit in a u64 number of milliseconds"
            ),
        };
        syn::Error::new(value.span(), message)
    })?;
    let message = match name {
        "ttl" if millis < MIN_TTL_MS => format!(
            "`ttl = {text:?}` is shorter than the minimum lease of 100ms: a lease this short leaves no room for the safety margin and renewal; use at least \"100ms\""
        ),
        "ttl" | "min_hold" if millis > MAX_TTL_MS => format!(
            "`{name} = {text:?}` is longer than the maximum of 30 days (\"30d\"); use `renew` to hold a lock longer"
        ),
        _ => return Ok(millis),
    };
    Err(syn::Error::new(value.span(), message))
}

/// Why a duration text was refused: the rules of `distlock_core::parse_duration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DurationError {
    /// Not a duration; the parser's explanation.
    Malformed(String),
    /// The duration is zero.
    Zero,
    /// Not a whole number of milliseconds (`"250us"`).
    SubMillisecond,
    /// More than `u64::MAX` milliseconds.
    TooLarge,
}

/// Parses `"500ms"`, `"10s"`, `"1m30s"`, `"1.5s"`, ... into milliseconds, by the rules of
/// `distlock_core::parse_duration` (the same `humantime` grammar; zero and sub-millisecond
/// durations refused), which the runtime applies to durations it reads as text.
pub(crate) fn parse_duration(text: &str) -> Result<u64, DurationError> {
    let duration = humantime::parse_duration(text)
        .map_err(|error| DurationError::Malformed(error.to_string()))?;
    if duration.is_zero() {
        return Err(DurationError::Zero);
    }
    if duration.subsec_nanos() % 1_000_000 != 0 {
        return Err(DurationError::SubMillisecond);
    }
    u64::try_from(duration.as_millis()).map_err(|_| DurationError::TooLarge)
}

/// Collects errors so independent mistakes are reported together.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(existing) => existing.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Keeps the error of `result`, if any, and returns its value.
    pub(crate) fn check<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|error| self.push(error)).ok()
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests;
