//! What the metrics promise outside the agent: every name the alert rules and dashboards use is
//! exported, and the label values, the events schema and the docs name exactly the model's enums.
use std::collections::BTreeSet;

use serde_json::json;

use super::config::{ExportConfig, TransferRule};
use super::metrics::Metrics;
use super::tests::{feed, finding, health, scrape, series};
use crate::model::{Cause, ConnTable, Finding, LimitReason, PathScope, PathTag, StopCause};

/// Every `tcpvigil_*` name the rules and dashboards use is a series a busy agent exports.
#[test]
fn rules_and_dashboards_use_only_exported_metric_names() {
    let cfg = ExportConfig {
        transfers: vec![TransferRule { name: "t".into(), filter: ":5201".into() }],
        ..ExportConfig::default()
    };
    let (mut m, r) = Metrics::new_registered(&cfg);
    let mut t = ConnTable::new(false);
    feed(&mut m, &mut t, 10);
    m.on_finding(&Finding {
        group: Some("g".into()),
        owner: None,
        evidence: json!({"jain": 0.7}),
        ..finding(3, Cause::UnfairStreams, true, None)
    });
    // A network stop in progress to a remote prefix (the per-prefix series exist only then).
    m.on_finding(&Finding {
        owner: Some(crate::model::StopOwner::Network),
        path: PathTag { remote_prefix: Some("10.72.1.0/24".into()), event: None },
        ..finding(4, StopCause::NoAck, true, None)
    });
    let mut h = health();
    h.maps.push(super::health::MapUsage { name: "tv_rtx".into(), entries: 1, max_entries: 2 });
    m.refresh(&t, &h);
    let text = crate::export::http::to_prometheus_text(&scrape(&r));
    let exported: BTreeSet<&str> = series(&text).iter().map(|l| l.split(['{', ' ']).next().unwrap_or("")).collect();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    for file in
        ["deploy/prometheus/tcpvigil.rules.yml", "dashboards/tcpvigil-fleet.json", "dashboards/tcpvigil-drilldown.json"]
    {
        let src = std::fs::read_to_string(format!("{root}/{file}")).unwrap();
        let bytes = src.as_bytes();
        let mut i = 0;
        while let Some(off) = src[i..].find("tcpvigil_") {
            let start = i + off;
            let end = start
                + src[start..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(src.len() - start);
            let name = &src[start..end];
            // Recording-rule names (`level:metric:op`) are not exported names.
            let in_rule_name = start > 0 && bytes[start - 1] == b':' || bytes.get(end) == Some(&b':');
            if !in_rule_name {
                let ok = exported.contains(name)
                    || exported
                        .iter()
                        .any(|e| e.strip_prefix(name).is_some_and(|s| ["_bucket", "_sum", "_count"].contains(&s)));
                assert!(ok, "{file} uses {name}, which the agent does not export");
            }
            i = end;
        }
    }
}

/// The finding contract in one place: the JSON schema's enums, the label values the metrics
/// export and the cause table of docs/events.md are exactly the model's enums.
#[test]
fn the_schema_the_metrics_and_the_docs_name_exactly_the_models_causes() {
    use crate::model::{FindingKind, StopOwner};
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let names = |v: &serde_json::Value| -> BTreeSet<String> {
        match v.get("enum").and_then(|e| e.as_array()) {
            Some(a) => a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect(),
            None => v.get("const").and_then(|c| c.as_str()).map(str::to_string).into_iter().collect(),
        }
    };
    fn set<'a>(it: impl Iterator<Item = &'a str>) -> BTreeSet<String> {
        it.map(str::to_string).collect()
    }
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{root}/docs/schema/events-v1.schema.json")).unwrap())
            .unwrap();
    let stop_causes = |owner: Option<StopOwner>| {
        set(StopCause::ALL.iter().filter(|c| owner.is_none_or(|o| c.owner() == o)).map(|c| c.as_str()))
    };
    assert_eq!(names(&schema["properties"]["kind"]), set(FindingKind::ALL.iter().map(|k| k.as_str())));
    assert_eq!(names(&schema["properties"]["owner"]), set(StopOwner::ALL.iter().map(|o| o.as_str())));
    assert_eq!(names(&schema["properties"]["mechanism"]), set(crate::model::Mechanism::ALL.iter().map(|m| m.as_str())));
    // Per kind (and for stops per owner), the causes the schema allows.
    let mut by_kind = BTreeSet::new();
    for rule in schema["allOf"].as_array().unwrap() {
        let kind = rule["if"]["properties"]["kind"]["const"].as_str().unwrap();
        let kind: FindingKind = kind.parse().unwrap();
        let want = set(Cause::all().filter(|c| c.kind() == kind).map(Cause::as_str));
        assert_eq!(names(&rule["then"]["properties"]["cause"]), want, "causes of kind {kind}");
        by_kind.insert(kind);
        for owner_rule in rule["then"]["allOf"].as_array().into_iter().flatten() {
            let owners = names(&owner_rule["if"]["properties"]["owner"]);
            let causes = names(&owner_rule["then"]["properties"]["cause"]);
            for o in owners {
                let o: StopOwner = o.parse().unwrap();
                let want = if o == StopOwner::Application {
                    stop_causes(Some(StopOwner::Undetermined))
                } else {
                    stop_causes(Some(o))
                };
                assert_eq!(causes, want, "stop causes of owner {o}");
            }
        }
    }
    assert_eq!(by_kind.len(), FindingKind::ALL.len(), "every kind has its causes in the schema");

    // The label values the metrics export.
    let (_m, r) = Metrics::new_registered(&ExportConfig::default());
    let text = scrape(&r);
    let labels = |family: &str, key: &str| -> BTreeSet<String> {
        series(&text)
            .iter()
            .filter(|l| l.starts_with(&format!("{family}{{")))
            .filter_map(|l| l.split(&format!("{key}=\"")).nth(1).and_then(|r| r.split('"').next()).map(str::to_string))
            .collect()
    };
    let pairs: BTreeSet<String> = series(&text)
        .iter()
        .filter(|l| l.starts_with("tcpvigil_stops_total{"))
        .map(|l| l.split(['{', '}']).nth(1).unwrap().to_string())
        .collect();
    let want: BTreeSet<String> =
        StopCause::ALL.iter().map(|c| format!("owner=\"{}\",cause=\"{}\"", c.owner(), c)).collect();
    assert_eq!(pairs, want);
    let mut reasons = set(LimitReason::ALL.iter().map(|r| r.as_str()));
    reasons.insert("other".into());
    assert_eq!(labels("tcpvigil_limited_connections", "reason"), reasons);
    assert_eq!(labels("tcpvigil_path_events_total", "scope"), set(PathScope::ALL.iter().map(|p| p.as_str())));
    let mechanisms = set(crate::model::Mechanism::ALL.iter().map(|m| m.as_str()));
    assert_eq!(labels("tcpvigil_stop_mechanisms_total", "mechanism"), mechanisms);

    // docs/events.md: its table of causes per kind (and owner).
    let doc = std::fs::read_to_string(format!("{root}/docs/events.md")).unwrap();
    let mut documented: BTreeSet<String> = BTreeSet::new();
    for row in doc.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (head, causes) = (cells[1], cells[2]);
        let Some(kind) = head.split('`').nth(1).and_then(|k| k.parse::<FindingKind>().ok()) else { continue };
        let owner =
            head.split("owner `").nth(1).and_then(|o| o.split('`').next()).map(|o| o.parse::<StopOwner>().unwrap());
        // The causes are the names in backticks before the first explanation in parentheses.
        let listed = set(causes.split('(').next().unwrap().split('`').skip(1).step_by(2));
        let want = match owner {
            Some(o) => stop_causes(Some(o)),
            None => set(Cause::all().filter(|c| c.kind() == kind).map(Cause::as_str)),
        };
        assert_eq!(listed, want, "docs/events.md row: {row}");
        documented.extend(listed);
    }
    assert_eq!(documented, set(Cause::all().map(Cause::as_str)), "docs/events.md lists every cause");
}
