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
