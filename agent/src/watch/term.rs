//! The terminal: raw mode and the alternate screen, always given back: ratatui's init installs a
//! panic hook that restores it before the message is printed, and the guard's Drop restores it on
//! every other way out.
use std::io;

use ratatui::DefaultTerminal;

/// Owns the terminal while the view is up; dropping it restores the terminal (and the terminal's
/// own Drop shows the cursor again).
pub struct TermGuard {
    pub term: DefaultTerminal,
}

impl TermGuard {
    pub fn new() -> io::Result<Self> {
        // A half-done set-up (raw mode on, no alternate screen) is undone before the error returns.
        let mut term = ratatui::try_init().inspect_err(|_| ratatui::restore())?;
        if let Err(e) = term.hide_cursor().and_then(|()| term.clear()) {
            ratatui::restore();
            return Err(e);
        }
        Ok(TermGuard { term })
    }
}

impl Drop for TermGuard {
    fn drop(&mut self) {
        ratatui::restore();
    }
}
