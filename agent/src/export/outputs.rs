//! The daemon's outputs behind the pipeline: kernel events go to the metrics and the flight recorder;
//! findings to the log, the metrics, the JSON events and the recorder; time to the recorder's
//! dumps. `step` is the daemon's whole handling of one kernel input.
use super::health::RecorderHealth;
use super::recorder::sink::DumpSink;
use super::recorder::Recorder;
use super::{EventsWriter, Health, Metrics};
use crate::clock::WallOffset;
use crate::detect::{Input, Pipeline};
use crate::model::{ConnTable, Finding, Sk};

/// The flight recorder: histories kept in the daemon's task, dumps written by the sink's thread.
pub struct Flight {
    pub rec: Recorder,
    pub sink: DumpSink,
}

impl Flight {
    pub fn health(&self) -> RecorderHealth {
        let s = self.rec.stats();
        let c = self.sink.counts();
        RecorderHealth {
            dumps_written: c.written,
            dumps_failed: c.failed,
            dumps_dropped: c.dropped,
            no_history: s.no_history,
            memory_bytes: s.bytes as u64,
            conns: s.conns as u64,
        }
    }
}

pub struct Outputs {
    pub metrics: Metrics,
    /// The JSON events file, if one is written.
    pub events: Option<EventsWriter>,
    pub flight: Option<Flight>,
    /// Monotonic to wall time, read again at every refresh (events and dumps follow clock steps).
    clock: WallOffset,
}

impl Outputs {
    /// The outputs with this host's clocks.
    pub fn new(metrics: Metrics, events: Option<EventsWriter>, flight: Option<Flight>) -> Self {
        Self::with_clock(metrics, events, flight, WallOffset::system())
    }

    /// The outputs with `clock` for the wall time of events and dumps (tests step a fake one).
    pub fn with_clock(
        metrics: Metrics,
        events: Option<EventsWriter>,
        flight: Option<Flight>,
        clock: WallOffset,
    ) -> Self {
        let mut o = Outputs { metrics, events, flight, clock };
        o.set_offset(o.clock.get());
        o
    }

    /// The monotonic-to-wall offset in use, ns.
    pub fn offset(&self) -> i64 {
        self.clock.get()
    }

    fn set_offset(&mut self, offset: i64) {
        if let Some(e) = self.events.as_mut() {
            e.set_offset(offset);
        }
        if let Some(fl) = self.flight.as_ref() {
            fl.sink.set_offset(offset);
        }
    }

    /// One input through the pipeline and on to every output.
    pub fn step(&mut self, pipe: &mut Pipeline, input: Input<'_>) {
        let (metrics, flight) = (&mut self.metrics, &mut self.flight);
        pipe.feed(input, |e| {
            metrics.on_event(e);
            if let Some(fl) = flight.as_mut() {
                fl.rec.on_event(e);
            }
        });
        if let (Input::Time(t), Some(fl)) = (input, self.flight.as_mut()) {
            for d in fl.rec.take_ready(t) {
                fl.sink.submit(d);
            }
        }
        for f in pipe.findings() {
            self.finding(&f, pipe.table());
        }
    }

    fn finding(&mut self, f: &Finding, table: &ConnTable) {
        let process = f.conn.and_then(|c| table.get(c.cookie)).and_then(|e| e.process.clone());
        // Absent fields are left out (no Rust `None`/`Some(..)` in the log); the cookie as `ss -e` prints it.
        tracing::info!(
            kind = f.kind().as_str(),
            cause = %f.cause,
            sk = f.conn.map(|c| display(Sk(c.cookie))),
            conn = f.conn.map(|c| display(c.tuple)),
            group = f.group.as_deref(),
            ongoing = f.ongoing,
            duration_s = f.duration_s,
            "finding"
        );
        self.metrics.on_finding(f);
        if let Some(e) = self.events.as_mut() {
            e.write(f, process.as_ref());
        }
        if let Some(job) = self.flight.as_mut().and_then(|fl| fl.rec.on_finding(f)) {
            tracing::info!(job = job.id, conns = job.cookies.len(), "flight recorder: dump opened");
        }
    }

    /// The periodic refresh of the metrics (per-connection, per-group and health series); `health`
    /// is filled with the outputs' own counts first.
    pub fn refresh(&mut self, table: &ConnTable, mut health: Health) {
        let before = self.clock.get();
        if let Some(now) = self.clock.refresh() {
            tracing::warn!(
                step_s = (now - before) as f64 / 1e9,
                "the wall clock stepped; event and dump times follow it from now on"
            );
            self.set_offset(now);
        }
        health.events_write_errors = self.events.as_ref().map_or(0, EventsWriter::errors);
        health.recorder = self.flight.as_ref().map(Flight::health).unwrap_or_default();
        self.metrics.refresh(table, &health);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::export::ExportConfig;
    use crate::model::{ConnId, StopCause, StopOwner, Tuple};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn stop(ts_ns: u64) -> Finding {
        Finding {
            ts_ns,
            conn: Some(ConnId {
                cookie: 7,
                netns: 1,
                tuple: Tuple { local: "10.0.0.1:4000".parse().unwrap(), remote: "10.0.0.2:5201".parse().unwrap() },
            }),
            group: None,
            start_ns: ts_ns,
            duration_s: None,
            ongoing: true,
            cause: StopCause::Rto.into(),
            owner: Some(StopOwner::Network),
            evidence: serde_json::json!({}),
            path: Default::default(),
            mechanism: None,
        }
    }

    #[test]
    fn events_after_a_step_of_the_wall_clock_carry_the_stepped_time() {
        // Monotonic 0 is 2026-01-01T00:00:00Z; then the wall clock is stepped back one hour.
        let fake = Arc::new(AtomicI64::new(1_767_225_600_000_000_000));
        let f = fake.clone();
        let clock = WallOffset::with_reader(Box::new(move || f.load(Ordering::SeqCst)));
        let buf = Buf::default();
        let events = EventsWriter::with_writer(Box::new(buf.clone()), 0);
        let mut out = Outputs::with_clock(Metrics::new(&ExportConfig::default()), Some(events), None, clock);
        let table = ConnTable::new(false);
        out.finding(&stop(10_000_000_000), &table);
        fake.fetch_sub(3_600_000_000_000, Ordering::SeqCst);
        out.refresh(&table, Health::default());
        out.finding(&stop(11_000_000_000), &table);
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let ts: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["ts"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(ts, ["2026-01-01T00:00:10.000000Z", "2025-12-31T23:00:11.000000Z"], "{text}");
        assert_eq!(out.offset(), 1_767_225_600_000_000_000 - 3_600_000_000_000);
    }
}
