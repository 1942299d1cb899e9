//! The finding contract: kinds, causes, stop owners and limit reasons as enums, with the snake_case
//! names the JSON events, the metrics' labels and the docs use (all taken from here).
use std::fmt;
use std::str::FromStr;

/// An enum of unit variants, each with its exported name: `ALL`, `as_str`, `FromStr`, `Display`
/// and serde as that name, so no other table of the names exists.
macro_rules! named_enum {
    ($(#[$m:meta])* pub enum $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal,)+ }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vm])* $v,)+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$v,)+];

            /// The exported name.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$v => $s,)+ }
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, UnknownName> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s).ok_or_else(|| UnknownName::new(stringify!($name), s))
            }
        }

        named_enum!(@common $name);
    };
    (@common $name:ident) => {
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

/// A name that is none of an enum's values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {name:?}")]
pub struct UnknownName {
    pub what: &'static str,
    pub name: String,
}

impl UnknownName {
    fn new(what: &'static str, name: &str) -> Self {
        UnknownName { what, name: name.chars().take(64).collect() }
    }
}

named_enum! {
    /// What a finding is about.
    pub enum FindingKind {
        /// Data to send, almost nothing delivered, for many RTTs.
        Stop = "stop",
        /// Streams of one transfer settled at very different rates.
        Unfair = "unfair",
        /// Held back by buffers, missing options or a small MSS.
        Limit = "limit",
        /// Network stops of several connections to one remote prefix that began together.
        Path = "path",
    }
}

named_enum! {
    /// Who holds a stopped connection back.
    pub enum StopOwner {
        /// Data is in flight and not acknowledged: the path (loss, outage) or the timers repairing it.
        Network = "network",
        /// Nothing in flight, data waiting behind a window below one MSS: the receiving application
        /// does not read.
        Receiver = "receiver",
        /// Nothing in flight and nothing waiting: the sending application has nothing to send. Never a
        /// stop; a stop whose sender turns out to be here ends.
        Application = "application",
        /// The last look at the sender is too old to tell (data waiting, window open, nothing in
        /// flight: the kernel sends at once, so only a stale view shows this).
        Undetermined = "undetermined",
    }
}

named_enum! {
    /// Why a connection stopped. Each cause belongs to one owner (`owner`).
    pub enum StopCause {
        /// Data in flight, nothing acknowledged, no timeout yet: the start of an outage or of heavy loss.
        NoAck = "no_ack",
        /// Retransmission timeouts.
        Rto = "rto",
        /// Several timeouts in a row, none answered: the path is silent (an outage).
        PathSilent = "path_silent",
        /// cwnd down to one or two segments in Recovery or Loss.
        CwndCollapse = "cwnd_collapse",
        /// Retransmissions lost again and resent late.
        LostRetransmit = "lost_retransmit",
        /// Holes repaired about one per RTT with cwnd open (recovery without SACK).
        SlowRecovery = "slow_recovery",
        /// The network's, for none of the reasons above.
        Unknown = "unknown",
        /// The receiver's window is closed: it does not read.
        ZeroWindow = "zero_window",
        /// The last look at the sender cannot tell whose stop it is.
        Undetermined = "undetermined",
    }
}

impl StopCause {
    /// The owner a stop of this cause is reported with.
    pub fn owner(self) -> StopOwner {
        match self {
            StopCause::ZeroWindow => StopOwner::Receiver,
            StopCause::Undetermined => StopOwner::Undetermined,
            _ => StopOwner::Network,
        }
    }
}

named_enum! {
    /// What holds a connection back (a `limit` finding).
    pub enum LimitReason {
        /// The receiver's window holds the sender back.
        RwndLimited = "rwnd_limited",
        /// The send buffer runs dry.
        SndbufLimited = "sndbuf_limited",
        /// SACK was not negotiated.
        NoSack = "no_sack",
        /// Window scaling was not negotiated.
        NoWscale = "no_wscale",
        /// A small MSS.
        SmallMss = "small_mss",
        /// Losses hold the window back, and their episodes name the mechanism (a policer, a queue
        /// too short or too long for the path).
        LossLimited = "loss_limited",
    }
}

named_enum! {
    /// What on the path or in the hosts holds a connection back: the fix follows from it, where
    /// the cause names only the symptom. Beside the cause of a stop, a limit or an unfair group.
    pub enum Mechanism {
        /// Full-size segments vanish while smaller ones pass, and the router's "fragmentation
        /// needed" never arrives: a path MTU black hole.
        MtuBlackhole = "mtu_blackhole",
        /// Losses in bursts at a flat RTT: a token-bucket policer drops what exceeds its rate.
        Policer = "policer",
        /// Losses after the RTT grew by the queue's depth: a full drop-tail queue.
        QueueOverflow = "queue_overflow",
        /// One stream of a group loses alone, without RTT growth: that stream's path member
        /// (an ECMP or LAG link) is lossy.
        LossyMember = "lossy_member",
        /// A buffer the application fixed with setsockopt (SO_RCVBUF/SO_SNDBUF: no autotuning).
        Application = "application",
        /// A buffer at the ceiling of the host's sysctl (net.ipv4.tcp_rmem / tcp_wmem maximum).
        Sysctl = "sysctl",
    }
}

named_enum! {
    /// How much of a path event's prefix stopped.
    pub enum PathScope {
        /// Every busy connection to the prefix stopped.
        All = "all",
        /// Some kept delivering: one ECMP member or one host, not the whole path.
        Partial = "partial",
    }
}

/// The cause of a finding; its kind follows from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cause {
    Stop(StopCause),
    /// The streams of one transfer share the path unfairly.
    UnfairStreams,
    Limit(LimitReason),
    /// A path event (`path_stop_all`, `path_stop_partial`).
    Path(PathScope),
}

impl Cause {
    pub fn kind(self) -> FindingKind {
        match self {
            Cause::Stop(_) => FindingKind::Stop,
            Cause::UnfairStreams => FindingKind::Unfair,
            Cause::Limit(_) => FindingKind::Limit,
            Cause::Path(_) => FindingKind::Path,
        }
    }

    /// The exported name.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Stop(c) => c.as_str(),
            Cause::UnfairStreams => "unfair_streams",
            Cause::Limit(r) => r.as_str(),
            Cause::Path(PathScope::All) => "path_stop_all",
            Cause::Path(PathScope::Partial) => "path_stop_partial",
        }
    }

    /// Every cause, kind by kind.
    pub fn all() -> impl Iterator<Item = Cause> {
        let stops = StopCause::ALL.iter().map(|c| Cause::Stop(*c));
        let limits = LimitReason::ALL.iter().map(|r| Cause::Limit(*r));
        let paths = PathScope::ALL.iter().map(|p| Cause::Path(*p));
        stops.chain([Cause::UnfairStreams]).chain(limits).chain(paths)
    }

    /// The stop cause, for stops.
    pub fn stop(self) -> Option<StopCause> {
        match self {
            Cause::Stop(c) => Some(c),
            _ => None,
        }
    }
}

impl FromStr for Cause {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        Cause::all().find(|c| c.as_str() == s).ok_or_else(|| UnknownName::new("cause", s))
    }
}

named_enum!(@common Cause);

impl From<StopCause> for Cause {
    fn from(c: StopCause) -> Self {
        Cause::Stop(c)
    }
}

impl From<LimitReason> for Cause {
    fn from(r: LimitReason) -> Self {
        Cause::Limit(r)
    }
}

impl From<PathScope> for Cause {
    fn from(p: PathScope) -> Self {
        Cause::Path(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cause_reads_back_from_its_name_and_serde_uses_the_same_name() {
        let names: Vec<&str> = Cause::all().map(Cause::as_str).collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "two causes share a name: {names:?}");
        for c in Cause::all() {
            assert_eq!(c.as_str().parse::<Cause>(), Ok(c));
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
            assert_eq!(serde_json::from_value::<Cause>(c.as_str().into()).unwrap(), c);
        }
        for o in StopOwner::ALL {
            assert_eq!(serde_json::to_value(o).unwrap(), o.as_str());
        }
        let e = "lost_retransmission".parse::<Cause>().unwrap_err();
        assert_eq!(e.to_string(), "unknown cause \"lost_retransmission\"");
        assert!(serde_json::from_value::<StopOwner>("nobody".into()).is_err());
    }

    #[test]
    fn stop_causes_belong_to_the_owner_they_name() {
        assert_eq!(StopCause::ZeroWindow.owner(), StopOwner::Receiver);
        assert_eq!(StopCause::Undetermined.owner(), StopOwner::Undetermined);
        assert_eq!(StopCause::SlowRecovery.owner(), StopOwner::Network);
        assert!(Cause::all().all(|c| (c.kind() == FindingKind::Stop) == c.stop().is_some()));
    }
}
