//! The terminal: raw mode and the alternate screen, always given back (Drop guard + panic hook).
use std::io::{self, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::cursor::Show;
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen};
use ratatui::Terminal;

/// Undo raw mode and the alternate screen; safe to call more than once.
pub fn restore() {
    let _ = disable_raw_mode();
    let _ = execute!(io::stdout(), LeaveAlternateScreen, Show);
}

/// Whether the view owns the terminal now (the panic hook touches it only then).
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Restore the terminal before any panic message is printed (installed once per process).
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if ACTIVE.swap(false, Ordering::SeqCst) {
                restore();
            }
            prev(info);
        }));
    });
}

/// Owns the terminal while the view is up; dropping it restores the terminal.
pub struct TermGuard {
    pub term: Terminal<CrosstermBackend<Stdout>>,
}

impl TermGuard {
    pub fn new() -> io::Result<Self> {
        install_panic_hook();
        enable_raw_mode()?;
        ACTIVE.store(true, Ordering::SeqCst);
        let guard_restore = |e| {
            ACTIVE.store(false, Ordering::SeqCst);
            restore();
            e
        };
        execute!(io::stdout(), EnterAlternateScreen).map_err(guard_restore)?;
        let mut term = Terminal::new(CrosstermBackend::new(io::stdout())).map_err(guard_restore)?;
        term.hide_cursor().map_err(guard_restore)?;
        term.clear().map_err(guard_restore)?;
        Ok(TermGuard { term })
    }
}

impl Drop for TermGuard {
    fn drop(&mut self) {
        ACTIVE.store(false, Ordering::SeqCst);
        restore();
    }
}
