//! The standard Prometheus process metrics (`process_cpu_seconds_total`, resident and virtual
//! memory, open and max fds, start time), read from /proc at scrape time as the Go and Python
//! client libraries' process collectors do, under the same unprefixed names.
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

/// One reading of the process's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: f64,
    pub virtual_bytes: f64,
    pub open_fds: f64,
    /// The soft open-file limit (what the process may open), as the Go collector reports it.
    pub max_fds: f64,
    /// Unix time the process started, seconds.
    pub start_time_seconds: f64,
}

/// The fields of /proc/PID/stat after the command name (which may hold spaces and parentheses):
/// index 0 is field 3, `state`.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_whitespace().collect())
}

/// The numbers from the text of /proc/self/stat and /proc/stat, the clock tick and page size.
pub fn parse(stat: &str, proc_stat: &str, ticks: f64, page: f64) -> Option<ProcessStats> {
    let f = stat_fields(stat)?;
    let field = |n: usize| f.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    let btime = proc_stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse::<f64>().ok()?;
    Some(ProcessStats {
        cpu_seconds: (field(14)? + field(15)?) / ticks,
        virtual_bytes: field(23)?,
        resident_bytes: field(24)? * page,
        start_time_seconds: btime + field(22)? / ticks,
        ..Default::default()
    })
}

/// This process now; None when /proc cannot be read.
pub fn read() -> Option<ProcessStats> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let proc_stat = std::fs::read_to_string("/proc/stat").ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let (ticks, page) = unsafe { (libc::sysconf(libc::_SC_CLK_TCK), libc::sysconf(libc::_SC_PAGESIZE)) };
    let mut s = parse(&stat, &proc_stat, ticks.max(1) as f64, page.max(1) as f64)?;
    s.open_fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count() as f64).unwrap_or(0.0);
    let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into a live, initialised rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } == 0 {
        s.max_fds = l.rlim_cur as f64;
    }
    Some(s)
}

/// Reads /proc at every scrape.
#[derive(Debug)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = read() else { return Ok(()) };
        let c = ConstCounter::new(s.cpu_seconds);
        c.encode(e.encode_descriptor(
            "process_cpu",
            "Total user and system CPU time spent in seconds",
            Some(&Unit::Seconds),
            c.metric_type(),
        )?)?;
        let gauges = [
            ("process_resident_memory", "Resident memory size in bytes", Some(Unit::Bytes), s.resident_bytes),
            ("process_virtual_memory", "Virtual memory size in bytes", Some(Unit::Bytes), s.virtual_bytes),
            ("process_open_fds", "Number of open file descriptors", None, s.open_fds),
            ("process_max_fds", "Maximum number of open file descriptors", None, s.max_fds),
            (
                "process_start_time",
                "Start time of the process since unix epoch in seconds",
                Some(Unit::Seconds),
                s.start_time_seconds,
            ),
        ];
        for (name, help, unit, v) in gauges {
            let g = ConstGauge::new(v);
            g.encode(e.encode_descriptor(name, help, unit.as_ref(), g.metric_type())?)?;
        }
        Ok(())
    }
}

/// Add the process metrics to `registry`'s root (no `tcpvigil_` prefix).
pub fn register(registry: &mut Registry) {
    registry.register_collector(Box::new(ProcessCollector));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_is_read_past_a_command_name_with_spaces_and_parentheses() {
        let stat = "4242 (tc (x) y) S 1 4242 4242 0 -1 4194560 5000 0 0 0 250 150 0 0 20 0 3 0 \
                    10000 123456789 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let s = parse(stat, "cpu 1 2 3\nbtime 1700000000\n", 100.0, 4096.0).unwrap();
        assert_eq!(s.cpu_seconds, 4.0);
        assert_eq!(s.virtual_bytes, 123456789.0);
        assert_eq!(s.resident_bytes, 2048.0 * 4096.0);
        assert_eq!(s.start_time_seconds, 1700000100.0);
        assert!(parse("garbage", "btime 1\n", 100.0, 4096.0).is_none());
    }

    #[test]
    fn the_scrape_has_the_six_standard_names_with_this_process_values() {
        let mut r = Registry::default();
        register(&mut r);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        let v = |name: &str| -> f64 {
            let l =
                text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{name}\n{text}"));
            l.rsplit(' ').next().unwrap().parse().unwrap()
        };
        assert!(text.contains("# TYPE process_cpu_seconds counter"), "{text}");
        assert!(v("process_cpu_seconds_total") > 0.0);
        assert!(v("process_resident_memory_bytes") > 1e6);
        assert!(v("process_virtual_memory_bytes") >= v("process_resident_memory_bytes"));
        assert!(v("process_open_fds") >= 3.0 && v("process_max_fds") >= v("process_open_fds"));
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        let start = v("process_start_time_seconds");
        assert!(start <= now + 1.0 && start > now - 3600.0, "{start} vs {now}");
    }
}
