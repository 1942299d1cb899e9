//! The JSON events schema (docs/schema/events-v1.schema.json) against real output: `tcpvigil
//! analyze` on every recorded fixture, the events writer for every kind, and broken lines refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};
use support::schema::{validate_values, validator_available};
use tcpvigil::export::events::finding_json;
use tcpvigil::model::{
    Cause, ConnId, Finding, FindingKind, LimitReason, Mechanism, PathScope, Process, StopCause, StopOwner, Tuple,
};

fn fixtures() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".jsonl.gz"))
        .collect();
    v.sort();
    v
}

/// `analyze --all` with the lab's detector settings (as tests/fixtures.rs judges them).
fn analyze_all(file: &PathBuf) -> Vec<Value> {
    let cfg = std::env::temp_dir().join(format!("tv-schema-{}.toml", std::process::id()));
    std::fs::write(&cfg, support::judge::LAB_CONFIG).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tcpvigil"))
        .args(["analyze", "--all", "--config"])
        .arg(&cfg)
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "analyze {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn analyze_output_of_every_fixture_validates_against_the_schema() {
    if !validator_available("events_schema_fixtures") {
        return;
    }
    let mut all = Vec::new();
    for f in fixtures() {
        all.extend(analyze_all(&f));
    }
    let kinds: BTreeSet<String> = all.iter().map(|v| v["kind"].as_str().unwrap().to_string()).collect();
    let causes: BTreeSet<String> = all.iter().map(|v| format!("{}/{}", v["kind"], v["cause"])).collect();
    eprintln!("{} findings from {} fixtures; kinds {kinds:?}; causes {causes:?}", all.len(), fixtures().len());
    assert!(all.len() >= 10 && kinds.contains("stop") && kinds.contains("limit"), "{kinds:?}");
    assert!(all.iter().all(|v| v["schema_version"] == 1), "every line carries schema_version 1");
    match validate_values("fixtures", &all) {
        Ok(s) => eprintln!("{}", s.trim()),
        Err(e) => panic!("analyze output does not match the schema:\n{e}"),
    }
}

fn conn(cookie: u64) -> ConnId {
    ConnId {
        cookie,
        netns: 4026531840,
        tuple: Tuple { local: "10.0.0.1:40000".parse().unwrap(), remote: "[2001:db8::2]:5201".parse().unwrap() },
    }
}

fn finding(cause: Cause, owner: Option<StopOwner>, evidence: Value) -> Finding {
    let (c, group) = match cause.kind() {
        FindingKind::Path => (None, Some("10.0.1.0/24".to_string())),
        FindingKind::Unfair => (Some(conn(8)), Some("10.0.0.1->10.0.1.2:2811".to_string())),
        _ => (Some(conn(7)), None),
    };
    Finding {
        ts_ns: 9_000_000_000,
        conn: c,
        group,
        start_ns: 8_000_000_000,
        duration_s: Some(1.0),
        ongoing: false,
        cause,
        owner,
        // Every line carries one, so the schema checks the field (whatever the cause).
        mechanism: Some(Mechanism::ALL[(cause.as_str().len()) % Mechanism::ALL.len()]),
        evidence,
        path: Default::default(),
    }
}

/// One line of every kind (and every stop owner) as the daemon's writer puts it in the file.
fn writer_lines() -> Vec<Value> {
    let stop_ev = json!({"owner": "network", "rtos": 3, "srtt_ms": 40.0});
    let path_ev = json!({"prefix": "10.0.1.0/24", "stopped": 3, "not_stopped": 1, "starts_spread_s": 0.1,
        "conns": [{"cookie": 1, "local": "10.0.0.1:1", "remote": "10.0.1.2:2", "cause": "rto"}]});
    // In a Kubernetes pod: every cgroup field the writer knows.
    let id = "7d186119302244ddad365b484cbd0c9e59d2718a87cea0497650871236bba78c";
    let mut cg = tcpvigil::model::cgroup::parse(&format!(
        "/kubepods.slice/kubepods-pod0f3b5a1e_2c4d_4e6f_8a9b_0c1d2e3f4a5b.slice/cri-containerd-{id}.scope"
    ));
    (cg.container_name, cg.pod_name, cg.pod_namespace) =
        (Some("web".into()), Some("web-1".into()), Some("shop".into()));
    let cgroup = Some(tcpvigil::model::Cgroup::new(cg));
    let owner = Process { pid: 42, uid: 0, cgroup_id: 1, comm: "iperf3".into(), cgroup };
    let fs = [
        finding(StopCause::PathSilent.into(), Some(StopOwner::Network), stop_ev.clone()),
        finding(StopCause::ZeroWindow.into(), Some(StopOwner::Receiver), stop_ev.clone()),
        finding(StopCause::Undetermined.into(), Some(StopOwner::Undetermined), stop_ev),
        finding(Cause::UnfairStreams, None, json!({"jain_index": 0.7})),
        finding(LimitReason::RwndLimited.into(), None, json!({"advice": "raise tcp_rmem"})),
        finding(PathScope::Partial.into(), Some(StopOwner::Network), path_ev),
    ];
    fs.iter().map(|f| finding_json(f, Some(&owner), 0, "host-1.example.org")).collect()
}

#[test]
fn the_events_writer_output_of_every_kind_validates() {
    if !validator_available("events_schema_writer") {
        return;
    }
    let lines = writer_lines();
    if let Err(e) = validate_values("writer", &lines) {
        panic!("the writer's lines do not match the schema:\n{e}");
    }
}

#[test]
fn lines_that_break_the_schema_are_refused_with_the_field_named() {
    if !validator_available("events_schema_broken") {
        return;
    }
    let good = writer_lines();
    type Edit = fn(&mut Value);
    let cases: [(&str, usize, Edit); 9] = [
        ("cause", 0, |v| v["cause"] = "bogus".into()),
        ("cause", 1, |v| v["cause"] = "rto".into()), // a receiver-owned stop is zero_window
        ("kind", 0, |v| v["kind"] = "stopp".into()),
        ("conn", 5, |v| v["conn"] = json!({"cookie": 1})),
        ("ts", 3, |v| v["ts"] = "yesterday".into()),
        ("schema_version", 4, |v| v["schema_version"] = 2.into()),
        ("schema_version", 2, |v| drop(v.as_object_mut().unwrap().remove("schema_version"))),
        ("host", 3, |v| drop(v.as_object_mut().unwrap().remove("host"))),
        ("evidence", 5, |v| v["evidence"].as_object_mut().unwrap().retain(|k, _| k != "prefix")),
    ];
    for (field, i, edit) in cases {
        let mut v = good[i].clone();
        edit(&mut v);
        match validate_values("broken", &[v.clone()]) {
            Ok(s) => panic!("accepted a line with a broken {field}: {v}\n{s}"),
            Err(e) => assert!(e.contains(field) || e.contains("(line)"), "{field}: {e}"),
        }
    }
}
