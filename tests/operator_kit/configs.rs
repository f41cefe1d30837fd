//! The kit's configuration examples and runbook links, against the real tools: `promtool
//! check config` on the scrape configuration (which loads the rule files next to it), `amtool
//! check-config` on the Alertmanager route example and `amtool config routes test` for every
//! alert of the kit (routed by its severity), every alert's `runbook_url` pointing at its
//! section of `ops/README.md` under the base the operator sets, and that base replaced as the
//! README says.

use std::process::Command;

use testkit::markdown_anchor;

use super::{promtool, read, root, yaml_values, ALERTS, RULES};

const SCRAPE: &str = "ops/prometheus/prometheus.yml";
const ALERTMANAGER: &str = "ops/alertmanager/alertmanager.yml";
/// The placeholder the alerts' runbook links start with, until the operator sets theirs.
const RUNBOOK_BASE: &str = "https://runbooks.invalid/distlock";

/// Runs `amtool` with `args` in the repository: its exit status and its output.
fn amtool(args: &[&str]) -> (bool, String) {
    let out = Command::new("amtool")
        .args(args)
        .current_dir(root())
        .output()
        .expect("run amtool (scripts/ensure-prometheus.sh installs Debian's prometheus-alertmanager, which has it)");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Every alert of the kit with its `severity` label, in the file's order.
fn alerts_and_severities() -> Vec<(String, String)> {
    let text = read(ALERTS);
    let names = yaml_values(&text, "alert");
    let severities = yaml_values(&text, "severity");
    assert_eq!(names.len(), severities.len(), "an alert without a severity");
    names
        .into_iter()
        .zip(severities)
        .map(|(n, s)| (n.to_owned(), s.to_owned()))
        .collect()
}

#[test]
fn promtool_checks_the_scrape_config_with_the_kits_rule_files() {
    let out = promtool(&["check", "config", SCRAPE]);
    assert!(out.contains("SUCCESS: 2 rule files found"), "{out}");
    for file in [RULES, ALERTS] {
        assert!(out.contains(&format!("Checking {file}")), "{out}");
    }
    let config = read(SCRAPE);
    assert!(config.contains("metrics_path: /metrics"), "{config}");
}

#[test]
fn amtool_checks_the_alertmanager_config() {
    let (ok, out) = amtool(&["check-config", ALERTMANAGER]);
    assert!(ok, "{out}");
    assert!(out.contains("SUCCESS"), "{out}");
}

/// Every alert goes to the pager if critical, to the chat otherwise; an alert that is not the
/// kit's stays on the operator's default route.
#[test]
fn every_alert_of_the_kit_is_routed_by_its_severity() {
    let config = format!("--config.file={ALERTMANAGER}");
    let route = |labels: &[String]| {
        let mut args = vec!["config", "routes", "test", config.as_str()];
        args.extend(labels.iter().map(String::as_str));
        let (ok, out) = amtool(&args);
        assert!(ok, "{labels:?}: {out}");
        // amtool prints a warning line about --alertmanager.url before the receivers.
        out.lines()
            .filter(|l| !l.starts_with("Warning:"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let alerts = alerts_and_severities();
    assert!(alerts.len() >= 15, "{alerts:?}");
    let critical = alerts.iter().filter(|(_, s)| s == "critical").count();
    assert!(critical >= 1, "no critical alert: {alerts:?}");
    for (alert, severity) in &alerts {
        let expected = if severity == "critical" {
            "distlock-pager"
        } else {
            "distlock-chat"
        };
        let labels = [format!("alertname={alert}"), format!("severity={severity}")];
        assert_eq!(route(&labels), expected, "{alert} ({severity})");
    }
    let other = [
        "alertname=DiskFull".to_owned(),
        "severity=critical".to_owned(),
    ];
    assert_eq!(route(&other), "default");
}

#[test]
fn the_inhibit_rule_names_alerts_of_the_kit() {
    let config = read(ALERTMANAGER);
    let names: Vec<String> = alerts_and_severities()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let named: Vec<&str> = config
        .split("alertname = \"")
        .skip(1)
        .map(|s| s.split('"').next().unwrap())
        .collect();
    assert!(named.len() >= 2, "{named:?}");
    for name in named {
        assert!(
            names.iter().any(|n| n == name),
            "{name} is no alert of the kit"
        );
    }
}

#[test]
fn every_alert_links_its_runbook_section_under_the_base() {
    let alerts = read(ALERTS);
    let links = yaml_values(&alerts, "runbook_url");
    let names: Vec<String> = alerts_and_severities()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(links.len(), names.len(), "an alert without a runbook_url");
    let readme = read("ops/README.md");
    let sections: Vec<String> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .map(markdown_anchor)
        .collect();
    for (name, link) in names.iter().zip(&links) {
        let (base, section) = link.split_once('#').expect("a link to a section");
        assert_eq!(base, RUNBOOK_BASE, "{name}: {link}");
        assert_eq!(section, markdown_anchor(name), "{name}: {link}");
        assert!(
            sections.iter().any(|s| s == section),
            "{name}: ops/README.md has no section `### {name}`"
        );
    }
    // The unit tests expect the same links.
    let tests = read("ops/prometheus/tests/distlock.alerts.test.yml");
    for link in yaml_values(&tests, "runbook_url") {
        assert!(links.contains(&link), "a unit test expects {link}");
    }
}

/// The README's line that sets the base (`sed -i 's|<placeholder>|<yours>|' …`), applied to
/// the alerts: every link then starts with the new base, and the file is still valid rules.
#[test]
fn the_runbook_base_is_set_as_the_readme_says() {
    let readme = read("ops/README.md");
    let line = readme
        .lines()
        .find(|l| l.starts_with(&format!("sed -i 's|{RUNBOOK_BASE}|")))
        .expect("ops/README.md: the sed line that sets the runbook base");
    let (from, to) = line
        .strip_prefix("sed -i 's|")
        .and_then(|rest| rest.split_once('|'))
        .and_then(|(from, rest)| Some((from, rest.split_once('|')?.0)))
        .expect("s|from|to|");
    assert!(
        line.ends_with("|' distlock.alerts.yml"),
        "the sed line edits distlock.alerts.yml: {line}"
    );
    let set = read(ALERTS).replace(from, to);
    let path = std::env::temp_dir().join(format!("distlock-alerts-{}.yml", std::process::id()));
    std::fs::write(&path, &set).unwrap();
    let out = promtool(&["check", "rules", path.to_str().unwrap()]);
    std::fs::remove_file(&path).unwrap();
    assert!(out.contains("SUCCESS"), "{out}");
    let links = yaml_values(&set, "runbook_url");
    assert!(!links.is_empty());
    for link in links {
        assert!(link.starts_with(&format!("{to}#")), "{link}");
    }
    assert!(!set.contains(RUNBOOK_BASE));
}
