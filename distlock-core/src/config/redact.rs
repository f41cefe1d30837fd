//! URLs as logs and errors may show them: without their secrets, in any URL form.

/// True for a URL that asks for TLS (`rediss://`, `valkeys://`).
pub(crate) fn uses_tls(url: &str) -> bool {
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
}

/// The URL without its secrets, from a real parse (the `url` crate, which redis-rs parses
/// with): the password becomes `***` (a user name alone too, as some services put a token
/// there), `pass`/`password`/`user`/`username` query values (the `redis+unix://` form) become
/// `***`, and the fragment is dropped. A URL that does not parse, or whose `@` the parse did
/// not read as user info (a password with an unencoded `/`, `?` or `#`), shows its scheme and
/// what follows its last `@` (the host and port), with everything before that `@` and any query
/// replaced by `***`: `127.0.0.1:6390` stays `127.0.0.1:6390`.
pub(crate) fn redact_url(raw: &str) -> String {
    const HIDDEN: &str = "***";
    // What cannot be read as a URL (or whose `@` the parse did not read as user info): every
    // byte up to the last `@` may be a secret, and so may a query; the rest is a host and port.
    let unparsed = || {
        let (scheme, rest) = match raw.split_once("://") {
            Some((scheme, rest))
                if !scheme.is_empty()
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
            {
                (format!("{scheme}://"), rest)
            }
            Some(_) => return HIDDEN.to_owned(),
            None => (String::new(), raw),
        };
        let (secret, host) = match rest.rsplit_once('@') {
            Some((_, host)) => (true, host),
            None => (false, rest),
        };
        let host = match host.split_once(['?', '#']) {
            Some((host, _)) => format!("{host}?{HIDDEN}"),
            None => host.to_owned(),
        };
        if secret {
            format!("{scheme}{HIDDEN}@{host}")
        } else {
            format!("{scheme}{host}")
        }
    };
    let Ok(mut url) = url::Url::parse(raw) else {
        return unparsed();
    };
    let has_userinfo = !url.username().is_empty() || url.password().is_some();
    if raw.contains('@') && !has_userinfo {
        return unparsed();
    }
    let redacted = if url.password().is_some() {
        url.set_password(Some(HIDDEN))
    } else if !url.username().is_empty() {
        url.set_username(HIDDEN)
    } else {
        Ok(())
    };
    if redacted.is_err() {
        return unparsed();
    }
    if url.query().is_some() {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let secret = matches!(&*k, "pass" | "password" | "user" | "username");
                let v = if secret {
                    HIDDEN.into()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.set_fragment(None);
    url.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::options::Config;

    #[test]
    fn redaction_comes_from_a_real_parse() {
        let cases = [
            ("redis+unix:///tmp/r.sock?db=1&pass=s3cret", "s3cret"),
            ("unix:///tmp/r.sock?user=bob&pass=s3cret", "s3cret"),
            ("redis://:pa/ss@host:6379/", "pa/ss"),
            ("redis://:pa?ss@host:6379/", "pa?ss"),
            ("redis://:pa#ss@host:6379/", "pa#ss"),
            ("redis://user:12/ss@host", "12/ss"),
            ("redis://:p%40ss@host/", "p%40ss"),
            ("rediss://alice:hunter2@host:6380/0#frag-hunter2", "hunter2"),
            ("not a url :hunter2@", "hunter2"),
        ];
        for (url, secret) in cases {
            let shown = redact_url(url);
            assert!(!shown.contains(secret), "{url} shown as {shown}");
            let debug = format!("{:?}", Config::new(url));
            assert!(!debug.contains(secret), "{url} in Debug: {debug}");
        }
        assert_eq!(
            redact_url("redis+unix:///tmp/r.sock?db=1&pass=s3cret"),
            "redis+unix:///tmp/r.sock?db=1&pass=***"
        );
        assert_eq!(
            redact_url("redis://:pa/ss@host:6379/"),
            "redis://***@host:6379/"
        );
        assert_eq!(redact_url("not a url :hunter2@"), "***@");
        // Not a URL at all (no scheme): nothing secret to hide but a query.
        assert_eq!(redact_url("127.0.0.1:6390"), "127.0.0.1:6390");
        assert_eq!(redact_url("h:1?password=s3cret"), "h:1?password=***");
        assert_eq!(redact_url("pw@h:1"), "***@h:1");
    }
}
