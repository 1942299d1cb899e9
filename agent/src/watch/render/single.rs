//! The single-connection view: its header, numbers, and what holds it back.
use super::*;

pub(super) fn draw_header(f: &mut Frame, area: Rect, c: &ConnView) {
    let mut s = vec![
        Span::styled(
            format!("{} → {}", c.id.tuple.local, c.id.tuple.remote),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!("  {}", crate::model::Sk(c.id.cookie))),
    ];
    if let Some(o) = &c.process {
        s.push(Span::raw(format!("  {} (pid {})", o.comm, o.pid)));
        if let Some(cg) = o.cgroup.as_ref().filter(|c| c.path != "/") {
            s.push(Span::styled(format!("  {cg}"), Style::new().fg(Color::LightBlue)));
        }
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

pub(super) fn draw_single(f: &mut Frame, area: Rect, st: &WatchState, c: &ConnView, scratch: &mut Scratch) {
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

pub(super) fn draw_numbers(f: &mut Frame, area: Rect, st: &WatchState, c: &ConnView) {
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
            let mech =
                c.stop.as_ref().and_then(|s| s.mechanism.as_ref()).map(|m| format!(", {}", m.0)).unwrap_or_default();
            match c.stop.as_ref().and_then(|s| s.owner) {
                Some(o) => format!("STOPPED {secs:.1} s: {cause} ({}){mech}", o.as_str()),
                None => format!("STOPPED {secs:.1} s: {cause}{mech}"),
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

pub(super) fn draw_holds_back(f: &mut Frame, area: Rect, st: &WatchState, c: &ConnView, scratch: &mut Scratch) {
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
    // The mechanism decides the fix: right under the stop, before the other reasons.
    if let Some((m, detail, advice)) = c.stop.as_ref().and_then(|s| s.mechanism.as_ref()) {
        let at = scratch.reasons.iter().position(|r| matches!(r, Reason::Stop { .. })).map_or(0, |i| i + 1);
        let style = Style::new().fg(Color::LightRed).add_modifier(Modifier::BOLD);
        lines.insert(at.min(lines.len()), Line::styled(format!("fix: {advice}"), Style::new().fg(Color::Yellow)));
        lines.insert(at.min(lines.len()), Line::styled(format!("mechanism: {m} {detail}"), style));
    }
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
