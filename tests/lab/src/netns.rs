//! Entering a named network namespace from one thread, so Rust code (delay line, plain TCP pair) runs inside it.
use crate::error::{LabError, Result};
use nix::sched::{setns, CloneFlags};
use std::fs::File;

/// Moves the calling thread into network namespace `name` (from `ip netns add`).
/// Only this thread moves; sockets it creates afterwards belong to that namespace.
pub fn enter(name: &str) -> Result<()> {
    let path = format!("/run/netns/{name}");
    let f = File::open(&path).map_err(|e| LabError::io(format!("open {path}"), e))?;
    setns(&f, CloneFlags::CLONE_NEWNET).map_err(|e| LabError::io(format!("setns into {name}"), std::io::Error::from(e)))
}

/// Spawns a named thread that enters `ns` and then runs `f`.
pub fn spawn_in<T, F>(ns: &str, thread_name: &str, f: F) -> Result<std::thread::JoinHandle<Result<T>>>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    let ns = ns.to_string();
    std::thread::Builder::new()
        .name(thread_name.to_string())
        .spawn(move || {
            enter(&ns)?;
            f()
        })
        .map_err(|e| LabError::io(format!("spawn thread {thread_name}"), e))
}
