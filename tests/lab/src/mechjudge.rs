//! Judging the `mechanism` the daemon's findings name against the mechanisms a run contains, and the per-mechanism matrix of a campaign.
use crate::fuzzjudge::parse_rfc3339;
use crate::mechanism::MechTruth;
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// The outcome of one mechanism in one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The run contains it and a finding named it.
    Named,
    /// The run contains it and no finding named it.
    Missed,
    /// A finding named it where the run does not contain it (or about other connections, or
    /// outside its time).
    NamedAbsent,
    /// Named where it was background (allowed, not required).
    NamedBackground,
    /// The run's scenario names it but the wire did not show it.
    NotOnWire,
    /// Present as background and not named.
    Background,
}

/// What one run's findings said about mechanisms.
#[derive(Debug, Clone, Default)]
pub struct MechVerdict {
    pub outcomes: Vec<(String, Outcome)>,
    /// Missed and wrongly named mechanisms: failures under `--judge-mechanism`.
    pub failures: Vec<String>,
    pub notes: Vec<String>,
}

/// One finding that names a mechanism.
#[derive(Debug, Clone)]
struct Naming {
    mechanism: String,
    what: String,
    ports: Vec<u16>,
    local: Option<SocketAddr>,
    cause: String,
    from: f64,
    to: f64,
}

fn namings(findings: &[Value]) -> Vec<Naming> {
    findings
        .iter()
        .filter_map(|f| {
            let m = f["mechanism"].as_str().filter(|m| !m.is_empty())?;
            let addr = |k: &str| f["conn"][k].as_str().and_then(|a| a.parse::<SocketAddr>().ok());
            let (local, remote) = (addr("local"), addr("remote"));
            let from = parse_rfc3339(f["start"].as_str().unwrap_or(""));
            let ts = parse_rfc3339(f["ts"].as_str().unwrap_or(""));
            let to = f["duration_s"].as_f64().map(|d| from + d).unwrap_or(ts).max(ts.min(from + 1e-3));
            Some(Naming {
                mechanism: m.to_string(),
                what: format!(
                    "{} {} {} from {from:.3}",
                    f["kind"].as_str().unwrap_or("?"),
                    f["cause"].as_str().unwrap_or("?"),
                    local.map(|a| a.to_string()).unwrap_or_else(|| f["group"].as_str().unwrap_or("?").to_string())
                ),
                ports: [local, remote].iter().flatten().map(|a| a.port()).collect(),
                local,
                cause: f["cause"].as_str().unwrap_or("").to_string(),
                from: if from.is_nan() { ts } else { from },
                to,
            })
        })
        .collect()
}

/// Whether naming `n` is about truth `t`: the same mechanism, overlapping its time (a finding is
/// often made some seconds after its start), its connections, and for buffers its side (a receive
/// window limit is the receiver's buffer, a send buffer limit the sender's).
fn about(n: &Naming, t: &MechTruth) -> bool {
    let overlap = n.from <= t.to + 3.0 && n.to >= t.from - 1.0;
    let conn = (t.ports.is_empty() || n.ports.iter().any(|p| t.ports.contains(p)))
        && (t.hosts.is_empty() || n.local.is_some_and(|a| t.hosts.contains(&a.ip())));
    let side = !matches!(
        (t.side.as_deref(), n.cause.as_str()),
        (Some("receiver"), "sndbuf_limited") | (Some("sender"), "rwnd_limited")
    );
    n.mechanism == t.mechanism && overlap && conn && side
}

/// Judges the findings' mechanisms against the run's `truths`.
pub fn judge_mechanisms(truths: &[MechTruth], findings: &[Value]) -> MechVerdict {
    let mut v = MechVerdict::default();
    let named = namings(findings);
    let mut mechs: Vec<&str> =
        truths.iter().map(|t| t.mechanism.as_str()).chain(named.iter().map(|n| n.mechanism.as_str())).collect();
    mechs.sort();
    mechs.dedup();
    for m in mechs {
        let mine: Vec<&MechTruth> = truths.iter().filter(|t| t.mechanism == m).collect();
        let required: Vec<&&MechTruth> = mine.iter().filter(|t| t.required).collect();
        let names: Vec<&Naming> = named.iter().filter(|n| n.mechanism == m).collect();
        if !required.is_empty() {
            if names.iter().any(|n| required.iter().any(|t| about(n, t))) {
                v.outcomes.push((m.into(), Outcome::Named));
            } else {
                v.outcomes.push((m.into(), Outcome::Missed));
                v.failures.push(format!(
                    "mechanism {m}: the run contains it ({}) and no finding names it{}",
                    required[0].evidence,
                    if names.is_empty() {
                        String::new()
                    } else {
                        format!(" about it (named by {:?})", names.iter().map(|n| &n.what).collect::<Vec<_>>())
                    }
                ));
            }
        } else if mine.iter().any(|t| t.unconfirmed) {
            v.outcomes.push((m.into(), Outcome::NotOnWire));
            v.notes.push(format!("mechanism {m}: expected, not on the wire: {}", mine[0].evidence));
        }
        let wrong: Vec<&&Naming> =
            names.iter().filter(|n| !mine.iter().any(|t| !t.unconfirmed && about(n, t))).collect();
        if let Some(n) = wrong.first() {
            v.outcomes.push((m.into(), Outcome::NamedAbsent));
            v.failures.push(format!("mechanism {m} named where the run does not contain it: {}", n.what));
        } else if required.is_empty() && !names.is_empty() {
            v.outcomes.push((m.into(), Outcome::NamedBackground));
            v.notes.push(format!("mechanism {m} named where it is background: {}", names[0].what));
        } else if required.is_empty() && names.is_empty() && mine.iter().any(|t| !t.unconfirmed) {
            v.outcomes.push((m.into(), Outcome::Background));
        }
        for n in names.iter().filter(|n| !wrong.iter().any(|w| std::ptr::eq(**w, **n))) {
            v.notes.push(format!("mechanism {m} named right: {}", n.what));
        }
    }
    v
}

/// Per mechanism over many runs: runs that contain it, named, missed, named where absent, named
/// where background, background not named, expected but not on the wire.
#[derive(Debug, Clone, Default)]
pub struct MechMatrix(pub BTreeMap<String, [u32; 7]>);

impl MechMatrix {
    pub fn add(&mut self, outcomes: &[(String, Outcome)]) {
        for (m, o) in outcomes {
            let c = self.0.entry(m.clone()).or_default();
            match o {
                Outcome::Named => (c[0], c[1]) = (c[0] + 1, c[1] + 1),
                Outcome::Missed => (c[0], c[2]) = (c[0] + 1, c[2] + 1),
                Outcome::NamedAbsent => c[3] += 1,
                Outcome::NamedBackground => c[4] += 1,
                Outcome::Background => c[5] += 1,
                Outcome::NotOnWire => c[6] += 1,
            }
        }
    }

    /// A markdown table, one row per mechanism seen.
    pub fn render(&self) -> String {
        let mut s = "| mechanism | runs with it | named | missed | named where absent | background, named | background, not named | expected, not on the wire |\n|---|---|---|---|---|---|---|---|\n".to_string();
        for (m, c) in &self.0 {
            let pct =
                if c[0] > 0 { format!(" ({:.0} %)", 100.0 * f64::from(c[1]) / f64::from(c[0])) } else { String::new() };
            s +=
                &format!("| {m} | {} | {}{pct} | {} | {} | {} | {} | {} |\n", c[0], c[1], c[2], c[3], c[4], c[5], c[6]);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T0: f64 = 1_795_000_000.0;

    fn truth(m: &str, required: bool, ports: Vec<u16>, side: Option<&str>) -> MechTruth {
        MechTruth {
            mechanism: m.into(),
            required,
            unconfirmed: false,
            from: T0 + 3.0,
            to: T0 + 10.0,
            ports,
            hosts: vec![],
            side: side.map(str::to_string),
            evidence: json!({}),
        }
    }

    fn finding(kind: &str, cause: &str, port: u16, start: &str, mech: Option<&str>) -> Value {
        let mut f = json!({"kind": kind, "cause": cause, "start": start, "ts": start, "duration_s": 1.0,
            "conn": {"local": format!("10.71.1.2:{port}"), "remote": "10.72.1.2:5201"}});
        if let Some(m) = mech {
            f["mechanism"] = json!(m);
        }
        f
    }

    // 2026-11-18T11:06:43Z is T0 + 3 s.
    const AT: &str = "2026-11-18T11:06:43.000Z";

    #[test]
    fn a_contained_mechanism_is_named_or_missed_and_one_named_elsewhere_is_wrong() {
        assert!((parse_rfc3339(AT) - (T0 + 3.0)).abs() < 1e-6);
        let t = vec![truth("mtu_blackhole", true, vec![40000], None), truth("queue_overflow", false, vec![], None)];
        let none = judge_mechanisms(&t, &[finding("stop", "rto", 40000, AT, None)]);
        assert_eq!(
            none.outcomes,
            vec![("mtu_blackhole".into(), Outcome::Missed), ("queue_overflow".into(), Outcome::Background)]
        );
        assert_eq!(none.failures.len(), 1);
        let right = judge_mechanisms(&t, &[finding("stop", "rto", 40000, AT, Some("mtu_blackhole"))]);
        assert_eq!(right.outcomes[0], ("mtu_blackhole".into(), Outcome::Named));
        assert!(right.failures.is_empty(), "{:?}", right.failures);
        // The same name about another connection misses the one held and is wrong about this one.
        let other = judge_mechanisms(&t, &[finding("stop", "rto", 40001, AT, Some("mtu_blackhole"))]);
        assert_eq!(
            other.outcomes[..2],
            [("mtu_blackhole".into(), Outcome::Missed), ("mtu_blackhole".into(), Outcome::NamedAbsent)]
        );
        let policer = judge_mechanisms(&t, &[finding("stop", "rto", 40000, AT, Some("policer"))]);
        assert!(policer.outcomes.contains(&("policer".into(), Outcome::NamedAbsent)));
        let bg = judge_mechanisms(&t, &[finding("stop", "rto", 40000, AT, Some("queue_overflow"))]);
        assert!(bg.outcomes.contains(&("queue_overflow".into(), Outcome::NamedBackground)), "{:?}", bg.outcomes);
        let late =
            judge_mechanisms(&t, &[finding("stop", "rto", 40000, "2026-11-18T11:07:00.000Z", Some("mtu_blackhole"))]);
        assert!(late.outcomes.contains(&("mtu_blackhole".into(), Outcome::Missed)), "outside the black hole's time");
    }

    #[test]
    fn a_buffer_is_judged_on_its_side_and_the_matrix_counts_runs() {
        let t = vec![truth("application", true, vec![], Some("receiver"))];
        let wrong_side = judge_mechanisms(&t, &[finding("limit", "sndbuf_limited", 40000, AT, Some("application"))]);
        assert_eq!(wrong_side.outcomes[0], ("application".into(), Outcome::Missed));
        let right = judge_mechanisms(&t, &[finding("limit", "rwnd_limited", 40000, AT, Some("application"))]);
        assert_eq!(right.outcomes, vec![("application".into(), Outcome::Named)]);
        let mut m = MechMatrix::default();
        m.add(&right.outcomes);
        m.add(&wrong_side.outcomes);
        let r = m.render();
        assert!(r.contains("| application | 2 | 1 (50 %) | 1 | 1 | 0 | 0 | 0 |"), "{r}");
    }
}
