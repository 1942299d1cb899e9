//! A `Write` that never blocks its caller: whole lines go to a writer thread through a bounded
//! queue; when the reader of the output does not keep up (a pipe nobody reads), lines are dropped
//! and counted instead of stalling the event loop (which then could not even stop on time).
//! Each line is written with one `write` call: up to PIPE_BUF (4096) bytes that is atomic on a
//! pipe, so the output holds only whole lines even if the process exits while the thread waits.
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Lines delivered to the output and lines dropped because the queue was full or the output failed.
#[derive(Debug, Default)]
pub struct LineCounts {
    pub written: AtomicU64,
    pub dropped: AtomicU64,
}

pub struct NonBlockingLines {
    tx: Option<SyncSender<Vec<u8>>>,
    partial: Vec<u8>,
    /// Lines queued, and lines refused because the queue was full.
    sent: u64,
    full: u64,
    pub counts: Arc<LineCounts>,
    thread: Option<JoinHandle<()>>,
}

fn pump(mut out: impl Write, rx: Receiver<Vec<u8>>, counts: Arc<LineCounts>) {
    for line in rx {
        // One write for the whole line when it is accepted whole (the usual case).
        let ok = match out.write(&line) {
            Ok(n) if n == line.len() => true,
            Ok(n) => out.write_all(&line[n..]).is_ok(),
            Err(_) => false,
        };
        if ok && out.flush().is_ok() {
            counts.written.fetch_add(1, Ordering::Relaxed);
        } else {
            counts.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl NonBlockingLines {
    /// Lines for `out`, at most `queue` waiting.
    pub fn new(out: impl Write + Send + 'static, queue: usize) -> io::Result<Self> {
        let (tx, rx) = sync_channel(queue);
        let counts = Arc::new(LineCounts::default());
        let c = counts.clone();
        let thread = std::thread::Builder::new().name("tcpvigil-out".into()).spawn(move || pump(out, rx, c))?;
        Ok(NonBlockingLines { tx: Some(tx), partial: Vec::new(), sent: 0, full: 0, counts, thread: Some(thread) })
    }

    /// Stop taking lines and give the thread up to `wait` to write what is queued; returns the
    /// counts (lines still queued after `wait` count as dropped).
    pub fn finish(mut self, wait: Duration) -> (u64, u64) {
        self.tx.take();
        let t0 = Instant::now();
        if let Some(t) = self.thread.take() {
            while !t.is_finished() && t0.elapsed() < wait {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
        // Queued but not written (failed, or still waiting behind a stuck reader) is dropped too.
        let written = self.counts.written.load(Ordering::Relaxed);
        (written, self.full + self.sent.saturating_sub(written))
    }
}

impl Write for NonBlockingLines {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.partial.extend_from_slice(buf);
        while let Some(i) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=i).collect();
            match self.tx.as_ref().map(|tx| tx.try_send(line)) {
                Some(Ok(())) => self.sent += 1,
                Some(Err(TrySendError::Full(_))) => self.full += 1,
                Some(Err(TrySendError::Disconnected(_))) | None => {
                    return Err(io::Error::new(io::ErrorKind::BrokenPipe, "the output is closed"));
                }
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that blocks forever once it has taken `n` lines (a pipe nobody reads).
    struct Stuck(std::sync::Arc<std::sync::Mutex<Vec<u8>>>, usize);
    impl Write for Stuck {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            if self.1 == 0 {
                std::thread::sleep(Duration::from_secs(3600));
            }
            self.1 -= 1;
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stuck_reader_never_blocks_the_writer_and_every_line_is_counted() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut w = NonBlockingLines::new(Stuck(seen.clone(), 5), 10).unwrap();
        let t = Instant::now();
        for i in 0..1000 {
            // Lines arrive in pieces, as serde and BufWriter hand them over.
            write!(w, "{{\"n\":").unwrap();
            writeln!(w, "{i}}}").unwrap();
        }
        assert!(t.elapsed() < Duration::from_secs(1), "writing blocked");
        let (written, dropped) = w.finish(Duration::from_millis(200));
        assert_eq!(written, 5);
        // 5 written; the one stuck in write, the queued ones and the refused ones are all dropped.
        assert_eq!(dropped, 995);
        let text = String::from_utf8(seen.lock().unwrap().clone()).unwrap();
        for l in text.lines() {
            serde_json::from_str::<serde_json::Value>(l).expect("whole JSON lines only");
        }
    }

    #[test]
    fn a_reader_that_keeps_up_gets_every_line_in_order() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut w = NonBlockingLines::new(Stuck(seen.clone(), usize::MAX), 100_000).unwrap();
        for i in 0..1000 {
            writeln!(w, "{i}").unwrap();
        }
        assert_eq!(w.finish(Duration::from_secs(5)), (1000, 0));
        let text = String::from_utf8(seen.lock().unwrap().clone()).unwrap();
        assert!(text.lines().enumerate().all(|(i, l)| l == i.to_string()));
    }
}
