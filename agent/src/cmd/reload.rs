//! `tcpvigil run` on SIGHUP: the configuration file read again and set against the running one:
//! what changes live, and what keeps its running value until a restart (named in the log).
use std::path::PathBuf;

use serde_json::Value;
use tcpvigil::config::Config;
use tcpvigil::export::config::ListenAddr;

/// Command-line settings that override the file, at start and at every reload.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub listen: Option<ListenAddr>,
    pub events: Option<String>,
    pub dump_dir: Option<PathBuf>,
}

impl Overrides {
    pub fn apply(&self, cfg: &mut Config) -> Result<(), String> {
        if let Some(l) = &self.listen {
            cfg.export.listen = l.clone();
        }
        if let Some(e) = &self.events {
            cfg.export.events = Some(e.clone());
        }
        if let Some(d) = &self.dump_dir {
            cfg.recorder.dir = d.clone();
            cfg.recorder.enabled = true;
            cfg.recorder.validate().map_err(|e| format!("--dump-dir: {e}"))?;
        }
        Ok(())
    }
}

/// Keys the running daemon cannot change: the kernel side was loaded with them, and the flight
/// recorder's directory is locked (and its histories kept) from the start.
pub fn needs_restart(key: &str) -> bool {
    key.starts_with("bpf.") || key == "recorder.enabled" || key == "recorder.dir"
}

/// Every leaf of `v` as (dotted key, value); arrays are leaves.
fn leaves(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                leaves(&key, x, out);
            }
        }
        _ => out.push((prefix.to_string(), v.clone())),
    }
}

/// The keys whose values differ, with (running, new) values, in key order.
pub fn changed_keys(old: &Config, new: &Config) -> Vec<(String, Value, Value)> {
    let flat = |c: &Config| {
        let mut v = Vec::new();
        leaves("", &serde_json::to_value(c).unwrap_or(Value::Null), &mut v);
        v
    };
    let (a, b) = (flat(old), flat(new));
    b.into_iter()
        .filter_map(|(k, nv)| {
            let ov = a.iter().find(|(ka, _)| *ka == k).map_or(Value::Null, |(_, v)| v.clone());
            (ov != nv).then_some((k, ov, nv))
        })
        .collect()
}

/// What a reload does: the configuration to run with from now on, the keys that change, and
/// the keys that keep their running value (`key = new (running old)`).
#[derive(Debug)]
pub struct Plan {
    pub cfg: Config,
    pub applied: Vec<String>,
    pub kept: Vec<String>,
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "unset".into(),
        v => v.to_string(),
    }
}

pub fn plan(running: &Config, new: Config) -> Plan {
    let mut cfg = new;
    let mut applied = Vec::new();
    let mut kept = Vec::new();
    for (k, old, new) in changed_keys(running, &cfg) {
        if needs_restart(&k) {
            kept.push(format!("{k} = {} (running {})", show(&new), show(&old)));
        } else {
            applied.push(k);
        }
    }
    cfg.bpf = running.bpf.clone();
    cfg.recorder.enabled = running.recorder.enabled;
    cfg.recorder.dir = running.recorder.dir.clone();
    Plan { cfg, applied, kept }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Config {
        Config::parse(s, "t.toml").unwrap()
    }

    #[test]
    fn live_keys_change_and_kernel_and_recorder_dir_keys_keep_their_running_value() {
        let running = parse("[export]\ntop_k = 5\n[bpf]\nringbuf_mib = 8\n");
        let new = parse(
            "[export]\ntop_k = 7\nlisten = \":9977\"\nevents = \"/tmp/e.jsonl\"\n[detect.stop]\nfloor_ms = 300\n\
             [bpf]\nringbuf_mib = 16\n[recorder]\ndir = \"/tmp/d\"\nmax_conns = 3\n",
        );
        let p = plan(&running, new);
        assert_eq!(
            p.applied,
            ["detect.stop.floor_ms", "export.events", "export.listen", "export.top_k", "recorder.max_conns"],
            "{p:?}"
        );
        assert_eq!(
            p.kept,
            ["bpf.ringbuf_mib = 16 (running 8)", "recorder.dir = \"/tmp/d\" (running \"/var/lib/tcpvigil/dumps\")"]
        );
        assert_eq!((p.cfg.export.top_k, p.cfg.detect.stop.floor_ms, p.cfg.recorder.max_conns), (7, 300, 3));
        assert_eq!(p.cfg.bpf.ringbuf_mib, 8, "kept");
        assert_eq!(p.cfg.recorder.dir, running.recorder.dir, "kept");
        assert_eq!(p.cfg.export.listen.to_string(), ":9977");
    }

    #[test]
    fn the_same_file_changes_nothing_and_overrides_win_again() {
        let c = parse("[export]\nlisten = \"127.0.0.1:1\"\n");
        let p = plan(&c, c.clone());
        assert!(p.applied.is_empty() && p.kept.is_empty(), "{p:?}");
        let o = Overrides { listen: Some("127.0.0.1:0".parse().unwrap()), events: Some("-".into()), dump_dir: None };
        let mut again = c.clone();
        o.apply(&mut again).unwrap();
        assert_eq!(again.export.listen.to_string(), "127.0.0.1:0");
        assert_eq!(again.export.events.as_deref(), Some("-"));
        let arrays = parse("[[export.transfers]]\nname = \"a\"\nfilter = \":1\"\n");
        assert_eq!(plan(&parse(""), arrays).applied, ["export.transfers"], "an array is one key");
    }
}
