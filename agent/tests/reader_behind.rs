//! A daemon that stops reading (stopped, starved, blocked on a full disk) costs the traffic at most
//! one early wakeup per clock tick while its ring buffer fills, by the kernel's own interrupt count.
mod support;

use std::time::{Duration, Instant};

use support::daemon::{value, Daemon};
use support::*;

/// Irq-work interrupts so far, summed over CPUs: a forced ring-buffer wakeup raises one.
fn irq_work_interrupts() -> u64 {
    let text = std::fs::read_to_string("/proc/interrupts").expect("read /proc/interrupts");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("IWI:"))
        .expect("/proc/interrupts has no IWI line (irq-work interrupts: x86)");
    line.split_whitespace().skip(1).map_while(|w| w.parse::<u64>().ok()).sum()
}

/// Samples read from the ring buffer so far, and records it had no room for.
fn counts(d: &Daemon) -> (f64, f64) {
    let text = d.scrape().expect("scrape");
    let samples = value(&text, "tcpvigil_kernel_records_total{kind=\"sample\"}").expect("samples series");
    let full = value(&text, "tcpvigil_dropped_records_total{stage=\"ring_buffer\"}").expect("ring_buffer series");
    (samples, full)
}

#[test]
fn a_stopped_reader_is_woken_at_most_once_per_tick_while_its_buffer_fills() {
    if !require_root("a_stopped_reader_is_woken_at_most_once_per_tick_while_its_buffer_fills") {
        return;
    }
    // A small buffer and a sample of every bulk stream each millisecond: it fills within seconds.
    let d = Daemon::start("behind", "[bpf]\nringbuf_mib = 1\nbulk_interval_ms = 1\n");
    let pid = d.pid().expect("daemon pid") as i32;
    let pair = Pair::new("rb");
    let (samples0, _) = counts(&d);
    let srv = pair.iperf_server(5301);
    let kill = |sig: &str| sh(&format!("kill -{sig} {pid}"));
    kill("STOP");
    let (w0, t0) = (irq_work_interrupts(), Instant::now());
    let run = pair.iperf_client(5301, 4, &["-P", "4"]);
    let (woken, secs) = (irq_work_interrupts() - w0, t0.elapsed().as_secs_f64());
    kill("CONT");
    drop(srv);
    assert!(run["end"]["sum_received"]["bytes"].as_f64().unwrap_or(0.0) > 0.0, "the transfer ran: {run}");
    // Wait for the reader to drain what waited and to publish the kernel's counters (a look).
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut samples, mut full) = counts(&d);
    while full == 0.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        (samples, full) = counts(&d);
    }
    d.stop();
    let read = samples - samples0;
    eprintln!("{woken} irq-work interrupts in {secs:.1} s; {read} samples read after, {full} refused by a full buffer");
    assert!(full > 0.0, "the buffer never filled while the reader was stopped: the test shows nothing");
    // Once per tick, and CPUs racing on the same tick: half again as many at most.
    let hz = f64::from(tcpvigil::bpf::kconfig::hz().expect("the kernel's CONFIG_HZ").hz);
    let bound = 1.5 * hz * secs + 50.0;
    assert!(woken as f64 <= bound, "{woken} wakeups in {secs:.1} s: more than one per tick ({bound:.0})");
    // Without the limit every record past an eighth of the buffer woke the reader: most of those read.
    assert!(
        (woken as f64) < read / 4.0,
        "{woken} wakeups for {read} records: about one per record, as without the limit"
    );
}
