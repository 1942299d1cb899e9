//! The host view: every bulk connection, busiest first, with what holds it back, its process
//! and container (`watch` without `--conn`). Draws from `HostState` only: no IO.
use super::*;
use crate::watch::host::{HostRow, HostState, BULK_BYTES};

/// `s` in exactly `w` columns: cut with `…`, or padded.
fn fit(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n <= w {
        format!("{s:<w$}")
    } else {
        let mut t: String = s.chars().take(w.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// What holds the connection back, and its colour.
fn state(r: &HostRow) -> (String, Color) {
    if r.closed {
        ("closed".into(), Color::DarkGray)
    } else if let Some(c) = r.stop {
        (format!("STOP {c}"), Color::LightRed)
    } else if r.unfair.is_some() {
        ("UNFAIR".into(), Color::Yellow)
    } else if let Some(c) = r.limit {
        (format!("LIMIT {c}"), Color::Yellow)
    } else {
        ("ok".into(), Color::Green)
    }
}

/// The process column: `comm[pid]`.
fn process(r: &HostRow) -> String {
    r.process.as_ref().map_or("?".into(), |p| format!("{}[{}]", p.comm, p.pid))
}

/// The container column: the container (name or short id), else the systemd unit.
fn container(r: &HostRow) -> String {
    let cg = r.process.as_ref().and_then(|p| p.cgroup.as_ref());
    match cg {
        Some(c) => c.container_label().map(str::to_string).or_else(|| c.unit.clone()).unwrap_or_default(),
        None => String::new(),
    }
}

const COLS: [(&str, usize); 6] =
    [("GOODPUT", 11), ("DELIVERED", 10), ("SRTT", 9), ("STATE", 24), ("PROCESS", 20), ("CONTAINER/UNIT", 24)];

pub fn draw_host(f: &mut Frame, hs: &HostState, hud: &Hud) {
    let [head, body, status] =
        Layout::vertical([Constraint::Length(3), Constraint::Min(3), Constraint::Length(1)]).areas(f.area());
    let listed: Vec<&HostRow> = hs.listed().collect();
    let total: f64 = listed.iter().map(|r| r.goodput_bps).sum();
    let count = |p: fn(&HostRow) -> bool| listed.iter().filter(|r| p(r)).count();
    let text = format!(
        " {} bulk connections, {} in all  │  {} stopped  {} unfair  {} limited  │  {} connections moved data",
        listed.len(),
        human_bps(total),
        count(|r| r.stop.is_some() && !r.closed),
        count(|r| r.unfair.is_some() && !r.closed),
        count(|r| r.limit.is_some() && !r.closed),
        hs.seen,
    );
    f.render_widget(Paragraph::new(text).block(Block::bordered().title(" tcpvigil watch: this host ")), head);

    let key = Style::new().fg(Color::Black).bg(Color::Gray);
    let spans = vec![
        Span::styled(" ↑/↓ ", key),
        Span::raw(" select  "),
        Span::styled(" Enter ", key),
        Span::raw(" open  "),
        Span::styled(" q ", key),
        Span::raw(format!(" quit │ {:.0} fps │ {} events, {} findings", hud.fps, hs.events, hs.findings)),
    ];
    f.render_widget(Line::from(spans), status);

    let inner = Block::bordered().title(" bulk connections by goodput ");
    let area = inner.inner(body);
    f.render_widget(inner, body);
    if listed.is_empty() {
        let what = format!("waiting for a connection to deliver {} …", human_bytes(BULK_BYTES));
        let mid = Layout::vertical([Constraint::Fill(1), Constraint::Length(1), Constraint::Fill(1)]).split(area)[1];
        f.render_widget(Paragraph::new(what).centered(), mid);
        return;
    }
    let width = area.width as usize;
    let mut head_line: String = COLS.iter().map(|(n, w)| format!("{n:<w$} ")).collect();
    head_line.push_str("LOCAL → REMOTE");
    let mut lines =
        vec![Line::styled(fit(&head_line, width), Style::new().fg(Color::Gray).add_modifier(Modifier::BOLD))];
    let rows = (area.height as usize).saturating_sub(1);
    // Scroll so that the cursor stays on the screen.
    let at = hs.cursor_index();
    let first = at.saturating_sub(rows.saturating_sub(1));
    for (i, r) in listed.iter().enumerate().skip(first).take(rows) {
        let (st, color) = state(r);
        let srtt = if r.srtt_us > 0 { format!("{:.1} ms", r.srtt_us as f64 / 1e3) } else { "-".into() };
        let cells = [human_bps(r.goodput_bps), human_bytes(r.bytes_acked), srtt, st, process(r), container(r)];
        let mut spans: Vec<Span> = Vec::with_capacity(8);
        for (k, ((_, w), c)) in COLS.iter().zip(cells).enumerate() {
            let text = format!("{} ", fit(&c, *w));
            spans.push(if k == 3 { Span::styled(text, Style::new().fg(color)) } else { Span::raw(text) });
        }
        let used: usize = COLS.iter().map(|(_, w)| w + 1).sum();
        spans
            .push(Span::raw(fit(&format!("{} → {}", r.id.tuple.local, r.id.tuple.remote), width.saturating_sub(used))));
        let mut line = Line::from(spans);
        if i == at {
            line = line.style(Style::new().add_modifier(Modifier::REVERSED));
        }
        lines.push(line);
    }
    f.render_widget(Paragraph::new(lines), area);
}
