//! The terminal: raw mode and the alternate screen, always given back (Drop guard + panic hook).
use std::io::{self, Stdout};
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

/// Restore the terminal before any panic message is printed (installed once per process).
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
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
        let guard_restore = |e| {
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
        restore();
    }
}
