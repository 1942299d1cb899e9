//! Tests of the host view: the list folded from a host's feed, keys that open and close a
//! connection, the screen, and the JSON lines.
use ratatui::backend::TestBackend;
use ratatui::Terminal;

use super::host::{HostState, BULK_BYTES};
use super::input::Action;
use super::render::{draw_host, Hud};
use super::state::WatchInput;
use super::views::{KeyOutcome, Views};
use super::*;
use crate::model::{cgroup, Body, Cgroup, ConnId, Event, Finding, Process, Sample, StopCause};
use crate::plot::synth;

const S: u64 = 1_000_000_000;
const ID: &str = "7d186119302244ddad365b484cbd0c9e59d2718a87cea0497650871236bba78c";

/// A sample of the synthetic outage with these bytes acknowledged.
fn sample(bytes_acked: u64) -> Sample {
    let (rec, _) = synth::outage();
    let s = rec.events.iter().find_map(|e| match &e.body {
        Body::Sample(s) => Some(s.clone()),
        _ => None,
    });
    Sample { bytes_acked, srtt_us: 20_000, ..s.expect("the outage has samples") }
}

fn conn(i: u64) -> ConnId {
    synth::conn(100 + i, &format!("10.0.0.1:{}", 40000 + i), "10.0.9.9:5201")
}

/// Process events for connections 0 (in a Podman container `tv-box`), 1 (a systemd service)
/// and 2 (no cgroup known), then `secs` seconds of samples: connection i delivers (i+1) MB/s,
/// connection 3 only 100 kB in all (not bulk).
fn host_feed(secs: u64) -> Vec<WatchInput> {
    let mut boxed = cgroup::parse(&format!("/machine.slice/libpod-{ID}.scope"));
    boxed.container_name = Some("tv-box".into());
    let cgroups = [Some(Cgroup::new(boxed)), Some(Cgroup::new(cgroup::parse("/system.slice/sync.service"))), None];
    let mut out = Vec::new();
    for (i, cg) in cgroups.into_iter().enumerate() {
        let p = Process { pid: 500 + i as u32, uid: 0, cgroup_id: 9, comm: format!("send{i}"), cgroup: cg };
        out.push(WatchInput::Event(Event { ts_ns: synth::T0, conn: conn(i as u64), body: Body::Process(p) }));
    }
    let template = sample(0);
    for t in 1..=secs * 10 {
        let ts = synth::T0 + t * S / 10;
        for i in 0..4u64 {
            let bytes = if i == 3 { 100_000 } else { (i + 1) * 100_000 * t };
            let s = template.clone();
            let s = Sample { bytes_acked: bytes, ..s };
            out.push(WatchInput::Event(Event { ts_ns: ts, conn: conn(i), body: Body::Sample(s) }));
        }
        out.push(WatchInput::Tick(ts));
    }
    out
}

fn stop(i: u64, ts: u64, ongoing: bool) -> WatchInput {
    WatchInput::Finding(Finding {
        ts_ns: ts,
        conn: Some(conn(i)),
        group: None,
        start_ns: ts - S / 2,
        duration_s: (!ongoing).then_some(0.5),
        ongoing,
        cause: StopCause::PathSilent.into(),
        owner: None,
        evidence: serde_json::json!({}),
        path: Default::default(),
        mechanism: None,
    })
}

fn host_state(inputs: &[WatchInput]) -> HostState {
    let mut h = HostState::default();
    for i in inputs {
        h.apply(i);
    }
    h
}

fn host_screen(h: &HostState, w: u16, rows: u16) -> String {
    let mut term = Terminal::new(TestBackend::new(w, rows)).unwrap();
    term.draw(|f| draw_host(f, h, &Hud::default())).unwrap();
    let buf = term.backend().buffer().clone();
    let mut s = String::new();
    for y in 0..buf.area.height {
        for x in 0..buf.area.width {
            s.push_str(buf[(x, y)].symbol());
        }
        s.push('\n');
    }
    s
}

#[test]
fn the_list_holds_bulk_connections_busiest_first_with_goodput_process_and_cgroup() {
    let h = host_state(&host_feed(5));
    let rows: Vec<_> = h.listed().collect();
    assert_eq!(
        rows.iter().map(|r| r.id.cookie).collect::<Vec<_>>(),
        vec![102, 101, 100],
        "busiest first, 103 not bulk"
    );
    // (i+1) MB/s = 8(i+1) Mb/s.
    for (r, mbps) in rows.iter().zip([24e6, 16e6, 8e6]) {
        assert!((r.goodput_bps - mbps).abs() < mbps * 0.02, "{} {}", r.goodput_bps, mbps);
    }
    let boxed = rows[2].process.as_ref().and_then(|p| p.cgroup.as_ref()).expect("cgroup kept");
    assert_eq!(boxed.container_name.as_deref(), Some("tv-box"));
    assert_eq!(rows[2].process.as_ref().unwrap().comm, "send0");
    assert!(h.get(103).is_some_and(|r| r.bytes_acked < BULK_BYTES), "followed, not listed");
    assert_eq!(h.seen, 4);
    assert_eq!(h.cursor, Some(102), "the cursor starts on the busiest");
}

#[test]
fn a_stop_marks_its_row_and_quiet_and_closed_connections_leave() {
    let mut inputs = host_feed(3);
    let end = synth::T0 + 3 * S;
    inputs.push(stop(0, end, true));
    let mut h = host_state(&inputs);
    assert_eq!(h.get(100).unwrap().stop.map(|c| c.to_string()), Some("path_silent".into()));
    h.apply(&stop(0, end + S / 10, true));
    assert_eq!(h.get(100).unwrap().stops, 1, "an update of the same stop is one stop");
    h.apply(&stop(0, end + S, false));
    assert_eq!(h.get(100).unwrap().stop, None);
    // No data for more than 2 s: nothing moves now; it stays listed (it delivered 1 MB+).
    h.tick(end + 3 * S);
    assert_eq!(h.get(102).unwrap().goodput_bps, 0.0);
    assert_eq!(h.listed().count(), 3);
    // Closed: listed as such for 5 s, then gone.
    let close = crate::model::event::StateChange { old: 1, new: 7 };
    h.apply(&WatchInput::Event(Event { ts_ns: end + 3 * S, conn: conn(2), body: Body::State(close) }));
    h.tick(end + 4 * S);
    assert!(h.get(102).unwrap().closed);
    h.tick(end + 9 * S);
    assert!(h.get(102).is_none());
    assert_eq!(h.listed().count(), 2);
}

#[test]
fn the_cursor_follows_its_connection_as_the_list_reorders() {
    let mut h = host_state(&host_feed(3));
    h.move_cursor(2);
    assert_eq!(h.cursor, Some(100));
    h.move_cursor(5);
    assert_eq!(h.cursor, Some(100), "held at the end of the list");
    // Connection 0 becomes the busiest: the cursor stays on it, now the first row.
    let t = synth::T0 + 3 * S;
    for k in 1..=20 {
        let s = sample(300_000 * 30 + 5_000_000 * k);
        h.apply(&WatchInput::Event(Event { ts_ns: t + k * S / 10, conn: conn(0), body: Body::Sample(s) }));
    }
    h.tick(t + 2 * S);
    assert_eq!(h.order[0], 100);
    assert_eq!((h.cursor, h.cursor_index()), (Some(100), 0));
    h.move_cursor(-1);
    assert_eq!(h.cursor, Some(100));
}

#[test]
fn enter_opens_the_connection_selected_for_samples_and_esc_goes_back() {
    let mut v = Views::new(&WatchOpts::host());
    for i in host_feed(3) {
        v.apply(&i);
    }
    assert_eq!(v.key(Action::Next), KeyOutcome::None);
    assert_eq!(v.key(Action::Open), KeyOutcome::Select(Some(101)));
    let st = v.single.as_ref().expect("the connection view");
    assert_eq!(st.selected_cookie(), Some(101));
    let p = st.selected().and_then(|c| c.process.as_ref()).expect("its process, from the list");
    assert_eq!(p.comm, "send1");
    // Keys now act on the connection view; its events reach it, others' do not.
    assert_eq!(v.key(Action::Open), KeyOutcome::None);
    let s = sample(9_000_000);
    v.apply(&WatchInput::Event(Event { ts_ns: synth::T0 + 4 * S, conn: conn(1), body: Body::Sample(s.clone()) }));
    v.apply(&WatchInput::Event(Event { ts_ns: synth::T0 + 4 * S, conn: conn(2), body: Body::Sample(s) }));
    assert_eq!(v.single.as_ref().unwrap().conns.len(), 1);
    assert_eq!(v.key(Action::Back), KeyOutcome::Select(None));
    assert!(v.single.is_none() && v.host.is_some());
    assert_eq!(v.key(Action::Back), KeyOutcome::None, "Esc on the list does not quit");
    assert_eq!(v.key(Action::Quit), KeyOutcome::Quit);
    assert!(!v.finished(), "the host view never finishes by itself");
    // With --conn, Esc quits as before.
    let mut c = Views::new(&WatchOpts::new(":5201".parse().unwrap()));
    assert_eq!(c.key(Action::Back), KeyOutcome::Quit);
}

#[test]
fn the_screen_lists_goodput_state_process_and_container_with_the_cursor_row() {
    let mut inputs = host_feed(3);
    inputs.push(stop(0, synth::T0 + 3 * S, true));
    let mut h = host_state(&inputs);
    h.move_cursor(1);
    let s = host_screen(&h, 160, 12);
    for want in [
        "tcpvigil watch: this host",
        "3 bulk connections",
        "1 stopped",
        "GOODPUT",
        "CONTAINER/UNIT",
        "STOP path_silent",
        "send0[500]",
        "tv-box",
        "sync.service",
        "10.0.0.1:40002 → 10.0.9.9:5201",
        "Enter",
    ] {
        assert!(s.contains(want), "{want:?} missing:\n{s}");
    }
    let lines: Vec<&str> = s.lines().collect();
    let row = |c: &str| lines.iter().position(|l| l.contains(c)).unwrap();
    assert!(row("40002") < row("40001") && row("40001") < row("40000"), "busiest first:\n{s}");
    assert!(!s.contains("40003"), "not bulk, not listed");
    // The cursor's row is drawn reversed.
    let mut term = Terminal::new(TestBackend::new(160, 12)).unwrap();
    term.draw(|f| draw_host(f, &h, &Hud::default())).unwrap();
    let buf = term.backend().buffer().clone();
    let reversed = |y: usize| buf[(3u16, y as u16)].modifier.contains(ratatui::style::Modifier::REVERSED);
    assert!(reversed(row("40001")) && !reversed(row("40002")));
    // Rows beyond the screen scroll with the cursor.
    h.move_cursor(1);
    let small = host_screen(&h, 160, 8);
    assert!(small.contains("40000") && !small.contains("40002"), "{small}");
    let empty = host_screen(&HostState::default(), 100, 10);
    assert!(empty.contains("waiting for a connection to deliver 1.0 MiB"), "{empty}");
}

#[tokio::test]
async fn json_without_a_filter_is_the_host_list_once_a_second() {
    let (tx, rx) = tokio::sync::mpsc::channel(1 << 16);
    for i in host_feed(5) {
        tx.send(i).await.unwrap();
    }
    drop(tx);
    let mut out = Vec::new();
    let sum = run_json(&WatchOpts::host(), rx, &mut out).await.unwrap();
    assert_eq!((sum.ended, sum.host_conns), (EndReason::InputEnded, Some(4)));
    let lines: Vec<serde_json::Value> =
        String::from_utf8(out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!((4..=5).contains(&lines.len()), "{} lines in 5 s", lines.len());
    let last = lines.last().unwrap();
    let conns = last["conns"].as_array().unwrap();
    assert_eq!(conns.len(), 3);
    assert_eq!(conns[0]["cookie"], 102);
    assert_eq!(conns[2]["local"], "10.0.0.1:40000");
    assert_eq!(conns[2]["process"]["cgroup"]["container_name"], "tv-box");
    assert_eq!(conns[2]["process"]["cgroup"]["container"], ID);
    assert!(conns[0]["goodput_bps"].as_f64().unwrap() > 20e6);
    assert!(lines.windows(2).all(|w| w[1]["ts_ns"].as_u64() > w[0]["ts_ns"].as_u64()));
}
