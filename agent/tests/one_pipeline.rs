//! One pipeline: every recorded fixture fed through the daemon's path (the pipeline with its
//! process lookup, then the daemon's outputs: metrics and the JSON events file) gives the findings
//! that the offline path (`analyze`) gives.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod support;

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tcpvigil::config::Config;
use tcpvigil::detect::{analyze, pipeline::replay, Pipeline};
use tcpvigil::export::events::{finding_json, host_name};
use tcpvigil::export::outputs::Outputs;
use tcpvigil::export::{EventsWriter, Metrics};
use tcpvigil::model::{Body, FindingKind};

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An events line without what only the daemon knows (the process, from its connection table),
/// as read back from its text (serde_json's float parsing may differ from the value in the last bit).
fn without_process(v: Value) -> Value {
    let mut v: Value = serde_json::from_str(&v.to_string()).unwrap();
    if let Some(c) = v["conn"].as_object_mut() {
        c.remove("pid");
        c.remove("comm");
    }
    v
}

#[test]
fn every_fixture_through_the_daemons_outputs_gives_the_findings_analyze_gives() {
    let cfg = Config::parse(support::judge::LAB_CONFIG, "lab").unwrap();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".jsonl.gz"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    let (mut total, mut kinds) = (0, std::collections::BTreeSet::new());
    for file in files {
        let rec = tcpvigil::recording::open(&file).unwrap();
        let offset = rec.header.mono_to_unix_ns;

        // Offline.
        let offline: Vec<Value> = analyze(&rec.events, &cfg.detect)
            .iter()
            .map(|f| without_process(finding_json(f, None, offset, &host_name())))
            .collect();

        // The daemon's path, fed at the same clock.
        let exact = rec.events.iter().any(|e| matches!(e.body, Body::LostRetrans(_)));
        let asked = Arc::new(Mutex::new(0usize));
        let lookup = {
            let asked = asked.clone();
            Box::new(move |_: &tcpvigil::model::ConnId| {
                *asked.lock().unwrap() += 1;
                None
            })
        };
        let mut pipe = Pipeline::new(&cfg.detect, exact).with_process_lookup(lookup);
        let buf = Shared::default();
        let (metrics, registry) = Metrics::new_registered(&cfg.export);
        let clock = tcpvigil::clock::WallOffset::with_reader(Box::new(move || offset));
        let events = Some(EventsWriter::with_writer(Box::new(buf.clone()), offset));
        let mut out = Outputs::with_clock(metrics, events, None, clock);
        replay(&rec.events, &mut pipe, |p, input| out.step(p, input));
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let live: Vec<Value> = text.lines().map(|l| without_process(serde_json::from_str(l).unwrap())).collect();
        assert_eq!(live, offline, "{}: the daemon's findings differ from analyze's", file.display());
        assert!(*asked.lock().unwrap() > 0, "the process lookup was asked for new connections");

        // The metrics counted the stops that ended.
        let ended = offline.iter().filter(|v| v["kind"] == "stop" && v["ongoing"] == false).count();
        let mut scrape = String::new();
        prometheus_client::encoding::text::encode(&mut scrape, &registry).unwrap();
        let counted: f64 = scrape
            .lines()
            .filter(|l| l.starts_with("tcpvigil_stops_total{"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum();
        assert_eq!(counted as usize, ended, "{}: stops counted by the metrics", file.display());
        total += live.len();
        kinds.extend(live.iter().map(|v| v["kind"].as_str().unwrap().parse::<FindingKind>().unwrap()));
    }
    assert!(total >= 10 && kinds.contains(&FindingKind::Stop) && kinds.contains(&FindingKind::Unfair), "{kinds:?}");
}
