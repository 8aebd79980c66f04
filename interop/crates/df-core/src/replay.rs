//! Replay windows (DF-RCV-3) and incarnation tables (DF-RCV-4).

use std::collections::{HashMap, HashSet};

/// What the receiver does with one entry of an accepted packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Admission {
    /// Applied (and relayed when the relay rules allow).
    Accepted,
    /// DF-RCV-2: the entry is this node's own.
    OwnOrigin,
    /// DF-RCV-3: seq already seen inside the window.
    Duplicate,
    /// DF-RCV-3: seq at or below `H - W`.
    TooOld,
    /// DF-RCV-4: incarnation lower than every tracked one on a full table.
    StaleIncarnation,
    /// Receiver bound on tracked origins (not fixed by the spec's table; spec DF-SEC-2; same as the Python reference).
    OriginLimit,
    /// DF-RCV-51 (1.1): origin outside the receiver's membership (never tracked).
    NotMember,
    /// DF-RCV-52 (1.1): seq more than `max_seq_jump` above a tracked incarnation's highest seq.
    SeqJump,
    /// DF-RCV-175 (1.1): an incarnation not yet tracked lies more than `max_incarnation_ahead`
    /// ahead of the receiver's clock `now_us`.
    FutureIncarnation,
    /// DF-RCV-178 (1.1): a new incarnation would evict one that accepted an entry less than
    /// `incarnation_grace` ago.
    LiveIncarnation,
}

impl Admission {
    /// Drop reasons in counter order.
    pub const DROPS: [Admission; 9] = [
        Admission::OwnOrigin,
        Admission::Duplicate,
        Admission::TooOld,
        Admission::StaleIncarnation,
        Admission::OriginLimit,
        Admission::NotMember,
        Admission::SeqJump,
        Admission::FutureIncarnation,
        Admission::LiveIncarnation,
    ];
    /// Counter name, e.g. `"own_origin"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Admission::Accepted => "accepted",
            Admission::OwnOrigin => "own_origin",
            Admission::Duplicate => "duplicate",
            Admission::TooOld => "too_old",
            Admission::StaleIncarnation => "stale_incarnation",
            Admission::OriginLimit => "origin_limit",
            Admission::NotMember => "not_member",
            Admission::SeqJump => "seq_jump",
            Admission::FutureIncarnation => "future_incarnation",
            Admission::LiveIncarnation => "live_incarnation",
        }
    }
}

/// Sliding window over the seqs of one (origin, incarnation): highest seq H and a W-bit bitmap
/// (seq s is stored at bit `s mod W`; valid for `H - W < s <= H`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayWindow {
    width: u64,
    highest: u64,
    bits: Vec<u64>,
    /// DF-RCV-178: the receiver's `now_us` at the last acceptance (`None`: unknown).
    last_us: Option<u64>,
}

impl ReplayWindow {
    /// An empty window of width W >= 1 (H = 0).
    pub fn new(width: u64) -> Self {
        let width = width.max(1);
        ReplayWindow {
            width,
            highest: 0,
            bits: vec![0; width.div_ceil(64) as usize],
            last_us: None,
        }
    }
    /// H (0 before the first seq).
    pub fn highest(&self) -> u64 {
        self.highest
    }
    /// W.
    pub fn width(&self) -> u64 {
        self.width
    }
    fn bit(&self, s: u64) -> bool {
        let p = s % self.width;
        (self.bits[(p / 64) as usize] >> (p % 64)) & 1 == 1
    }
    fn set(&mut self, s: u64, v: bool) {
        let p = s % self.width;
        let w = &mut self.bits[(p / 64) as usize];
        if v {
            *w |= 1 << (p % 64);
        } else {
            *w &= !(1 << (p % 64));
        }
    }
    /// The verdict for `seq` (>= 1) without changing the window.
    pub fn check(&self, seq: u64) -> Admission {
        let h = self.highest;
        if seq > h {
            Admission::Accepted
        } else if h >= self.width && seq <= h - self.width {
            Admission::TooOld
        } else if self.bit(seq) {
            Admission::Duplicate
        } else {
            Admission::Accepted
        }
    }
    /// Checks `seq` and records it when accepted.
    pub fn admit(&mut self, seq: u64) -> Admission {
        let v = self.check(seq);
        if v == Admission::Accepted {
            if seq > self.highest {
                let shift = seq - self.highest;
                if shift >= self.width {
                    self.bits.iter_mut().for_each(|w| *w = 0);
                } else {
                    for s in self.highest + 1..seq {
                        self.set(s, false);
                    }
                }
                self.highest = seq;
            }
            self.set(seq, true);
        }
        v
    }
    /// Accepted seqs still inside the window, ascending.
    pub fn seen(&self) -> Vec<u64> {
        let h = self.highest;
        let lo = h.saturating_sub(self.width - 1).max(1);
        (lo..=h).filter(|&s| h > 0 && self.bit(s)).collect()
    }
}

/// Per-origin incarnation tables, each incarnation with its replay window (DF-RCV-2..4).
#[derive(Debug, Clone)]
pub struct ReceiverState {
    own_id: u64,
    window: u64,
    max_incarnations: usize,
    max_origins: usize,
    members: Option<HashSet<u64>>,
    max_seq_jump: u64,
    max_incarnation_ahead: u64,
    incarnation_grace: u64,
    now_us: Option<u64>,
    origins: HashMap<u64, Vec<(u64, ReplayWindow)>>,
}

/// Default bound on tracked origins (same as the Python reference).
pub const DEFAULT_MAX_ORIGINS: usize = 4096;

impl ReceiverState {
    /// A fresh state.
    pub fn new(own_id: u64, window: u64, max_incarnations: usize, max_origins: usize) -> Self {
        ReceiverState {
            own_id,
            window: window.max(1),
            max_incarnations: max_incarnations.max(1),
            max_origins: max_origins.max(1),
            members: None,
            max_seq_jump: 0,
            max_incarnation_ahead: 0,
            incarnation_grace: 0,
            now_us: None,
            origins: HashMap::new(),
        }
    }

    /// DF-RCV-52 (1.1): the largest accepted `seq - H` of a tracked incarnation with `H >= 1`
    /// (0: no bound, as in 1.0).
    pub fn set_max_seq_jump(&mut self, jump: u64) {
        self.max_seq_jump = jump;
    }

    /// DF-RCV-175 (1.1): how far (microseconds) an incarnation not yet tracked may lie ahead of
    /// the clock given by [`ReceiverState::set_now_us`] (0: no bound).
    pub fn set_max_incarnation_ahead(&mut self, ahead: u64) {
        self.max_incarnation_ahead = ahead;
    }

    /// DF-RCV-178 (1.1): how long (microseconds) an incarnation that accepted an entry cannot be
    /// evicted by a new one (0: off).
    pub fn set_incarnation_grace(&mut self, grace: u64) {
        self.incarnation_grace = grace;
    }

    /// DF-RCV-175 (1.1): the receiver's clock (microseconds since the Unix epoch) for the next
    /// entries, given by the node layer. Until a reading is given the bound is not applied.
    pub fn set_now_us(&mut self, now_us: u64) {
        self.now_us = Some(now_us);
    }

    /// The clock reading given by [`ReceiverState::set_now_us`], if any.
    pub fn now_us(&self) -> Option<u64> {
        self.now_us
    }

    /// DF-RCV-51 (1.1): the node ids accepted as origins (`None`: every origin, as in 1.0). Windows
    /// of origins that left are kept: a member that returns continues where it was.
    pub fn set_members(&mut self, members: Option<HashSet<u64>>) {
        self.members = members;
    }

    /// The membership, if any.
    pub fn members(&self) -> Option<&HashSet<u64>> {
        self.members.as_ref()
    }

    fn verdict(&self, origin: u64, inc: u64, seq: u64) -> (Admission, Option<u64>) {
        if origin == self.own_id {
            return (Admission::OwnOrigin, None);
        }
        if self.members.as_ref().is_some_and(|m| !m.contains(&origin)) {
            return (Admission::NotMember, None);
        }
        let table = self.origins.get(&origin);
        if self.max_incarnation_ahead > 0
            && self
                .now_us
                .is_some_and(|now| inc > now && inc - now > self.max_incarnation_ahead)
            && !table.is_some_and(|t| t.iter().any(|(i, _)| *i == inc))
        {
            return (Admission::FutureIncarnation, None); // DF-RCV-175: creates no state
        }
        let Some(table) = table else {
            if self.origins.len() >= self.max_origins {
                return (Admission::OriginLimit, None);
            }
            return (Admission::Accepted, None);
        };
        if let Some((_, w)) = table.iter().find(|(i, _)| *i == inc) {
            let h = w.highest();
            if self.max_seq_jump > 0 && h > 0 && seq > h && seq - h > self.max_seq_jump {
                return (Admission::SeqJump, None);
            }
            return (w.check(seq), None);
        }
        if table.len() < self.max_incarnations {
            return (Admission::Accepted, None);
        }
        let Some((lowest, w)) = table.iter().min_by_key(|(i, _)| *i) else {
            return (Admission::Accepted, None);
        };
        if inc > *lowest {
            let live = match (self.now_us, w.last_us) {
                (Some(now), Some(last)) if self.incarnation_grace > 0 => {
                    now < last || now - last < self.incarnation_grace
                }
                _ => false,
            };
            if live {
                return (Admission::LiveIncarnation, None); // DF-RCV-178: no state change
            }
            (Admission::Accepted, Some(*lowest))
        } else {
            (Admission::StaleIncarnation, None)
        }
    }

    /// The verdict for an entry without changing state.
    pub fn check(&self, origin: u64, inc: u64, seq: u64) -> Admission {
        self.verdict(origin, inc, seq).0
    }

    /// Checks an entry and records it when accepted.
    pub fn admit(&mut self, origin: u64, inc: u64, seq: u64) -> Admission {
        let (v, evict) = self.verdict(origin, inc, seq);
        if v == Admission::Accepted {
            let width = self.window;
            let table = self.origins.entry(origin).or_default();
            if let Some(e) = evict {
                table.retain(|(i, _)| *i != e);
            }
            let pos = match table.iter().position(|(i, _)| *i == inc) {
                Some(p) => p,
                None => {
                    table.push((inc, ReplayWindow::new(width)));
                    table.len() - 1
                }
            };
            table[pos].1.admit(seq);
            if self.now_us.is_some() {
                table[pos].1.last_us = self.now_us; // DF-RCV-178
            }
        }
        v
    }

    /// DF-RCV-178 (1.1): records `now_us` as the clock reading at which `origin`'s tracked
    /// incarnation `inc` last accepted an entry, as [`ReceiverState::admit`] does under a clock
    /// reading: what restoring a history with acceptance times needs (driver protocol 5.5). Judges
    /// nothing. `false` (and no change) when that incarnation is not tracked.
    pub fn set_accepted_at(&mut self, origin: u64, inc: u64, now_us: u64) -> bool {
        match self
            .origins
            .get_mut(&origin)
            .and_then(|t| t.iter_mut().find(|(i, _)| *i == inc))
        {
            Some((_, w)) => {
                w.last_us = Some(now_us);
                true
            }
            None => false,
        }
    }

    /// A copy of `origin`'s incarnation table (`None` when untracked), for [`ReceiverState::restore`]:
    /// what a receiver needs to undo the admissions of a packet it refuses after admitting its
    /// entries (DF-RCV-50). O(max_incarnations * W) bits.
    pub fn save(&self, origin: u64) -> Option<Vec<(u64, ReplayWindow)>> {
        self.origins.get(&origin).cloned()
    }

    /// Puts back a table taken by [`ReceiverState::save`] (`None`: `origin` becomes untracked).
    pub fn restore(&mut self, origin: u64, saved: Option<Vec<(u64, ReplayWindow)>>) {
        match saved {
            Some(t) => {
                self.origins.insert(origin, t);
            }
            None => {
                self.origins.remove(&origin);
            }
        }
    }

    /// Tracked incarnations of `origin`, ascending.
    pub fn incarnations(&self, origin: u64) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .origins
            .get(&origin)
            .map(|t| t.iter().map(|(i, _)| *i).collect())
            .unwrap_or_default();
        v.sort_unstable();
        v
    }

    /// The window of (origin, incarnation), if tracked.
    pub fn window_of(&self, origin: u64, inc: u64) -> Option<&ReplayWindow> {
        self.origins
            .get(&origin)?
            .iter()
            .find(|(i, _)| *i == inc)
            .map(|(_, w)| w)
    }

    /// `(origin, incarnation, seq)` of every accepted seq still in a window, sorted.
    pub fn history(&self) -> Vec<(u64, u64, u64)> {
        let mut out = Vec::new();
        for (&o, t) in &self.origins {
            for (i, w) in t {
                out.extend(w.seen().into_iter().map(|s| (o, *i, s)));
            }
        }
        out.sort_unstable();
        out
    }
}
