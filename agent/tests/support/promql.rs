//! Every PromQL expression the project ships: dashboard panels and variables, recording and
//! alerting rules, with where each comes from.
use std::path::Path;

use serde_json::Value;

#[derive(Debug, Clone)]
pub struct Expr {
    /// e.g. `tcpvigil-fleet.json: Stops in progress`, `alert TcpvigilDown`.
    pub origin: String,
    /// The alert's name for alerting rules.
    pub alert: Option<String>,
    pub expr: String,
}

/// Panel targets and variable queries (`label_values(SELECTOR, label)` -> SELECTOR) of every
/// dashboard in `dir`, with Grafana's variables replaced as `subst` says.
pub fn dashboards(dir: &Path, subst: &[(&str, &str)]) -> Vec<Expr> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("dashboards/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let fill = |e: &str| subst.iter().fold(e.to_string(), |acc, (k, v)| acc.replace(k, v));
    let mut out = Vec::new();
    for f in files {
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let d: Value = serde_json::from_str(&std::fs::read_to_string(&f).expect("read dashboard")).expect("JSON");
        for v in d["templating"]["list"].as_array().into_iter().flatten() {
            let q = v["query"].as_str().or(v["query"]["query"].as_str()).unwrap_or("");
            if let Some(sel) = q.strip_prefix("label_values(").and_then(|r| r.rsplit_once(',')).map(|(s, _)| s) {
                out.push(Expr { origin: format!("{name}: variable {}", v["name"]), alert: None, expr: fill(sel) });
            }
        }
        for p in d["panels"].as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push(Expr { origin: format!("{name}: {}", p["title"]), alert: None, expr: fill(e) });
                }
            }
        }
    }
    out
}

/// Every rule's expression, and for recording rules also the series they record.
pub fn rules(yaml: &str) -> Vec<Expr> {
    let doc: Value = serde_norway::from_str(yaml).expect("rules YAML");
    let mut out = Vec::new();
    for g in doc["groups"].as_array().into_iter().flatten() {
        for r in g["rules"].as_array().into_iter().flatten() {
            let expr = r["expr"].as_str().unwrap_or("").trim().to_string();
            if let Some(rec) = r["record"].as_str() {
                out.push(Expr { origin: format!("record {rec} (expr)"), alert: None, expr });
                out.push(Expr { origin: format!("record {rec} (recorded)"), alert: None, expr: rec.to_string() });
            } else if let Some(a) = r["alert"].as_str() {
                out.push(Expr { origin: format!("alert {a}"), alert: Some(a.to_string()), expr });
            }
        }
    }
    out
}
