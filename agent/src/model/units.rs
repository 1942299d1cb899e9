//! Numbers as people read them and as streams are compared: bit rates and byte sizes as text,
//! Jain's fairness index.

/// 1536 -> "1.5 KiB".
pub fn human_bytes(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// 480e6 -> "480.0 Mbit/s".
pub fn human_bps(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} Gbit/s", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.1} Mbit/s", bps / 1e6)
    } else if bps >= 1e3 {
        format!("{:.1} kbit/s", bps / 1e3)
    } else {
        format!("{bps:.0} bit/s")
    }
}

/// Jain's fairness index of non-negative rates, from 1/n (one stream has it all) to 1 (even).
/// None when it is undefined: no streams, or none delivered anything (0/0).
pub fn jain(rates: &[f64]) -> Option<f64> {
    let (s, s2) = rates.iter().fold((0.0, 0.0), |(a, b), x| (a + x, b + x * x));
    (s2 > 0.0).then(|| s * s / (rates.len() as f64 * s2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_is_one_for_an_even_split_one_over_n_for_one_stream_and_undefined_for_nothing() {
        assert_eq!(jain(&[5.0, 5.0, 5.0]), Some(1.0));
        assert!((jain(&[9.0, 0.0, 0.0]).unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert!((jain(&[3.0, 1.0]).unwrap() - 0.8).abs() < 1e-12);
        assert_eq!(jain(&[0.0, 0.0]), None, "nothing delivered: no index");
        assert_eq!(jain(&[]), None);
    }

    #[test]
    fn sizes_and_rates_read_in_their_unit() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
        assert_eq!(human_bps(480e6), "480.0 Mbit/s");
        assert_eq!(human_bps(2.5e9), "2.50 Gbit/s");
        assert_eq!(human_bps(12.0), "12 bit/s");
    }
}
