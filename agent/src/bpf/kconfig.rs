//! The Kconfig values the BPF object reads (CONFIG_HZ), found without needing /boot/config-*.
//!
//! libbpf resolves `__kconfig` externs from /boot/config-$(uname -r) or /proc/config.gz and refuses
//! every program (EINVAL) when neither exists: containers, minimal images, many cloud hosts. The
//! loader therefore hands libbpf the value itself (`bpf_object_open_opts.kconfig`), taken from
//! those files when present and otherwise measured: /proc/timer_list prints the jiffies counter
//! beside the CLOCK_MONOTONIC time it was read at, so two reads give ticks per second.
use std::ffi::{CString, NulError};
use std::io::Read;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Why HZ could not be measured.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MeasureError {
    #[error("/proc/timer_list: {0}")]
    Read(Arc<std::io::Error>),
    #[error("/proc/timer_list has no `now at` or `jiffies:` line")]
    NoSample,
    #[error("jiffies advanced {jiffies} in {ns} ns")]
    Rate { jiffies: u64, ns: u64 },
}

/// Why libbpf cannot be given the Kconfig values.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KconfigError {
    #[error("cannot tell the kernel's CONFIG_HZ: no /boot/config-$(uname -r) or /proc/config.gz, and measuring failed ({0})")]
    Hz(MeasureError),
    #[error(transparent)]
    Text(#[from] NulError),
}

/// HZ values a Linux kernel can be built with (kernel/Kconfig.hz), the measurement is rounded to one.
pub const HZ_CHOICES: [u32; 5] = [100, 250, 300, 1000, 1024];

/// Where the HZ value came from, for `tcpvigil check` and the log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Hz {
    pub hz: u32,
    pub source: String,
}

/// `CONFIG_HZ=<n>` in a kernel config text.
pub fn hz_from_config(text: &str) -> Option<u32> {
    text.lines().find_map(|l| l.trim().strip_prefix("CONFIG_HZ=")?.trim().parse().ok()).filter(|h| *h > 0)
}

/// (monotonic ns, jiffies) of one /proc/timer_list read: its `now at <ns> nsecs` line and the first
/// `jiffies: <n>` line (the global counter, printed once per CPU).
pub fn timer_list_sample(text: &str) -> Option<(u64, u64)> {
    let now =
        text.lines().find_map(|l| l.trim().strip_prefix("now at ")?.strip_suffix(" nsecs")?.trim().parse().ok())?;
    let j = text.lines().find_map(|l| l.trim().strip_prefix("jiffies:")?.trim().parse().ok())?;
    Some((now, j))
}

/// The HZ choice nearest to the rate of two samples, if within 5 % of one.
pub fn hz_from_samples(a: (u64, u64), b: (u64, u64)) -> Option<u32> {
    let (dt, dj) = (b.0.checked_sub(a.0)?, b.1.checked_sub(a.1)?);
    if dt < 20_000_000 || dj == 0 {
        return None;
    }
    let rate = dj as f64 * 1e9 / dt as f64;
    let best = HZ_CHOICES.iter().copied().min_by(|x, y| {
        ((*x as f64 - rate).abs()).partial_cmp(&(*y as f64 - rate).abs()).unwrap_or(std::cmp::Ordering::Equal)
    })?;
    ((best as f64 - rate).abs() <= 0.05 * best as f64).then_some(best)
}

fn from_files() -> Option<Hz> {
    let rel = nix::sys::utsname::uname().ok()?.release().to_string_lossy().into_owned();
    let boot = format!("/boot/config-{rel}");
    if let Some(h) = std::fs::read_to_string(&boot).ok().as_deref().and_then(hz_from_config) {
        return Some(Hz { hz: h, source: boot });
    }
    let mut text = String::new();
    let f = std::fs::File::open("/proc/config.gz").ok()?;
    flate2::read::GzDecoder::new(f).read_to_string(&mut text).ok()?;
    hz_from_config(&text).map(|h| Hz { hz: h, source: "/proc/config.gz".into() })
}

fn measured() -> Result<Hz, MeasureError> {
    let read = || -> Result<(u64, u64), MeasureError> {
        let t = std::fs::read_to_string("/proc/timer_list").map_err(|e| MeasureError::Read(Arc::new(e)))?;
        timer_list_sample(&t).ok_or(MeasureError::NoSample)
    };
    let mut last = MeasureError::NoSample;
    for gap_ms in [120, 300] {
        let a = read()?;
        std::thread::sleep(Duration::from_millis(gap_ms));
        let b = read()?;
        match hz_from_samples(a, b) {
            Some(h) => return Ok(Hz { hz: h, source: "measured from /proc/timer_list".into() }),
            None => last = MeasureError::Rate { jiffies: b.1.wrapping_sub(a.1), ns: b.0.wrapping_sub(a.0) },
        }
    }
    Err(last)
}

/// Find HZ once per process: the config files first, else the measurement.
pub fn hz() -> Result<Hz, KconfigError> {
    static HZ: OnceLock<Result<Hz, KconfigError>> = OnceLock::new();
    HZ.get_or_init(|| match from_files() {
        Some(h) => Ok(h),
        None => measured().map_err(KconfigError::Hz),
    })
    .clone()
}

/// The `kconfig` text handed to libbpf (lives for the whole process), or the reason there is none.
pub fn kconfig_text() -> Result<&'static CString, KconfigError> {
    static TEXT: OnceLock<Result<CString, KconfigError>> = OnceLock::new();
    TEXT.get_or_init(|| Ok(CString::new(format!("CONFIG_HZ={}\n", hz()?.hz))?)).as_ref().map_err(|e| e.clone())
}

/// Open options that give libbpf our Kconfig values, so it never needs the config files.
pub fn open_opts() -> Result<libbpf_sys::bpf_object_open_opts, KconfigError> {
    let text = kconfig_text()?;
    Ok(libbpf_sys::bpf_object_open_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_object_open_opts>() as libbpf_sys::size_t,
        kconfig: text.as_ptr(),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_text_gives_hz_and_ignores_neighbours() {
        let t = "# CONFIG_HZ_100 is not set\nCONFIG_HZ_250=y\nCONFIG_HZ=250\nCONFIG_HZ_PERIODIC=n\n";
        assert_eq!(hz_from_config(t), Some(250));
        assert_eq!(hz_from_config("CONFIG_HZ_1000=y\n"), None);
        assert_eq!(hz_from_config("CONFIG_HZ=0\n"), None);
        assert_eq!(hz_from_config("CONFIG_HZ=x\n"), None);
    }

    #[test]
    fn timer_list_sample_reads_now_and_first_jiffies() {
        let t = "Timer List Version: v0.10\nnow at 5047785003038 nsecs\n\ncpu: 0\n jiffies: 4296154496\ncpu: 1\n jiffies: 4296154497\n";
        assert_eq!(timer_list_sample(t), Some((5047785003038, 4296154496)));
        assert_eq!(timer_list_sample("now at 1 nsecs\n"), None);
        assert_eq!(timer_list_sample("jiffies: 3\n"), None);
    }

    #[test]
    fn samples_round_to_the_nearest_hz_choice_or_refuse() {
        let s = |ms: u64, j: u64| ((ms * 1_000_000), j);
        assert_eq!(hz_from_samples(s(0, 1000), s(120, 1030)), Some(250));
        assert_eq!(hz_from_samples(s(0, 1000), s(120, 1029)), Some(250));
        assert_eq!(hz_from_samples(s(0, 0), s(120, 12)), Some(100));
        assert_eq!(hz_from_samples(s(0, 0), s(300, 90)), Some(300));
        assert_eq!(hz_from_samples(s(0, 0), s(120, 120)), Some(1000));
        // 175 ticks/s is no kernel's HZ; too short a gap or no tick is no measurement.
        assert_eq!(hz_from_samples(s(0, 0), s(200, 35)), None);
        assert_eq!(hz_from_samples(s(0, 0), s(10, 3)), None);
        assert_eq!(hz_from_samples(s(0, 5), s(200, 5)), None);
        assert_eq!(hz_from_samples(s(100, 5), s(0, 50)), None);
    }
}
