//! Every PromQL expression of the dashboards and the rules, evaluated in Prometheus over the whole
//! campaign: each returns data at some point, except those listed here with the situation they need.
use crate::campaign::{campaign, fairness_truth, repo, Campaign};
use crate::support::promql::{self, Expr};
use crate::{LAB_TRANSFER, UNFAIR_SCENARIO};

/// What an expression needs before it can have data.
enum Need {
    /// A situation the campaign does not produce, or not in every run; the expression must still
    /// evaluate, and with its thresholds removed it must return data (the metrics and labels it
    /// reads exist).
    Never(&'static str),
    /// An unfair group: data is required when the unfair scenario's truth is unfair.
    UnfairTruth(&'static str),
    /// Jain's index of the lab's streams below this: data is required when the truth's is.
    JainBelow(f64, &'static str),
}

/// Matched against an expression's origin (`alert NAME`) or, failing that, its text.
const EXCEPTED: &[(&str, Need)] = &[
    (
        "alert TcpvigilStopsRecurring",
        Need::Never("three stops on one host within 15 minutes; the campaign has one (outage)"),
    ),
    ("alert TcpvigilDroppingData", Need::Never("the agent losing ring-buffer records or failing to decode them")),
    ("alert TcpvigilMapPressure", Need::Never("BPF map or socket-storage failures")),
    (
        "alert TcpvigilBpfProgramSkipped",
        Need::Never(
            "the kernel skipping a program already running on that CPU: most campaigns have some, one CI run none",
        ),
    ),
    (
        "alert TcpvigilPathEventAcrossHosts",
        Need::Never("network stops towards one prefix on two hosts; the campaign has one agent"),
    ),
    (
        "alert TcpvigilPathEvent",
        Need::Never("several connections to one prefix stopping together; the campaign's outage has one"),
    ),
    ("alert TcpvigilUnfairGroup", Need::UnfairTruth("the agent finds a group unfair")),
    ("tcpvigil_group_", Need::UnfairTruth("group series exist only while the agent finds a group unfair")),
    (
        "alert TcpvigilUnfairTransferAcrossHosts",
        Need::JainBelow(0.9, "Jain's index of a transfer's one-minute goodput averages below 0.9"),
    ),
];

fn excepted(e: &Expr) -> Option<&'static (&'static str, Need)> {
    EXCEPTED.iter().find(|(m, _)| e.origin == *m).or_else(|| EXCEPTED.iter().find(|(m, _)| e.expr.contains(m)))
}

/// The expression without its comparisons against numbers (`x > 0` -> `x`), outside selectors.
pub fn strip_thresholds(e: &str) -> String {
    let b = e.as_bytes();
    let (mut out, mut i, mut depth, mut quoted) = (String::new(), 0, 0i32, false);
    while i < b.len() {
        let c = b[i] as char;
        match c {
            '"' => quoted = !quoted,
            '{' if !quoted => depth += 1,
            '}' if !quoted => depth -= 1,
            _ => {}
        }
        if !quoted && depth == 0 && "<>=!".contains(c) {
            let op = if b.get(i + 1) == Some(&b'=') { 2 } else { 1 };
            let mut j = i + op;
            while b.get(j).is_some_and(|x| x.is_ascii_whitespace()) {
                j += 1;
            }
            let k = j + b[j..].iter().take_while(|x| x.is_ascii_digit() || **x == b'.').count();
            if k > j && (c != '=' || op == 2) {
                i = k;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

fn has_data(c: &Campaign, expr: &str) -> Result<bool, String> {
    let s = c.prom.query_range(expr, c.start, c.end)?;
    Ok(s.iter().any(|s| s.points.iter().any(|p| p.1.is_finite())))
}

fn all_exprs(c: &Campaign) -> Vec<Expr> {
    let subst = [
        ("$__rate_interval", "4s"), // Grafana: max(4 x scrape interval, step + scrape interval)
        ("$job", "tcpvigil"),
        ("$instance", c.instance.as_str()),
        ("$transfer", LAB_TRANSFER),
        ("$conn", ".+"),
    ];
    let mut v = promql::dashboards(&repo().join("dashboards"), &subst);
    let rules = std::fs::read_to_string(repo().join("deploy/prometheus/tcpvigil.rules.yml")).expect("rules");
    v.extend(promql::rules(&rules));
    v
}

#[test]
fn every_dashboard_and_rule_expression_returns_data() {
    let Some(c) = campaign("dashboard and rule expressions") else { return };
    let truth = fairness_truth(c.run(UNFAIR_SCENARIO));
    let exprs = all_exprs(c);
    let mut bad = Vec::new();
    let (mut with_data, mut exempt) = (0, 0);
    for e in &exprs {
        let data = match has_data(c, &e.expr) {
            Ok(d) => d,
            Err(err) => {
                bad.push(format!("does not evaluate: {}: {err}\n    {}", e.origin, e.expr));
                continue;
            }
        };
        with_data += data as usize;
        let required = match excepted(e).map(|(_, n)| n) {
            None => true,
            Some(Need::UnfairTruth(_)) => truth.unfair,
            Some(Need::JainBelow(x, _)) => truth.jain < *x,
            Some(Need::Never(why)) => {
                let probe = strip_thresholds(&e.expr);
                match has_data(c, &probe) {
                    Ok(true) => {}
                    Ok(false) => {
                        bad.push(format!("no data even without thresholds ({why}): {}\n    {probe}", e.origin))
                    }
                    Err(err) => bad.push(format!("probe does not evaluate: {}: {err}\n    {probe}", e.origin)),
                }
                false
            }
        };
        if required && !data {
            bad.push(format!("NO DATA: {}\n    {}", e.origin, e.expr));
        } else if !required {
            exempt += 1;
            let why = match excepted(e).map(|(_, n)| n) {
                Some(Need::Never(w)) | Some(Need::UnfairTruth(w)) | Some(Need::JainBelow(_, w)) => w,
                None => "",
            };
            eprintln!("   excepted ({}): {} - needs {why}", if data { "had data" } else { "no data" }, e.origin);
        }
    }
    for (m, _) in EXCEPTED {
        assert!(
            exprs.iter().any(|e| e.origin == *m || e.expr.contains(m)),
            "exception {m:?} matches nothing: remove it"
        );
    }
    eprintln!(
        "== {} expressions ({} dashboard, {} rule): {with_data} returned data, {exempt} excepted (truth of {UNFAIR_SCENARIO}: {})",
        exprs.len(),
        exprs.iter().filter(|e| e.origin.contains(".json")).count(),
        exprs.iter().filter(|e| !e.origin.contains(".json")).count(),
        truth.verdict()
    );
    assert!(bad.is_empty(), "{} problems:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn prometheus_loads_every_rule_and_evaluates_it_without_error() {
    let Some(c) = campaign("rule health") else { return };
    let groups = c.rule_health["groups"].as_array().cloned().unwrap_or_default();
    let rules: Vec<&serde_json::Value> =
        groups.iter().flat_map(|g| g["rules"].as_array().into_iter().flatten()).collect();
    let expected = promql::rules(&c.rules).iter().filter(|e| !e.origin.ends_with("(recorded)")).count();
    assert_eq!(rules.len(), expected, "rules loaded by Prometheus vs in the file");
    for r in &rules {
        assert_eq!(r["health"], "ok", "{}: {}", r["name"], r["lastError"]);
    }
    eprintln!("== {} rules in {} groups loaded, all healthy", rules.len(), groups.len());
}

#[test]
fn strip_thresholds_removes_comparisons_but_not_matchers() {
    assert_eq!(strip_thresholds(r#"sum(x{a!="1"}) > 0"#), r#"sum(x{a!="1"}) "#);
    assert_eq!(strip_thresholds("a >= 3 or b == 0"), "a  or b ");
    assert_eq!(strip_thresholds(r#"rate(x{l=~"5.*"}[5m]) > 0.5"#), r#"rate(x{l=~"5.*"}[5m]) "#);
    assert_eq!(strip_thresholds("a / (b > 0)"), "a / (b )");
}
