//! Tests of which connection the view shows when a filter matches several (iperf3's control and
//! data connections).
use super::state::{self, WatchInput, WatchState};
use super::tests::{fold_until, outage_inputs, screen, MS};
use crate::model::{Body, Event};
use crate::plot::synth;

/// iperf3's shape: its control connection opens first and carries a few hundred bytes, then
/// the data connection carries the transfer. Both match `:5201`.
fn control_then_data() -> Vec<WatchInput> {
    use crate::model::event::StateChange;
    let data = outage_inputs();
    let ctl = synth::conn(777, "10.77.0.1:39999", "10.77.1.2:5201");
    let mut samples = data.iter().filter_map(|i| match i {
        WatchInput::Event(e @ Event { body: Body::Sample(_), .. }) => Some(e.clone()),
        _ => None,
    });
    let mut out = Vec::new();
    // Two small samples of the control connection, 37 and 127 bytes acknowledged, before any data.
    for (k, bytes) in [(0u64, 37u64), (1, 127)] {
        let mut e = samples.next().unwrap();
        e.conn = ctl;
        e.ts_ns = synth::T0 - 50 * MS + k * MS;
        if let Body::Sample(s) = &mut e.body {
            s.bytes_acked = bytes;
        }
        out.push(WatchInput::Event(e));
    }
    out.push(WatchInput::Event(Event {
        ts_ns: synth::T0 - 40 * MS,
        conn: ctl,
        body: Body::State(StateChange { old: 1, new: 4 }),
    }));
    out.extend(data);
    out
}

#[test]
fn busiest_keeps_the_current_connection_unless_another_delivered_much_more() {
    let inputs = control_then_data();
    let mut st = WatchState::new(":5201".parse().unwrap(), false, 30);
    fold_until(&mut st, &inputs, 3000);
    assert_eq!(st.conns.len(), 2);
    // Equal or slightly larger totals do not take the view over; a closed connection never does.
    let (ctl, data) = (0, 1);
    assert_eq!(st.conns[ctl].id.cookie, 777);
    assert_eq!(state::busiest(&st.conns, data), data);
    assert_eq!(state::busiest(&st.conns, ctl), data);
    assert_eq!(state::busiest(&[], 3), 0);
    st.conns[data].closed_ns = Some(st.now_ns);
    assert_eq!(state::busiest(&st.conns, ctl), ctl, "a closed connection does not take the view over");
    st.conns[data].closed_ns = None;
    st.conns[ctl].total_bytes = st.conns[data].total_bytes;
    assert_eq!(state::busiest(&st.conns, ctl), ctl, "no flicker between two equal streams");
    assert_eq!(state::busiest(&st.conns, data), data);
}

#[test]
fn a_filter_matching_control_and_data_opens_on_the_data_connection_with_only_its_events() {
    let inputs = control_then_data();
    let mut st = WatchState::new(":5201".parse().unwrap(), false, 30);
    fold_until(&mut st, &inputs, 3000);
    assert_eq!(st.conns.len(), 2);
    assert_eq!(st.conns[0].id.cookie, 777, "the control connection was seen first");
    assert_eq!(st.selected_cookie(), Some(40961), "the view opened on the data connection");
    let s = screen(&st, 160, 48);
    assert!(s.contains("sk:a001"), "{s}");
    assert!(s.contains("lost retransmission"), "the data connection's events are shown:\n{s}");
    assert!(!s.contains("FIN_WAIT1"), "the control connection's event leaked into the pane:\n{s}");
    // The user picks the control connection: it stays (no automatic switch back), and the pane
    // shows its events only.
    st.pick(true);
    fold_until(&mut st, &inputs, 4000);
    assert_eq!(st.selected_cookie(), Some(777));
    let s = screen(&st, 160, 48);
    assert!(s.contains("sk:309") && s.contains("TCP ESTABLISHED -> FIN_WAIT1"), "{s}");
    assert!(!s.contains("lost retransmission") && !s.contains("STOP"), "the data connection's events leaked:\n{s}");
    // The group view shows every connection's lines, each labelled with its cookie.
    let mut st = WatchState::new(":5201".parse().unwrap(), true, 30);
    fold_until(&mut st, &inputs, 3000);
    let s = screen(&st, 160, 48);
    assert!(s.contains("sk:309 TCP ESTABLISHED -> FIN_WAIT1") && s.contains("sk:a001 "), "{s}");
}
