//! Keys: what each one does (pure), and the thread that reads them from the terminal.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratatui::crossterm::event::{self, Event as TermEvent, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use tokio::sync::mpsc;

/// What a key asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Quit,
    Pause,
    /// A longer time window (`+`).
    Wider,
    /// A shorter time window (`-`).
    Narrower,
    /// The previous matching connection.
    Prev,
    /// The next matching connection.
    Next,
    /// Open the connection under the cursor (host view: Enter).
    Open,
    /// Back to the host view (Esc; with `--conn`, quit).
    Back,
    /// A page up or down the host view's list.
    PageUp,
    PageDown,
    /// The terminal was resized: redraw.
    Redraw,
}

/// The action for a key press, None for keys that do nothing.
pub fn action(k: &KeyEvent) -> Option<Action> {
    if k.kind == KeyEventKind::Release {
        return None;
    }
    let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
    Some(match k.code {
        KeyCode::Char('c') | KeyCode::Char('d') if ctrl => Action::Quit,
        KeyCode::Char('q') | KeyCode::Char('Q') => Action::Quit,
        KeyCode::Esc | KeyCode::Backspace => Action::Back,
        KeyCode::Enter => Action::Open,
        KeyCode::PageUp => Action::PageUp,
        KeyCode::PageDown => Action::PageDown,
        KeyCode::Char('p') | KeyCode::Char('P') | KeyCode::Char(' ') => Action::Pause,
        KeyCode::Char('+') | KeyCode::Char('=') => Action::Wider,
        KeyCode::Char('-') | KeyCode::Char('_') => Action::Narrower,
        KeyCode::Left | KeyCode::Up | KeyCode::BackTab => Action::Prev,
        KeyCode::Right | KeyCode::Down | KeyCode::Tab => Action::Next,
        _ => return None,
    })
}

/// Reads the terminal on its own OS thread (crossterm's reads block) until `stop` is set or
/// the receiver is gone; polls every 50 ms so it notices `stop` quickly.
pub fn spawn_reader(stop: Arc<AtomicBool>) -> mpsc::Receiver<Action> {
    let (tx, rx) = mpsc::channel(64);
    let spawned = std::thread::Builder::new().name("watch-keys".into()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match event::poll(Duration::from_millis(50)) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(_) => break,
            }
            let a = match event::read() {
                Ok(TermEvent::Key(k)) => action(&k),
                Ok(TermEvent::Resize(..)) => Some(Action::Redraw),
                Ok(_) => None,
                Err(_) => break,
            };
            if let Some(a) = a {
                if tx.blocking_send(a).is_err() {
                    break;
                }
            }
        }
    });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the key reader thread ({e}); keys will not work, use --duration or Ctrl-\\");
    }
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(c: KeyCode, m: KeyModifiers) -> KeyEvent {
        KeyEvent::new(c, m)
    }

    #[test]
    fn quit_back_open_pause_window_and_pick_keys_map_to_actions() {
        let none = KeyModifiers::NONE;
        assert_eq!(action(&key(KeyCode::Char('q'), none)), Some(Action::Quit));
        assert_eq!(action(&key(KeyCode::Esc, none)), Some(Action::Back));
        assert_eq!(action(&key(KeyCode::Enter, none)), Some(Action::Open));
        assert_eq!(action(&key(KeyCode::PageDown, none)), Some(Action::PageDown));
        assert_eq!(action(&key(KeyCode::Char('c'), KeyModifiers::CONTROL)), Some(Action::Quit));
        assert_eq!(action(&key(KeyCode::Char('c'), none)), None);
        assert_eq!(action(&key(KeyCode::Char('p'), none)), Some(Action::Pause));
        assert_eq!(action(&key(KeyCode::Char('+'), none)), Some(Action::Wider));
        assert_eq!(action(&key(KeyCode::Char('-'), none)), Some(Action::Narrower));
        assert_eq!(action(&key(KeyCode::Left, none)), Some(Action::Prev));
        assert_eq!(action(&key(KeyCode::Right, none)), Some(Action::Next));
        let mut release = key(KeyCode::Char('q'), none);
        release.kind = KeyEventKind::Release;
        assert_eq!(action(&release), None);
    }
}
