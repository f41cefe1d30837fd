//! What is wrong with a Redis URL that redis-rs refused, said for a person: the scheme, the
//! database path, the host — and the forms accepted.

/// The URL forms a client accepts.
pub(crate) const ACCEPTED_FORMS: &str = "`redis://[[user]:password@]host[:port][/db]`, `rediss://…` (TLS), `valkey://…` / `valkeys://…`, or `redis+unix:///path/to/socket[?db=N]`";

/// Why `raw` (already refused by redis-rs) is not a Redis URL, ending with the accepted forms.
/// Shows no part of the URL but its scheme and path (the caller shows it redacted).
pub(crate) fn url_problem(raw: &str) -> String {
    let Some((scheme, _)) = raw.split_once("://") else {
        return format!("it has no scheme; the accepted forms are {ACCEPTED_FORMS}");
    };
    let parsed = match url::Url::parse(raw) {
        Ok(parsed) => parsed,
        Err(error) => {
            return format!(
                "it does not parse as a URL ({error}); the accepted forms are {ACCEPTED_FORMS}"
            )
        }
    };
    let why = match scheme.to_ascii_lowercase().as_str() {
        "redis" | "rediss" | "valkey" | "valkeys" => {
            let path = parsed.path().trim_start_matches('/');
            if parsed.host_str().is_none_or(str::is_empty) {
                "it names no host".to_owned()
            } else if !path.is_empty() && path.parse::<i64>().is_err() {
                format!("its path `/{path}` is not a database number (the path of a Redis URL is the database's index, as in `redis://host:6379/0`)")
            } else {
                "redis-rs did not accept it".to_owned()
            }
        }
        "redis+unix" | "unix" | "valkey+unix" => {
            "a socket URL takes the socket's path, as in `redis+unix:///run/redis.sock`".to_owned()
        }
        other => format!("`{other}://` is not a Redis scheme"),
    };
    format!("{why}; the accepted forms are {ACCEPTED_FORMS}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mistake_is_named() {
        assert!(
            url_problem("http://127.0.0.1:6379/").starts_with("`http://` is not a Redis scheme;")
        );
        assert!(url_problem("redis://127.0.0.1/abc")
            .starts_with("its path `/abc` is not a database number"));
        assert!(url_problem("redis:///0").starts_with("it names no host"));
        assert!(url_problem("redis://[::1").starts_with("it does not parse as a URL"));
        for raw in ["http://h/", "redis://h/x", "redis://[::1"] {
            assert!(url_problem(raw).ends_with(ACCEPTED_FORMS), "{raw}");
        }
    }
}
