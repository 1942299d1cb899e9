//! Tests of the watch view: the state fold on the synthetic outage, the rendered screen, JSON lines.
use ratatui::backend::TestBackend;
use ratatui::Terminal;

use super::render::{draw, Hud, Scratch};
use super::state::{LogKind, WatchInput, WatchState, POINT_RES_NS};
use super::*;
use crate::model::{Body, Event, Filter};
use crate::plot::synth;

pub(super) const MS: u64 = 1_000_000;

pub(super) fn outage_inputs() -> Vec<WatchInput> {
    let (rec, findings) = synth::outage();
    replay::schedule(rec.events, findings)
}

pub(super) fn fold_until(st: &mut WatchState, inputs: &[WatchInput], until_ms: u64) {
    for i in inputs {
        let ts = match i {
            WatchInput::Event(e) => e.ts_ns,
            WatchInput::Finding(f) => f.ts_ns,
            WatchInput::Tick(t) => *t,
        };
        if ts > synth::T0 + until_ms * MS {
            break;
        }
        st.apply(i);
    }
}

pub(super) fn screen(st: &WatchState, w: u16, h: u16) -> String {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    let mut scratch = Scratch::default();
    term.draw(|f| draw(f, st, &Hud { fps: 20.0, closing: false, back: false }, &mut scratch)).unwrap();
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
fn state_folds_the_outage_into_goodput_bins_scoreboard_log_and_stop() {
    let inputs = outage_inputs();
    let mut st = WatchState::new(":5201".parse().unwrap(), false, 30);
    fold_until(&mut st, &inputs, 3000);
    let c = st.selected().unwrap();
    // Mid-stop: cwnd 1, nothing in flight, a stop with its cause, the lost retransmissions logged.
    assert_eq!(c.live.cwnd, 1);
    assert_eq!(c.live.in_flight, 0);
    assert_eq!(c.lost_retrans, 12);
    let stop = c.stop.as_ref().unwrap();
    assert!(stop.ongoing);
    assert_eq!(stop.cause.as_str(), "lost_retransmit");
    assert!(st.log.iter().any(|l| l.kind == LogKind::LostRetrans && l.repeat > 1), "lost retransmissions folded");
    assert!(st.log.iter().any(|l| l.kind == LogKind::Finding && l.text.contains("STOP lost_retransmit")));
    // Goodput bins are one RTT (10 ms) wide; during the stop they carry at most one segment.
    let stop_bins: Vec<_> = c.goodput.iter().filter(|b| b.t_end_ns > synth::T0 + 1100 * MS).collect();
    assert!(stop_bins.len() > 150, "{} bins", stop_bins.len());
    assert!(stop_bins.iter().all(|b| b.width_ns == 10_000_000));
    assert!(stop_bins.iter().all(|b| b.bytes <= synth::MSS), "at most a segment per RTT while stopped");
    assert!(c.goodput_bps(st.now_ns, 1_000_000_000) < 2e6);
    // Chart points are one per 10 ms slot at most.
    let pts: Vec<_> = c.points.iter().collect();
    assert!(pts.windows(2).all(|w| w[1].t_ns / POINT_RES_NS > w[0].t_ns / POINT_RES_NS));

    fold_until(&mut st, &inputs, u64::MAX / 4_000_000);
    let c = st.selected().unwrap();
    assert!(st.finished(), "closed connections end the view");
    assert_eq!(c.rtos, 1);
    assert!(!c.stop.as_ref().unwrap().ongoing);
    // After the RTO it runs near the bottleneck: 1 s goodput close to the best delivery rate.
    let late = c.goodput_bps(synth::T0 + 9000 * MS, 1_000_000_000);
    assert!(late > 400e6 && late < 560e6, "{late}");
    assert!(c.efficiency(late) > 0.8, "{}", c.efficiency(late));
    let mean = c.mean_goodput_bps();
    assert!(mean < late * 0.8, "the stop costs mean goodput: {mean} vs {late}");
    let sum = st.summary();
    assert_eq!(sum.len(), 1);
    assert_eq!(sum[0].stops, 1);
    assert_eq!(sum[0].stop_causes, vec![crate::model::StopCause::LostRetransmit.into()]);
    assert!(sum[0].closed);
}

#[test]
fn ticks_close_goodput_bins_while_a_connection_is_silent() {
    let (rec, _) = synth::outage();
    let mut st = WatchState::new(":5201".parse().unwrap(), false, 30);
    for e in rec.events.iter().take(50) {
        st.apply_event(e);
    }
    let n = st.selected().unwrap().goodput.len();
    st.tick(st.now_ns + 1_000 * MS);
    let c = st.selected().unwrap();
    assert!(c.goodput.len() >= n + 99, "{} -> {}", n, c.goodput.len());
    assert!(c.goodput.iter().rev().take(90).all(|b| b.bytes == 0));
}

#[test]
fn screen_shows_the_tuple_numbers_charts_and_stop_cause() {
    let inputs = outage_inputs();
    let mut st = WatchState::new(":5201".parse().unwrap(), false, 5);
    fold_until(&mut st, &inputs, 3000);
    let s = screen(&st, 160, 48);
    for want in [
        "10.77.0.1:40000 → 10.77.1.2:5201",
        "iperf3 (pid 4242)",
        "cubic",
        "SACK on",
        "MSS 1448",
        "sndbuf 4.0 MiB",
        "cwnd",
        "lost_out",
        "srtt",
        "10.0 ms",
        "efficiency",
        "STOPPED",
        "stop cause: lost_retransmit",
        "goodput per RTT bin (10 ms)",
        "sequence",
        "lost retransmission",
        "window 5 s",
    ] {
        assert!(s.contains(want), "screen lacks {want:?}:\n{s}");
    }
    assert!(s.contains('⣿') || s.chars().any(|c| ('\u{2801}'..='\u{28ff}').contains(&c)), "charts drew braille:\n{s}");
}

#[test]
fn screen_says_it_is_waiting_when_nothing_matches_yet() {
    let st = WatchState::new(":5201".parse().unwrap(), false, 30);
    let s = screen(&st, 120, 30);
    assert!(s.contains("waiting for a connection matching :5201 …"), "{s}");
}

#[test]
fn several_matches_get_tabs_and_all_gets_fairness() {
    let (rec, findings) = synth::parallel();
    let inputs = replay::schedule(rec.events, findings);
    let mut st = WatchState::new(":2811".parse().unwrap(), false, 30);
    fold_until(&mut st, &inputs, 15_000);
    assert_eq!(st.conns.len(), 4);
    let auto = st.selected;
    st.pick(true);
    assert_eq!(st.selected, (auto + 1) % 4);
    assert!(st.pinned, "a pick by the user pins the view");
    let s = screen(&st, 160, 48);
    assert!(s.contains("10.77.0.1:41000-10.77.1.2:2811") && s.contains("10.77.0.1:41003-10.77.1.2:2811"), "{s}");
    let mut st = WatchState::new(":2811".parse().unwrap(), true, 5);
    fold_until(&mut st, &inputs, 15_000);
    let f = st.fairness(&mut Vec::new()).unwrap();
    assert!(f.jain > 0.75 && f.jain < 0.95, "{f:?}");
    let s = screen(&st, 160, 48);
    for want in ["4 connections matching :2811", "Jain fairness", "UNFAIR unfair_streams", "goodput per stream"] {
        assert!(s.contains(want), "screen lacks {want:?}:\n{s}");
    }
}

#[test]
fn the_group_view_shows_the_send_phase_when_the_streams_report_rounds() {
    let (mut rec, findings) = synth::parallel();
    let plain = replay::schedule(rec.events.clone(), findings.clone());
    let mut st = WatchState::new(":2811".parse().unwrap(), true, 5);
    fold_until(&mut st, &plain, 15_000);
    assert!(st.send_phase().is_none());
    assert!(!screen(&st, 160, 48).contains("send order"), "no rounds, no phase");
    // Every other sample of each stream starts a round.
    let mut n: std::collections::HashMap<u64, usize> = Default::default();
    for e in rec.events.iter_mut() {
        if let crate::model::Body::Sample(s) = &mut e.body {
            let k = n.entry(e.conn.cookie).or_default();
            s.round = *k % 2 == 0;
            *k += 1;
        }
    }
    let inputs = replay::schedule(rec.events, findings);
    let mut st = WatchState::new(":2811".parse().unwrap(), true, 5);
    fold_until(&mut st, &inputs, 15_000);
    let (r, rows) = st.send_phase().expect("a send phase");
    assert_eq!(r.streams.len(), 4);
    assert!(!rows.is_empty());
    let s = screen(&st, 160, 48);
    for want in ["send order in the RTT", "send phase: where in the RTT"] {
        assert!(s.contains(want), "screen lacks {want:?}:\n{s}");
    }
}

#[test]
fn zoom_steps_and_pause_freeze_the_view_end() {
    let mut st = WatchState::new(":1".parse().unwrap(), false, 30);
    st.zoom(true);
    assert_eq!(st.window_s, 60);
    st.zoom(false);
    st.zoom(false);
    assert_eq!(st.window_s, 20);
    st.tick(100);
    st.toggle_pause();
    st.tick(500);
    assert_eq!(st.view_end_ns(), 100);
    st.toggle_pause();
    assert_eq!(st.view_end_ns(), 500);
}

#[tokio::test]
async fn json_lines_are_the_model_events_field_by_field() {
    let (rec, findings) = synth::outage();
    let want: Vec<Event> = rec.events.clone();
    let (tx, rx) = tokio::sync::mpsc::channel(1 << 16);
    for i in replay::schedule(rec.events, findings.clone()) {
        tx.send(i).await.unwrap();
    }
    drop(tx);
    let mut out = Vec::new();
    let opts = WatchOpts { json: true, ..WatchOpts::new(":5201".parse::<Filter>().unwrap()) };
    let sum = run_json(&opts, rx, &mut out).await.unwrap();
    assert_eq!(sum.ended, EndReason::Closed);
    let text = String::from_utf8(out).unwrap();
    let mut got_events = Vec::new();
    let mut got_findings = 0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v.get("kind").is_some() {
            got_findings += 1;
        } else {
            got_events.push(serde_json::from_value::<Event>(v).unwrap());
        }
    }
    assert_eq!(got_findings, findings.len());
    assert_eq!(got_events.len(), want.len());
    for (g, w) in got_events.iter().zip(&want) {
        assert_eq!(g, w);
    }
    let samples = got_events.iter().filter(|e| matches!(e.body, Body::Sample(_))).count();
    assert!(samples > 1000);
}

#[tokio::test]
async fn replay_feeds_the_recording_in_order_with_ticks() {
    let dir = std::env::temp_dir().join(format!("tcpvigil-watch-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (rec, findings) = synth::outage();
    let path = dir.join("outage.jsonl");
    let mut buf = Vec::new();
    crate::recording::write_header(&mut buf, &rec.header).unwrap();
    for e in &rec.events {
        crate::recording::write_event(&mut buf, e).unwrap();
    }
    std::fs::write(&path, buf).unwrap();
    let fl: String = findings.iter().map(|f| serde_json::to_string(f).unwrap() + "\n").collect();
    std::fs::write(crate::recording::findings_path_for(&path), fl).unwrap();
    let mut rx = replay::start(&path, None, 1000.0).unwrap();
    let (mut events, mut ticks, mut finds, mut last) = (0, 0, 0, 0);
    while let Some(i) = rx.recv().await {
        let ts = match &i {
            WatchInput::Event(e) => {
                events += 1;
                e.ts_ns
            }
            WatchInput::Finding(f) => {
                finds += 1;
                f.ts_ns
            }
            WatchInput::Tick(t) => {
                ticks += 1;
                *t
            }
        };
        assert!(ts >= last, "in time order");
        last = ts;
    }
    assert_eq!(events, rec.events.len());
    assert_eq!(finds, 2);
    assert!(ticks >= 200, "a tick every 50 ms over 10 s: {ticks}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `TCPVIGIL_WATCH_REPLAY=FILE cargo test -p tcpvigil --lib watch_replay_in_a_terminal -- --ignored
/// --nocapture` runs the real terminal view against a recording (the tmux check uses it);
/// TCPVIGIL_WATCH_CONN=host opens the host view on it.
#[tokio::test]
#[ignore = "needs a terminal; run by hand or from tmux"]
async fn watch_replay_in_a_terminal() {
    let path = std::env::var("TCPVIGIL_WATCH_REPLAY").expect("set TCPVIGIL_WATCH_REPLAY=RECORDING");
    let filter = std::env::var("TCPVIGIL_WATCH_CONN").unwrap_or_else(|_| ":5201".into());
    let mut opts = match filter.as_str() {
        "host" => WatchOpts::host(),
        f => WatchOpts::new(f.parse().unwrap()),
    };
    opts.replay = Some(path.into());
    opts.all = std::env::var("TCPVIGIL_WATCH_ALL").is_ok();
    opts.window = 10;
    let (_tx, rx) = tokio::sync::mpsc::channel(1);
    let s = run(opts, rx, Box::new(|_| {})).await.unwrap();
    eprintln!("{}", serde_json::to_string(&s).unwrap());
}

/// A ratatui buffer as an SVG terminal screenshot (8x16 px cells, DejaVu Sans Mono).
fn buffer_svg(buf: &ratatui::buffer::Buffer) -> String {
    use ratatui::style::Color;
    use std::fmt::Write as _;
    fn hex(c: Color, default: &str) -> String {
        let s = match c {
            Color::Reset => return default.to_string(),
            Color::Black => "#1e1e1e",
            Color::Red => "#e05252",
            Color::Green => "#5fbf5f",
            Color::Yellow => "#e5c07b",
            Color::Blue => "#5f87d7",
            Color::Magenta => "#c678dd",
            Color::Cyan => "#56b6c2",
            Color::Gray => "#b0b0b0",
            Color::DarkGray => "#6b6b6b",
            Color::LightRed => "#ff7b72",
            Color::LightGreen => "#8fe08f",
            Color::LightYellow => "#f0e08a",
            Color::LightBlue => "#79b8ff",
            Color::LightMagenta => "#e0a0f0",
            Color::LightCyan => "#8be9fd",
            Color::White => "#f0f0f0",
            Color::Rgb(r, g, b) => return format!("#{r:02x}{g:02x}{b:02x}"),
            Color::Indexed(_) => "#d0d0d0",
        };
        s.to_string()
    }
    let (cw, ch) = (8.0, 16.0);
    let (w, h) = (buf.area.width as f64 * cw, buf.area.height as f64 * ch);
    let mut s = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="DejaVu Sans Mono, monospace" font-size="13.3"><rect width="{w}" height="{h}" fill="#1e1e1e"/>"##
    );
    for y in 0..buf.area.height {
        for x in 0..buf.area.width {
            let c = &buf[(x, y)];
            let (px, py) = (x as f64 * cw, y as f64 * ch);
            if c.bg != Color::Reset {
                let _ = write!(
                    s,
                    r#"<rect x="{px}" y="{py}" width="{cw}" height="{ch}" fill="{}"/>"#,
                    hex(c.bg, "#1e1e1e")
                );
            }
            let sym = c.symbol();
            if sym.trim().is_empty() {
                continue;
            }
            let esc = sym.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
            let bold = if c.modifier.contains(ratatui::style::Modifier::BOLD) { r#" font-weight="bold""# } else { "" };
            let _ = write!(s, r#"<text x="{px}" y="{}" fill="{}"{bold}>{esc}</text>"#, py + 12.5, hex(c.fg, "#d0d0d0"));
        }
    }
    s.push_str("</svg>\n");
    s
}

/// A screenshot of the view 3 s into the synthetic outage (mid-stop), without a kernel, as
/// `watch-synthetic.png` (the README's screenshot is of a live run: tests/watch_live.rs):
/// `TCPVIGIL_DEMO_OUT=/tmp/x cargo test -p tcpvigil --lib watch::tests::screenshot -- --ignored`.
#[test]
#[ignore = "writes files; run by hand"]
fn screenshot_of_the_outage_mid_stop() {
    let out =
        std::path::PathBuf::from(std::env::var("TCPVIGIL_DEMO_OUT").unwrap_or_else(|_| "/tmp/tcpvigil-demo".into()));
    std::fs::create_dir_all(&out).unwrap();
    let inputs = outage_inputs();
    let mut st = WatchState::new(":5201".parse().unwrap(), false, 5);
    fold_until(&mut st, &inputs, 3000);
    let mut term = Terminal::new(TestBackend::new(160, 48)).unwrap();
    term.draw(|f| draw(f, &st, &Hud { fps: 20.0, closing: false, back: false }, &mut Scratch::default())).unwrap();
    let svg = buffer_svg(term.backend().buffer());
    std::fs::write(out.join("watch-synthetic.png"), crate::plot::svg::png(&svg).unwrap()).unwrap();
}

/// What a frame costs, without a terminal: `cargo test -p tcpvigil --release --lib
/// render_cost -- --nocapture` prints it (the debug build is several times slower).
#[test]
fn render_cost_per_frame_is_measured_on_a_full_window() {
    let inputs = outage_inputs();
    let mut st = WatchState::new(":5201".parse().unwrap(), false, 10);
    fold_until(&mut st, &inputs, 10_000);
    let mut term = Terminal::new(TestBackend::new(160, 48)).unwrap();
    let mut scratch = Scratch::default();
    let hud = Hud { fps: 20.0, closing: false, back: false };
    term.draw(|f| draw(f, &st, &hud, &mut scratch)).unwrap();
    let n = 50;
    let t = std::time::Instant::now();
    for _ in 0..n {
        term.draw(|f| draw(f, &st, &hud, &mut scratch)).unwrap();
    }
    let ms = t.elapsed().as_secs_f64() * 1e3 / n as f64;
    eprintln!("watch: {ms:.2} ms to build a 160x48 frame with a 10 s window ({:.0} frames/s possible)", 1e3 / ms);
    assert!(ms < 500.0, "{ms} ms per frame");
}

#[derive(clap::Parser, Debug)]
struct Cli {
    #[command(flatten)]
    watch: WatchOpts,
}

#[test]
fn command_line_options_have_ranges_and_parse_the_filter() {
    use clap::Parser;
    let ok = Cli::try_parse_from(["t", "--conn", "10.0.0.2:5201", "--duration", "5", "--all"]).unwrap().watch;
    assert_eq!(ok.conn, Some("10.0.0.2:5201".parse().unwrap()));
    let host = Cli::try_parse_from(["t", "--json"]).unwrap().watch;
    assert_eq!((host.conn, host.json), (None, true), "no filter: the host view");
    assert_eq!((ok.duration, ok.all, ok.window, ok.fps), (Some(5), true, 30, 20));
    for bad in [
        vec!["t", "--all"],
        vec!["t", "--conn", "nonsense:x"],
        vec!["t", "--conn", ":1", "--duration", "0"],
        vec!["t", "--conn", ":1", "--window", "121"],
        vec!["t", "--conn", ":1", "--fps", "0"],
        vec!["t", "--conn", ":1", "--replay-findings", "f"],
        vec!["t", "--conn", ":1", "--replay", "r", "--replay-speed", "0"],
    ] {
        assert!(Cli::try_parse_from(&bad).is_err(), "{bad:?} was accepted");
    }
    let r = Cli::try_parse_from(["t", "--conn", ":1", "--replay", "r.jsonl", "--replay-speed", "10"]).unwrap().watch;
    assert_eq!((r.replay.unwrap().to_string_lossy().as_ref(), r.replay_speed), ("r.jsonl", 10.0));
}

/// The live view's clock runs ahead of the events it has read (the reader polls every 20 ms and
/// stalls while it takes snapshots): bytes must still land in the bins of their own time.
#[test]
fn goodput_bins_keep_their_bytes_when_the_clock_runs_ahead_of_the_events() {
    let inputs = outage_inputs();
    let max_bps = |lag_ns: u64| {
        let mut st = WatchState::new(":5201".parse().unwrap(), false, 30);
        for i in &inputs {
            st.apply(i);
            if let WatchInput::Event(e) = i {
                st.tick(e.ts_ns + lag_ns);
            }
        }
        let c = &st.conns[0];
        (c.goodput.iter().map(|b| b.bps()).fold(0.0, f64::max), c.total_bytes)
    };
    let (on_time, bytes) = max_bps(0);
    for lag_ms in [30, 150] {
        let (late, late_bytes) = max_bps(lag_ms * MS);
        assert_eq!(late_bytes, bytes);
        assert!(late <= on_time * 1.01, "lag {lag_ms} ms: a bin of {late:.0} bit/s, on time at most {on_time:.0}");
    }
}

#[test]
fn a_stop_whose_cause_sharpens_is_shown_and_logged_with_its_new_cause_and_owner() {
    let inputs = outage_inputs();
    let mut st = WatchState::new(":5201".parse().unwrap(), false, 30);
    fold_until(&mut st, &inputs, 3000);
    let first = inputs
        .iter()
        .find_map(|i| match i {
            WatchInput::Finding(f) if f.kind() == crate::model::FindingKind::Stop => Some(f.clone()),
            _ => None,
        })
        .expect("the synthetic outage has a stop");
    let mut later = first.clone();
    later.ts_ns = synth::T0 + 3000 * MS;
    later.cause = crate::model::StopCause::PathSilent.into();
    later.owner = Some(crate::model::StopOwner::Network);
    st.apply(&WatchInput::Finding(later));
    let c = st.selected().unwrap();
    let stop = c.stop.as_ref().unwrap();
    assert_eq!((stop.cause.as_str(), stop.owner), ("path_silent", Some(crate::model::StopOwner::Network)));
    assert_eq!(c.stops, 1, "the same stop, not a second one");
    assert_eq!(
        c.stop_causes,
        vec![crate::model::StopCause::PathSilent.into()],
        "the summary names the cause it has now"
    );
    assert!(st.log.iter().any(|l| l.text.starts_with("STOP path_silent (network)")), "the change is logged");
    let s = screen(&st, 160, 48);
    assert!(s.contains("path_silent (network)"), "{s}");
}

#[test]
fn a_stop_named_late_as_a_path_mtu_black_hole_is_shown_and_logged_with_its_evidence_and_fix() {
    let inputs = outage_inputs();
    let mut st = WatchState::new(":5201".parse().unwrap(), false, 30);
    fold_until(&mut st, &inputs, 3000);
    let mut named = inputs
        .iter()
        .find_map(|i| match i {
            WatchInput::Finding(f) if f.kind() == crate::model::FindingKind::Stop => Some(f.clone()),
            _ => None,
        })
        .expect("the synthetic outage has a stop");
    named.ts_ns = synth::T0 + 3000 * MS;
    named.mechanism = Some(crate::model::Mechanism::MtuBlackhole);
    if let Some(m) = named.evidence.as_object_mut() {
        m.insert(
            "mtu_blackhole".into(),
            serde_json::json!({"stuck_segment_bytes": 1448, "largest_through_bytes": 297}),
        );
        m.insert("advice".into(), "Set net.ipv4.tcp_mtu_probing=1".into());
    }
    st.apply(&WatchInput::Finding(named));
    let stop = st.selected().unwrap().stop.clone().unwrap();
    let (m, detail, advice) = stop.mechanism.expect("the mechanism is kept");
    assert_eq!(m, crate::model::Mechanism::MtuBlackhole);
    assert!(detail.contains("stuck_segment_bytes=1448") && advice.contains("tcp_mtu_probing=1"), "{detail} / {advice}");
    assert!(!stop.evidence.contains("advice"), "the advice has a line of its own: {}", stop.evidence);
    assert!(st.log.iter().any(|l| l.text.contains("[mtu_blackhole: ")), "the naming is logged");
    let s = screen(&st, 160, 48);
    assert!(s.contains("mtu_blackhole") && s.contains("fix: Set net.ipv4.tcp_mtu_probing=1"), "{s}");
}
