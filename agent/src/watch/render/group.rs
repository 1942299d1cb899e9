//! The group view: every matching stream side by side, with fairness and the send phase.
use super::*;

pub(super) fn draw_group_header(f: &mut Frame, area: Rect, st: &WatchState) {
    let comm = st.conns.iter().find_map(|c| c.process.as_ref()).map(|o| {
        let cg = o.cgroup.as_ref().map(|c| format!("  {c}")).unwrap_or_default();
        format!("  {} (pid {}){cg}", o.comm, o.pid)
    });
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

pub(super) fn draw_group(f: &mut Frame, area: Rect, st: &WatchState, scratch: &mut Scratch) {
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
        let sets = pp.iter().enumerate().map(|(i, d)| dots("", STREAM_COLORS[i % STREAM_COLORS.len()], d)).collect();
        let chart = Chart::new(sets)
            .block(Block::bordered().title(" send phase: where in the RTT each stream's rounds begin "))
            .x_axis(x_axis(st))
            .y_axis(y_axis("RTT", 0.0, 1.0, |v| format!("{v:.1}")));
        f.render_widget(chart, area);
    }
}
