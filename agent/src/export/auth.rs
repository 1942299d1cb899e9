//! Basic authentication that a flood of wrong passwords cannot turn against the scrapes. bcrypt
//! is slow on purpose, so: it runs on one worker thread behind a short queue (a full queue is
//! "busy", 429, at once); credentials checked before are remembered, as exporter-toolkit does
//! (a good scrape needs no bcrypt, a repeated wrong password costs nothing); a peer that keeps
//! failing is refused without hashing for a while, longer each time; and an unknown user costs
//! one bcrypt at the users' own cost, as a known user with a wrong password does.
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine;

/// Checks waiting for the bcrypt worker; more are refused as busy.
const QUEUE: usize = 8;
/// Good credentials remembered (a few users, a few passwords each).
const GOOD_ENTRIES: usize = 64;
/// Wrong credentials remembered.
const BAD_ENTRIES: usize = 1024;
/// Failures a peer may have before it is backed off.
const FREE_FAILURES: u32 = 5;
/// The longest back-off; it doubles from 1 s with each failure past `FREE_FAILURES`.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A peer's failures are forgotten after this long without one.
const FORGET: Duration = Duration::from_secs(600);
/// Peers tracked at once (the oldest are forgotten first).
const PEERS: usize = 4096;

/// What to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// 401.
    Denied,
    /// 429: too many attempts (this peer's, or everyone's at once); retry after the given time.
    Busy(Duration),
}

/// `Basic base64(user:pass)` -> (user, pass).
pub fn parse_basic(h: &[u8]) -> Option<(String, String)> {
    let h = std::str::from_utf8(h).ok()?.trim();
    let (scheme, rest) = h.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD.decode(rest.trim()).ok()?;
    let s = String::from_utf8(raw).ok()?;
    let (u, p) = s.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

struct Job {
    hash: String,
    pass: String,
    reply: tokio::sync::oneshot::Sender<bool>,
}

/// A bcrypt worker thread and its queue.
fn spawn_worker() -> Option<SyncSender<Job>> {
    let (tx, rx) = sync_channel::<Job>(QUEUE);
    let spawned = std::thread::Builder::new().name("tcpvigil-bcrypt".into()).spawn(move || {
        for j in rx {
            let ok = bcrypt::verify(j.pass.as_bytes(), &j.hash).unwrap_or(false);
            let _ = j.reply.send(ok);
        }
    });
    spawned.ok().map(|_| tx)
}

/// The one bcrypt worker of the process (shared by every web config a reload makes).
fn worker() -> Option<SyncSender<Job>> {
    static POOL: OnceLock<Option<SyncSender<Job>>> = OnceLock::new();
    POOL.get_or_init(spawn_worker).clone()
}

/// Remembered credentials, by a keyed 128-bit hash of (user, password): no password is kept.
#[derive(Default)]
struct Memo {
    at: HashMap<u128, Instant>,
}

impl Memo {
    fn contains(&self, k: u128) -> bool {
        self.at.contains_key(&k)
    }
    fn insert(&mut self, k: u128, cap: usize) {
        if self.at.len() >= cap && !self.at.contains_key(&k) {
            if let Some(old) = self.at.iter().min_by_key(|(_, t)| **t).map(|(k, _)| *k) {
                self.at.remove(&old);
            }
        }
        self.at.insert(k, Instant::now());
    }
}

#[derive(Clone, Copy)]
struct Strikes {
    failures: u32,
    last: Instant,
    until: Instant,
}

/// The users of a web config and what was learnt about credentials and peers since it was loaded.
pub struct Auth {
    users: BTreeMap<String, String>,
    /// A hash of the users' highest cost, checked for unknown users.
    dummy: String,
    keys: (RandomState, RandomState),
    worker: Option<SyncSender<Job>>,
    good: Mutex<Memo>,
    bad: Mutex<Memo>,
    strikes: Mutex<HashMap<IpAddr, Strikes>>,
}

impl Auth {
    /// `users`: name -> bcrypt hash, all checked to parse (`WebConfig::parse`).
    pub fn new(users: BTreeMap<String, String>) -> Self {
        let cost = users.values().filter_map(|h| h.parse::<bcrypt::HashParts>().ok()).map(|p| p.get_cost()).max();
        // Any salt and digest will do: verifying runs the full cost whatever it compares against.
        let dummy = format!("$2b${:02}$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DSmV9UUNY6iETwcuHAjN6", cost.unwrap_or(10));
        Auth {
            users,
            dummy,
            keys: (RandomState::new(), RandomState::new()),
            worker: worker(),
            good: Mutex::default(),
            bad: Mutex::default(),
            strikes: Mutex::default(),
        }
    }

    pub fn required(&self) -> bool {
        !self.users.is_empty()
    }

    fn key(&self, user: &str, pass: &str) -> u128 {
        let (a, b) = (&self.keys.0, &self.keys.1);
        (a.hash_one((user, pass)) as u128) << 64 | b.hash_one((user, pass)) as u128
    }

    /// The hash to check a password against: the user's, or for an unknown user the dummy.
    fn hash_for(&self, user: &str) -> (&str, bool) {
        match self.users.get(user) {
            Some(h) => (h, true),
            None => (&self.dummy, false),
        }
    }

    fn remember(&self, key: u128, ok: bool) {
        let (memo, cap) = if ok { (&self.good, GOOD_ENTRIES) } else { (&self.bad, BAD_ENTRIES) };
        memo.lock().unwrap_or_else(|p| p.into_inner()).insert(key, cap);
    }

    fn recall(&self, key: u128) -> Option<bool> {
        if self.good.lock().unwrap_or_else(|p| p.into_inner()).contains(key) {
            return Some(true);
        }
        self.bad.lock().unwrap_or_else(|p| p.into_inner()).contains(key).then_some(false)
    }

    /// Check a user and password now, on this thread (bcrypt unless remembered).
    pub fn verify_now(&self, user: &str, pass: &str) -> bool {
        let key = self.key(user, pass);
        if let Some(ok) = self.recall(key) {
            return ok;
        }
        let (hash, known) = self.hash_for(user);
        let ok = bcrypt::verify(pass.as_bytes(), hash).unwrap_or(false) && known;
        self.remember(key, ok);
        ok
    }

    /// Check an `Authorization` header from `peer`: remembered credentials at once, others on the
    /// bcrypt worker unless the peer is backed off or the worker's queue is full.
    pub async fn check(&self, header: Option<&[u8]>, peer: IpAddr) -> Verdict {
        if !self.required() {
            return Verdict::Allowed;
        }
        let Some((user, pass)) = header.and_then(parse_basic) else { return Verdict::Denied };
        let key = self.key(&user, &pass);
        match self.recall(key) {
            Some(true) => return Verdict::Allowed,
            Some(false) => {
                self.strike(peer);
                return Verdict::Denied;
            }
            None => {}
        }
        if let Some(wait) = self.backed_off(peer) {
            return Verdict::Busy(wait);
        }
        let (hash, known) = self.hash_for(&user);
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = Job { hash: hash.to_string(), pass, reply };
        match self.worker.as_ref().map(|w| w.try_send(job)) {
            Some(Ok(())) => {}
            Some(Err(TrySendError::Full(_) | TrySendError::Disconnected(_))) | None => {
                return Verdict::Busy(Duration::from_secs(1))
            }
        }
        let ok = answer.await.unwrap_or(false) && known;
        self.remember(key, ok);
        if ok {
            self.strikes.lock().unwrap_or_else(|p| p.into_inner()).remove(&peer);
            Verdict::Allowed
        } else {
            self.strike(peer);
            Verdict::Denied
        }
    }

    fn backed_off(&self, peer: IpAddr) -> Option<Duration> {
        let now = Instant::now();
        let s = self.strikes.lock().unwrap_or_else(|p| p.into_inner());
        s.get(&peer).filter(|s| s.until > now).map(|s| s.until - now)
    }

    fn strike(&self, peer: IpAddr) {
        let now = Instant::now();
        let mut all = self.strikes.lock().unwrap_or_else(|p| p.into_inner());
        if all.len() >= PEERS && !all.contains_key(&peer) {
            all.retain(|_, s| now.duration_since(s.last) < FORGET);
            if all.len() >= PEERS {
                if let Some(old) = all.iter().min_by_key(|(_, s)| s.last).map(|(p, _)| *p) {
                    all.remove(&old);
                }
            }
        }
        let s = all.entry(peer).or_insert(Strikes { failures: 0, last: now, until: now });
        if now.duration_since(s.last) >= FORGET {
            s.failures = 0;
        }
        s.failures += 1;
        s.last = now;
        if s.failures > FREE_FAILURES {
            let exp = (s.failures - FREE_FAILURES - 1).min(16);
            s.until = now + Duration::from_secs(1u64 << exp).min(MAX_BACKOFF);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user: &str, pass: &str) -> Vec<u8> {
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))).into_bytes()
    }

    /// With a worker of its own, so that tests filling the queue do not disturb each other.
    fn auth(cost: u32) -> Auth {
        let mut a = Auth::new(BTreeMap::from([("prom".to_string(), bcrypt::hash("s3cret", cost).unwrap())]));
        a.worker = spawn_worker();
        a
    }

    #[test]
    fn an_unknown_user_costs_what_a_known_one_does_whatever_the_cost() {
        for cost in [6, 8] {
            let a = auth(cost);
            // Interleaved, each with a new password (nothing remembered helps); medians.
            let (mut known, mut unknown) = (Vec::new(), Vec::new());
            for i in 0..9 {
                for (user, out) in [("prom", &mut known), ("mallory", &mut unknown)] {
                    let t = Instant::now();
                    assert!(!a.verify_now(user, &format!("wrong{i}")));
                    out.push(t.elapsed().as_secs_f64() * 1000.0);
                }
            }
            for v in [&mut known, &mut unknown] {
                v.sort_by(|a, b| a.total_cmp(b));
            }
            let (k, u) = (known[4], unknown[4]);
            println!("cost {cost}: known user {k:.1} ms, unknown {u:.1} ms");
            // Loose bounds (tests run side by side on a shared machine): the cost-10 dummy this
            // replaced made an unknown user 16 times dearer than a cost-6 one, 4 times a cost-8 one.
            assert!((0.33..3.0).contains(&(u / k)), "cost {cost}: known user {k:.1} ms, unknown {u:.1} ms");
        }
    }

    #[tokio::test]
    async fn remembered_credentials_skip_bcrypt_and_a_failing_peer_is_backed_off() {
        let a = auth(4);
        let peer: IpAddr = "192.0.2.7".parse().unwrap();
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        assert_eq!(a.check(Some(&basic("prom", "s3cret")), peer).await, Verdict::Allowed);
        assert_eq!(a.check(None, peer).await, Verdict::Denied);
        assert_eq!(a.check(Some(b"Bearer x"), peer).await, Verdict::Denied);
        for i in 0..FREE_FAILURES {
            assert_eq!(a.check(Some(&basic("prom", &format!("w{i}"))), peer).await, Verdict::Denied);
        }
        // One more failure backs the peer off: new guesses are refused unhashed.
        assert_eq!(a.check(Some(&basic("prom", "w-last")), peer).await, Verdict::Denied);
        assert!(matches!(a.check(Some(&basic("prom", "w-next")), peer).await, Verdict::Busy(_)));
        // A remembered good password still passes; another peer is not affected.
        assert_eq!(a.check(Some(&basic("prom", "s3cret")), peer).await, Verdict::Allowed);
        assert_eq!(a.check(Some(&basic("prom", "s3cret2")), other).await, Verdict::Denied);
        // The good password's second check needs no bcrypt at all.
        let t = Instant::now();
        for _ in 0..1000 {
            assert_eq!(a.check(Some(&basic("prom", "s3cret")), other).await, Verdict::Allowed);
        }
        assert!(t.elapsed() < Duration::from_secs(1), "remembered checks took {:?}", t.elapsed());
    }

    #[tokio::test]
    async fn a_full_queue_is_busy_not_a_thread_per_attempt() {
        let a = std::sync::Arc::new(auth(8));
        let mut tasks = Vec::new();
        for i in 0..64 {
            let a = a.clone();
            let peer = IpAddr::from([198, 51, 100, i as u8]);
            tasks.push(tokio::spawn(async move { a.check(Some(&basic("prom", &format!("x{i}"))), peer).await }));
        }
        let mut busy = 0;
        for t in tasks {
            busy += matches!(t.await.unwrap(), Verdict::Busy(_)) as usize;
        }
        assert!(busy >= 64 - QUEUE - 2, "{busy} of 64 were refused as busy");
        let threads = std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0);
        assert!(threads < 40, "{threads} threads");
    }

    #[test]
    fn parse_basic_takes_only_well_formed_basic_credentials() {
        assert_eq!(parse_basic(&basic("a", "b:c")), Some(("a".into(), "b:c".into())));
        assert_eq!(parse_basic(b"basic   YTpi"), Some(("a".into(), "b".into())));
        for bad in [&b""[..], b"Basic", b"Basic !!!", b"Bearer YTpi", b"Basic YWI=", b"\xff\xfe"] {
            assert_eq!(parse_basic(bad), None, "{bad:?}");
        }
    }
}
