//! Hostile input, time-boxed random fuzzing (TV_FUZZ_SECS per target, default 2): the ring-buffer
//! decoder, the recording reader and the detectors behind `analyze`, the config and the connection
//! filter never panic; and hostile files given to `analyze`/`plot` (/dev/zero, a directory, a
//! 200 MB line, a truncated gzip, timestamps out of order) end with exit 2 and a clear message.
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tcpvigil::bpf::decode::decode;
use tcpvigil::config::Config;
use tcpvigil::model::Filter;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn budget() -> Duration {
    Duration::from_secs_f64(std::env::var("TV_FUZZ_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(2.0))
}

fn seed() -> u64 {
    let s = std::env::var("TV_FUZZ_SEED").ok().and_then(|s| s.parse().ok());
    s.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(7)
    }) | 1
}

/// Run `case` on generated inputs until the budget is spent; a panic fails with the input and seed.
fn fuzz<T: std::fmt::Debug>(name: &str, mut gen: impl FnMut(&mut Rng) -> T, case: impl Fn(&T)) {
    let s = seed();
    let mut rng = Rng(s);
    let (t, mut n) = (Instant::now(), 0u64);
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    while t.elapsed() < budget() {
        let input = gen(&mut rng);
        if catch_unwind(AssertUnwindSafe(|| case(&input))).is_err() {
            std::panic::set_hook(hook);
            let shown = format!("{input:?}");
            panic!("{name}: panicked on input (TV_FUZZ_SEED={s}): {}", &shown[..shown.len().min(2000)]);
        }
        n += 1;
    }
    std::panic::set_hook(hook);
    println!("{name}: {n} inputs in {:.1} s, no panic (seed {s})", t.elapsed().as_secs_f64());
    assert!(n >= 20, "{name}: too few inputs tried ({n})");
}

fn fixture(name: &str) -> Vec<u8> {
    let gz =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures").join(name)).expect("fixture");
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut out).expect("gunzip fixture");
    out
}

/// Byte-level damage: flips, cuts, splices, duplicated and swapped lines.
fn mutate(rng: &mut Rng, base: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..1 + rng.below(8) {
        match rng.below(6) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = rng.next() as u8;
            }
            1 => v.truncate(rng.below(v.len() + 1)),
            2 if !v.is_empty() => {
                let (a, b) = (rng.below(v.len()), rng.below(v.len()));
                let (a, b) = (a.min(b), a.max(b));
                let piece = v[a..b.min(a + 4096)].to_vec();
                let at = rng.below(v.len());
                v.splice(at..at, piece);
            }
            3 => {
                let digits = b"0123456789-e.";
                if !v.is_empty() {
                    let i = rng.below(v.len());
                    v[i] = digits[rng.below(digits.len())];
                }
            }
            _ => {
                let mut lines: Vec<&[u8]> = v.split(|b| *b == b'\n').collect();
                if lines.len() > 2 {
                    let (a, b) = (1 + rng.below(lines.len() - 1), 1 + rng.below(lines.len() - 1));
                    lines.swap(a, b);
                }
                v = lines.join(&b'\n');
            }
        }
    }
    v
}

#[test]
fn ring_buffer_decoder_never_panics_on_random_records() {
    fuzz(
        "decode",
        |rng| {
            let len = rng.below(1100);
            let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            // Most inputs pass the header checks: a known kind and its own length as the size.
            if len >= 4 && rng.below(4) > 0 {
                b[0] = 1 + rng.below(10) as u8;
                b[1] = 0;
                b[2..4].copy_from_slice(&(len as u16).to_ne_bytes());
            }
            b
        },
        |b| {
            let _ = decode(b);
        },
    );
}

#[test]
fn recording_reader_and_detectors_never_panic_on_damaged_recordings() {
    let bases = [fixture("outage.jsonl.gz"), fixture("parallel-4-lossy.jsonl.gz"), fixture("zero-window.jsonl.gz")];
    let detect = Config::default().detect;
    fuzz(
        "recording+analyze",
        |rng| {
            let i = rng.below(bases.len());
            mutate(rng, &bases[i])
        },
        |b| {
            if let Ok(rec) = tcpvigil::recording::read(&b[..]) {
                let _ = tcpvigil::detect::analyze(&rec.events, &detect);
            }
        },
    );
}

#[test]
fn config_parser_never_panics_on_damaged_configs() {
    let base = "[bpf]\nbulk_interval_ms = 50\n[export]\nlisten = \"127.0.0.1:9977\"\nmax_conn_series = 100\n[detect.stop]\nfloor_ms = 150\nrtt_factor = 2.0\n[recorder]\nenabled = true\n";
    fuzz(
        "config",
        |rng| String::from_utf8_lossy(&mutate(rng, base.as_bytes())).into_owned(),
        |t| {
            if let Ok(c) = Config::parse(t, "fuzz.toml") {
                let _ = c.validate();
            }
        },
    );
}

#[test]
fn connection_filter_parser_never_panics() {
    let alphabet: Vec<char> = "0123456789abcdef:.[]-/%, xX\u{0}é".chars().collect();
    fuzz(
        "filter",
        |rng| (0..rng.below(60)).map(|_| alphabet[rng.below(alphabet.len())]).collect::<String>(),
        |s| {
            let _ = s.parse::<Filter>();
        },
    );
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tvi-{}-{name}", std::process::id()))
}

/// `tcpvigil <cmd> <file>` must exit 2 with a message naming the problem, within `limit`.
fn refused(cmd: &str, file: &Path, expect: &str, limit: Duration) {
    let out_dir = tmp("plot-out");
    let mut c = Command::new(env!("CARGO_BIN_EXE_tcpvigil"));
    c.arg(cmd).arg(file);
    if cmd == "plot" {
        c.arg("--out").arg(&out_dir);
    }
    let t = Instant::now();
    let mut child = c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().expect("spawn");
    while child.try_wait().expect("wait").is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            panic!("{cmd} {} did not finish within {limit:?}", file.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let err = String::from_utf8_lossy(&out.stderr);
    println!(
        "{cmd} {}: exit {:?} in {:.2} s: {}",
        file.display(),
        out.status.code(),
        t.elapsed().as_secs_f64(),
        err.trim()
    );
    assert_eq!(out.status.code(), Some(2), "{cmd} {}: {err}", file.display());
    assert!(!err.contains("panicked"), "{cmd} panicked: {err}");
    assert!(err.to_lowercase().contains(expect), "{cmd} {}: message lacks {expect:?}: {err}", file.display());
    let _ = std::fs::remove_dir_all(&out_dir);
}

#[test]
fn hostile_files_get_exit_2_and_a_clear_message_from_analyze_and_plot() {
    let dir = tmp("dir");
    std::fs::create_dir_all(&dir).expect("mkdir");
    // A valid header, then a 200 MB line.
    let long = tmp("long.jsonl");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&long).expect("create"));
        let header = fixture("outage.jsonl.gz").split(|b| *b == b'\n').next().expect("header").to_vec();
        f.write_all(&header).expect("write");
        f.write_all(b"\n").expect("write");
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..200 {
            f.write_all(&chunk).expect("write");
        }
    }
    let gz = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/outage.jsonl.gz"))
        .expect("fixture");
    let cut = tmp("cut.jsonl.gz");
    std::fs::write(&cut, &gz[..gz.len() / 2]).expect("write");
    // Out of order: one event of the fixture moved 100 s ahead, so the next is 100 s back in time
    // (past the bound of one snapshot interval a pending sample may arrive late).
    let text = String::from_utf8(fixture("outage.jsonl.gz")).expect("utf8");
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut v: serde_json::Value = serde_json::from_str(&lines[300]).expect("event");
    v["ts_ns"] = (v["ts_ns"].as_u64().expect("ts") + 100_000_000_000).into();
    lines[300] = v.to_string();
    let ooo = tmp("ooo.jsonl");
    std::fs::write(&ooo, lines.join("\n") + "\n").expect("write");
    let cases: [(&Path, &str); 5] = [
        (Path::new("/dev/zero"), "not a regular file"),
        (&dir, "directory"),
        (&long, "line 2: longer than 1 mib"),
        (&cut, "reading the recording"),
        (&ooo, "out of order"),
    ];
    for cmd in ["analyze", "plot"] {
        for (f, expect) in &cases {
            refused(cmd, f, expect, Duration::from_secs(20));
        }
    }
    let _ = std::fs::remove_file(&long);
    let _ = std::fs::remove_file(&cut);
    let _ = std::fs::remove_file(&ooo);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hostile_config_files_get_exit_2_and_a_clear_message() {
    let web = tmp("web.toml");
    std::fs::write(&web, "[export]\nweb_config = \"/dev/zero\"\n").expect("write");
    let bad = tmp("bad.toml");
    std::fs::write(&bad, "[bpf\nringbuf_mib = \n").expect("write");
    for (f, expect) in [
        (Path::new("/dev/zero"), "not a regular file"),
        (Path::new("/"), "directory"),
        (web.as_path(), "not a config file"),
        (bad.as_path(), "bad.toml"),
    ] {
        let t = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_tcpvigil"))
            .args(["run", "--check-config", "--config"])
            .arg(f)
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        println!("run --config {}: exit {:?}: {}", f.display(), out.status.code(), err.trim());
        assert!(t.elapsed() < Duration::from_secs(10), "--config {} took {:?}", f.display(), t.elapsed());
        assert_eq!(out.status.code(), Some(2), "--config {}: {err}", f.display());
        assert!(err.contains(expect), "--config {}: message lacks {expect:?}: {err}", f.display());
    }
    let _ = std::fs::remove_file(&web);
    let _ = std::fs::remove_file(&bad);
}

/// Events of the fixtures, parsed once, for structured damage.
fn fixture_events() -> Vec<serde_json::Value> {
    ["outage.jsonl.gz", "parallel-4-lossy.jsonl.gz", "lost-retransmit.jsonl.gz", "no-sack.jsonl.gz"]
        .iter()
        .flat_map(|f| {
            String::from_utf8(fixture(f))
                .expect("utf8")
                .lines()
                .skip(1)
                .map(|l| serde_json::from_str(l).expect("event"))
                .collect::<Vec<serde_json::Value>>()
        })
        .collect()
}

/// A recording the reader may accept: fixture events out of their order and steps back (up to
/// the reader's bound), long gaps, times near the end of the clock, extreme field values.
fn damaged_recording(rng: &mut Rng, events: &[serde_json::Value], header: &str) -> String {
    let n = 1 + rng.below(60);
    let start = rng.below(events.len());
    let base: u64 = match rng.below(4) {
        0 => i64::MAX as u64 - (40 * 86_400 + rng.below(1 << 20) as u64) * 1_000_000_000,
        1 => rng.below(1000) as u64,
        _ => 1_000_000_000_000,
    };
    let mut latest = base;
    let mut out = format!("{header}\n");
    let extremes = [0u64, 1, u16::MAX as u64, u32::MAX as u64, u32::MAX as u64, u64::MAX];
    for k in 0..n {
        let mut v = events[(start + k) % events.len()].clone();
        let t = match rng.below(10) {
            // Back, as far as the reader allows (65 s), from the latest so far.
            0 => latest.saturating_sub(rng.below(64_000) as u64 * 1_000_000),
            1 => latest + rng.below(86_400) as u64 * 1_000_000_000,
            2 => latest,
            _ => latest + rng.below(100_000_000) as u64,
        };
        latest = latest.max(t);
        v["ts_ns"] = t.into();
        if rng.below(4) == 0 {
            let keys: Vec<String> = v
                .as_object()
                .map(|o| o.iter().filter(|(k, x)| x.is_u64() && *k != "ts_ns").map(|(k, _)| k.clone()).collect())
                .unwrap_or_default();
            if !keys.is_empty() {
                let key = keys[rng.below(keys.len())].clone();
                let was = v[&key].clone();
                v[&key] = extremes[rng.below(extremes.len())].into();
                // An extreme the field's type cannot hold would only make the reader refuse the file.
                if serde_json::from_value::<tcpvigil::model::Event>(v.clone()).is_err() {
                    v[&key] = was;
                }
            }
        }
        out.push_str(&v.to_string());
        out.push('\n');
    }
    out
}

#[test]
fn plot_series_and_figures_never_panic_on_recordings_the_reader_accepts() {
    use tcpvigil::plot::{figure, series::ConnSeries};
    static ACCEPTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static DRAWN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let events = fixture_events();
    let header =
        String::from_utf8(fixture("outage.jsonl.gz")).expect("utf8").lines().next().expect("header").to_string();
    fuzz(
        "plot series",
        |rng| damaged_recording(rng, &events, &header),
        |b| {
            let rec = match tcpvigil::recording::read(b.as_bytes()) {
                Ok(r) => r,
                Err(e) => {
                    if std::env::var("TV_FUZZ_WHY").is_ok() {
                        println!("refused: {e}");
                    }
                    return;
                }
            };
            ACCEPTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let t0 = rec.events.iter().map(|e| e.ts_ns).min().unwrap_or(0);
            let mut cookies: Vec<u64> = rec.events.iter().map(|e| e.conn.cookie).collect();
            cookies.sort_unstable();
            cookies.dedup();
            let mut all = Vec::new();
            for c in cookies {
                // In file order, as the group pictures take them.
                let evs: Vec<_> = rec.events.iter().filter(|e| e.conn.cookie == c).collect();
                if let Some(s) = ConnSeries::build(&evs, &[], t0, None) {
                    assert!(s.goodput.len() as u64 <= tcpvigil::plot::series::MAX_BINS + 1);
                    assert!(s.board.len() <= tcpvigil::plot::series::MAX_POINTS);
                    // Drawing is slow in a debug build: one connection of every fourth input.
                    if all.is_empty() && DRAWN.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 4 == 0 {
                        let _ = figure::conn_figure(&s);
                    }
                    all.push(s);
                }
            }
            if all.len() > 1 && DRAWN.load(std::sync::atomic::Ordering::Relaxed) % 4 == 1 {
                let _ = figure::group_figure("fuzz", &all);
            }
        },
    );
    let accepted = ACCEPTED.load(std::sync::atomic::Ordering::Relaxed);
    println!("plot series: {accepted} of them accepted by the reader and drawn");
    assert!(accepted >= 10, "only {accepted} inputs reached the plot");
}

/// The web server's request handling: random and damaged requests (methods, paths, headers,
/// credentials, bodies, pipelining, binary) against a live in-process server with basic auth
/// and a rate limit. No task may panic, every connection must end within the deadlines, and a
/// good scrape must answer afterwards.
#[test]
fn the_web_server_never_panics_or_hangs_on_random_requests() {
    use std::io::{Read, Write as _};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tcpvigil::export::http::{Deadlines, HttpServer};
    use tcpvigil::export::{Metrics, WebConfig};

    static PANICKED: AtomicBool = AtomicBool::new(false);
    let hash = bcrypt::hash("pw", 4).expect("bcrypt");
    let web = WebConfig::parse(
        &format!("basic_auth_users:\n  prom: '{hash}'\nrate_limit:\n  interval: 1ms\n  burst: 1000\nhttp_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"),
        Path::new("fuzz.yml"),
    )
    .expect("web config");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        rt.block_on(async move {
            let (_m, r) = Metrics::new_registered(&Default::default());
            let d = Deadlines {
                head: Duration::from_millis(300),
                handshake: Duration::from_millis(300),
                write: Duration::from_millis(500),
            };
            let srv = HttpServer::bind(
                "127.0.0.1:0".parse().expect("addr"),
                Some(web),
                Arc::new(r),
                Arc::new(AtomicBool::new(true)),
            )
            .await
            .expect("bind")
            .with_deadlines(d);
            tx.send(srv.local_addr()).expect("send");
            let _ = srv.run(std::future::pending()).await;
        });
    });
    let addr = rx.recv().expect("address");
    let good = |extra: &str| {
        let auth = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "prom:pw");
        format!("GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth}\r\n{extra}\r\n")
    };
    let seeds: Vec<Vec<u8>> = vec![
        good("").into_bytes(),
        good("Accept: application/openmetrics-text;version=1.0.0\r\n").into_bytes(),
        b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        b"GET /metrics HTTP/1.1\r\nAuthorization: Basic cHJvbTp3cm9uZw==\r\n\r\nGET / HTTP/1.1\r\n\r\n".to_vec(),
        b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello".to_vec(),
        b"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".to_vec(),
        b"GET /%ff%00?x=\xff HTTP/1.0\r\nAuthorization: Basic\r\n\r\n".to_vec(),
        b"GET /metrics HTTP/1.1\r\nAuthorization: basic   OjpCOg==\r\nAccept: \xff\xfe\r\n\r\n".to_vec(),
    ];
    // Not `fuzz`: a panic may happen on a server thread, and the hook must record it.
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICKED.store(true, Ordering::SeqCst);
        prev(info);
    }));
    let (sd, t0) = (seed(), Instant::now());
    let (mut rng, mut n, mut slow) = (Rng(sd), 0u64, 0usize);
    while t0.elapsed() < budget() {
        let i = rng.below(seeds.len());
        let mut req = mutate(&mut rng, &seeds[i]);
        if rng.below(4) == 0 {
            req.extend_from_slice(&seeds[rng.below(seeds.len())]);
        }
        n += 1;
        let Ok(mut s) = std::net::TcpStream::connect(addr) else { continue };
        let t = Instant::now();
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = s.write_all(&req);
        // Mostly the request ends there (as a client that closes its side); sometimes it stays
        // open, for the server's deadlines to end.
        if rng.below(4) > 0 {
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
        // Every phase has a deadline: nothing keeps a connection open past them.
        if t.elapsed() > Duration::from_secs(3) {
            slow += 1;
            println!(
                "web requests: a connection lasted {:?} (TV_FUZZ_SEED={sd}): {:?}",
                t.elapsed(),
                String::from_utf8_lossy(&req)
            );
        }
        assert!(
            !PANICKED.load(Ordering::SeqCst),
            "a server task panicked on (TV_FUZZ_SEED={sd}): {:?}",
            String::from_utf8_lossy(&req)
        );
    }
    println!("web requests: {n} inputs in {:.1} s, no panic (seed {sd})", t0.elapsed().as_secs_f64());
    assert!(n >= 20, "too few requests tried ({n})");
    assert_eq!(slow, 0, "connections outlived every deadline");
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.write_all(good("Connection: close\r\n").as_bytes()).expect("write");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 200") || out.starts_with("HTTP/1.1 429"), "after the fuzz: {out}");
}
