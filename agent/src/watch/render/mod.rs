//! Draws the watch view from `WatchState` into a ratatui frame: no IO, chart buffers reused.
//! `single`: one connection's numbers and what holds it back; `charts`: the time charts;
//! `group`: the streams side by side.
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Clear, Dataset, GraphType, Paragraph, Tabs, Wrap};
use ratatui::Frame;

use super::state::{ConnView, LogKind, Reason, WatchState};
use super::text::tcp_state_name;
use crate::model::event::ca_state_name;
use crate::model::units::{human_bps, human_bytes};
use crate::model::Filter;

mod charts;
mod group;
mod host;
mod single;

use charts::*;
use group::*;
pub use host::draw_host;
use single::*;

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
    /// Opened from the host view: Esc goes back to it.
    pub back: bool,
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
        Filter::Cookie(c) => crate::model::Sk(*c).to_string(),
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
    if (hud.closing && !hud.back) || st.finished() {
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
    if hud.back {
        spans.push(Span::styled(" Esc ", key));
        spans.push(Span::raw(" back  "));
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

fn kv(k: &str, v: String) -> Vec<Span<'static>> {
    vec![Span::styled(format!("{k:<14}"), Style::new().fg(Color::Gray)), Span::raw(format!("{v:<10}"))]
}

fn row(a: (&str, String), b: (&str, String)) -> Line<'static> {
    let mut s = kv(a.0, a.1);
    s.extend(kv(b.0, b.1));
    Line::from(s)
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
        let who = if with_conn { format!("{} ", crate::model::Sk(l.cookie)) } else { String::new() };
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
