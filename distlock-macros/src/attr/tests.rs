//! Unit tests of the attribute's option parsing.

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

fn millis(ms: u64) -> Result<u64, DurationError> {
    Ok(ms)
}

#[test]
fn durations() {
    assert_eq!(parse_duration("500ms"), millis(500));
    assert_eq!(parse_duration("10s"), millis(10_000));
    assert_eq!(parse_duration("5m"), millis(300_000));
    assert_eq!(parse_duration("1h"), millis(3_600_000));
    assert_eq!(parse_duration("1m30s"), millis(90_000));
    assert_eq!(parse_duration("1m 30s"), millis(90_000));
    assert_eq!(parse_duration("1.5s"), millis(1_500));
    assert_eq!(parse_duration("007s"), millis(7_000));
    assert_eq!(parse_duration("30d"), millis(MAX_TTL_MS));
    assert_eq!(parse_duration("2000us"), millis(2));
}

#[test]
fn malformed_durations() {
    for text in [
        "",
        "10",
        "s",
        "ms",
        "-1s",
        "+1s",
        "10S",
        "1_000ms",
        "10 parsecs",
        "１s",
        "1.s",
    ] {
        assert!(
            matches!(parse_duration(text), Err(DurationError::Malformed(_))),
            "{text:?}"
        );
    }
}

#[test]
fn zero_sub_millisecond_and_overflowing_durations() {
    assert_eq!(parse_duration("0s"), Err(DurationError::Zero));
    assert_eq!(parse_duration("000ms"), Err(DurationError::Zero));
    assert_eq!(parse_duration("250us"), Err(DurationError::SubMillisecond));
    assert_eq!(
        parse_duration("1.0005s"),
        Err(DurationError::SubMillisecond)
    );
    assert_eq!(
        parse_duration("100000000000y"),
        Err(DurationError::TooLarge)
    );
}

/// The attribute and the runtime read duration texts alike: same values, same refusals.
#[test]
fn durations_agree_with_the_runtime() {
    use distlock_core::DurationError as Runtime;
    for text in [
        "500ms",
        "10s",
        "5m",
        "1h",
        "1m30s",
        "1m 30s",
        "1.5s",
        " 2h ",
        "1d",
        "2000us",
        "250us",
        "1.0005s",
        "0s",
        "0",
        "",
        "10",
        "-1s",
        "10 parsecs",
        "1_000ms",
        "100000000000y",
        "18446744073709551615ms",
    ] {
        let ours = parse_duration(text).map_err(|error| match error {
            DurationError::Malformed(_) => "malformed",
            DurationError::Zero => "zero",
            DurationError::SubMillisecond => "sub-millisecond",
            DurationError::TooLarge => "too large",
        });
        let runtime = distlock_core::parse_duration(text)
            .map(|duration| u64::try_from(duration.as_millis()).unwrap())
            .map_err(|error| match error {
                Runtime::Malformed { .. } => "malformed",
                Runtime::Zero => "zero",
                Runtime::SubMillisecond => "sub-millisecond",
                Runtime::TooLarge => "too large",
                _ => "unknown",
            });
        assert_eq!(ours, runtime, "{text:?}");
    }
}

#[test]
fn limits_agree_with_the_runtime() {
    assert_eq!(u128::from(MIN_TTL_MS), distlock_core::MIN_TTL.as_millis());
    assert_eq!(u128::from(MAX_TTL_MS), distlock_core::MAX_TTL.as_millis());
}

#[test]
fn constant_durations() {
    let args =
        parse("key = \"a\", ttl = ORDER_TTL, wait = Self::WAIT, min_hold = <T as Settings>::HOLD")
            .unwrap();
    let path = |arg: Option<DurationArg>| match arg {
        Some(DurationArg::Const(path)) => quote::quote!(#path).to_string(),
        _ => panic!("not a path"),
    };
    assert_eq!(path(args.ttl), "ORDER_TTL");
    assert_eq!(path(args.wait), "Self :: WAIT");
    assert_eq!(path(args.min_hold), "< T as Settings > :: HOLD");
    assert!(error("ttl = 10").starts_with("a duration needs a unit: write `ttl = \"10s\"`"));
    assert!(error("wait = 1.5").contains("`wait = \"1.5s\"`"));
    assert!(error("ttl = Duration::from_secs(10)").contains(
        "define a constant (`const ORDER_TTL: Duration = ...;`) and write `ttl = ORDER_TTL`"
    ));
    assert!(error("ttl = [1]").starts_with("expected a duration"));
}

#[test]
fn all_options() {
    let args = parse(
        r#"key = "user:<self.tenant>", ttl = "500ms", renew, wait = "2s", min_hold = "1m", fenced, min_replicas = 2, client = "payments", crate = "my::distlock","#,
    )
    .unwrap();
    assert_eq!(
        args.key.unwrap().templates()[0].value(),
        "user:<self.tenant>"
    );
    assert_eq!(args.ttl, Some(DurationArg::Millis(500)));
    assert!(args.renew.is_some());
    assert_eq!(args.wait, Some(DurationArg::Millis(2_000)));
    assert_eq!(args.min_hold, Some(DurationArg::Millis(60_000)));
    assert!(args.skip.is_none());
    assert!(args.fenced.is_some());
    assert_eq!(
        args.min_replicas.map(|n| match n {
            Replicas::Count(n) => n.base10_parse::<u64>().unwrap(),
            Replicas::All => u64::MAX,
        }),
        Some(2)
    );
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
        "unknown option `foo`; valid options are `key`, `permits`, `read`, `ttl`, `renew`, `wait`, `skip`, `min_hold`, `fenced`, `min_replicas`, `client` and `crate`"
    );
    assert!(error("timeout = \"1s\"").starts_with("unknown option `timeout` (did you mean `ttl`?)"));
    assert!(error("123").starts_with("expected an option"));
}

#[test]
fn value_shapes() {
    assert!(error(r#""order:<id>""#).contains("write `key = \"...\"`"));
    assert!(error("key").contains("expected `=` and the lock key"));
    assert!(error("renew = true").starts_with("`renew` is a flag and takes no value"));
    assert!(error("fenced = true").starts_with("`fenced` is a flag and takes no value"));
    assert!(error("fencing").starts_with("unknown option `fencing` (did you mean `fenced`?)"));
    assert!(
        error("min_replicas = 1001").starts_with("`min_replicas = 1001` is not a replica count")
    );
    assert!(error("min_replicas = \"1\"").starts_with("expected an integer literal"));
    assert!(error("replicas = 1")
        .starts_with("unknown option `replicas` (did you mean `min_replicas`?)"));
    assert!(error(r#"key = "a" ttl = "1s""#).contains("expected `,`"));
    assert!(error(r#"client = """#).starts_with("the client name is empty"));
    assert!(error(r#"crate = "not a path""#).contains("is not a path"));
}

#[test]
fn permits() {
    let count = |text: &str| match parse(text).unwrap().permits {
        Some(PermitsArg::Count(n)) => n,
        other => panic!("{other:?}"),
    };
    assert_eq!(count("permits = 5"), 5);
    assert_eq!(count("permits = 1u32"), 1);
    assert!(matches!(
        parse("permits = Self::PERMITS").unwrap().permits,
        Some(PermitsArg::Const(_))
    ));
    assert!(error("permits = 0").starts_with("`permits = 0` lets no body run"));
    assert!(error("permits = 5u8").starts_with("`permits = 5u8` is not a number of permits"));
    assert!(error("permits = 4294967296").contains("is not a number of permits"));
    assert!(error("permits = n()").contains("define a constant"));
    assert!(error("permits = \"5\"").starts_with("expected the number of permits"));
    assert_eq!(
        error("permits = 2, permits = 3"),
        "`permits` set multiple times"
    );
    assert!(error("concurrency = 5").contains("(did you mean `permits`?)"));
}

#[test]
fn read() {
    assert!(parse(r#"key = "a", read"#).unwrap().read.is_some());
    assert!(error("read = true").starts_with("`read` is a flag and takes no value"));
    assert_eq!(error("read, read"), "`read` set multiple times");
    assert!(error("shared").contains("(did you mean `read`?)"));
}

#[test]
fn duration_messages() {
    assert_eq!(
        error(r#"ttl = "10""#),
        "invalid duration \"10\" for `ttl`: time unit needed, for example 10sec or 10ms; write numbers with units, e.g. \"500ms\", \"10s\", \"1m30s\", \"1.5h\""
    );
    assert!(error(r#"ttl = "0ms""#).starts_with("`ttl` must be longer than zero"));
    assert!(error(r#"wait = "250us""#)
        .starts_with("`wait = \"250us\"` is not a whole number of milliseconds"));
    assert!(error(r#"wait = "100000000000y""#).contains("too large"));
    assert!(error(r#"ttl = "99ms""#).contains("shorter than the minimum lease of 100ms"));
    assert!(error(r#"min_hold = "31d""#).contains("longer than the maximum of 30 days"));
    assert!(error(r#"ttl"#).contains("expected `=` and a duration"));
}

#[test]
fn key_lists() {
    let args = parse(r#"key = ["account:<from>", "account:<to>",], ttl = "5s""#).unwrap();
    let key = args.key.unwrap();
    assert!(matches!(key, KeyArg::List(_)));
    let templates: Vec<String> = key.templates().iter().map(LitStr::value).collect();
    assert_eq!(templates, ["account:<from>", "account:<to>"]);
    assert!(error("key = []").starts_with("the key list is empty"));
    assert!(
        error(r#"key = ["a:<x>"]"#).starts_with("a key list of one lock: use `key = \"a:<x>\"`")
    );
    assert!(
        error(r#"key = ["a:<x>", "b", "a:<x>"]"#).starts_with("`a:<x>` is in the key list twice")
    );
    let message = error(r#"key = ["a", 1]"#);
    assert!(
        message.contains("expected a string literal: each lock"),
        "{message}"
    );
}
