//! The words of the watch view: TCP state names, evidence in one line, a stop's mechanism and
//! advice taken out of its evidence.
use crate::model::{Finding, FindingKind};

pub fn tcp_state_name(s: u8) -> &'static str {
    match s {
        1 => "ESTABLISHED",
        2 => "SYN_SENT",
        3 => "SYN_RECV",
        4 => "FIN_WAIT1",
        5 => "FIN_WAIT2",
        6 => "TIME_WAIT",
        7 => "CLOSE",
        8 => "CLOSE_WAIT",
        9 => "LAST_ACK",
        10 => "LISTEN",
        11 => "CLOSING",
        12 => "NEW_SYN_RECV",
        _ => "?",
    }
}

/// Evidence as `k=v k=v`, at most `max` characters.
pub fn evidence_text(v: &serde_json::Value, max: usize) -> String {
    let mut s = String::new();
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                if !s.is_empty() {
                    s.push(' ');
                }
                match v {
                    serde_json::Value::String(x) => s.push_str(&format!("{k}={x}")),
                    serde_json::Value::Number(n) => match n.as_f64() {
                        Some(f) if f.fract() != 0.0 => s.push_str(&format!("{k}={f:.3}")),
                        _ => s.push_str(&format!("{k}={n}")),
                    },
                    other => s.push_str(&format!("{k}={other}")),
                }
            }
        }
        serde_json::Value::Null => {}
        other => s = other.to_string(),
    }
    if s.chars().count() > max {
        s = s.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
    }
    s
}

/// A stop's mechanism, its evidence (the object under its name) in one line and its advice, taken
/// out of `evidence` so the rest stays readable.
pub(super) fn stop_mechanism(
    f: &Finding,
    evidence: &mut serde_json::Value,
) -> Option<(crate::model::Mechanism, String, String)> {
    let m = f.mechanism.filter(|_| f.kind() == FindingKind::Stop)?;
    let map = evidence.as_object_mut()?;
    let detail = map.remove(m.as_str()).map(|v| evidence_text(&v, 120)).unwrap_or_default();
    let advice = map.remove("advice").and_then(|a| a.as_str().map(str::to_string)).unwrap_or_default();
    Some((m, detail, advice))
}
