//! Parsing of the attribute's options: `key = "...", ttl = "10s", renew, wait = "2s", skip, ...`.
//!
//! Only syntax and per-option values are checked here; combinations of options and the key
//! template are checked against the function in `model.rs`.

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::{Ident, LitStr, Path, Token};

mod kw {
    syn::custom_keyword!(key);
    syn::custom_keyword!(ttl);
    syn::custom_keyword!(renew);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(min_hold);
    syn::custom_keyword!(skip);
    syn::custom_keyword!(client);
}

const VALID_OPTIONS: &str =
    "`key`, `ttl`, `renew`, `wait`, `skip`, `min_hold`, `client` and `crate`";

/// The options as written, each with the span of its name for later errors.
#[derive(Default)]
pub(crate) struct LockArgs {
    /// `key = "..."`: the template literal.
    pub(crate) key: Option<LitStr>,
    /// `ttl = "..."`, in milliseconds.
    pub(crate) ttl: Option<u64>,
    /// `renew`: the span of the flag.
    pub(crate) renew: Option<Span>,
    /// `wait = "..."`, in milliseconds.
    pub(crate) wait: Option<u64>,
    /// `min_hold = "..."`, in milliseconds.
    pub(crate) min_hold: Option<u64>,
    /// `skip`: the span of the flag.
    pub(crate) skip: Option<Span>,
    /// `client = "..."`.
    pub(crate) client: Option<LitStr>,
    /// `crate = "..."`.
    pub(crate) krate: Option<Path>,
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
            let value = string_value(input, "the lock key, e.g. `key = \"order:<id>\"`")?;
            set_once(&mut self.key, value, "key", name.span, errors);
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
        } else if input.peek(kw::skip) {
            let name = input.parse::<kw::skip>()?;
            no_value(input, "skip", name.span)?;
            set_once(&mut self.skip, name.span, "skip", name.span, errors);
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
        "connection" | "redis" | "pool" => " (did you mean `client`?)",
        _ => "",
    };
    format!("unknown option `{name}`{hint}; valid options are {VALID_OPTIONS}")
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

/// Rejects `flag = value` for the flags `renew` and `skip`.
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

/// Parses `= "<duration>"` after a duration option's name into `slot` (in milliseconds).
fn duration_option(
    input: ParseStream<'_>,
    slot: &mut Option<u64>,
    name: &str,
    example: &str,
    name_span: Span,
    errors: &mut Errors,
) -> syn::Result<()> {
    let value = string_value(input, &format!("a duration, e.g. `{name} = \"{example}\"`"))?;
    match duration_millis(name, &value) {
        Ok(millis) => set_once(slot, millis, name, name_span, errors),
        Err(error) => errors.push(error),
    }
    Ok(())
}

/// `distlock::MIN_TTL` and `distlock::MAX_TTL` in milliseconds (the macro crate cannot import
/// the runtime; the UI cases `ttl_too_short` and `ttl_bounds` pin both sides).
const MIN_TTL_MS: u64 = 100;
const MAX_TTL_MS: u64 = 30 * 24 * 3_600_000;

fn duration_millis(name: &str, value: &LitStr) -> syn::Result<u64> {
    let text = value.value();
    let millis = parse_millis(name, value)?;
    let message = match name {
        "ttl" if millis < MIN_TTL_MS => format!(
            "`ttl = {text:?}` is shorter than the minimum lease of 100ms: a lease this short leaves no room for the safety margin and renewal; use at least \"100ms\""
        ),
        "ttl" | "min_hold" if millis > MAX_TTL_MS => format!(
            "`{name} = {text:?}` is longer than the maximum of 30 days (\"720h\"); use `renew` to hold a lock longer"
        ),
        _ => return Ok(millis),
    };
    Err(syn::Error::new(value.span(), message))
}

fn parse_millis(name: &str, value: &LitStr) -> syn::Result<u64> {
    let text = value.value();
    parse_duration(&text).map_err(|error| {
        let message = match error {
            DurationError::Malformed => format!(
                "invalid duration {text:?} for `{name}`: write an integer followed by `ms`, `s`, `m` or `h`, e.g. \"500ms\", \"10s\", \"5m\", \"1h\"{}",
                if text.contains('.') { " (use a smaller unit instead of a fraction: \"1500ms\", not \"1.5s\")" } else { "" }
            ),
            DurationError::Zero if name == "wait" => format!(
                "`wait = {text:?}` waits for nothing: remove `wait` to fail at once when the lock is busy, or give a positive duration such as \"2s\""
            ),
            DurationError::Zero => format!(
                "`{name}` must be longer than zero: a zero lease would expire at once; give a positive duration such as \"30s\""
            ),
            DurationError::Overflow => format!(
                "duration {text:?} for `{name}` is too large: it must fit in a u64 number of milliseconds"
            ),
        };
        syn::Error::new(value.span(), message)
    })
}

/// Why a duration string was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DurationError {
    /// Not `<digits><unit>`.
    Malformed,
    /// The duration is zero.
    Zero,
    /// The duration does not fit in `u64` milliseconds.
    Overflow,
}

/// Parses `"500ms"`, `"10s"`, `"5m"`, `"1h"` into milliseconds.
pub(crate) fn parse_duration(text: &str) -> Result<u64, DurationError> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or(DurationError::Malformed)?;
    let (digits, unit) = text.split_at(digits_end);
    let factor: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(DurationError::Malformed),
    };
    if digits.is_empty() {
        return Err(DurationError::Malformed);
    }
    // Only ASCII digits remain, so the one way `parse` fails is overflow.
    let count: u64 = digits.parse().map_err(|_| DurationError::Overflow)?;
    let millis = count.checked_mul(factor).ok_or(DurationError::Overflow)?;
    if millis == 0 {
        return Err(DurationError::Zero);
    }
    Ok(millis)
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
mod tests {
    use super::*;

    fn parse(tokens: &str) -> syn::Result<LockArgs> {
        syn::parse_str(tokens)
    }

    fn error(tokens: &str) -> String {
        match parse(tokens) {
            Ok(_) => panic!("`{tokens}` parsed"),
            Err(error) => error
                .into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(500));
        assert_eq!(parse_duration("10s"), Ok(10_000));
        assert_eq!(parse_duration("5m"), Ok(300_000));
        assert_eq!(parse_duration("1h"), Ok(3_600_000));
        assert_eq!(parse_duration("007s"), Ok(7_000));
        assert_eq!(parse_duration("18446744073709551615ms"), Ok(u64::MAX));
    }

    #[test]
    fn malformed_durations() {
        for text in [
            "", "10", "s", "ms", "10 s", " 10s", "10s ", "1.5s", "-1s", "+1s", "10S", "10sec",
            "1_000ms", "10d", "1h30m", "１s",
        ] {
            assert_eq!(
                parse_duration(text),
                Err(DurationError::Malformed),
                "{text:?}"
            );
        }
    }

    #[test]
    fn zero_and_overflowing_durations() {
        assert_eq!(parse_duration("0s"), Err(DurationError::Zero));
        assert_eq!(parse_duration("000ms"), Err(DurationError::Zero));
        assert_eq!(
            parse_duration("18446744073709551616ms"),
            Err(DurationError::Overflow)
        );
        assert_eq!(
            parse_duration("5124095576030432h"),
            Err(DurationError::Overflow)
        );
        assert_eq!(
            parse_duration("99999999999999999999999h"),
            Err(DurationError::Overflow)
        );
    }

    #[test]
    fn all_options() {
        let args = parse(
            r#"key = "user:<self.tenant>", ttl = "500ms", renew, wait = "2s", min_hold = "1m", client = "payments", crate = "my::distlock","#,
        )
        .unwrap();
        assert_eq!(args.key.unwrap().value(), "user:<self.tenant>");
        assert_eq!(args.ttl.unwrap(), 500);
        assert!(args.renew.is_some());
        assert_eq!(args.wait.unwrap(), 2_000);
        assert_eq!(args.min_hold.unwrap(), 60_000);
        assert!(args.skip.is_none());
        assert_eq!(args.client.unwrap().value(), "payments");
        let krate = args.krate.unwrap();
        assert_eq!(quote::quote!(#krate).to_string(), "my :: distlock");
    }

    #[test]
    fn empty_arguments_parse() {
        let args = parse("").unwrap();
        assert!(args.key.is_none());
    }

    #[test]
    fn duplicates() {
        assert_eq!(
            error(r#"key = "a", ttl = "1s", ttl = "2s""#),
            "`ttl` set multiple times"
        );
        assert_eq!(error("skip, skip"), "`skip` set multiple times");
    }

    #[test]
    fn independent_mistakes_are_all_reported() {
        let message = error(r#"key = "a", key = "b", wait = "0s""#);
        assert!(message.starts_with("`key` set multiple times\n`wait = \"0s\"` waits for nothing"));
    }

    #[test]
    fn unknown_options() {
        assert_eq!(
            error(r#"key = "a", foo = 1"#),
            "unknown option `foo`; valid options are `key`, `ttl`, `renew`, `wait`, `skip`, `min_hold`, `client` and `crate`"
        );
        assert!(
            error("timeout = \"1s\"").starts_with("unknown option `timeout` (did you mean `ttl`?)")
        );
        assert!(error("123").starts_with("expected an option"));
    }

    #[test]
    fn value_shapes() {
        assert!(error(r#""order:<id>""#).contains("write `key = \"...\"`"));
        assert!(error("key").contains("expected `=` and the lock key"));
        assert!(error("ttl = 10").starts_with("expected a string literal: a duration"));
        assert!(error("renew = true").starts_with("`renew` is a flag and takes no value"));
        assert!(error(r#"key = "a" ttl = "1s""#).contains("expected `,`"));
        assert!(error(r#"client = """#).starts_with("the client name is empty"));
        assert!(error(r#"crate = "not a path""#).contains("is not a path"));
    }

    #[test]
    fn duration_messages() {
        assert!(error(r#"ttl = "10""#).starts_with("invalid duration \"10\" for `ttl`"));
        assert!(error(r#"ttl = "1.5s""#).contains("\"1500ms\", not \"1.5s\""));
        assert!(error(r#"ttl = "0ms""#).starts_with("`ttl` must be longer than zero"));
        assert!(error(r#"ttl = "99999999999999999999h""#).contains("too large"));
    }
}
