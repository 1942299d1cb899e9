//! A real Prometheus server (Debian package `prometheus`) for tests: generated config and rules in a
//! temporary directory, 1 s scrape and evaluation, and its HTTP API.
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::http;

/// The `prometheus` binary on PATH, if installed.
pub fn binary() -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join("prometheus")).find(|p| p.is_file())
}

/// The rules as the test loads them: every group evaluated every `interval` instead of its own
/// (15 s), and `for:` of the named alerts shortened, so that lab scenarios of 6-15 s can walk an
/// alert through pending to firing. Expressions, labels and thresholds are untouched. Each
/// override names the production value it replaces: a rule changed in the repository must be
/// looked at here again.
pub fn rules_for_test(src: &str, interval: &str, for_overrides: &[(&str, &str, &str)]) -> Result<String, String> {
    let mut doc: Value = serde_norway::from_str(src).map_err(|e| format!("rules YAML: {e}"))?;
    let mut seen = Vec::new();
    for g in doc["groups"].as_array_mut().ok_or("rules: no groups")? {
        g["interval"] = Value::from(interval);
        for r in g["rules"].as_array_mut().ok_or("rules: a group without rules")? {
            let Some(name) = r["alert"].as_str().map(str::to_string) else { continue };
            if let Some((_, prod, test)) = for_overrides.iter().find(|(a, _, _)| *a == name) {
                if r["for"].as_str() != Some(prod) {
                    return Err(format!("{name}: for is {:?} in the repository, the test expects {prod:?}", r["for"]));
                }
                r["for"] = Value::from(*test);
                seen.push(name);
            }
        }
    }
    if let Some((a, _, _)) = for_overrides.iter().find(|(a, _, _)| !seen.iter().any(|s| s == a)) {
        return Err(format!("no alert {a} in the rules"));
    }
    serde_norway::to_string(&doc).map_err(|e| e.to_string())
}

pub struct Prometheus {
    pub addr: SocketAddr,
    pub dir: PathBuf,
    pid: i32,
    rules: PathBuf,
}

/// Sample values of one series over time: (unix seconds, value).
#[derive(Debug, Clone)]
pub struct Series {
    pub labels: Value,
    pub points: Vec<(f64, f64)>,
}

fn config(rules: &Path, targets: &[SocketAddr]) -> String {
    let t: Vec<String> = targets.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "global: {{ scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s }}\n\
         rule_files: [\"{}\"]\n\
         scrape_configs:\n  - job_name: tcpvigil\n    static_configs: [ {{ targets: [{}] }} ]\n",
        rules.display(),
        t.join(", ")
    )
}

impl Prometheus {
    /// Start Prometheus in `dir` with `rules` (the text of a rule file), scraping `targets` as the
    /// job `tcpvigil`. It gets SIGTERM when the test process ends (PR_SET_PDEATHSIG on a thread
    /// that lives as long as the process), so a static may own it.
    pub fn start(dir: &Path, rules: &str, targets: &[SocketAddr]) -> Result<Prometheus, String> {
        let bin = binary().ok_or("prometheus is not installed (Debian package `prometheus`)")?;
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let rules_path = dir.join("tcpvigil.rules.yml");
        std::fs::write(&rules_path, rules).map_err(|e| e.to_string())?;
        std::fs::write(dir.join("prometheus.yml"), config(&rules_path, targets)).map_err(|e| e.to_string())?;
        let addr: SocketAddr = ([127, 0, 0, 1], http::free_port()).into();
        let log = std::fs::File::create(dir.join("prometheus.log")).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(bin);
        cmd.arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--web.enable-lifecycle")
            .stdout(Stdio::null())
            .stderr(log);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("prometheus-owner".into())
            .spawn(move || match cmd.spawn() {
                Ok(mut c) => {
                    let _ = tx.send(Ok(c.id() as i32));
                    let _ = c.wait();
                }
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                }
            })
            .map_err(|e| e.to_string())?;
        let pid = rx.recv().map_err(|e| e.to_string())??;
        let p = Prometheus { addr, dir: dir.to_path_buf(), pid, rules: rules_path };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !matches!(http::get(addr, "/-/ready"), Ok((200, _))) {
            if Instant::now() > deadline {
                return Err(format!("Prometheus not ready within 60 s: {}", p.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(p)
    }

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default();
        log.lines().rev().take(10).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// Scrape other targets from now on (an empty list: none), via the lifecycle reload.
    pub fn set_targets(&self, targets: &[SocketAddr]) -> Result<(), String> {
        std::fs::write(self.dir.join("prometheus.yml"), config(&self.rules, targets)).map_err(|e| e.to_string())?;
        match http::request("POST", self.addr, "/-/reload", Duration::from_secs(10))? {
            (200, _) => Ok(()),
            (c, b) => Err(format!("reload: HTTP {c}: {b}")),
        }
    }

    /// GET /api/v1/<path>?<params>; the `data` of a successful answer, else the error text.
    pub fn api(&self, path: &str, params: &[(&str, &str)]) -> Result<Value, String> {
        let (code, body) = http::get(self.addr, &format!("/api/v1/{path}?{}", http::query(params)))?;
        let v: Value = serde_json::from_str(&body).map_err(|e| format!("HTTP {code}: {e}: {body}"))?;
        if v["status"] != "success" {
            return Err(format!("{}: {}", v["errorType"], v["error"]));
        }
        Ok(v["data"].clone())
    }

    /// The expression evaluated every second from `start` to `end` (unix seconds).
    pub fn query_range(&self, expr: &str, start: f64, end: f64) -> Result<Vec<Series>, String> {
        let (s, e) = (format!("{start:.3}"), format!("{end:.3}"));
        let d = self.api("query_range", &[("query", expr), ("start", &s), ("end", &e), ("step", "1")])?;
        Ok(matrix(&d["result"]))
    }

    /// The raw samples `selector` stored between `start` and `end` (a range-vector query at `end`).
    pub fn samples(&self, selector: &str, start: f64, end: f64) -> Result<Vec<Series>, String> {
        let q = format!("{selector}[{}ms]", ((end - start) * 1000.0).ceil().max(1.0) as u64);
        let d = self.api("query", &[("query", &q), ("time", &format!("{end:.3}"))])?;
        Ok(matrix(&d["result"]))
    }

    /// Wait until every active target of the job has been scraped successfully.
    pub fn wait_targets_up(&self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            let t = self.api("targets", &[("state", "active")])?;
            let all = t["activeTargets"].as_array().cloned().unwrap_or_default();
            if !all.is_empty() && all.iter().all(|t| t["health"] == "up") {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("targets not up: {t}"));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid), nix::sys::signal::Signal::SIGTERM);
    }
}

fn matrix(result: &Value) -> Vec<Series> {
    let num = |p: &Value| -> Option<(f64, f64)> { Some((p[0].as_f64()?, p[1].as_str()?.parse().ok()?)) };
    result
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| Series {
            labels: s["metric"].clone(),
            points: s["values"].as_array().into_iter().flatten().filter_map(num).collect(),
        })
        .collect()
}

/// Seconds since the epoch, as Prometheus counts time.
pub fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Tests that need Prometheus skip loudly without it; under CI=true that is a failure.
pub fn require(test: &str) -> bool {
    if binary().is_some() {
        return true;
    }
    let msg = format!(
        "SKIPPED {test}: prometheus is not installed (Debian package `prometheus`, see scripts/install-deps.sh)"
    );
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{msg}; under CI=true a skip is a failure");
    }
    eprintln!("{msg}");
    false
}
