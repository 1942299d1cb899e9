//! What wakes the BPF thread besides records: control messages, and the detectors' next tick.
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags};
use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::clock::{mono_now_ns, next_tick};

/// Shared by the agent's handle (which wakes) and the BPF thread (which waits).
pub(super) struct Waker {
    fd: EventFd,
    /// CLOCK_MONOTONIC ns of the detectors' next tick; 0: every `clock::TICK_MIN`.
    due: AtomicU64,
    /// A look was asked for and not yet taken.
    look_asked: AtomicBool,
}

impl Waker {
    pub fn new() -> Result<Waker> {
        let fd = EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .context("creating an eventfd")?;
        Ok(Waker { fd, due: AtomicU64::new(0), look_asked: AtomicBool::new(false) })
    }

    /// A look is asked for: whether it is news to the thread. The detectors ask at every tick
    /// until the look's records reach them, and each ask woke the thread, which handed time over
    /// at once, which asked again: a busy loop until the look came (lab fuzz seed 151 run 53).
    pub fn ask_look(&self) -> bool {
        !self.look_asked.swap(true, Ordering::Relaxed)
    }

    /// The thread takes a look now: asks after this are for a later one.
    pub fn look_taken(&self) {
        self.look_asked.store(false, Ordering::Relaxed);
    }

    /// Wake the thread now (a control message waits).
    pub fn wake(&self) {
        let _ = self.fd.write(1);
    }

    /// The detectors' next tick is due at `mono_ns`; the thread is woken if that is sooner than
    /// it was told before.
    pub fn tick_at(&self, mono_ns: u64) {
        if mono_ns < self.due.swap(mono_ns, Ordering::Relaxed) {
            self.wake();
        }
    }

    /// Wait for records past the ring buffer's wakeup mark, a wake, the next tick or `limit`,
    /// whichever comes first. Records below the mark are not signalled (the programs submit
    /// without a wakeup): the caller consumes after this.
    pub fn wait(&self, rb: &libbpf_rs::RingBuffer<'_>, limit: Duration) {
        let now = mono_now_ns();
        let timeout = Duration::from_nanos(next_tick(now, self.due.load(Ordering::Relaxed)) - now).min(limit);
        // SAFETY: the ring buffer's epoll descriptor lives as long as `rb`, borrowed for this call.
        let ring = unsafe { BorrowedFd::borrow_raw(rb.epoll_fd()) };
        let mut fds = [PollFd::new(ring, PollFlags::POLLIN), PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        // Rounded up: woken before the tick is due, the detectors would find nothing due yet.
        let ms = u16::try_from(timeout.as_nanos().div_ceil(1_000_000)).unwrap_or(u16::MAX);
        match poll(&mut fds, ms) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => tracing::warn!("ring buffer poll: {e}"),
        }
        if fds[1].revents().is_some_and(|r| r.contains(PollFlags::POLLIN)) {
            let _ = self.fd.read();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_asked_for_again_before_it_is_taken_is_no_news() {
        let w = Waker::new().unwrap();
        assert!(w.ask_look(), "the first ask");
        assert!(!w.ask_look() && !w.ask_look(), "asks at the next ticks, the look not yet taken");
        w.look_taken();
        assert!(w.ask_look(), "an ask after the look is for the next one");
    }
}
