//! tcpvigil-lab: long-fat-network scenarios on one machine (netns + veth + tbf + nft + NFQUEUE delay + tc-bpf) with recorded ground truth.
pub mod apps;
pub mod bench;
pub mod bpf;
pub mod catalog;
pub mod catalog_mech;
pub mod clock;
pub mod cmd;
pub mod daemon;
pub mod delay;
pub mod error;
pub mod fuzz;
pub mod fuzzcase;
pub mod fuzzjudge;
pub mod fuzzplan;
pub mod lab;
pub mod mechanism;
pub mod mechjudge;
pub mod netns;
pub mod nfq;
pub mod observe;
pub mod path;
pub mod pcap;
pub mod plain;
pub mod registry;
pub mod runner;
pub mod scenario;
pub mod stalls;
pub mod topo;
pub mod traffic;
pub mod truth;
pub mod wire;

pub use error::{LabError, Result};
pub use lab::{Lab, LabConfig};
pub use runner::RunOptions;
pub use scenario::{Event, Knobs, Scenario};
pub use topo::Family;
pub use truth::{Expected, Truth};

impl Scenario {
    /// The scenario called `name`, with its defaults (see [`catalog::NAMES`]).
    pub fn by_name(name: &str) -> Result<Scenario> {
        catalog::by_name(name)
    }
    /// Every scenario.
    pub fn all() -> Vec<Scenario> {
        catalog::all()
    }
}
