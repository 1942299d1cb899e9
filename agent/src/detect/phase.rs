//! Send phase: where in the group's RTT each stream's rounds begin, in what order, how stably, and who loses first.
//!
//! A stream's round begins with the ACK that acknowledges what it had sent when the previous round
//! began; ACK-clocked, it sends its next window then. Measured against one reference stream's
//! rounds, every stream's round starts fall at a phase (a fraction of the RTT) that "Fairness analysis of
//! parallel TCP streams on long fat networks" (Sugawara, Inaba, Hiraki) found to keep its order: the stream whose data leaves last meets the fullest queue and loses first.
use serde::Serialize;

/// The round starts of one stream (monotonic ns, ascending).
#[derive(Debug, Clone, Copy)]
pub struct StreamRounds<'a> {
    pub cookie: u64,
    pub starts: &'a [u64],
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamPhase {
    pub cookie: u64,
    /// Where its rounds begin, as a fraction of the RTT after the group's round start.
    pub phase: f64,
    /// Circular standard deviation of that phase over the cycles, as a fraction of the RTT.
    pub spread: f64,
    /// Cycles in which it began a round.
    pub cycles: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseReport {
    /// The group's cycle: the median length of the reference stream's rounds.
    pub rtt_ms: f64,
    /// In send order: the first stream to send in the round first, the last one last.
    pub streams: Vec<StreamPhase>,
    /// Share of the cycles in which every stream began a round and they did so in this order.
    pub stability: f64,
    /// Cycles looked at.
    pub cycles: usize,
}

impl PhaseReport {
    /// The stream whose data leaves last in the round.
    pub fn last(&self) -> Option<u64> {
        self.streams.last().map(|s| s.cookie)
    }

    pub fn order(&self) -> Vec<u64> {
        self.streams.iter().map(|s| s.cookie).collect()
    }
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Cyclic order of `phases` (index, phase in [0, 1)): sorted by phase and rotated so that it
/// begins after the largest gap (the group's burst begins after its longest quiet part).
fn cyclic_order(phases: &[(usize, f64)]) -> Vec<usize> {
    let mut v = phases.to_vec();
    v.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let n = v.len();
    let gap = |j: usize| if j + 1 < n { v[j + 1].1 - v[j].1 } else { v[0].1 + 1.0 - v[j].1 };
    let widest = (0..n).max_by(|&a, &b| gap(a).total_cmp(&gap(b)).then(b.cmp(&a))).unwrap_or(0);
    (0..n).map(|k| v[(widest + 1 + k) % n].0).collect()
}

/// Each cycle's start (ns) and where in it every stream (in input order) began a round, as a
/// fraction of the RTT after the group's round start; with the report they come from.
pub fn per_cycle(
    streams: &[StreamRounds],
    min_cycles: usize,
    max_cycles: usize,
) -> Option<(PhaseReport, Vec<(u64, Vec<Option<f64>>)>)> {
    let (report, cycles, phase, start) = measure(streams, min_cycles, max_cycles)?;
    let rows = cycles
        .iter()
        .enumerate()
        .map(|(k, &(a, _))| (a, phase.iter().map(|p| p[k].map(|x| (x - start).rem_euclid(1.0))).collect()))
        .collect();
    Some((report, rows))
}

/// Phases of every stream over the reference stream's last `max_cycles` cycles; None when any
/// stream has fewer than `min_cycles` rounds in them, or there are fewer than two streams.
pub fn analyze(streams: &[StreamRounds], min_cycles: usize, max_cycles: usize) -> Option<PhaseReport> {
    measure(streams, min_cycles, max_cycles).map(|m| m.0)
}

/// The report, the cycles, each stream's phase in each, and the group's round start (a phase).
#[allow(clippy::type_complexity)]
fn measure(
    streams: &[StreamRounds],
    min_cycles: usize,
    max_cycles: usize,
) -> Option<(PhaseReport, Vec<(u64, u64)>, Vec<Vec<Option<f64>>>, f64)> {
    if streams.len() < 2 || min_cycles == 0 {
        return None;
    }
    let refs = streams.iter().max_by(|a, b| a.starts.len().cmp(&b.starts.len()).then(b.cookie.cmp(&a.cookie)))?;
    let r = &refs.starts[refs.starts.len().saturating_sub(max_cycles + 1)..];
    let mut lens: Vec<u64> = r.windows(2).map(|w| w[1].saturating_sub(w[0])).filter(|&d| d > 0).collect();
    if lens.len() < min_cycles {
        return None;
    }
    let rtt = median(&mut lens);
    // Cycles of a normal length: a stall or a timeout in the reference stream is no cycle.
    let cycles: Vec<(u64, u64)> =
        r.windows(2).map(|w| (w[0], w[1])).filter(|(a, b)| b > a && b - a <= 2 * rtt && 2 * (b - a) >= rtt).collect();
    // phase[i][k]: where stream i began a round in cycle k, if it did.
    let phase: Vec<Vec<Option<f64>>> = streams
        .iter()
        .map(|s| {
            let mut j = 0;
            cycles
                .iter()
                .map(|&(a, b)| {
                    while j < s.starts.len() && s.starts[j] < a {
                        j += 1;
                    }
                    s.starts.get(j).filter(|&&t| t < b).map(|&t| (t - a) as f64 / (b - a) as f64)
                })
                .collect()
        })
        .collect();
    let tau = std::f64::consts::TAU;
    let mut mean = Vec::new();
    for (i, p) in phase.iter().enumerate() {
        let seen: Vec<f64> = p.iter().flatten().copied().collect();
        if seen.len() < min_cycles {
            return None;
        }
        let (c, s) = seen.iter().fold((0.0, 0.0), |(c, s), x| (c + (tau * x).cos(), s + (tau * x).sin()));
        let n = seen.len() as f64;
        let len = (c / n).hypot(s / n).clamp(1e-9, 1.0);
        let m = (s.atan2(c) / tau).rem_euclid(1.0);
        mean.push((i, m, (-2.0 * len.ln()).max(0.0).sqrt() / tau + 0.0, seen.len()));
    }
    let order = cyclic_order(&mean.iter().map(|m| (m.0, m.1)).collect::<Vec<_>>());
    let start = mean[order[0]].1;
    // Every cycle in which all began a round: is their cyclic order the same?
    let complete: Vec<Vec<usize>> = (0..cycles.len())
        .filter_map(|k| {
            let v: Option<Vec<(usize, f64)>> = phase.iter().enumerate().map(|(i, p)| p[k].map(|x| (i, x))).collect();
            v.map(|v| cyclic_order(&v))
        })
        .collect();
    let same = complete.iter().filter(|o| **o == order).count();
    let report = PhaseReport {
        rtt_ms: rtt as f64 / 1e6,
        streams: order
            .iter()
            .map(|&i| StreamPhase {
                cookie: streams[i].cookie,
                phase: (mean[i].1 - start).rem_euclid(1.0),
                spread: mean[i].2,
                cycles: mean[i].3,
            })
            .collect(),
        stability: if complete.is_empty() { 0.0 } else { same as f64 / complete.len() as f64 },
        cycles: cycles.len(),
    };
    Some((report, cycles, phase, start))
}

/// Who loses first: loss episodes are Recovery/Loss entries of the group's streams less than one
/// RTT apart; the stream whose entry opens the most episodes, with (its firsts, episodes).
pub fn first_to_lose(entries: &[(u64, &[u64])], rtt_ns: u64) -> Option<(u64, usize, usize)> {
    let mut all: Vec<(u64, u64)> = entries.iter().flat_map(|(c, ts)| ts.iter().map(move |t| (*t, *c))).collect();
    all.sort_unstable();
    let mut firsts: std::collections::BTreeMap<u64, usize> = Default::default();
    let mut episodes = 0;
    let mut last: Option<u64> = None;
    for (t, c) in all {
        if last.is_none_or(|l| t.saturating_sub(l) > rtt_ns) {
            episodes += 1;
            *firsts.entry(c).or_default() += 1;
        }
        last = Some(t);
    }
    let (c, n) = firsts.into_iter().max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))?;
    Some((c, n, episodes))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Round starts every `rtt_ms` at `offset` of it, with a deterministic jitter of +-`jit_ms`.
    fn rounds(offset: f64, rtt_ms: u64, n: usize, jit_ms: u64, seed: u64) -> Vec<u64> {
        let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..n as u64)
            .map(|k| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let j = if jit_ms > 0 { (x >> 33) % (2 * jit_ms * 1000) } else { jit_ms * 1000 };
                1000 * MS + k * rtt_ms * MS + (offset * (rtt_ms * MS) as f64) as u64 + j * 1000 - jit_ms * MS
            })
            .collect()
    }

    #[test]
    fn streams_keep_their_order_within_the_rtt_and_the_last_is_named() {
        let s: Vec<Vec<u64>> =
            [0.30, 0.05, 0.55, 0.20].iter().enumerate().map(|(i, o)| rounds(*o, 100, 40, 2, i as u64)).collect();
        let input: Vec<StreamRounds> =
            s.iter().enumerate().map(|(i, v)| StreamRounds { cookie: 10 + i as u64, starts: v }).collect();
        let r = analyze(&input, 8, 64).unwrap();
        assert_eq!(r.order(), vec![11, 13, 10, 12], "{r:?}");
        assert_eq!(r.last(), Some(12));
        assert!((r.rtt_ms - 100.0).abs() < 5.0, "{}", r.rtt_ms);
        let p: Vec<f64> = r.streams.iter().map(|s| s.phase).collect();
        for (got, want) in p.iter().zip([0.0, 0.15, 0.25, 0.5]) {
            assert!((got - want).abs() < 0.03, "{p:?}");
        }
        assert!(r.stability > 0.9, "{}", r.stability);
        assert!(r.streams.iter().all(|s| s.spread < 0.03), "{r:?}");
    }

    #[test]
    fn the_group_round_begins_after_its_longest_quiet_part_even_across_the_reference_cycle() {
        // Streams send at 0.85, 0.95 and 0.05 of the reference's cycle: one burst that wraps.
        let s: Vec<Vec<u64>> =
            [0.05, 0.85, 0.95].iter().enumerate().map(|(i, o)| rounds(*o, 50, 30, 0, i as u64)).collect();
        let input: Vec<StreamRounds> =
            s.iter().enumerate().map(|(i, v)| StreamRounds { cookie: i as u64, starts: v }).collect();
        let r = analyze(&input, 8, 64).unwrap();
        assert_eq!(r.order(), vec![1, 2, 0], "{r:?}");
        assert!((r.streams[2].phase - 0.2).abs() < 0.02, "{r:?}");
    }

    #[test]
    fn an_order_that_changes_every_other_cycle_is_unstable() {
        // Two streams swap places between cycles (0.2/0.6, then 0.6/0.2 seen from a third at 0).
        let a = rounds(0.0, 100, 40, 0, 1);
        let b: Vec<u64> =
            (0..40u64).map(|k| 1000 * MS + k * 100 * MS + if k % 2 == 0 { 20 } else { 60 } * MS).collect();
        let c: Vec<u64> =
            (0..40u64).map(|k| 1000 * MS + k * 100 * MS + if k % 2 == 0 { 60 } else { 20 } * MS).collect();
        let input = [
            StreamRounds { cookie: 1, starts: &a },
            StreamRounds { cookie: 2, starts: &b },
            StreamRounds { cookie: 3, starts: &c },
        ];
        let r = analyze(&input, 8, 64).unwrap();
        assert!(r.stability < 0.6, "{r:?}");
        assert!(r.streams.iter().skip(1).all(|s| s.spread > 0.1), "{r:?}");
    }

    #[test]
    fn per_cycle_phases_are_measured_from_the_group_round_start() {
        let s: Vec<Vec<u64>> = [0.5, 0.7].iter().enumerate().map(|(i, o)| rounds(*o, 100, 20, 0, i as u64)).collect();
        let input: Vec<StreamRounds> =
            s.iter().enumerate().map(|(i, v)| StreamRounds { cookie: i as u64, starts: v }).collect();
        let (r, rows) = per_cycle(&input, 8, 64).unwrap();
        assert_eq!(rows.len(), r.cycles);
        for (_, p) in &rows[..rows.len() - 1] {
            assert!(p[0].is_some_and(|x| x.abs() < 1e-6) && p[1].is_some_and(|x| (x - 0.2).abs() < 1e-6), "{p:?}");
        }
    }

    #[test]
    fn too_few_rounds_or_streams_say_nothing() {
        let a = rounds(0.0, 100, 40, 0, 1);
        let b = rounds(0.5, 100, 4, 0, 2);
        assert!(analyze(&[StreamRounds { cookie: 1, starts: &a }], 8, 64).is_none());
        let two = [StreamRounds { cookie: 1, starts: &a }, StreamRounds { cookie: 2, starts: &b }];
        assert!(analyze(&two, 8, 64).is_none());
    }

    #[test]
    fn a_stall_of_the_reference_stream_is_no_cycle() {
        let mut a = rounds(0.0, 100, 20, 0, 1);
        let later = rounds(0.0, 100, 20, 0, 1).iter().map(|t| t + 5000 * MS).collect::<Vec<_>>();
        a.extend(later);
        let b: Vec<u64> = a.iter().map(|t| t + 30 * MS).collect();
        let r =
            analyze(&[StreamRounds { cookie: 1, starts: &a }, StreamRounds { cookie: 2, starts: &b }], 8, 64).unwrap();
        assert_eq!(r.cycles, 38, "the 3 s gap is left out");
        assert!((r.streams[1].phase - 0.3).abs() < 0.01, "{r:?}");
    }

    #[test]
    fn the_stream_that_opens_most_loss_episodes_loses_first() {
        let a = [1000 * MS, 3000 * MS + 5 * MS, 6000 * MS + 20 * MS];
        let b = [1000 * MS + 10 * MS, 3000 * MS, 6000 * MS];
        let c = [1000 * MS + 2 * MS];
        let got = first_to_lose(&[(1, &a[..]), (2, &b[..]), (3, &c[..])], 100 * MS);
        assert_eq!(got, Some((2, 2, 3)));
        assert_eq!(first_to_lose(&[(1, &[][..])], 100 * MS), None);
    }
}
