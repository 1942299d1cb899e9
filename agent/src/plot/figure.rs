//! The pictures, in the papers' style: one connection (goodput, window and scoreboard, sequence)
//! and a group of parallel streams (per-stream goodput, delivered bytes and, when reported, send phase).
use super::series::ConnSeries;
use super::svg::{Panel, Svg};
use crate::detect::phase::{self, StreamRounds};
use crate::model::event::ca_state_name;
use crate::model::units::{human_bps, jain};

pub const WIDTH: u32 = 1200;
pub const HEIGHT: u32 = 800;
const LEFT: f64 = 84.0;
const PLOT_W: f64 = 930.0;
const LEGEND_X: f64 = LEFT + PLOT_W + 18.0;

const C_GOODPUT: &str = "#1f77b4";
const C_CWND: &str = "#1f77b4";
const C_FLIGHT: &str = "#2ca02c";
const C_LOST: &str = "#d62728";
const C_SACKED: &str = "#9467bd";
const C_RETRANS: &str = "#ff7f0e";
const C_SSTHRESH: &str = "#7f7f7f";
const C_UNA: &str = "#111111";
const C_NXT: &str = "#17becf";
const C_STOP: &str = "#ff9896";
pub const STREAM_COLORS: [&str; 8] =
    ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

fn ca_color(s: u8) -> Option<&'static str> {
    match s {
        1 => Some("#ffe066"),
        2 => Some("#ffa94d"),
        3 => Some("#ff8787"),
        4 => Some("#c92a2a"),
        _ => None,
    }
}

fn legend(svg: &mut Svg, y: f64, items: &[(&str, &str)]) {
    for (i, (color, name)) in items.iter().enumerate() {
        let yy = y + 8.0 + i as f64 * 17.0;
        svg.line((LEGEND_X, yy), (LEGEND_X + 22.0, yy), color, 3.0, None);
        svg.text(LEGEND_X + 28.0, yy + 4.0, 12.0, "start", "#222", name, None, false);
    }
}

/// A panel's caption, at its top right.
fn caption(svg: &mut Svg, p: &Panel, text: &str) {
    svg.text(p.x + p.w - 4.0, p.y + 14.0, 11.0, "end", "#333", text, None, false);
}

fn max_of(v: impl Iterator<Item = f64>) -> f64 {
    v.filter(|x| x.is_finite()).fold(0.0, f64::max)
}

fn shade_stops(svg: &mut Svg, p: &Panel, s: &ConnSeries) {
    for st in &s.stops {
        let (a, b) = (p.px(st.from.max(p.xr.0)), p.px(st.to.min(p.xr.1)));
        svg.rect(a, p.y, (b - a).max(1.0), p.h, C_STOP, 0.35);
    }
}

/// Per connection: (a) goodput in RTT bins with stops shaded, (b) cwnd / in_flight / scoreboard
/// with the CA state band and RTO and lost-retransmission markers, (c) sequence progress.
pub fn conn_figure(s: &ConnSeries) -> String {
    let mut svg = Svg::new(WIDTH, HEIGHT);
    let xr = (s.start, s.end.max(s.start + s.bin_s));
    // Title: the 4-tuple, who, how.
    let mut title = format!("{} → {}", s.id.tuple.local, s.id.tuple.remote);
    if let Some(o) = &s.owner {
        title.push_str(&format!("   {} (pid {})", o.comm, o.pid));
    }
    svg.text(LEFT, 26.0, 18.0, "start", "#111", &title, None, true);
    let mut sub = crate::model::Sk(s.id.cookie).to_string();
    if let Some(n) = &s.snap {
        let o = n.options;
        sub.push_str(&format!(
            " · {} · MSS {} · SACK {} · wscale {} · TS {}",
            if n.cc.is_empty() { "?" } else { &n.cc },
            n.mss,
            if o.sack { "on" } else { "OFF" },
            if o.wscale { "on" } else { "OFF" },
            if o.timestamps { "on" } else { "OFF" }
        ));
    }
    sub.push_str(&format!(
        " · mean goodput {} · max delivery rate {} · {} RTO · {} lost retransmissions",
        human_bps(s.mean_bps()),
        human_bps(s.max_rate_bps),
        s.rtos.len(),
        s.lost_retrans.len()
    ));
    svg.text(LEFT, 46.0, 12.0, "start", "#444", &sub, None, false);

    // (a) goodput.
    let gmax = max_of(s.goodput.iter().map(|g| g.1)).max(max_of([s.max_rate_bps / 1e6].into_iter())).max(1.0);
    let a = Panel { x: LEFT, y: 66.0, w: PLOT_W, h: 185.0, xr, yr: (0.0, gmax * 1.22) };
    shade_stops(&mut svg, &a, s);
    a.axes(&mut svg, "", "goodput (Mbit/s)");
    let mut px = Vec::new();
    // Bars as a step line: each bin drawn from its start to its end.
    a.decimate(s.goodput.iter().flat_map(|&(t, v)| [(t, v), (t + s.bin_s * 0.999, v)]), &mut px);
    svg.polyline(&px, C_GOODPUT, 1.0, Some(a.py(0.0)), None);
    if s.max_rate_bps > 0.0 {
        let y = a.py(s.max_rate_bps / 1e6);
        svg.line((a.x, y), (a.x + a.w, y), "#555", 1.0, Some("6 4"));
    }
    for st in &s.stops {
        let label = if st.inferred {
            format!("stop (inferred, {:.1} s)", st.to - st.from)
        } else {
            format!("stop: {} ({:.1} s)", st.cause, st.to - st.from)
        };
        svg.text(a.px(st.from.max(xr.0)) + 4.0, a.y + 14.0, 12.0, "start", "#a61e1e", &label, None, true);
    }
    caption(&mut svg, &a, &format!("(a) goodput per {:.0} ms bin (≈1 RTT)", s.bin_s * 1e3));
    legend(&mut svg, a.y, &[(C_GOODPUT, "goodput"), ("#555", "max delivery"), (C_STOP, "stop")]);

    // (b) window and scoreboard, with the CA band above it.
    let bmax = max_of(s.board.iter().flat_map(|b| [b.cwnd, b.in_flight, b.lost, b.sacked, b.retrans])).max(4.0);
    let b = Panel { x: LEFT, y: 300.0, w: PLOT_W, h: 200.0, xr, yr: (0.0, bmax * 1.08) };
    let band_y = b.y - 14.0;
    svg.text(LEFT - 6.0, band_y + 9.0, 10.0, "end", "#333", "CA state", None, false);
    for (i, &(t, st)) in s.ca.iter().enumerate() {
        let until = s.ca.get(i + 1).map_or(xr.1, |n| n.0);
        if let Some(c) = ca_color(st) {
            let (x0, x1) = (b.px(t.max(xr.0)), b.px(until.min(xr.1)));
            svg.rect(x0, band_y, (x1 - x0).max(1.0), 10.0, c, 1.0);
        }
    }
    svg.frame(b.x, band_y, b.w, 10.0, "#999");
    shade_stops(&mut svg, &b, s);
    b.axes(&mut svg, "", "segments");
    type Get = fn(&super::series::Board) -> f64;
    let series: [(&str, Get); 5] = [
        (C_SACKED, |p| p.sacked),
        (C_LOST, |p| p.lost),
        (C_RETRANS, |p| p.retrans),
        (C_FLIGHT, |p| p.in_flight),
        (C_CWND, |p| p.cwnd),
    ];
    for (color, f) in series {
        // Step: a value holds until the next event.
        let pts = s.board.windows(2).flat_map(|w| [(w[0].t, f(&w[0])), (w[1].t, f(&w[0]))]);
        b.decimate(pts.chain(s.board.last().map(|p| (p.t, f(p)))), &mut px);
        svg.polyline(&px, color, 1.4, None, None);
    }
    let ss: Vec<(f64, f64)> = s.board.iter().filter(|p| p.ssthresh < bmax * 1.08).map(|p| (p.t, p.ssthresh)).collect();
    b.decimate(ss, &mut px);
    svg.polyline(&px, C_SSTHRESH, 1.0, None, Some("4 3"));
    for &t in &s.rtos {
        let x = b.px(t);
        svg.line((x, a.y), (x, b.y + b.h), "#c92a2a", 1.5, Some("5 3"));
        svg.text(x + 3.0, b.y + 12.0, 12.0, "start", "#c92a2a", "RTO", None, true);
    }
    for &(t, _) in &s.lost_retrans {
        svg.cross((b.px(t), b.y + 22.0), 4.0, "#c92a2a");
    }
    caption(&mut svg, &b, "(b) window and scoreboard");
    legend(
        &mut svg,
        band_y,
        &[
            (C_CWND, "cwnd"),
            (C_FLIGHT, "in_flight"),
            (C_LOST, "lost_out"),
            (C_SACKED, "sacked_out"),
            (C_RETRANS, "retrans_out"),
            (C_SSTHRESH, "ssthresh"),
        ],
    );
    let mut ly = band_y + 112.0;
    for st in 1..=4u8 {
        if let Some(c) = ca_color(st) {
            svg.rect(LEGEND_X, ly, 22.0, 9.0, c, 1.0);
            svg.text(LEGEND_X + 28.0, ly + 9.0, 11.0, "start", "#222", ca_state_name(st), None, false);
            ly += 14.0;
        }
    }
    svg.cross((LEGEND_X + 11.0, ly + 6.0), 4.0, "#c92a2a");
    svg.text(LEGEND_X + 28.0, ly + 10.0, 11.0, "start", "#222", "lost retransmission", None, false);

    // (c) sequence progress.
    let lo = s.seq.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let hi = max_of(s.seq.iter().map(|p| p.2).chain(s.sacks.iter().map(|p| p.2)));
    let (lo, hi) = if lo.is_finite() { (lo.min(0.0), hi.max(lo + 1.0)) } else { (0.0, 1.0) };
    let c = Panel { x: LEFT, y: 540.0, w: PLOT_W, h: 205.0, xr, yr: (lo, hi * 1.03) };
    shade_stops(&mut svg, &c, s);
    c.axes(&mut svg, "time (s)", "sequence (MSS)");
    // SACK blocks: per pixel column, the span they cover.
    let mut cols: Vec<(f64, f64, f64)> = Vec::new();
    for &(t, a0, a1) in &s.sacks {
        let x = c.px(t).floor();
        match cols.last_mut() {
            Some(l) if l.0 == x => {
                l.1 = l.1.min(a0);
                l.2 = l.2.max(a1);
            }
            _ => cols.push((x, a0, a1)),
        }
    }
    for (x, a0, a1) in cols {
        svg.line((x + 0.5, c.py(a0)), (x + 0.5, c.py(a1)), C_SACKED, 1.0, None);
    }
    c.decimate(s.seq.iter().map(|p| (p.0, p.2)), &mut px);
    svg.polyline(&px, C_NXT, 1.4, None, None);
    c.decimate(s.seq.iter().map(|p| (p.0, p.1)), &mut px);
    svg.polyline(&px, C_UNA, 1.6, None, None);
    let step = (s.retrans.len() / 2000).max(1);
    for &(t, q) in s.retrans.iter().step_by(step) {
        svg.circle(c.pt((t, q)), 1.6, C_RETRANS);
    }
    for &(t, q) in &s.lost_retrans {
        svg.cross(c.pt((t, q)), 3.5, "#c92a2a");
    }
    svg.text(c.x + 4.0, c.y + 14.0, 11.0, "start", "#333", "(c) sequence relative to the start", None, false);
    legend(
        &mut svg,
        c.y,
        &[(C_UNA, "snd_una"), (C_NXT, "snd_nxt"), (C_SACKED, "SACK blocks"), (C_RETRANS, "retransmission")],
    );
    svg.finish()
}

/// A group of parallel streams (the parallel-streams study): per-stream goodput over time and delivered bytes.
pub fn group_figure(title: &str, streams: &[ConnSeries]) -> String {
    let mut svg = Svg::new(WIDTH, HEIGHT);
    let start = streams.iter().map(|s| s.start).fold(f64::INFINITY, f64::min);
    let end = max_of(streams.iter().map(|s| s.end)).max(start + 1.0);
    let xr = (start, end);
    let means: Vec<f64> = streams.iter().map(|s| s.mean_bps()).collect();
    let j = jain(&means).unwrap_or(0.0);
    let (mn, mx) = means.iter().fold((f64::INFINITY, 0.0f64), |(a, b), &m| (a.min(m), b.max(m)));
    svg.text(LEFT, 26.0, 18.0, "start", "#111", title, None, true);
    let sub = format!(
        "{} streams · total {} · Jain fairness {:.2} · slowest/fastest {:.2} · an even split of the data ends at {:.0} % of the total rate",
        streams.len(),
        human_bps(means.iter().sum()),
        j,
        if mx > 0.0 { mn / mx } else { 0.0 },
        if mx > 0.0 { 100.0 * mn * streams.len() as f64 / means.iter().sum::<f64>() } else { 0.0 }
    );
    svg.text(LEFT, 46.0, 12.0, "start", "#444", &sub, None, false);
    let gmax = max_of(streams.iter().flat_map(|s| s.goodput.iter().map(|g| g.1))).max(1.0);
    let a = Panel { x: LEFT, y: 70.0, w: PLOT_W, h: 380.0, xr, yr: (0.0, gmax * 1.08) };
    a.axes(&mut svg, "", "goodput per stream (Mbit/s)");
    let mut px = Vec::new();
    for (i, s) in streams.iter().enumerate() {
        a.decimate(s.goodput.iter().map(|&(t, v)| (t + s.bin_s / 2.0, v)), &mut px);
        svg.polyline(&px, STREAM_COLORS[i % STREAM_COLORS.len()], 1.6, None, None);
    }
    let bin = streams.first().map_or(0.0, |s| s.bin_s);
    caption(&mut svg, &a, &format!("goodput per {:.0} ms bin", bin * 1e3));
    let names: Vec<String> =
        streams.iter().zip(&means).map(|(s, m)| format!(":{} {}", s.id.tuple.local.port(), human_bps(*m))).collect();
    let items: Vec<(&str, &str)> =
        names.iter().enumerate().map(|(i, n)| (STREAM_COLORS[i % STREAM_COLORS.len()], n.as_str())).collect();
    legend(&mut svg, a.y, &items);
    // The send phase, when the streams reported their rounds: each cycle's phase of each stream.
    let input: Vec<StreamRounds> =
        streams.iter().enumerate().map(|(i, s)| StreamRounds { cookie: i as u64, starts: &s.rounds }).collect();
    let phases = phase::per_cycle(&input, 8, 100_000);
    // Delivered bytes: the gap between the lines is the data the slowest stream still owes.
    let bmax = max_of(streams.iter().map(|s| s.bytes as f64 / 1e6)).max(1.0);
    let bh = if phases.is_some() { 110.0 } else { 240.0 };
    let b = Panel { x: LEFT, y: 500.0, w: PLOT_W, h: bh, xr, yr: (0.0, bmax * 1.05) };
    b.axes(&mut svg, if phases.is_some() { "" } else { "time (s)" }, "delivered (MB)");
    for (i, s) in streams.iter().enumerate() {
        let mut acc = 0.0;
        let pts = s.goodput.iter().map(|&(t, v)| {
            acc += v * s.bin_s / 8.0;
            (t + s.bin_s, acc)
        });
        b.decimate(pts, &mut px);
        svg.polyline(&px, STREAM_COLORS[i % STREAM_COLORS.len()], 1.8, None, None);
    }
    if let Some((r, rows)) = phases {
        let c = Panel { x: LEFT, y: 640.0, w: PLOT_W, h: 100.0, xr, yr: (0.0, 1.0) };
        c.axes(&mut svg, "time (s)", "send phase (RTT)");
        let t0 = streams.first().map_or(0, |s| s.t0_ns);
        for (at, p) in &rows {
            let x = at.saturating_sub(t0) as f64 / 1e9;
            for (i, v) in p.iter().enumerate() {
                if let Some(v) = v {
                    svg.circle(c.pt((x, *v)), 1.6, STREAM_COLORS[i % STREAM_COLORS.len()]);
                }
            }
        }
        let last = r.last().and_then(|k| streams.get(k as usize)).map_or(0, |s| s.id.tuple.local.port());
        let note = format!(
            "where in the RTT each stream's rounds begin (0: the group's round start) · order kept in {:.0} % of {} cycles · last in the round: :{last}",
            r.stability * 100.0,
            r.cycles
        );
        svg.text(c.x + c.w - 4.0, c.y + 12.0, 11.0, "end", "#333", &note, None, false);
    }
    svg.finish()
}
