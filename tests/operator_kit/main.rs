//! The operator's kit (`ops/`) against the real tools (feature `metrics`; `cargo test --test
//! operator_kit --features metrics`; `scripts/ensure-prometheus.sh` installs them): `promtool`
//! checks both rule files and runs their unit tests; every alert has a unit-test case that
//! fires and one that does not, every recording rule expected samples; and a real `prometheus`
//! (a throwaway `testkit::Prometheus`: 1 s scrapes and rule evaluations, the kit's rule files)
//! scrapes the metrics example's equivalent under load (`load`) until every query of every
//! dashboard panel returns a series with a value, every recording rule a series, every rule is
//! healthy, the lock the load loses fires `DistlockLocksLost`, and the kit tells an election's
//! lock from a plain one: a leader's lost term fires `DistlockLeadershipLost` and no
//! `DistlockLocksLost`, a leader past 100 ttls trips no `DistlockHeldPastTtls` while a plain
//! lock held as long does (pending: its `for` is 5 minutes). And `testkit::Prometheus` itself:
//! it answers, and its process is gone when it is dropped. `configs`: the scrape
//! configuration (`promtool check config`), the Alertmanager example (`amtool`: its syntax and
//! where every alert goes) and the alerts' runbook links. `grafana_schema`: the dashboard
//! against Grafana's published dashboard schema (no Grafana is installable here).

mod configs;
mod grafana_schema;
mod load;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use testkit::{Prometheus, RedisServer};

const RULES: &str = "ops/prometheus/distlock.rules.yml";
const ALERTS: &str = "ops/prometheus/distlock.alerts.yml";
const TESTS: &str = "ops/prometheus/tests";
const DASHBOARD: &str = "ops/grafana/distlock-dashboard.json";

/// What the dashboard's template variables stand for in a query: every lock template, and a
/// rate interval of 10 scrapes.
const VARIABLES: [(&str, &str); 2] = [("$lock", ".*"), ("$__rate_interval", "10s")];

/// How long the load may take to show in every query (the long holds need 10 s to pass 100
/// ttls).
const WITHIN: Duration = Duration::from_secs(40);

/// How long a query that must stay empty is watched after its witness showed: three rule
/// evaluations.
const QUIET_FOR: Duration = Duration::from_secs(3);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// Runs `promtool` with `args` in the repository; panics with its output if it fails.
fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(root())
        .output()
        .expect("run promtool (scripts/ensure-prometheus.sh installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

/// The values of `key: <value>` lines of a YAML file (the kit's files keep one per line).
fn yaml_values<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    let key = format!("{key}:");
    text.lines()
        .filter_map(|l| l.trim_start().trim_start_matches("- ").strip_prefix(&key))
        .map(|v| v.trim().trim_matches('\''))
        .collect()
}

fn test_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(root().join(TESTS))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml"))
        .map(|p| p.strip_prefix(root()).unwrap().display().to_string())
        .collect();
    files.sort();
    files
}

#[test]
fn promtool_checks_both_rule_files() {
    let out = promtool(&["check", "rules", RULES, ALERTS]);
    assert_eq!(out.matches("SUCCESS").count(), 2, "{out}");
}

#[test]
fn promtool_unit_tests_of_the_rules_pass() {
    let files = test_files();
    assert!(files.len() >= 2, "{files:?}");
    for file in &files {
        promtool(&["test", "rules", file]);
    }
}

#[test]
fn every_alert_has_a_case_that_fires_and_one_that_does_not() {
    let alerts = read(ALERTS);
    let names = yaml_values(&alerts, "alert");
    assert!(names.len() >= 15, "{names:?}");
    let tests: String = test_files().iter().map(|f| read(f)).collect();
    // Each `alertname:` line is followed by its `exp_alerts:` line: `[]` (none) or a list.
    let lines: Vec<&str> = tests.lines().map(str::trim).collect();
    let mut cases: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (i, line) in lines.iter().enumerate() {
        if let Some(name) = line.strip_prefix("alertname:") {
            let expected = lines[i + 1];
            let case = cases.entry(name.trim()).or_default();
            match expected {
                "exp_alerts: []" => case.1 += 1,
                "exp_alerts:" => case.0 += 1,
                other => panic!("{name}: `{other}` after its alertname"),
            }
        }
    }
    for name in &names {
        let (fires, quiet) = cases.get(name).copied().unwrap_or_default();
        assert!(fires > 0, "{name}: no unit-test case where it fires");
        assert!(
            quiet > 0,
            "{name}: no unit-test case where it does not fire"
        );
    }
    let unknown: Vec<_> = cases.keys().filter(|n| !names.contains(n)).collect();
    assert!(
        unknown.is_empty(),
        "tests of alerts that do not exist: {unknown:?}"
    );
}

#[test]
fn every_recording_rule_has_expected_samples() {
    let records = yaml_values(&read(RULES), "record").join(" ");
    let tests: String = test_files().iter().map(|f| read(f)).collect();
    let tested = yaml_values(&tests, "expr");
    for record in records.split(' ') {
        assert!(
            tested.iter().any(|e| e.starts_with(record)),
            "{record}: no promql_expr_test"
        );
    }
}

/// The runbook's `DistlockLocksLost` section explains every `reason` the runtime gives a loss
/// (the losses `REASONS` lists in `distlock-core/src/metrics.rs`, by their `reason_label`; a
/// hold let go, `LossReason::Released`, is no loss and never counted) and no other, and
/// `docs/observability.md` tells every one apart.
#[test]
fn the_runbook_explains_every_loss_reason() {
    let source = read("distlock-core/src/metrics.rs");
    let counted = source
        .split("const REASONS")
        .nth(1)
        .and_then(|s| s.split("];").next())
        .expect("metrics.rs: const REASONS");
    let counted: Vec<&str> = counted
        .lines()
        .filter_map(|l| l.trim().strip_prefix("LossReason::"))
        .map(|l| l.trim_end_matches(','))
        .collect();
    let mut reasons: Vec<&str> = source
        .lines()
        .filter_map(|l| l.trim().strip_prefix("LossReason::"))
        .filter_map(|l| l.split_once(" => \""))
        .filter(|(variant, _)| counted.contains(variant))
        .map(|(_, label)| label.trim_end_matches("\","))
        .collect();
    reasons.sort_unstable();
    assert_eq!(reasons.len(), 6, "{reasons:?}");
    let readme = read("ops/README.md");
    let section = readme
        .split("### DistlockLocksLost")
        .nth(1)
        .and_then(|s| s.split("\n### ").next())
        .expect("a DistlockLocksLost section");
    let mut explained: Vec<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix("- `"))
        .filter_map(|l| l.split('`').next())
        .collect();
    explained.sort_unstable();
    assert_eq!(explained, reasons, "ops/README.md, DistlockLocksLost");
    let docs = read("docs/observability.md");
    let paragraph = docs
        .split("\n\n")
        .find(|p| p.starts_with("The `reason` of `distlock_lost_total`"))
        .expect("docs/observability.md: the paragraph on loss reasons");
    let paragraph = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
    for reason in reasons {
        assert!(
            paragraph.contains(&format!("`{reason}` (")),
            "docs/observability.md does not tell `{reason}` apart"
        );
    }
}

/// Every `expr` of every panel's targets (rows' own panels included), as written.
fn panel_queries(dashboard: &Value) -> Vec<String> {
    fn walk(panels: &Value, out: &mut Vec<String>) {
        for panel in panels.as_array().into_iter().flatten() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                let datasource = &target["datasource"]["uid"];
                assert_eq!(datasource, "${DS_PROMETHEUS}", "{target}");
                out.push(target["expr"].as_str().expect("a query").to_owned());
            }
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

fn substituted(query: &str) -> String {
    let query = VARIABLES
        .iter()
        .fold(query.to_owned(), |q, (name, value)| q.replace(name, value));
    assert!(!query.contains('$'), "an unknown variable in {query}");
    query
}

/// The series of an instant query's JSON answer, each with its value.
fn series(answer: &str) -> Vec<(Value, f64)> {
    let answer: Value = serde_json::from_str(answer).expect("JSON");
    assert_eq!(answer["status"], "success", "{answer}");
    let value = |v: &Value| {
        v[1].as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    };
    answer["data"]["result"]
        .as_array()
        .expect("a vector")
        .iter()
        .map(|s| (s["metric"].clone(), value(&s["value"])))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_sees_every_panel_and_rule_of_the_kit_under_load() {
    let started = Instant::now();
    let dashboard: Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    for name in ["DS_PROMETHEUS", "lock"] {
        assert!(variables.iter().any(|v| v["name"] == name), "no ${name}");
    }
    let panels = panel_queries(&dashboard);
    assert!(panels.len() >= 15, "{panels:?}");
    let records: Vec<String> = yaml_values(&read(RULES), "record")
        .into_iter()
        .map(str::to_owned)
        .collect();

    let (port, exporter) = load::serve(load::install_recorder()).await;
    let server = RedisServer::start();
    let absolute = |path: &str| root().join(path).display().to_string();
    let prometheus = Prometheus::start(&format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - {}\n  - {}\n\
         scrape_configs:\n  - job_name: distlock\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n",
        absolute(RULES),
        absolute(ALERTS),
    ));
    let mut load = load::Load::start(&server).await;
    // The losses once Prometheus has their series at 0 (a series born at 1 is no increase).
    let zero = r#"distlock_lost_total{lock="lease:<n>",reason="expired"} == 0"#;
    load.lose_a_lock(&server, until_series(&prometheus, zero, started))
        .await;
    let zero = [
        r#"distlock_lost_total{lock="scheduler",kind="leader",reason="expired"} == 0"#,
        r#"distlock_leader_lost_total{name="scheduler",reason="expired"} == 0"#,
    ];
    let scraped = async {
        for query in zero {
            until_series(&prometheus, query, started).await;
        }
    };
    load.lose_a_term(&server, scraped).await;

    // Each query waits for: a series with a value (a panel), a series (a recording rule, an
    // alert).
    let mut waiting: Vec<(String, bool)> = panels.iter().map(|q| (substituted(q), true)).collect();
    waiting.extend(records.iter().map(|r| (r.clone(), false)));
    for alert in [
        r#"ALERTS{alertname="DistlockLocksLost",alertstate="firing",lock="lease:<n>",reason="expired"}"#,
        r#"ALERTS{alertname="DistlockLeadershipLost",alertstate="firing",name="scheduler",reason="expired"}"#,
        r#"ALERTS{alertname="DistlockHeldPastTtls",alertstate="pending",lock="stuck:<n>"}"#,
    ] {
        waiting.push((alert.to_owned(), false));
    }
    // Alerts that must not be, in any state, from the start; watched for [`QUIET_FOR`] after
    // their witness (what they would fire on) showed.
    let mut quiet: Vec<(&str, &str, Option<Instant>)> = vec![
        (
            r#"lock_kind_reason:distlock_lost:increase10m{lock="scheduler",kind="leader",reason="expired"} > 0"#,
            r#"ALERTS{alertname="DistlockLocksLost",lock="scheduler"}"#,
            None,
        ),
        (
            r#"lock_kind:distlock_hold_ttl_ratio:max_rate10m{lock="keeper",kind="leader"} > 100"#,
            r#"ALERTS{alertname="DistlockHeldPastTtls",lock="keeper"}"#,
            None,
        ),
    ];
    let mut last = BTreeMap::new();
    let mut rules_ok = false;
    loop {
        for (witness, alert, seen_at) in &mut quiet {
            let fired = series(&prometheus.query(alert).await);
            assert!(fired.is_empty(), "{alert}: {fired:?}");
            if seen_at.is_none() && !series(&prometheus.query(witness).await).is_empty() {
                *seen_at = Some(Instant::now());
            }
        }
        let unwatched: Vec<&str> = quiet
            .iter()
            .filter(|(_, _, at)| at.is_none_or(|at| at.elapsed() < QUIET_FOR))
            .map(|(witness, _, _)| *witness)
            .collect();
        let mut still = Vec::new();
        for (query, finite) in waiting {
            let found = series(&prometheus.query(&query).await);
            let seen = found.iter().any(|(_, v)| !finite || v.is_finite());
            if !seen {
                last.insert(query.clone(), found);
                still.push((query, finite));
            }
        }
        waiting = still;
        rules_ok = rules_ok || every_rule_healthy(&prometheus).await;
        if waiting.is_empty() && rules_ok && unwatched.is_empty() {
            break;
        }
        let unseen: Vec<_> = waiting.iter().map(|(q, _)| (q, &last[q])).collect();
        assert!(
            started.elapsed() < WITHIN,
            "after {WITHIN:?}, rules healthy: {rules_ok}; no series (with a value) for:\n{unseen:#?}\nnot watched quiet for {QUIET_FOR:?} after:\n{unwatched:#?}\nprometheus' log:\n{}",
            prometheus.log()
        );
        // The next scrape and rule evaluation are a second apart.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "{} panel queries and {} recording rules answered in {:?}",
        panels.len(),
        records.len(),
        started.elapsed()
    );
    drop(load);
    exporter.abort();
}

/// Until `query` returns a series (polling every scrape's quarter), within [`WITHIN`] of
/// `started`.
async fn until_series(prometheus: &Prometheus, query: &str, started: Instant) {
    while series(&prometheus.query(query).await).is_empty() {
        assert!(started.elapsed() < WITHIN, "no series for {query}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// True once every rule of both files was evaluated without an error; panics on an error.
async fn every_rule_healthy(prometheus: &Prometheus) -> bool {
    let (status, body) = prometheus.get("/api/v1/rules").await;
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    let groups = answer["data"]["groups"].as_array().unwrap();
    let rules: Vec<&Value> = groups
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    for rule in &rules {
        assert_ne!(rule["health"], "err", "{rule}");
    }
    let files: Vec<&str> = groups.iter().filter_map(|g| g["file"].as_str()).collect();
    let both = [RULES, ALERTS]
        .iter()
        .all(|f| files.iter().any(|g| Path::new(g).ends_with(f)));
    both && rules.len() >= 28 && rules.iter().all(|r| r["health"] == "ok")
}

/// `testkit::Prometheus`: a started server answers its API; dropped, its process is gone.
#[tokio::test]
async fn a_throwaway_prometheus_answers_and_is_stopped_when_dropped() {
    let prometheus = Prometheus::start("global:\n  evaluation_interval: 1s\n");
    let answer = series(&prometheus.query("vector(42)").await);
    assert_eq!(answer.len(), 1, "{answer:?}");
    assert_eq!(answer[0].1, 42.0);
    let pid = prometheus.pid();
    let process = PathBuf::from(format!("/proc/{pid}"));
    assert!(process.exists());
    drop(prometheus);
    assert!(!process.exists(), "prometheus {pid} still runs");
}
