//! The daemon's outputs behind the pipeline: kernel events go to the metrics and the flight recorder;
//! findings to the log, the metrics, the JSON events and the recorder; time to the recorder's
//! dumps. `step` is the daemon's whole handling of one kernel input.
use super::health::RecorderHealth;
use super::recorder::sink::DumpSink;
use super::recorder::Recorder;
use super::{EventsWriter, Health, Metrics};
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
}

impl Outputs {
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
        health.events_write_errors = self.events.as_ref().map_or(0, EventsWriter::errors);
        health.recorder = self.flight.as_ref().map(Flight::health).unwrap_or_default();
        self.metrics.refresh(table, &health);
    }
}
