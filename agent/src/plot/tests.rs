//! Tests of the pictures: non-trivial PNGs of the expected size from synthetic recordings.
use std::collections::HashSet;
use std::path::{Path, PathBuf};

use resvg::tiny_skia::Pixmap;

use super::series::ConnSeries;
use super::*;
use crate::recording::{findings_path_for, read_findings};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tcpvigil-plot-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Share of pixels that are not white, and how many distinct colours the picture has.
fn ink(png: &Path) -> (f64, usize, u32, u32) {
    let p = Pixmap::decode_png(&std::fs::read(png).unwrap()).unwrap();
    let mut colors = HashSet::new();
    let mut inked = 0usize;
    for px in p.pixels() {
        let c = (px.red(), px.green(), px.blue());
        if c != (255, 255, 255) {
            inked += 1;
        }
        colors.insert(c);
    }
    (inked as f64 / p.pixels().len() as f64, colors.len(), p.width(), p.height())
}

#[test]
fn outage_picture_is_non_trivial_and_of_the_fixed_size() {
    let (rec, findings) = synth::outage();
    let dir = tmp("outage");
    let files = plot_recording(&rec, None, &findings, &dir).unwrap();
    let names: Vec<String> = files.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, vec!["conn-40961.svg", "conn-40961.png"]);
    let (share, colors, w, h) = ink(&files[1]);
    assert_eq!((w, h), (WIDTH, HEIGHT));
    assert!(share > 0.08, "only {:.1} % of the pixels are drawn", share * 100.0);
    assert!(colors > 50, "only {colors} colours");
    let svg = std::fs::read_to_string(&files[0]).unwrap();
    for want in [
        "10.77.0.1:40000 → 10.77.1.2:5201",
        "stop: lost_retransmit (3.0 s)",
        "RTO",
        "goodput (Mbit/s)",
        "sequence (MSS)",
        "time (s)",
        "Recovery",
    ] {
        assert!(svg.contains(want), "SVG lacks {want:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn series_of_the_outage_have_rtt_bins_a_stop_and_the_markers() {
    let (rec, findings) = synth::outage();
    let evs: Vec<&crate::model::Event> = rec.events.iter().collect();
    let fs: Vec<&Finding> = findings.iter().collect();
    let s = ConnSeries::build(&evs, &fs, synth::T0, None).unwrap();
    assert!((s.bin_s - 0.010).abs() < 1e-9, "bins are one RTT: {}", s.bin_s);
    assert_eq!(s.stops.len(), 1);
    assert!((s.stops[0].from - 1.0).abs() < 1e-9 && (s.stops[0].to - 4.0).abs() < 1e-9);
    assert_eq!(s.rtos.len(), 1);
    assert_eq!(s.lost_retrans.len(), 12);
    assert!(s.ca.iter().any(|c| c.1 == 3) && s.ca.iter().any(|c| c.1 == 4));
    // Without findings the stop is inferred from the goodput, at about the same place.
    let s = ConnSeries::build(&evs, &[], synth::T0, None).unwrap();
    assert_eq!(s.stops.len(), 1, "{:?}", s.stops);
    assert!(s.stops[0].inferred);
    // The recovery before it (2 segments per RTT) is already nearly silent.
    assert!(s.stops[0].from >= 0.45 && s.stops[0].from <= 1.05, "{:?}", s.stops);
    assert!((s.stops[0].to - 4.0).abs() < 0.4, "{:?}", s.stops);
}

#[test]
fn a_stop_named_a_path_mtu_black_hole_late_says_so_in_the_picture_with_its_segment_sizes() {
    let (rec, mut findings) = synth::outage();
    let mut named = findings.iter().find(|f| f.kind() == FindingKind::Stop).cloned().expect("a stop");
    named.ts_ns += 500_000_000;
    named.mechanism = Some(crate::model::Mechanism::MtuBlackhole);
    named.evidence["mtu_blackhole"] = serde_json::json!({"stuck_segment_bytes": 1448, "largest_through_bytes": 297});
    findings.push(named);
    let dir = tmp("mtu");
    let files = plot_recording(&rec, None, &findings, &dir).unwrap();
    let svg = std::fs::read_to_string(&files[0]).unwrap();
    let want = "stop: lost_retransmit, mtu_blackhole: 1448-byte segments never through, 297 bytes did (3.0 s)";
    assert!(svg.contains(want), "SVG lacks {want:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn parallel_streams_get_a_group_picture() {
    let (rec, findings) = synth::parallel();
    let dir = tmp("parallel");
    let files = plot_recording(&rec, None, &findings, &dir).unwrap();
    assert_eq!(files.len(), 4 * 2 + 2, "{files:?}");
    let group = files.iter().find(|p| p.to_string_lossy().ends_with("group-1.png")).unwrap();
    let (share, colors, w, h) = ink(group);
    assert_eq!((w, h), (WIDTH, HEIGHT));
    assert!(share > 0.03, "{share}");
    assert!(colors > 30, "{colors}");
    // A filter keeps one stream and no group.
    let one = plot_recording(&rec, Some(&"10.77.0.1:41002".parse().unwrap()), &[], &dir.join("one")).unwrap();
    assert_eq!(one.len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_group_whose_streams_reported_rounds_gets_a_send_phase_strip() {
    let (mut rec, findings) = synth::parallel();
    let dir = tmp("phase");
    let plain = plot_recording(&rec, None, &findings, &dir.join("plain")).unwrap();
    let svg = |files: &[std::path::PathBuf]| {
        let g = files.iter().find(|p| p.to_string_lossy().ends_with("group-1.svg")).unwrap();
        std::fs::read_to_string(g).unwrap()
    };
    assert!(!svg(&plain).contains("send phase"), "no rounds, no strip");
    // Every other sample of each stream starts a round: the streams keep their offsets.
    let mut n: std::collections::HashMap<u64, usize> = Default::default();
    for e in rec.events.iter_mut() {
        if let crate::model::Body::Sample(s) = &mut e.body {
            let k = n.entry(e.conn.cookie).or_default();
            s.round = *k % 2 == 0;
            *k += 1;
        }
    }
    let files = plot_recording(&rec, None, &findings, &dir.join("phase")).unwrap();
    let text = svg(&files);
    assert!(text.contains("send phase (RTT)") && text.contains("last in the round"), "no strip");
    let g = files.iter().find(|p| p.to_string_lossy().ends_with("group-1.png")).unwrap();
    assert_eq!((ink(g).2, ink(g).3), (WIDTH, HEIGHT));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unfair_finding_names_its_streams() {
    let (_, findings) = synth::parallel();
    assert_eq!(findings[0].cookies(), vec![50000, 50001, 50002, 50003]);
}

#[test]
fn findings_file_with_a_bad_line_is_an_error_naming_it() {
    let dir = tmp("findings");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("x.findings.jsonl");
    let (_, findings) = synth::outage();
    std::fs::write(&p, format!("{}\nnot json\n", serde_json::to_string(&findings[0]).unwrap())).unwrap();
    let e = read_findings(&p).unwrap_err();
    assert!(format!("{e:#}").contains("line 2"), "{e:#}");
    assert_eq!(findings_path_for(Path::new("/a/dump.jsonl")), Path::new("/a/dump.findings.jsonl"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Regenerates the docs pictures (docs/img/plot-outage.png, plot-parallel-4.png) and leaves the
/// demo recordings in the temp dir (`tcpvigil-demo-*.jsonl`, with `.findings.jsonl` beside):
/// `TCPVIGIL_DEMO_OUT=$PWD/docs/img cargo test -p tcpvigil --lib plot::tests::demo -- --ignored`.
#[test]
#[ignore = "writes files; run by hand to refresh docs/img"]
fn demo_pictures_and_recordings() {
    let out = PathBuf::from(std::env::var("TCPVIGIL_DEMO_OUT").unwrap_or_else(|_| "/tmp/tcpvigil-demo".into()));
    std::fs::create_dir_all(&out).unwrap();
    for (name, pick, (rec, findings)) in
        [("outage", "conn-40961.png", synth::outage()), ("parallel-4", "group-1.png", synth::parallel())]
    {
        let path = std::env::temp_dir().join(format!("tcpvigil-demo-{name}.jsonl"));
        let mut buf = Vec::new();
        crate::recording::write_header(&mut buf, &rec.header).unwrap();
        for e in &rec.events {
            crate::recording::write_event(&mut buf, e).unwrap();
        }
        std::fs::write(&path, buf).unwrap();
        let fl: String = findings.iter().map(|f| serde_json::to_string(f).unwrap() + "\n").collect();
        std::fs::write(findings_path_for(&path), fl).unwrap();
        let all = std::env::temp_dir().join(format!("tcpvigil-demo-{name}"));
        let files = plot_recording(&rec, None, &findings, &all).unwrap();
        std::fs::copy(all.join(pick), out.join(format!("plot-{name}.png"))).unwrap();
        eprintln!("{name}: {} pictures in {}, recording {}", files.len(), all.display(), path.display());
    }
}

#[derive(clap::Parser, Debug)]
struct Cli {
    #[command(flatten)]
    plot: PlotArgs,
}

#[test]
fn plot_command_line_takes_a_recording_out_dir_and_filter() {
    use clap::Parser;
    let a = Cli::try_parse_from(["t", "rec.jsonl", "--out", "pics", "--conn", ":5201"]).unwrap().plot;
    assert_eq!(a.recording, Path::new("rec.jsonl"));
    assert_eq!(a.out, Path::new("pics"));
    assert_eq!(a.conn, Some(":5201".parse().unwrap()));
    assert_eq!(Cli::try_parse_from(["t", "r"]).unwrap().plot.out, Path::new("."));
    assert!(Cli::try_parse_from(["t", "r", "--conn", ":0"]).is_err());
}

#[test]
fn run_reads_the_recording_and_its_findings_sibling() {
    let dir = tmp("run");
    std::fs::create_dir_all(&dir).unwrap();
    let (rec, findings) = synth::outage();
    let path = dir.join("x.jsonl");
    let mut buf = Vec::new();
    crate::recording::write_header(&mut buf, &rec.header).unwrap();
    for e in &rec.events {
        crate::recording::write_event(&mut buf, e).unwrap();
    }
    std::fs::write(&path, buf).unwrap();
    std::fs::write(findings_path_for(&path), serde_json::to_string(&findings[1]).unwrap() + "\n").unwrap();
    let args = PlotArgs { recording: path.clone(), out: dir.join("out"), conn: None, findings: None };
    let files = run(&args).unwrap();
    let svg = std::fs::read_to_string(&files[0]).unwrap();
    assert!(svg.contains("stop: lost_retransmit"), "the sibling findings were used");
    std::fs::write(&path, "not a recording\n").unwrap();
    let e = run(&args).unwrap_err();
    assert!(format!("{e:#}").contains("not a tcpvigil recording header"), "{e:#}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The daemon samples a bulk connection once per 50 ms: goodput bins about that wide must not
/// alternate between empty and doubled (the aliasing the first live dumps showed).
#[test]
fn periodic_samples_give_even_goodput_bins_and_a_stop_stays_empty() {
    let (rec, _) = synth::outage();
    let proto = rec.events.iter().find(|e| matches!(e.body, crate::model::Body::Sample(_))).unwrap().clone();
    let crate::model::Body::Sample(base) = &proto.body else { unreachable!() };
    let rate = 25_000_000u64; // bytes/s: 200 Mbit/s
    let mut events = Vec::new();
    let mut t_ns = 0u64;
    for i in 0..100u64 {
        // 50 ms ± 3 ms; silent from 2.0 s to 3.0 s (a stop: nothing delivered).
        t_ns += if i % 2 == 0 { 53 } else { 47 } * 1_000_000;
        let at = if t_ns < 2_000_000_000 {
            t_ns
        } else if t_ns < 3_000_000_000 {
            continue;
        } else {
            t_ns - 1_000_000_000
        };
        let mut s = base.clone();
        s.srtt_us = 52_000;
        s.bytes_acked = 1 + rate * at / 1_000_000_000;
        s.snd_una = s.bytes_acked as u32;
        events.push(crate::model::Event {
            ts_ns: synth::T0 + t_ns,
            conn: proto.conn,
            body: crate::model::Body::Sample(s),
        });
    }
    let evs: Vec<&crate::model::Event> = events.iter().collect();
    let s = ConnSeries::build(&evs, &[], synth::T0, None).unwrap();
    assert!((0.05..0.06).contains(&s.bin_s), "{}", s.bin_s);
    let inner = &s.goodput[1..s.goodput.len() - 1];
    for &(t, mbps) in inner {
        let silent = t > 2.06 && t + s.bin_s < 3.0;
        if silent {
            assert!(mbps < 1.0, "{mbps} Mbit/s at {t:.2} s inside the silence");
        } else if !(1.9..3.1).contains(&t) {
            assert!((mbps - 200.0).abs() < 30.0, "{mbps:.0} Mbit/s at {t:.2} s, 200 expected");
        }
    }
}
