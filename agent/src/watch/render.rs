//! Draws the watch view from `WatchState` into a ratatui frame: no IO, chart buffers reused.
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Clear, Dataset, GraphType, Paragraph, Tabs, Wrap};
use ratatui::Frame;

use super::state::{tcp_state_name, ConnView, LogKind, Reason, WatchState};
use crate::model::event::ca_state_name;
use crate::model::units::{human_bps, human_bytes};
use crate::model::Filter;

const C_GOODPUT: Color = Color::Cyan;
const C_CWND: Color = Color::Yellow;
const C_FLIGHT: Color = Color::Green;
const C_LOST: Color = Color::Red;
const C_SACKED: Color = Color::LightBlue;
const C_RETRANS: Color = Color::Magenta;
const C_UNA: Color = Color::White;
const C_NXT: Color = Color::Cyan;
const STREAM_COLORS: [Color; 8] = [
    Color::Cyan,
    Color::Yellow,
    Color::Green,
    Color::Magenta,
    Color::LightRed,
    Color::LightBlue,
    Color::White,
    Color::LightGreen,
];

/// Numbers about the loop itself, shown in the status line.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hud {
    pub fps: f64,
    /// The closing summary is up; the view exits shortly.
    pub closing: bool,
}

/// Buffers the charts borrow from; kept between frames so drawing does not reallocate.
#[derive(Debug, Default)]
pub struct Scratch {
    series: Vec<Vec<(f64, f64)>>,
    reasons: Vec<Reason>,
    rates: Vec<f64>,
}

impl Scratch {
    fn take(&mut self, n: usize) -> &mut [Vec<(f64, f64)>] {
        if self.series.len() < n {
            self.series.resize_with(n, || Vec::with_capacity(4096));
        }
        for s in &mut self.series[..n] {
            s.clear();
        }
        &mut self.series[..n]
    }
}

/// How a filter is typed back to the user.
pub fn filter_text(f: &Filter) -> String {
    match f {
        Filter::Endpoint(a) => a.to_string(),
        Filter::Port(p) => format!(":{p}"),
        Filter::Addr(a) => a.to_string(),
        Filter::Cookie(c) => format!("cookie {c}"),
        Filter::Pair(l, r) => format!("{l}-{r}"),
    }
}

/// The whole screen.
pub fn draw(f: &mut Frame, st: &WatchState, hud: &Hud, scratch: &mut Scratch) {
    let area = f.area();
    let tabs = usize::from(st.conns.len() > 1 && !st.all);
    let [head, tabs_area, body, status] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Length(tabs as u16),
        Constraint::Min(8),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_status(f, status, st, hud);
    if st.conns.is_empty() {
        let what = format!("waiting for a connection matching {} …", filter_text(&st.filter));
        f.render_widget(Paragraph::new(Line::from(" tcpvigil watch")).block(Block::bordered()), head);
        let mid = Layout::vertical([Constraint::Fill(1), Constraint::Length(1), Constraint::Fill(1)]).split(body)[1];
        f.render_widget(Paragraph::new(what).centered(), mid);
        return;
    }
    if st.all {
        draw_group_header(f, head, st);
        draw_group(f, body, st, scratch);
    } else if let Some(c) = st.selected() {
        draw_header(f, head, c);
        if tabs > 0 {
            let titles = st.conns.iter().map(|c| {
                let mark = if c.closed() { " (closed)" } else { "" };
                format!("{}{mark}", c.id.tuple)
            });
            let t = Tabs::new(titles)
                .select(st.selected.min(st.conns.len() - 1))
                .highlight_style(Style::new().fg(Color::Black).bg(Color::Cyan));
            f.render_widget(t, tabs_area);
        }
        draw_single(f, body, st, c, scratch);
    }
    if hud.closing || st.finished() {
        draw_summary(f, body, st);
    }
}

fn draw_status(f: &mut Frame, area: Rect, st: &WatchState, hud: &Hud) {
    let key = Style::new().fg(Color::Black).bg(Color::Gray);
    let mut spans = vec![
        Span::styled(" p ", key),
        Span::raw(" pause  "),
        Span::styled(" +/- ", key),
        Span::raw(format!(" window {} s  ", st.window_s)),
    ];
    if st.conns.len() > 1 && !st.all {
        spans.push(Span::styled(" ←/→ ", key));
        spans.push(Span::raw(" pick  "));
    }
    spans.push(Span::styled(" q ", key));
    spans.push(Span::raw(format!(" quit │ {:.0} fps │ {} events, {} findings", hud.fps, st.events, st.findings)));
    if st.paused_at.is_some() {
        spans.push(Span::styled("  PAUSED", Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD)));
    }
    if st.source_ended {
        spans.push(Span::raw("  (input ended)"));
    }
    f.render_widget(Line::from(spans), area);
}

fn onoff(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "OFF"
    }
}

fn draw_header(f: &mut Frame, area: Rect, c: &ConnView) {
    let mut s = vec![
        Span::styled(
            format!("{} → {}", c.id.tuple.local, c.id.tuple.remote),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!("  cookie {}", c.id.cookie)),
    ];
    if let Some(o) = &c.process {
        s.push(Span::raw(format!("  {} (pid {})", o.comm, o.pid)));
    }
    if let Some(n) = &c.snap {
        let o = n.options;
        s.push(Span::raw(format!(
            "  {}  SACK {}  wscale {}  TS {}  MSS {}  sndbuf {}  rcvbuf {}",
            if n.cc.is_empty() { "?" } else { &n.cc },
            onoff(o.sack),
            if o.wscale { format!("{}/{}", o.snd_wscale, o.rcv_wscale) } else { "OFF".into() },
            onoff(o.timestamps),
            n.mss,
            human_bytes(n.sndbuf as u64),
            human_bytes(n.rcvbuf as u64)
        )));
        let state = if c.closed() { "closed" } else { tcp_state_name(n.state) };
        s.push(Span::raw(format!("  {state}")));
    } else if c.closed() {
        s.push(Span::raw("  closed"));
    }
    let block = Block::bordered().title(" tcpvigil watch ");
    f.render_widget(Paragraph::new(Line::from(s)).block(block), area);
}

fn draw_single(f: &mut Frame, area: Rect, st: &WatchState, c: &ConnView, scratch: &mut Scratch) {
    let [left, right] = Layout::horizontal([Constraint::Length(56), Constraint::Min(40)]).areas(area);
    let [nums, held, log] =
        Layout::vertical([Constraint::Length(14), Constraint::Length(7), Constraint::Min(3)]).areas(left);
    draw_numbers(f, nums, st, c);
    draw_holds_back(f, held, st, c, scratch);
    draw_log(f, log, st, Some(c.id.cookie));
    let [g, w, s] = Layout::vertical([Constraint::Ratio(1, 3); 3]).areas(right);
    draw_goodput(f, g, st, c, scratch);
    draw_window(f, w, st, c, scratch);
    draw_seq(f, s, st, c, scratch);
}

fn kv(k: &str, v: String) -> Vec<Span<'static>> {
    vec![Span::styled(format!("{k:<14}"), Style::new().fg(Color::Gray)), Span::raw(format!("{v:<10}"))]
}

fn row(a: (&str, String), b: (&str, String)) -> Line<'static> {
    let mut s = kv(a.0, a.1);
    s.extend(kv(b.0, b.1));
    Line::from(s)
}

fn draw_numbers(f: &mut Frame, area: Rect, st: &WatchState, c: &ConnView) {
    let l = &c.live;
    let end = st.view_end_ns();
    let now = c.goodput_bps(end, 1_000_000_000);
    let mean = c.mean_goodput_bps();
    let ssthresh = if l.ssthresh >= 1 << 24 { "∞".to_string() } else { l.ssthresh.to_string() };
    let lines = vec![
        row(("cwnd", l.cwnd.to_string()), ("ssthresh", ssthresh)),
        row(("in_flight", l.in_flight.to_string()), ("packets_out", l.packets_out.to_string())),
        row(("lost_out", l.lost_out.to_string()), ("sacked_out", l.sacked_out.to_string())),
        row(("retrans_out", l.retrans_out.to_string()), ("CA state", ca_state_name(l.ca_state).to_string())),
        row(("srtt", format!("{:.1} ms", l.srtt_us as f64 / 1e3)), ("rto", format!("{:.0} ms", l.rto_us as f64 / 1e3))),
        Line::from(kv(
            "delivery rate",
            format!("{}  (max {})", human_bps(l.delivery_rate_bps), human_bps(c.max_rate_bps)),
        )),
        Line::from(kv("goodput 1 s", human_bps(now))),
        Line::from(kv("goodput mean", human_bps(mean))),
        Line::from(kv(
            "efficiency",
            format!("{:.0} % now, {:.0} % mean", 100.0 * c.efficiency(now), 100.0 * c.efficiency(mean)),
        )),
        row(("retrans", format!("{} seg", c.retrans_segs)), ("lost rtx", c.lost_retrans.to_string())),
        row(("RTOs", c.rtos.to_string()), ("stops", c.stops.to_string())),
        Line::from(kv(
            "delivered",
            format!("{} in {:.1} s", human_bytes(c.total_bytes), (c.last_ns - c.first_ns) as f64 / 1e9),
        )),
    ];
    f.render_widget(Paragraph::new(lines).block(Block::bordered().title(" now ")), area);
}

/// One line per reason the connection is held back.
pub fn reason_text(c: &ConnView, r: &Reason) -> String {
    match *r {
        Reason::Stop { secs } => {
            let cause = c.stop.as_ref().map_or("?", |s| s.cause.as_str());
            match c.stop.as_ref().and_then(|s| s.owner) {
                Some(o) => format!("STOPPED {secs:.1} s: {cause} ({})", o.as_str()),
                None => format!("STOPPED {secs:.1} s: {cause}"),
            }
        }
        Reason::Stalled { secs, rtts } => format!("nothing delivered for {secs:.1} s ({rtts} RTTs)"),
        Reason::LossRecovery { state, cwnd } => format!("loss recovery: CA {state}, cwnd {cwnd}"),
        Reason::ReceiveWindow { share } => format!("receive window: {:.0} % of busy time", share * 100.0),
        Reason::SendBuffer { share } => format!("send buffer: {:.0} % of busy time", share * 100.0),
        Reason::Application => "the application (app-limited)".into(),
        Reason::NoSack => "SACK not negotiated".into(),
        Reason::NoWindowScaling => "window scaling not negotiated (64 KiB max)".into(),
        Reason::LimitFinding => match &c.limit {
            Some((cause, ev)) => format!("limit: {cause} {ev}"),
            None => "limit".into(),
        },
        Reason::CongestionWindow => "congestion window (the network)".into(),
    }
}

fn draw_holds_back(f: &mut Frame, area: Rect, st: &WatchState, c: &ConnView, scratch: &mut Scratch) {
    c.holds_back(st.view_end_ns(), &mut scratch.reasons);
    let mut lines: Vec<Line> = scratch
        .reasons
        .iter()
        .map(|r| {
            let style = match r {
                Reason::Stop { .. } | Reason::Stalled { .. } => {
                    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
                }
                _ => Style::new(),
            };
            Line::styled(reason_text(c, r), style)
        })
        .collect();
    if let Some(s) = &c.stop {
        let when = st.rel_s(s.start_ns);
        let how = match (s.ongoing, s.duration_s) {
            (true, _) => "ongoing".to_string(),
            (false, Some(d)) => format!("{d:.1} s"),
            (false, None) => "ended".to_string(),
        };
        lines.push(Line::styled(
            format!("stop cause: {} at {when:.1} s ({how}) {}", s.cause, s.evidence),
            Style::new().fg(Color::LightRed),
        ));
    }
    if lines.is_empty() {
        lines.push(Line::raw("nothing seen yet"));
    }
    let p = Paragraph::new(lines).wrap(Wrap { trim: true }).block(Block::bordered().title(" holds it back "));
    f.render_widget(p, area);
}

/// The event pane: with `only`, that connection's lines (the single view); without, every
/// line labelled with its connection's cookie (the group view).
fn draw_log(f: &mut Frame, area: Rect, st: &WatchState, only: Option<u64>) {
    let with_conn = only.is_none();
    let rows = area.height.saturating_sub(2) as usize;
    let width = area.width.saturating_sub(2) as usize;
    let text_w = width.saturating_sub(8).max(8);
    // Newest entries last; long entries wrap under their text, not under the time.
    let mut lines: Vec<Line> = Vec::with_capacity(rows);
    for l in st.log.iter().rev().filter(|l| only.is_none_or(|k| k == l.cookie)) {
        if lines.len() >= rows {
            break;
        }
        let color = match l.kind {
            LogKind::Finding => Color::LightRed,
            LogKind::Rto | LogKind::LostRetrans => Color::Red,
            LogKind::Ca => Color::Yellow,
            LogKind::State | LogKind::Close => Color::Gray,
        };
        let rep = if l.repeat > 1 { format!(" ×{}", l.repeat) } else { String::new() };
        let who = if with_conn { format!("#{} ", l.cookie) } else { String::new() };
        let text: Vec<char> = format!("{who}{}{rep}", l.text).chars().collect();
        let mut chunk: Vec<Line> = text
            .chunks(text_w)
            .enumerate()
            .map(|(i, c)| {
                let t = if i == 0 { format!("{:>7.3} ", st.rel_s(l.ts_ns)) } else { " ".repeat(8) };
                Line::from(vec![
                    Span::styled(t, Style::new().fg(Color::DarkGray)),
                    Span::styled(c.iter().collect::<String>(), Style::new().fg(color)),
                ])
            })
            .collect();
        chunk.reverse();
        lines.extend(chunk);
    }
    lines.truncate(rows);
    lines.reverse();
    f.render_widget(Paragraph::new(lines).block(Block::bordered().title(" events ")), area);
}

fn x_axis(st: &WatchState) -> Axis<'static> {
    let (start, end) = x_bounds(st);
    Axis::default().title("s").style(Style::new().fg(Color::Gray)).bounds([start, end]).labels([
        format!("{start:.1}"),
        format!("{:.1}", (start + end) / 2.0),
        format!("{end:.1}"),
    ])
}

/// The window ending now, but never before the first event: early on, data grows from the left.
fn x_bounds(st: &WatchState) -> (f64, f64) {
    let w = st.window_s as f64;
    let end = st.rel_s(st.view_end_ns()).max(w);
    (end - w, end)
}

fn y_axis(title: &'static str, lo: f64, hi: f64, fmt: fn(f64) -> String) -> Axis<'static> {
    let hi = if hi > lo { hi } else { lo + 1.0 };
    Axis::default().title(title).style(Style::new().fg(Color::Gray)).bounds([lo, hi]).labels([
        fmt(lo),
        fmt((lo + hi) / 2.0),
        fmt(hi),
    ])
}

/// A chart title whose series names are written in their colours (the legend, out of the data's way).
fn legend_title(head: String, items: &[(&'static str, Color)]) -> Line<'static> {
    let mut spans = vec![Span::raw(head)];
    for (name, color) in items {
        spans.push(Span::styled(format!("━ {name} "), Style::new().fg(*color)));
    }
    Line::from(spans)
}

/// Charts carry their legend in the title.
fn with_legend(c: Chart<'_>) -> Chart<'_> {
    c.legend_position(None)
}

fn fmt_int(v: f64) -> String {
    format!("{v:.0}")
}

/// Fill `out` with the goodput bins of `c` inside the window, Mbit/s; returns the largest.
fn goodput_points(st: &WatchState, c: &ConnView, out: &mut Vec<(f64, f64)>) -> f64 {
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

fn draw_goodput(f: &mut Frame, area: Rect, st: &WatchState, c: &ConnView, scratch: &mut Scratch) {
    let s = scratch.take(2);
    let mut max = goodput_points(st, c, &mut s[0]);
    let rate = c.max_rate_bps / 1e6;
    if rate > 0.0 {
        let (a, b) = x_bounds(st);
        s[1].extend([(a, rate), (b, rate)]);
        max = max.max(rate);
    }
    let bin_ms = (c.live.srtt_us as f64 / 1e3).max(super::state::MIN_BIN_NS as f64 / 1e6);
    let ds = vec![
        Dataset::default()
            .name("goodput")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(C_GOODPUT))
            .data(&s[0]),
        Dataset::default()
            .name("max delivery rate")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(Color::DarkGray))
            .data(&s[1]),
    ];
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

fn draw_window(f: &mut Frame, area: Rect, st: &WatchState, c: &ConnView, scratch: &mut Scratch) {
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
    let ds = s
        .iter()
        .zip(names)
        .zip(colors)
        .map(|((d, n), c)| {
            Dataset::default()
                .name(n)
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(Style::new().fg(c))
                .data(d)
        })
        .collect();
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

fn draw_seq(f: &mut Frame, area: Rect, st: &WatchState, c: &ConnView, scratch: &mut Scratch) {
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
    let ds = vec![
        Dataset::default()
            .name("snd_una")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(C_UNA))
            .data(&s[0]),
        Dataset::default()
            .name("snd_nxt")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(C_NXT))
            .data(&s[1]),
        Dataset::default()
            .name("SACK")
            .marker(Marker::Dot)
            .graph_type(GraphType::Scatter)
            .style(Style::new().fg(C_SACKED))
            .data(&s[2]),
    ];
    let chart = with_legend(Chart::new(ds))
        .block(Block::bordered().title(legend_title(
            " sequence, MSS since start: ".into(),
            &[("snd_una", C_UNA), ("snd_nxt", C_NXT), ("first SACK block", C_SACKED)],
        )))
        .x_axis(x_axis(st))
        .y_axis(y_axis("MSS", lo.floor(), hi.ceil() + 1.0, fmt_int));
    f.render_widget(chart, area);
}

fn draw_group_header(f: &mut Frame, area: Rect, st: &WatchState) {
    let comm = st.conns.iter().find_map(|c| c.process.as_ref()).map(|o| format!("  {} (pid {})", o.comm, o.pid));
    let cc = st.conns.iter().find_map(|c| c.snap.as_ref()).map(|s| format!("  {}", s.cc));
    let text = format!(
        "{} connections matching {}{}{}",
        st.conns.len(),
        filter_text(&st.filter),
        comm.unwrap_or_default(),
        cc.unwrap_or_default()
    );
    f.render_widget(Paragraph::new(text).block(Block::bordered().title(" tcpvigil watch --all ")), area);
}

fn draw_group(f: &mut Frame, area: Rect, st: &WatchState, scratch: &mut Scratch) {
    let [left, right] = Layout::horizontal([Constraint::Length(74), Constraint::Min(40)]).areas(area);
    let n = st.conns.len() as u16;
    let [table, log] = Layout::vertical([Constraint::Length(n + 8), Constraint::Min(3)]).areas(left);
    let end = st.view_end_ns();
    let mut lines = vec![Line::styled(
        format!("{:<22} {:>12} {:>12} {:>6} {:>7} {:>6}", "stream", "goodput", "mean", "cwnd", "srtt", "retr"),
        Style::new().fg(Color::Gray),
    )];
    for (i, c) in st.conns.iter().enumerate() {
        let g = c.goodput_bps(end, st.window_ns());
        let closed = if c.closed() { " ✕" } else { "" };
        lines.push(Line::styled(
            format!(
                "{:<22} {:>12} {:>12} {:>6} {:>5.0}ms {:>6}{closed}",
                c.id.tuple.local.to_string(),
                human_bps(g),
                human_bps(c.mean_goodput_bps()),
                c.live.cwnd,
                c.live.srtt_us as f64 / 1e3,
                c.retrans_segs
            ),
            Style::new().fg(STREAM_COLORS[i % STREAM_COLORS.len()]),
        ));
    }
    lines.push(Line::raw(""));
    if let Some(fair) = st.fairness(&mut scratch.rates) {
        lines.push(Line::raw(format!(
            "Jain fairness {:.2}   slowest/fastest {:.2}   total {}",
            fair.jain,
            fair.slowest_over_fastest,
            human_bps(fair.total_bps)
        )));
        let even = fair.streams as f64 * scratch.rates.iter().copied().fold(f64::INFINITY, f64::min);
        if fair.total_bps > 0.0 {
            lines.push(Line::raw(format!(
                "an even split finishes at {:.0} % of the total rate (slowest stream bounds it)",
                100.0 * even / fair.total_bps
            )));
        }
    }
    let phase = st.send_phase();
    if let Some((r, _)) = &phase {
        let port = |k: u64| st.conns.get(k as usize).map_or(0, |c| c.id.tuple.local.port());
        let order: Vec<String> = r.streams.iter().map(|s| format!(":{} {:.2}", port(s.cookie), s.phase)).collect();
        lines.push(Line::raw(format!(
            "send order in the RTT: {} (kept in {:.0} % of {} cycles)",
            order.join(" → "),
            100.0 * r.stability,
            r.cycles
        )));
    }
    if let Some((group, cause, ev)) = &st.unfair {
        lines.push(Line::styled(format!("UNFAIR {cause}: {group}"), Style::new().fg(Color::LightRed)));
        lines.push(Line::styled(ev.clone(), Style::new().fg(Color::LightRed)));
    }
    let p = Paragraph::new(lines).wrap(Wrap { trim: false }).block(Block::bordered().title(" streams (window) "));
    f.render_widget(p, table);
    draw_log(f, log, st, None);

    let (g, w, ph) = if phase.is_some() {
        let [g, w, p] =
            Layout::vertical([Constraint::Ratio(2, 5), Constraint::Ratio(2, 5), Constraint::Ratio(1, 5)]).areas(right);
        (g, w, Some(p))
    } else {
        let [g, w] = Layout::vertical([Constraint::Ratio(1, 2); 2]).areas(right);
        (g, w, None)
    };
    let n = st.conns.len();
    let s = scratch.take(3 * n);
    let (gp, rest) = s.split_at_mut(n);
    let (cw, pp) = rest.split_at_mut(n);
    let mut gmax = 0.0f64;
    let mut cmax = 1.0f64;
    let start = end.saturating_sub(st.window_ns());
    for (i, c) in st.conns.iter().enumerate() {
        gmax = gmax.max(goodput_points(st, c, &mut gp[i]));
        for p in c.points.iter().filter(|p| p.t_ns >= start && p.t_ns <= end) {
            cw[i].push((st.rel_s(p.t_ns), p.cwnd as f64));
            cmax = cmax.max(p.cwnd as f64);
        }
    }
    let chart = Chart::new(stream_datasets(gp))
        .block(Block::bordered().title(" goodput per stream, per RTT bin (Mbit/s) "))
        .x_axis(x_axis(st))
        .y_axis(y_axis("Mbit/s", 0.0, gmax * 1.1, fmt_int));
    f.render_widget(chart, g);
    let chart = Chart::new(stream_datasets(cw))
        .block(Block::bordered().title(" cwnd per stream (segments) "))
        .x_axis(x_axis(st))
        .y_axis(y_axis("seg", 0.0, cmax * 1.1, fmt_int));
    f.render_widget(chart, w);
    if let (Some(area), Some((_, rows))) = (ph, &phase) {
        for (at, p) in rows.iter().filter(|(at, _)| *at >= start && *at <= end) {
            for (i, v) in p.iter().enumerate() {
                if let (Some(v), Some(d)) = (v, pp.get_mut(i)) {
                    d.push((st.rel_s(*at), *v));
                }
            }
        }
        let sets = pp
            .iter()
            .enumerate()
            .map(|(i, d)| {
                Dataset::default()
                    .marker(Marker::Dot)
                    .graph_type(GraphType::Scatter)
                    .style(Style::new().fg(STREAM_COLORS[i % STREAM_COLORS.len()]))
                    .data(d)
            })
            .collect();
        let chart = Chart::new(sets)
            .block(Block::bordered().title(" send phase: where in the RTT each stream's rounds begin "))
            .x_axis(x_axis(st))
            .y_axis(y_axis("RTT", 0.0, 1.0, |v| format!("{v:.1}")));
        f.render_widget(chart, area);
    }
}

fn stream_datasets(data: &[Vec<(f64, f64)>]) -> Vec<Dataset<'_>> {
    data.iter()
        .enumerate()
        .map(|(i, d)| {
            Dataset::default()
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(Style::new().fg(STREAM_COLORS[i % STREAM_COLORS.len()]))
                .data(d)
        })
        .collect()
}

fn draw_summary(f: &mut Frame, body: Rect, st: &WatchState) {
    let mut lines = vec![Line::styled("closed — summary", Style::new().add_modifier(Modifier::BOLD))];
    for c in st.summary() {
        lines.push(Line::raw(format!("{}  {}", c.tuple, c.comm.unwrap_or_default())));
        lines.push(Line::raw(format!(
            "  {} in {:.1} s, mean {} ({:.0} % of max delivery rate {})",
            human_bytes(c.bytes_acked),
            c.watched_s,
            human_bps(c.mean_goodput_bps),
            100.0 * c.efficiency,
            human_bps(c.max_delivery_rate_bps)
        )));
        lines.push(Line::raw(format!(
            "  retrans {} seg, lost retrans {}, RTOs {}, stops {} {}",
            c.retrans_segs,
            c.lost_retrans,
            c.rtos,
            c.stops,
            c.stop_causes.iter().map(|x| x.as_str()).collect::<Vec<_>>().join(", ")
        )));
    }
    let h = (lines.len() as u16 + 2).min(body.height);
    let w = 90.min(body.width);
    let area = Rect { x: body.x + (body.width - w) / 2, y: body.y + (body.height - h) / 2, width: w, height: h };
    f.render_widget(Clear, area);
    f.render_widget(Paragraph::new(lines).block(Block::bordered().title(" summary ")), area);
}
