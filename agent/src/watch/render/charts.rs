//! The time charts: goodput, window and scoreboard, sequence progress, and their axes.
use super::*;

pub(super) fn x_axis(st: &WatchState) -> Axis<'static> {
    let (start, end) = x_bounds(st);
    Axis::default().title("s").style(Style::new().fg(Color::Gray)).bounds([start, end]).labels([
        format!("{start:.1}"),
        format!("{:.1}", (start + end) / 2.0),
        format!("{end:.1}"),
    ])
}

/// The window ending now, but never before the first event: early on, data grows from the left.
pub(super) fn x_bounds(st: &WatchState) -> (f64, f64) {
    let w = st.window_s as f64;
    let end = st.rel_s(st.view_end_ns()).max(w);
    (end - w, end)
}

pub(super) fn y_axis(title: &'static str, lo: f64, hi: f64, fmt: fn(f64) -> String) -> Axis<'static> {
    let hi = if hi > lo { hi } else { lo + 1.0 };
    Axis::default().title(title).style(Style::new().fg(Color::Gray)).bounds([lo, hi]).labels([
        fmt(lo),
        fmt((lo + hi) / 2.0),
        fmt(hi),
    ])
}

/// A chart title whose series names are written in their colours (the legend, out of the data's way).
pub(super) fn legend_title(head: String, items: &[(&'static str, Color)]) -> Line<'static> {
    let mut spans = vec![Span::raw(head)];
    for (name, color) in items {
        spans.push(Span::styled(format!("━ {name} "), Style::new().fg(*color)));
    }
    Line::from(spans)
}

/// Charts carry their legend in the title.
pub(super) fn with_legend(c: Chart<'_>) -> Chart<'_> {
    c.legend_position(None)
}

pub(super) fn fmt_int(v: f64) -> String {
    format!("{v:.0}")
}

/// Fill `out` with the goodput bins of `c` inside the window, Mbit/s; returns the largest.
pub(super) fn goodput_points(st: &WatchState, c: &ConnView, out: &mut Vec<(f64, f64)>) -> f64 {
    let end = st.view_end_ns();
    let start = end.saturating_sub(st.window_ns());
    let mut max = 0.0f64;
    for b in c.goodput.iter().rev() {
        if b.t_end_ns > end {
            continue;
        }
        if b.t_end_ns < start {
            break;
        }
        let v = b.bps() / 1e6;
        max = max.max(v);
        out.push((st.rel_s(b.t_end_ns), v));
    }
    out.reverse();
    max
}

pub(super) fn draw_goodput(f: &mut Frame, area: Rect, st: &WatchState, c: &ConnView, scratch: &mut Scratch) {
    let s = scratch.take(2);
    let mut max = goodput_points(st, c, &mut s[0]);
    let rate = c.max_rate_bps / 1e6;
    if rate > 0.0 {
        let (a, b) = x_bounds(st);
        s[1].extend([(a, rate), (b, rate)]);
        max = max.max(rate);
    }
    let bin_ms = (c.live.srtt_us as f64 / 1e3).max(crate::watch::state::MIN_BIN_NS as f64 / 1e6);
    let ds = vec![line("goodput", C_GOODPUT, &s[0]), line("max delivery rate", Color::DarkGray, &s[1])];
    let title = legend_title(
        format!(" goodput per RTT bin ({bin_ms:.0} ms), Mbit/s: "),
        &[("goodput", C_GOODPUT), ("max delivery rate", Color::DarkGray)],
    );
    let chart = with_legend(Chart::new(ds)).block(Block::bordered().title(title)).x_axis(x_axis(st)).y_axis(y_axis(
        "Mbit/s",
        0.0,
        max * 1.1,
        fmt_int,
    ));
    f.render_widget(chart, area);
}

pub(super) fn draw_window(f: &mut Frame, area: Rect, st: &WatchState, c: &ConnView, scratch: &mut Scratch) {
    let end = st.view_end_ns();
    let start = end.saturating_sub(st.window_ns());
    let s = scratch.take(5);
    let mut max = 1.0f32;
    for p in c.points.iter().filter(|p| p.t_ns >= start && p.t_ns <= end) {
        let t = st.rel_s(p.t_ns);
        for (i, v) in [p.cwnd, p.in_flight, p.lost, p.sacked, p.retrans].into_iter().enumerate() {
            s[i].push((t, v as f64));
            max = max.max(v);
        }
    }
    let names = ["cwnd", "in_flight", "lost_out", "sacked_out", "retrans_out"];
    let colors = [C_CWND, C_FLIGHT, C_LOST, C_SACKED, C_RETRANS];
    let ds = s.iter().zip(names).zip(colors).map(|((d, n), c)| line(n, c, d)).collect();
    let title = legend_title(
        format!(" segments, CA {}: ", ca_state_name(c.live.ca_state)),
        &[
            ("cwnd", C_CWND),
            ("in_flight", C_FLIGHT),
            ("lost_out", C_LOST),
            ("sacked_out", C_SACKED),
            ("retrans_out", C_RETRANS),
        ],
    );
    let chart = with_legend(Chart::new(ds)).block(Block::bordered().title(title)).x_axis(x_axis(st)).y_axis(y_axis(
        "seg",
        0.0,
        max as f64 * 1.1,
        fmt_int,
    ));
    f.render_widget(chart, area);
}

pub(super) fn draw_seq(f: &mut Frame, area: Rect, st: &WatchState, c: &ConnView, scratch: &mut Scratch) {
    let end = st.view_end_ns();
    let start = end.saturating_sub(st.window_ns());
    let s = scratch.take(3);
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for p in c.points.iter().filter(|p| p.t_ns >= start && p.t_ns <= end) {
        let t = st.rel_s(p.t_ns);
        s[0].push((t, p.una as f64));
        s[1].push((t, p.nxt as f64));
        lo = lo.min(p.una as f64);
        hi = hi.max(p.nxt as f64);
        if !p.sack_lo.is_nan() {
            s[2].push((t, p.sack_lo as f64));
            s[2].push((t, p.sack_hi as f64));
        }
    }
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    let ds = vec![line("snd_una", C_UNA, &s[0]), line("snd_nxt", C_NXT, &s[1]), dots("SACK", C_SACKED, &s[2])];
    let chart = with_legend(Chart::new(ds))
        .block(Block::bordered().title(legend_title(
            " sequence, MSS since start: ".into(),
            &[("snd_una", C_UNA), ("snd_nxt", C_NXT), ("first SACK block", C_SACKED)],
        )))
        .x_axis(x_axis(st))
        .y_axis(y_axis("MSS", lo.floor(), hi.ceil() + 1.0, fmt_int));
    f.render_widget(chart, area);
}

pub(super) fn stream_datasets(data: &[Vec<(f64, f64)>]) -> Vec<Dataset<'_>> {
    data.iter().enumerate().map(|(i, d)| line("", STREAM_COLORS[i % STREAM_COLORS.len()], d)).collect()
}

/// A line through `data`, in the legend as `name` (none when empty).
pub(super) fn line<'a>(name: &'a str, color: Color, data: &'a [(f64, f64)]) -> Dataset<'a> {
    dataset(name, Marker::Braille, GraphType::Line, color, data)
}

/// Dots at `data`, in the legend as `name` (none when empty).
pub(super) fn dots<'a>(name: &'a str, color: Color, data: &'a [(f64, f64)]) -> Dataset<'a> {
    dataset(name, Marker::Dot, GraphType::Scatter, color, data)
}

fn dataset<'a>(name: &'a str, m: Marker, g: GraphType, color: Color, data: &'a [(f64, f64)]) -> Dataset<'a> {
    let d = Dataset::default().marker(m).graph_type(g).style(Style::new().fg(color)).data(data);
    if name.is_empty() {
        d
    } else {
        d.name(name)
    }
}
