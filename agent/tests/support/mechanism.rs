//! One lab scenario beside a fresh daemon, judged as `lab run NAME --judge --judge-mechanism` judges it.
use tcpvigil_lab::daemon::Daemon;
use tcpvigil_lab::fuzz::{judge_run, judged_text, run_beside};
use tcpvigil_lab::mechjudge::Outcome;
use tcpvigil_lab::Scenario;

/// Runs `name` beside a fresh daemon: the judgement's failures (owners and mechanisms), and whether
/// `mechanism` was named about what the run contains.
pub fn judged(name: &str, mechanism: &str, out: &std::path::Path) -> (Vec<String>, bool) {
    let sc = Scenario::by_name(name).expect("scenario");
    let dir = out.join(name);
    let daemon = Daemon::start(std::path::Path::new(env!("CARGO_BIN_EXE_tcpvigil")), &dir.join("daemon"))
        .expect("tcpvigil run started");
    let (truth, all) = run_beside(&sc, &daemon, &dir, false).expect("scenario ran");
    drop(daemon);
    let mut j = judge_run(&truth, all, truth.config.path.rtt_ms() / 1e3).expect("judged");
    j.judge_mechanism();
    eprintln!("== {name}\n{}", judged_text(&j));
    let named = j.mech.outcomes.iter().any(|(m, o)| m == mechanism && *o == Outcome::Named);
    (j.verdict.failures, named)
}
