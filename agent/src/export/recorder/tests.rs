//! Tests of the flight recorder: config, memory per sample, dumps of a stop and of a group.
use super::*;
use std::path::Path;

use crate::plot::synth;
use crate::recording;

fn cfg(dir: &Path) -> RecorderConfig {
    RecorderConfig { dir: dir.to_path_buf(), seconds_before: 2.0, seconds_after: 1.0, ..RecorderConfig::default() }
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tcpvigil-recorder-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn config_denies_unknown_keys_and_checks_ranges() {
    let ok: RecorderConfig = serde_json::from_str(r#"{"dir": "/tmp/x", "seconds_after": 5}"#).unwrap();
    assert_eq!(ok.seconds_after, 5.0);
    assert_eq!(ok.seconds_before, RecorderConfig::default().seconds_before);
    let e = serde_json::from_str::<RecorderConfig>(r#"{"second_before": 5}"#).unwrap_err();
    assert!(e.to_string().contains("unknown field"), "{e}");
    let bad = RecorderConfig { seconds_before: -1.0, ..RecorderConfig::default() };
    assert!(bad.validate().unwrap_err().to_string().contains("seconds_before"));
    let bad = RecorderConfig { max_bytes_per_conn: 10, ..RecorderConfig::default() };
    assert!(Recorder::new(bad).is_err());
}

/// The number the docs quote: `cargo test -p tcpvigil --lib recorder::tests::memory -- --nocapture`.
#[test]
fn memory_per_stored_sample_is_measured_and_the_cap_holds() {
    let (rec, _) = synth::outage();
    let cap = 64 << 10;
    let mut r = Recorder::new(RecorderConfig {
        seconds_before: 3600.0,
        max_bytes_per_conn: cap,
        ..cfg(Path::new("/nonexistent"))
    })
    .unwrap();
    let samples = rec.events.iter().filter(|e| matches!(e.body, Body::Sample(_))).count();
    let mut only = Recorder::new(r.config().clone()).unwrap();
    for e in rec.events.iter().filter(|e| matches!(e.body, Body::Sample(_))).take(2000) {
        only.on_event(e);
    }
    let s = only.stats();
    let per_sample = s.bytes as f64 / s.events as f64;
    for e in rec.events.iter().take(2000) {
        r.on_event(e);
    }
    let s = r.stats();
    let per_event = s.bytes as f64 / s.events as f64;
    eprintln!(
        "recorder: {per_sample:.1} bytes per stored sample, {per_event:.1} per event of the outage mix \
         (a model Sample is {} bytes, an Event {}); {} samples per MiB",
        size_of::<crate::model::Sample>(),
        size_of::<Event>(),
        (1u64 << 20) / per_sample as u64
    );
    assert!(per_sample < 64.0, "{per_sample} bytes per stored sample");
    assert!(per_event < 80.0, "{per_event} bytes per stored event");
    for e in &rec.events {
        r.on_event(e);
    }
    let s = r.stats();
    assert!(s.largest_conn_bytes <= cap, "{} > {cap}", s.largest_conn_bytes);
    assert!(s.evicted_events > 0 && s.events < samples);
}

#[test]
fn only_bulk_connections_get_a_history_and_max_conns_evicts_the_idlest() {
    let mut r = Recorder::new(RecorderConfig { max_conns: 2, ..cfg(Path::new("/x")) }).unwrap();
    let (rec, _) = synth::parallel();
    let owner_only = rec.events.iter().find(|e| matches!(e.body, Body::Process(_))).unwrap();
    r.on_event(owner_only);
    assert_eq!(r.stats().conns, 0, "an Process event alone does not make a connection bulk");
    for e in &rec.events {
        r.on_event(e);
    }
    let s = r.stats();
    assert_eq!(s.conns, 2);
    assert!(s.evicted_conns >= 2);
}

#[test]
fn stop_dump_completes_after_seconds_after_and_writes_recording_findings_and_pictures() {
    let dir = tmp("stop");
    let (rec, findings) = synth::outage();
    let mut r = Recorder::new(cfg(&dir)).unwrap();
    let (first, last) = (&findings[0], &findings[1]);
    let mut job = None;
    let mut ready = Vec::new();
    for e in &rec.events {
        if job.is_none() && e.ts_ns >= first.ts_ns {
            job = r.on_finding(first);
            assert!(job.is_some());
            assert_eq!(r.on_finding(first), None, "the same finding opens one job");
        }
        if e.ts_ns >= last.ts_ns && r.stats().open_jobs == 1 && ready.is_empty() {
            assert_eq!(r.on_finding(last), None, "a later report extends the job");
        }
        r.on_event(e);
        ready.extend(r.take_ready(e.ts_ns));
        if !ready.is_empty() {
            break;
        }
    }
    let job = job.unwrap();
    assert_eq!(ready.len(), 1);
    let d = &ready[0];
    assert_eq!(d.job.id, job.id);
    // From 2 s before the stop's start (1.0 s) to 1 s after its end (4.0 s).
    let t = |ns: u64| (ns - synth::T0) as f64 / 1e9;
    assert!((t(d.job.until_ns) - 5.0).abs() < 1e-6, "{}", t(d.job.until_ns));
    let (a, b) = (t(d.events[0].ts_ns), t(d.events.last().unwrap().ts_ns));
    assert!(a <= 0.01 && (4.99..=5.0).contains(&b), "{a}..{b}");
    assert!(d.events.iter().any(|e| matches!(e.body, Body::Rto(_))));
    let header = synth::header(&[]);
    let files = write_dump(d, &dir, &header).unwrap();
    assert!(files.dir.file_name().unwrap().to_string_lossy().starts_with("stop-40961-2023"), "{files:?}");
    let back = recording::read(std::io::BufReader::new(std::fs::File::open(&files.recording).unwrap())).unwrap();
    assert_eq!(back.events, d.events);
    assert_eq!(back.header.filters, vec!["40961".to_string()]);
    assert_eq!(crate::recording::read_findings(&files.findings).unwrap()[0].duration_s, Some(3.0));
    let names: Vec<String> =
        files.pictures.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, vec!["conn-40961.png", "conn-40961.svg"]);
    assert!(std::fs::metadata(&files.pictures[0]).unwrap().len() > 20_000);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unfair_dump_holds_every_stream_of_the_group() {
    let dir = tmp("unfair");
    let (rec, findings) = synth::parallel();
    let mut r = Recorder::new(cfg(&dir)).unwrap();
    let mut opened = false;
    let mut ready = Vec::new();
    for e in &rec.events {
        if !opened && e.ts_ns >= findings[0].ts_ns {
            opened = r.on_finding(&findings[0]).is_some();
        }
        r.on_event(e);
        ready.extend(r.take_ready(e.ts_ns));
    }
    assert!(opened);
    assert_eq!(ready.len(), 1);
    let mut cookies: Vec<u64> = ready[0].events.iter().map(|e| e.conn.cookie).collect();
    cookies.dedup();
    cookies.sort_unstable();
    cookies.dedup();
    assert_eq!(cookies, vec![50000, 50001, 50002, 50003]);
    let files = write_dump(&ready[0], &dir, &synth::header(&[])).unwrap();
    assert!(files.pictures.iter().any(|p| p.ends_with("group-1.png")), "{files:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_path_event_dump_holds_the_members_that_joined_after_its_first_report() {
    use crate::model::StopOwner;
    let (rec, _) = synth::parallel();
    let mut r = Recorder::new(cfg(Path::new("/x"))).unwrap();
    let t = rec.events.len() / 2;
    for e in &rec.events[..t] {
        r.on_event(e);
    }
    let now = rec.events[t].ts_ns;
    let path = |cookies: &[u64], ongoing: bool| Finding {
        ts_ns: now,
        start_ns: now - 1_000_000_000,
        duration_s: (!ongoing).then_some(1.0),
        conn: None,
        group: Some("10.72.1.0/24".into()),
        ongoing,
        cause: crate::model::PathScope::Partial.into(),
        owner: Some(StopOwner::Network),
        mechanism: None,
        path: Default::default(),
        evidence: serde_json::json!({"conns": cookies.iter().map(|c| serde_json::json!({"cookie": c})).collect::<Vec<_>>()}),
    };
    let job = r.on_finding(&path(&[50000, 50001], true)).expect("the first report opens the dump");
    assert_eq!(job.cookies, vec![50000, 50001]);
    assert_eq!(r.on_finding(&path(&[50000, 50001, 50002], false)), None);
    let mut ready = Vec::new();
    for e in &rec.events[t..] {
        r.on_event(e);
        ready.extend(r.take_ready(e.ts_ns));
    }
    assert_eq!(ready.len(), 1);
    let mut cookies: Vec<u64> = ready[0].events.iter().map(|e| e.conn.cookie).collect();
    cookies.sort_unstable();
    cookies.dedup();
    assert_eq!(cookies, vec![50000, 50001, 50002], "the member that joined later is in the dump");
}

#[test]
fn dump_names_say_kind_who_and_the_utc_start() {
    let (_, findings) = synth::outage();
    let job = DumpJob { id: 7, finding: findings[0].clone(), cookies: vec![], from_ns: 0, until_ns: 0 };
    // Starts at 1700000000 s Unix time (2023-11-14T22:13:20Z); one day before 2000-03-01 is the 29th.
    let start = job.finding.start_ns as i64;
    assert_eq!(dump_name(&job, 1_700_000_000_000_000_000 - start), "stop-40961-20231114T221320Z");
    assert_eq!(dump_name(&job, 951_868_800_000_000_000 - 86_400_000_000_000 - start), "stop-40961-20000229T000000Z");
    let path = DumpJob { finding: Finding { conn: None, ..findings[0].clone() }, ..job };
    assert_eq!(dump_name(&path, -start), "stop-job7-19700101T000000Z");
}
