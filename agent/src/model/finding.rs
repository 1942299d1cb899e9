//! Findings: what the detectors conclude (a stop, an unfair group, a limit, a path event), with
//! evidence. Serialized as the JSON events (docs/schema/events-v1.schema.json) without `ts`/`start`.
use serde::{Deserialize, Serialize};

use super::cause::{Cause, FindingKind, Mechanism, StopOwner};
use super::conn::ConnId;

/// Where a stop stands among path events (set by the path detector; exported inside `evidence`
/// as `remote_prefix` and `path_event`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathTag {
    /// A network stop's remote prefix: stops towards one destination, across hosts.
    pub remote_prefix: Option<String>,
    /// The prefix of the path event this stop is part of: the event is reported and dumped instead.
    pub event: Option<String>,
}

/// One diagnosis. Times are CLOCK_MONOTONIC nanoseconds; exporters turn them into wall time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "Wire", try_from = "Wire")]
pub struct Finding {
    /// When the finding was made (or updated).
    pub ts_ns: u64,
    /// The connection, for stops and limits; the slowest stream for an unfair group.
    pub conn: Option<ConnId>,
    /// The group key, for unfair groups; the remote prefix, for path events.
    pub group: Option<String>,
    pub start_ns: u64,
    /// None while the finding is still in progress.
    pub duration_s: Option<f64>,
    pub ongoing: bool,
    /// What was found; the kind follows from it.
    pub cause: Cause,
    /// Whose stop it is (stops and path events only).
    pub owner: Option<StopOwner>,
    /// What holds the connection or group back, where the detectors can tell (the fix follows).
    pub mechanism: Option<Mechanism>,
    /// The numbers behind the diagnosis, as exported (keys depend on the cause).
    pub evidence: serde_json::Value,
    pub path: PathTag,
}

impl Finding {
    pub fn kind(&self) -> FindingKind {
        self.cause.kind()
    }

    /// The evidence as exported: with the path tags in it.
    pub fn evidence_json(&self) -> serde_json::Value {
        let mut v = self.evidence.clone();
        if let Some(o) = v.as_object_mut() {
            if let Some(p) = &self.path.remote_prefix {
                o.insert(REMOTE_PREFIX.into(), p.clone().into());
            }
            if let Some(p) = &self.path.event {
                o.insert(PATH_EVENT.into(), p.clone().into());
            }
        }
        v
    }

    /// Cookies the finding names: its connection, and every `cookie`/`cookies` in its evidence
    /// (an unfair group's streams, a path event's members).
    pub fn cookies(&self) -> Vec<u64> {
        fn walk(v: &serde_json::Value, key: Option<&str>, out: &mut Vec<u64>) {
            match v {
                serde_json::Value::Object(m) => m.iter().for_each(|(k, v)| walk(v, Some(k), out)),
                serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, key, out)),
                serde_json::Value::Number(n) if matches!(key, Some("cookie") | Some("cookies")) => {
                    out.extend(n.as_u64());
                }
                _ => {}
            }
        }
        let mut out: Vec<u64> = self.conn.iter().map(|c| c.cookie).collect();
        walk(&self.evidence, None, &mut out);
        out.sort_unstable();
        out.dedup();
        out
    }
}

const REMOTE_PREFIX: &str = "remote_prefix";
const PATH_EVENT: &str = "path_event";

/// A finding as JSON: the kind beside the cause, the path tags inside the evidence.
#[derive(Serialize, Deserialize)]
struct Wire {
    ts_ns: u64,
    kind: FindingKind,
    conn: Option<ConnId>,
    group: Option<String>,
    start_ns: u64,
    duration_s: Option<f64>,
    ongoing: bool,
    cause: Cause,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<StopOwner>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mechanism: Option<Mechanism>,
    evidence: serde_json::Value,
}

impl From<Finding> for Wire {
    fn from(f: Finding) -> Wire {
        Wire {
            ts_ns: f.ts_ns,
            kind: f.kind(),
            conn: f.conn,
            group: f.group.clone(),
            start_ns: f.start_ns,
            duration_s: f.duration_s,
            ongoing: f.ongoing,
            cause: f.cause,
            owner: f.owner,
            mechanism: f.mechanism,
            evidence: f.evidence_json(),
        }
    }
}

/// A finding whose cause is not one of its kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cause {cause} is not one of kind {kind}")]
pub struct KindMismatch {
    pub kind: FindingKind,
    pub cause: Cause,
}

impl TryFrom<Wire> for Finding {
    type Error = KindMismatch;
    fn try_from(w: Wire) -> Result<Finding, KindMismatch> {
        if w.kind != w.cause.kind() {
            return Err(KindMismatch { kind: w.kind, cause: w.cause });
        }
        let mut evidence = w.evidence;
        let mut take = |k: &str| match evidence.as_object_mut().and_then(|o| o.remove(k)) {
            Some(serde_json::Value::String(s)) => Some(s),
            _ => None,
        };
        let path = PathTag { remote_prefix: take(REMOTE_PREFIX), event: take(PATH_EVENT) };
        Ok(Finding {
            ts_ns: w.ts_ns,
            conn: w.conn,
            group: w.group,
            start_ns: w.start_ns,
            duration_s: w.duration_s,
            ongoing: w.ongoing,
            cause: w.cause,
            owner: w.owner,
            mechanism: w.mechanism,
            evidence,
            path,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::cause::StopCause;

    #[test]
    fn a_finding_reads_back_as_itself_with_its_path_tags_inside_the_evidence() {
        let f = Finding {
            ts_ns: 2,
            conn: None,
            group: None,
            start_ns: 1,
            duration_s: None,
            ongoing: true,
            cause: StopCause::NoAck.into(),
            owner: Some(StopOwner::Network),
            mechanism: Some(Mechanism::MtuBlackhole),
            evidence: serde_json::json!({"rtos": 0}),
            path: PathTag { remote_prefix: Some("10.0.0.0/24".into()), event: Some("10.0.0.0/24".into()) },
        };
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["kind"], "stop");
        assert_eq!(v["cause"], "no_ack");
        assert_eq!(v["mechanism"], "mtu_blackhole");
        assert_eq!(
            v["evidence"],
            serde_json::json!({"rtos": 0, "remote_prefix": "10.0.0.0/24", "path_event": "10.0.0.0/24"})
        );
        assert_eq!(serde_json::from_value::<Finding>(v.clone()).unwrap(), f);
        let mut wrong = v;
        wrong["kind"] = "limit".into();
        let e = serde_json::from_value::<Finding>(wrong).unwrap_err().to_string();
        assert!(e.contains("cause no_ack is not one of kind limit"), "{e}");
    }
}
