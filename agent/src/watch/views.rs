//! Which view the terminal shows and what a key does to it: the `--conn` view alone, or the host
//! list with one connection opened from it (Enter) and closed again (Esc). Pure: inputs and keys
//! in, state and the connection to select for per-ACK samples out.
use super::host::HostState;
use super::input::Action;
use super::state::{WatchInput, WatchState};
use super::WatchOpts;
use crate::model::{Body, Event, Filter};

/// Rows a page key moves the host list's cursor.
const PAGE: isize = 20;

/// What the loop must do after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOutcome {
    None,
    Quit,
    /// Select this connection for per-ACK samples (None: no connection any more).
    Select(Option<u64>),
}

/// The views of one `watch` run.
#[derive(Debug)]
pub struct Views {
    /// The connection view: `--conn`'s, or the one opened from the host list.
    pub single: Option<WatchState>,
    /// The host list (no `--conn`).
    pub host: Option<HostState>,
    window_s: u32,
}

impl Views {
    pub fn new(opts: &WatchOpts) -> Self {
        match &opts.conn {
            Some(f) => Views {
                single: Some(WatchState::new(f.clone(), opts.all, opts.window)),
                host: None,
                window_s: opts.window,
            },
            None => Views { single: None, host: Some(HostState::default()), window_s: opts.window },
        }
    }

    pub fn apply(&mut self, input: &WatchInput) {
        if let Some(h) = self.host.as_mut() {
            h.apply(input);
        }
        if let Some(s) = self.single.as_mut() {
            s.apply(input);
        }
    }

    /// The input ended (replay over, daemon gone).
    pub fn source_ended(&mut self) {
        if let Some(s) = self.single.as_mut() {
            s.source_ended = true;
        }
    }

    /// `--conn`'s view is done (its connection closed); the host view never is.
    pub fn finished(&self) -> bool {
        self.host.is_none() && self.single.as_ref().is_some_and(WatchState::finished)
    }

    /// Paused (the connection view only): the screen need not be redrawn every frame.
    pub fn paused(&self) -> bool {
        self.single.as_ref().is_some_and(|s| s.paused_at.is_some())
    }

    pub fn key(&mut self, a: Action) -> KeyOutcome {
        if a == Action::Open && self.single.is_none() {
            let cursor = self.host.as_ref().and_then(|h| h.cursor);
            return self.open(cursor);
        }
        match (a, self.host.as_mut(), self.single.as_mut()) {
            (Action::Quit, _, _) => return KeyOutcome::Quit,
            // Esc: back to the host list, or (with --conn) quit as it always did.
            (Action::Back, None, _) => return KeyOutcome::Quit,
            (Action::Back, Some(_), Some(_)) => {
                self.single = None;
                return KeyOutcome::Select(None);
            }
            (Action::Prev, Some(h), None) => h.move_cursor(-1),
            (Action::Next, Some(h), None) => h.move_cursor(1),
            (Action::PageUp, Some(h), None) => h.move_cursor(-PAGE),
            (Action::PageDown, Some(h), None) => h.move_cursor(PAGE),
            (Action::Pause, _, Some(s)) => s.toggle_pause(),
            (Action::Wider, _, Some(s)) => s.zoom(true),
            (Action::Narrower, _, Some(s)) => s.zoom(false),
            (Action::Prev, _, Some(s)) => s.pick(false),
            (Action::Next, _, Some(s)) => s.pick(true),
            _ => {}
        }
        KeyOutcome::None
    }

    /// Open a connection of the host list: the single view, from now on, with its process.
    fn open(&mut self, cookie: Option<u64>) -> KeyOutcome {
        let Some((h, k)) = self.host.as_ref().zip(cookie) else { return KeyOutcome::None };
        let Some(row) = h.get(k) else { return KeyOutcome::None };
        let mut st = WatchState::new(Filter::Cookie(k), false, self.window_s);
        if let Some(p) = &row.process {
            st.apply_event(&Event { ts_ns: h.now_ns, conn: row.id, body: Body::Process(p.clone()) });
        }
        st.tick(h.now_ns);
        self.single = Some(st);
        KeyOutcome::Select(Some(k))
    }
}
