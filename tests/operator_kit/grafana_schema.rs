//! The Grafana dashboard against Grafana's published dashboard schema. No Grafana server can be
//! installed from the registries this project uses (Debian's archive has no grafana, PyPI and
//! npm ship no Grafana binary), so the dashboard is not imported into a real Grafana: its JSON
//! is type-checked instead against the TypeScript types Grafana generates from its schema
//! (`@grafana/schema`: the dashboard, its panels, the time series panel's options and field
//! config) and the Prometheus data source's query type (`@grafana/prometheus`), by `tsc`, with
//! excess property checks (a misspelt or unknown key is an error) and the schema's enums as the
//! strings JSON holds. `scripts/ensure-grafana-schema.sh` installs the pinned versions.
//!
//! A copy of the dashboard with three mistakes (an unknown key, a draw style the schema does
//! not have, a query without its `expr`) must fail, each mistake named: the check bites.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::{read, root, DASHBOARD};

/// The folder `scripts/ensure-grafana-schema.sh` installs into (it prints it).
fn schema_dir() -> PathBuf {
    let out = Command::new("bash")
        .arg("scripts/ensure-grafana-schema.sh")
        .current_dir(root())
        .output()
        .expect("run scripts/ensure-grafana-schema.sh");
    assert!(
        out.status.success(),
        "scripts/ensure-grafana-schema.sh failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    PathBuf::from(stdout.lines().last().expect("the folder").trim())
}

/// A TypeScript module that type-checks `dashboard` (without the import wrapper, `__inputs`
/// and `__requires`, which Grafana's import reads and the schema does not hold): the whole
/// dashboard, each panel as a time series panel (the only panel type it uses), and each of
/// its queries as a Prometheus query.
fn check_module(dashboard: &Value) -> (String, usize) {
    let mut dashboard = dashboard.clone();
    let object = dashboard.as_object_mut().unwrap();
    object.remove("__inputs");
    object.remove("__requires");
    let mut lines = vec![
        "import type { Dashboard, Panel } from '@grafana/schema';".to_owned(),
        "import type { Options, FieldConfig } from '@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen';".to_owned(),
        "import type { Prometheus } from '../prometheus/dataquery';".to_owned(),
        "// The schema's string enums as the strings JSON holds; everything else as it is.".to_owned(),
        "type Json<T> = T extends string ? `${T}` : T extends object ? { [K in keyof T]: Json<T[K]> } : T;".to_owned(),
        format!("export const dashboard = {dashboard} satisfies Json<Dashboard>;"),
    ];
    let mut checked = 0;
    let mut panels: Vec<&Value> = Vec::new();
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for panel in list.as_array().into_iter().flatten() {
            if panel["type"] == "row" {
                walk(&panel["panels"], out);
            } else {
                out.push(panel);
            }
        }
    }
    walk(&dashboard["panels"], &mut panels);
    for (i, panel) in panels.iter().enumerate() {
        assert_eq!(
            panel["type"], "timeseries",
            "a panel type the check does not know"
        );
        lines.push(format!(
            "export const panel{i} = {panel} satisfies Json<Panel<Options, FieldConfig>>;"
        ));
        for (j, target) in panel["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            lines.push(format!(
                "export const query{i}_{j} = {target} satisfies Json<Prometheus>;"
            ));
            checked += 1;
        }
    }
    (lines.join("\n") + "\n", checked)
}

/// The dashboard with one mistake in each of three panels (the top level's: its rows are
/// open, their panels listed after them).
fn with_mistakes(dashboard: &Value) -> Value {
    let mut bad = dashboard.clone();
    let mut panels: Vec<&mut Value> = bad["panels"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .filter(|p| p["type"] != "row")
        .collect();
    assert!(panels.len() >= 3);
    let grid = panels[0]
        .as_object_mut()
        .unwrap()
        .remove("gridPos")
        .unwrap();
    panels[0]["gridpos"] = grid;
    panels[1]["fieldConfig"]["defaults"]["custom"] = serde_json::json!({ "drawStyle": "bar" });
    panels[2]["targets"][0]
        .as_object_mut()
        .unwrap()
        .remove("expr");
    bad
}

/// Runs `tsc` on `files` (in `dir`, below the schema folder): its output.
fn tsc(schema: &Path, dir: &Path, files: &[&str]) -> (bool, String) {
    let config = serde_json::json!({
        "compilerOptions": {
            "strict": true, "noEmit": true, "skipLibCheck": true,
            "module": "esnext", "moduleResolution": "bundler", "target": "es2022"
        },
        "files": files,
    });
    std::fs::write(dir.join("tsconfig.json"), config.to_string()).unwrap();
    let out = Command::new("node")
        .arg(schema.join("node_modules/typescript/bin/tsc"))
        .args(["-p", "tsconfig.json"])
        .current_dir(dir)
        .output()
        .expect("run node (scripts/ensure-grafana-schema.sh installs npm, which brings it)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn the_dashboard_matches_grafanas_published_dashboard_schema() {
    let schema = schema_dir();
    let dashboard: Value = serde_json::from_str(&read(DASHBOARD)).unwrap();
    // The import wrapper: the data source input the queries name, and the panel types used.
    let inputs = dashboard["__inputs"].as_array().expect("__inputs");
    assert!(
        inputs
            .iter()
            .any(|i| i["name"] == "DS_PROMETHEUS" && i["pluginId"] == "prometheus"),
        "{inputs:?}"
    );
    let required = dashboard["__requires"].to_string();
    assert!(required.contains(r#""id":"timeseries""#), "{required}");

    let dir = schema.join(format!("check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (good, queries) = check_module(&dashboard);
    assert!(queries >= 15, "{queries} queries checked");
    std::fs::write(dir.join("good.ts"), good).unwrap();
    std::fs::write(
        dir.join("bad.ts"),
        check_module(&with_mistakes(&dashboard)).0,
    )
    .unwrap();
    let (ok, out) = tsc(&schema, &dir, &["good.ts", "bad.ts"]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!ok, "the dashboard with mistakes passed the check:\n{out}");
    let good_errors: Vec<&str> = out.lines().filter(|l| l.starts_with("good.ts")).collect();
    assert!(
        good_errors.is_empty(),
        "ops/grafana/distlock-dashboard.json does not match Grafana's dashboard schema:\n{}",
        good_errors.join("\n")
    );
    // Each mistake named (all errors are bad.ts's; details follow a message's first line).
    for mistake in [
        "'\"gridpos\"' does not exist",
        "'\"bar\"' is not assignable",
        "Property 'expr' is missing",
    ] {
        assert!(
            out.contains(mistake),
            "the check did not say {mistake}:\n{out}"
        );
    }
}
