//! Anti-entropy by gap repair (spec section 7.9, DF-RCV-160..165, added in 1.1;
//! `delta_fabric.repair` in Python). Sans-IO: no clock, no thread; a node calls
//! [`GapTracker::round`] and [`ResendBuffer::take`] once per sync round.
//!
//! - [`GapTracker`] (receiver side) sees every accepted entry's header and, once per sync round,
//!   says which seqs of which (origin, incarnation) have been missing for `delay` rounds, between
//!   the first seq accepted of that incarnation and the highest, inside the replay window. It asks
//!   again once `retry` of its rounds have passed and the origin's highest seq has grown by `retry`
//!   since the last request, `attempts` times in all, then gives up (counted) after one more such
//!   wait.
//! - [`RepairRequest`] (`schema/repair.fbs`, identifier `DFR1`): what the receiver publishes on its
//!   delta key; [`encode_request`] / [`decode_request`].
//! - [`ResendBuffer`] (origin side) keeps the node's own last entries (bounded) and publishes the
//!   very same entries again when asked, at most `max_values_per_round` values per round.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt;

use flatbuffers::FlatBufferBuilder;

use crate::error::DecodeError;
use crate::generated::repair::deltafabric::v_1 as fb;
use crate::wire::{FINGERPRINT_SIZE, OwnedEntry, Reader, VERSION_MAJOR, VERSION_MINOR};

// Field ids of `RepairRequest` (schema/repair.fbs, declaration order).
const F_VERSION_MAJOR: usize = 0;
const F_VERSION_MINOR: usize = 1;
const F_SENDER: usize = 2;
const F_SENDER_INCARNATION: usize = 3;
const F_FINGERPRINT: usize = 4;
const F_ORIGIN: usize = 5;
const F_INCARNATION: usize = 6;
const F_SEQS: usize = 7;

/// The minor version a node writes in its requests.
pub const REQUEST_VERSION_MINOR: u16 = VERSION_MINOR;

/// File identifier of a repair request (DF-RCV-160).
pub const REPAIR_IDENTIFIER: &[u8; 4] = b"DFR1";
/// DF-RCV-161: at most this many seqs in one request.
pub const MAX_REQUEST_SEQS: usize = 256;

/// Why a repair request was refused (DF-RCV-161).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairErrorKind {
    /// Shorter than 8 bytes, or bytes 4 to 7 are not `DFR1`.
    BadIdentifier,
    /// `version_major` is not 1.
    UnsupportedVersion,
    /// Structure or field rules broken.
    Malformed,
}

impl RepairErrorKind {
    /// The name shared with Python (`RepairErrorKind`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadIdentifier => "BAD_IDENTIFIER",
            Self::UnsupportedVersion => "UNSUPPORTED_VERSION",
            Self::Malformed => "MALFORMED",
        }
    }
}

/// A repair request that does not decode; nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairError {
    /// Why.
    pub kind: RepairErrorKind,
    /// Detail for logs.
    pub detail: String,
}

impl fmt::Display for RepairError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.detail)
    }
}

impl std::error::Error for RepairError {}

fn malformed(detail: impl Into<String>) -> RepairError {
    RepairError {
        kind: RepairErrorKind::Malformed,
        detail: detail.into(),
    }
}

/// `sender` asks `origin` to publish again its entries `(origin, incarnation, s)`, `s` in `seqs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairRequest {
    /// Requesting node.
    pub sender: u64,
    /// Its incarnation.
    pub sender_incarnation: u64,
    /// Manifest fingerprint.
    pub fingerprint: [u8; 32],
    /// Origin asked.
    pub origin: u64,
    /// Its incarnation.
    pub incarnation: u64,
    /// Missing seqs, strictly increasing.
    pub seqs: Vec<u64>,
    /// Minor version of the requester.
    pub version_minor: u16,
}

impl RepairRequest {
    /// The field rules of DF-RCV-161.
    pub fn check(&self) -> Result<(), RepairError> {
        for (name, v) in [
            ("sender", self.sender),
            ("sender_incarnation", self.sender_incarnation),
            ("origin", self.origin),
            ("incarnation", self.incarnation),
        ] {
            if v == 0 {
                return Err(malformed(format!("{name} 0 not in [1, 2**64)")));
            }
        }
        if self.seqs.is_empty() || self.seqs.len() > MAX_REQUEST_SEQS {
            return Err(malformed(format!(
                "{} seqs, expected 1 to {MAX_REQUEST_SEQS}",
                self.seqs.len()
            )));
        }
        let mut prev = 0u64;
        for &s in &self.seqs {
            if s <= prev {
                return Err(malformed(format!(
                    "seq {s} after {prev}: seqs must be strictly increasing and >= 1"
                )));
            }
            prev = s;
        }
        Ok(())
    }
}

/// True when bytes 4 to 7 are `DFR1` (DF-RCV-160).
pub fn is_repair_request(buf: &[u8]) -> bool {
    buf.len() >= 8 && &buf[4..8] == REPAIR_IDENTIFIER
}

/// The `RepairRequest` buffer; refuses fields DF-RCV-161 refuses.
pub fn encode_request(req: &RepairRequest) -> Result<Vec<u8>, RepairError> {
    req.check()?;
    let mut b = FlatBufferBuilder::with_capacity(64 + 8 * req.seqs.len());
    let seqs = b.create_vector(&req.seqs);
    let fp = b.create_vector(&req.fingerprint);
    let root = fb::RepairRequest::create(
        &mut b,
        &fb::RepairRequestArgs {
            version_major: VERSION_MAJOR,
            version_minor: req.version_minor,
            sender: req.sender,
            sender_incarnation: req.sender_incarnation,
            fingerprint: Some(fp),
            origin: req.origin,
            incarnation: req.incarnation,
            seqs: Some(seqs),
        },
    );
    fb::finish_repair_request_buffer(&mut b, root);
    Ok(b.finished_data().to_vec())
}

/// Decodes and checks one repair request (DF-RCV-161): identifier; structure by the packet
/// decoder's reader (the verifier rules of DF-PKT-20 and DF-PKT-21 and the sharing rule DF-SEC-20,
/// applied to `RepairRequest`, as the snapshot decoder does for `SnapshotChunk`); version; required
/// vectors and their sizes; the field rules of [`RepairRequest::check`]. Never panics.
pub fn decode_request(buf: &[u8]) -> Result<RepairRequest, RepairError> {
    if !is_repair_request(buf) {
        return Err(RepairError {
            kind: RepairErrorKind::BadIdentifier,
            detail: "missing file identifier DFR1".into(),
        });
    }
    let bad = |e: DecodeError| malformed(e.detail);
    let mut r = Reader::new(buf);
    let t = r.root("RepairRequest").map_err(bad)?;
    let version_major = r.u16(t, F_VERSION_MAJOR, "version_major").map_err(bad)?;
    if version_major != VERSION_MAJOR {
        return Err(RepairError {
            kind: RepairErrorKind::UnsupportedVersion,
            detail: format!("version_major {version_major}"),
        });
    }
    let version_minor = r.u16(t, F_VERSION_MINOR, "version_minor").map_err(bad)?;
    let sender = r.u64(t, F_SENDER, "sender").map_err(bad)?;
    let sender_incarnation = r
        .u64(t, F_SENDER_INCARNATION, "sender_incarnation")
        .map_err(bad)?;
    let fp = r.vector(t, F_FINGERPRINT, 1, "fingerprint").map_err(bad)?;
    let origin = r.u64(t, F_ORIGIN, "origin").map_err(bad)?;
    let incarnation = r.u64(t, F_INCARNATION, "incarnation").map_err(bad)?;
    let seqs = r.vector(t, F_SEQS, 8, "seqs").map_err(bad)?;
    let (Some((fp_start, fp_len)), Some((s_start, s_len))) = (fp, seqs) else {
        let name = if fp.is_none() { "fingerprint" } else { "seqs" };
        return Err(malformed(format!("{name} (required) missing")));
    };
    r.check_disjoint().map_err(bad)?;
    if s_len > MAX_REQUEST_SEQS {
        return Err(malformed(format!(
            "{s_len} seqs, expected at most {MAX_REQUEST_SEQS}"
        )));
    }
    let fingerprint: [u8; FINGERPRINT_SIZE] =
        buf[fp_start..fp_start + fp_len].try_into().map_err(|_| {
            malformed(format!(
                "fingerprint has {fp_len} bytes, expected {FINGERPRINT_SIZE}"
            ))
        })?;
    let seqs = buf[s_start..s_start + 8 * s_len]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let req = RepairRequest {
        sender,
        sender_incarnation,
        fingerprint,
        origin,
        incarnation,
        seqs,
        version_minor,
    };
    req.check()?;
    Ok(req)
}

/// DF-RCV-165's counters of one node (both sides).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairCounters {
    /// Requests published.
    pub requests_sent: u64,
    /// Seqs they asked for (each attempt counted).
    pub seqs_requested: u64,
    /// Seqs given up after `attempts` requests.
    pub seqs_given_up: u64,
    /// Requests addressed to this node and queued.
    pub requests_received: u64,
    /// Requests refused (malformed, another manifest, another origin's or an old incarnation's).
    pub requests_refused: u64,
    /// Own entries published again.
    pub entries_resent: u64,
    /// Requested seqs not (or no longer) held.
    pub seqs_unavailable: u64,
    /// Requested seqs left for a later round (budget) or refused by the pending bound.
    pub seqs_deferred: u64,
}

impl RepairCounters {
    /// `(name, value)` pairs, the names of Python's `RepairCounters.to_json`.
    pub fn pairs(&self) -> [(&'static str, u64); 8] {
        [
            ("entries_resent", self.entries_resent),
            ("requests_received", self.requests_received),
            ("requests_refused", self.requests_refused),
            ("requests_sent", self.requests_sent),
            ("seqs_deferred", self.seqs_deferred),
            ("seqs_given_up", self.seqs_given_up),
            ("seqs_requested", self.seqs_requested),
            ("seqs_unavailable", self.seqs_unavailable),
        ]
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, o: &RepairCounters) {
        self.requests_sent += o.requests_sent;
        self.seqs_requested += o.seqs_requested;
        self.seqs_given_up += o.seqs_given_up;
        self.requests_received += o.requests_received;
        self.requests_refused += o.requests_refused;
        self.entries_resent += o.entries_resent;
        self.seqs_unavailable += o.seqs_unavailable;
        self.seqs_deferred += o.seqs_deferred;
    }
}

#[derive(Debug, Clone, Copy)]
struct Miss {
    first: u64,
    /// requests that carried it (`attempts + 1` once given up)
    asked: u64,
    last: u64,
    /// the origin's highest seq at the last request
    at: u64,
}

#[derive(Debug)]
struct Track {
    incarnation: u64,
    base: u64,
    highest: u64,
    seen: HashSet<u64>,
    /// missing seq -> (round first seen missing, requests that carried it, round of the last one,
    /// highest seq then)
    since: HashMap<u64, Miss>,
}

/// Parameters of a [`GapTracker`] (each >= 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GapParams {
    /// The replay window W.
    pub window: u64,
    /// Rounds a seq must be missing before the first request.
    pub delay: u64,
    /// Rounds of this node, and seqs of the origin accepted, between requests for one seq (a
    /// request's wait is over when both have passed, DF-RCV-163).
    pub retry: u64,
    /// Requests per seq before it is given up.
    pub attempts: u64,
    /// Requests per round.
    pub max_requests: usize,
}

impl GapParams {
    /// The defaults of both implementations for a replay window `window`.
    pub fn with_window(window: u64) -> Self {
        Self {
            window,
            delay: 2,
            retry: 4,
            attempts: 4,
            max_requests: 16,
        }
    }
}

/// DF-RCV-162/163: which seqs to ask for again, decided once per sync round.
#[derive(Debug)]
pub struct GapTracker {
    p: GapParams,
    rounds: u64,
    /// Counters (requests_sent, seqs_requested, seqs_given_up).
    pub counters: RepairCounters,
    tracks: BTreeMap<u64, Track>,
}

impl GapTracker {
    /// A tracker; `Err` names a parameter below 1.
    pub fn new(p: GapParams) -> Result<Self, String> {
        for (name, v) in [
            ("window", p.window),
            ("delay", p.delay),
            ("retry", p.retry),
            ("attempts", p.attempts),
            ("max_requests", p.max_requests as u64),
        ] {
            if v < 1 {
                return Err(format!("{name} must be >= 1, got {v}"));
            }
        }
        Ok(Self {
            p,
            rounds: 0,
            counters: RepairCounters::default(),
            tracks: BTreeMap::new(),
        })
    }

    /// An entry the receiver accepted.
    pub fn observe(&mut self, origin: u64, incarnation: u64, seq: u64) {
        let fresh = |seq: u64| Track {
            incarnation,
            base: seq,
            highest: seq,
            seen: HashSet::from([seq]),
            since: HashMap::new(),
        };
        let t = match self.tracks.get_mut(&origin) {
            Some(t) if incarnation < t.incarnation => return,
            Some(t) if incarnation == t.incarnation => t,
            _ => {
                self.tracks.insert(origin, fresh(seq));
                return;
            }
        };
        if seq > t.highest {
            t.highest = seq;
            if let Some(low) = seq.checked_sub(self.p.window).filter(|&l| l > 0) {
                t.seen.retain(|&s| s > low);
                t.since.retain(|&s, _| s > low);
            }
        }
        t.seen.insert(seq);
        t.base = t.base.min(seq);
    }

    /// The seqs of `origin`'s tracked incarnation missing now, ascending.
    pub fn missing(&self, origin: u64) -> Vec<u64> {
        let Some(t) = self.tracks.get(&origin) else {
            return Vec::new();
        };
        let lo = t
            .base
            .max((t.highest + 1).saturating_sub(self.p.window))
            .max(1);
        (lo..=t.highest).filter(|s| !t.seen.contains(s)).collect()
    }

    /// End of a sync round: `(origin, incarnation, seqs)` to request, by ascending origin.
    pub fn round(&mut self) -> Vec<(u64, u64, Vec<u64>)> {
        self.round_reachable(None)
    }

    /// [`GapTracker::round`] with the origins a request can reach now (the transport's live
    /// peers): the due seqs of any other origin are not asked this round and stay due
    /// (DF-RCV-230). `None`: all.
    pub fn round_reachable(
        &mut self,
        reachable: Option<&BTreeSet<u64>>,
    ) -> Vec<(u64, u64, Vec<u64>)> {
        self.rounds += 1;
        let r = self.rounds;
        let p = self.p;
        let origins: Vec<u64> = self.tracks.keys().copied().collect();
        let mut out = Vec::new();
        for origin in origins {
            let now = self.missing(origin);
            let t = self.tracks.get_mut(&origin).expect("tracked");
            let mut since: HashMap<u64, Miss> = now
                .iter()
                .map(|&s| {
                    let fresh = Miss {
                        first: r,
                        asked: 0,
                        last: 0,
                        at: 0,
                    };
                    (s, t.since.get(&s).copied().unwrap_or(fresh))
                })
                .collect();
            let mut due = Vec::new();
            for &s in &now {
                let m = since[&s];
                // a request's wait is over once this node has had retry rounds and the origin has
                // moved on by retry seqs: an origin that is stalled (no CPU, pacing) had no round
                // in which to answer, so its peers' requests do not expire meanwhile
                let over = m.asked > 0
                    && r - m.last >= p.retry
                    && t.highest.saturating_sub(m.at) >= p.retry;
                if m.asked >= p.attempts {
                    if m.asked == p.attempts && over {
                        // given up once
                        self.counters.seqs_given_up += 1;
                        since.get_mut(&s).expect("missing").asked += 1;
                    }
                } else if (m.asked == 0 && r - m.first >= p.delay) || over {
                    due.push(s);
                }
            }
            // only what a request carries counts as asked: a due seq left out by either bound
            // stays due for a later round (a burst loss of more than MAX_REQUEST_SEQS seqs)
            let held = reachable.is_some_and(|live| !live.contains(&origin));
            if !due.is_empty() && !held && out.len() < p.max_requests {
                due.truncate(MAX_REQUEST_SEQS);
                for s in &due {
                    let m = since.get_mut(s).expect("due seqs are missing");
                    m.asked += 1;
                    m.last = r;
                    m.at = t.highest;
                }
                self.counters.requests_sent += 1;
                self.counters.seqs_requested += due.len() as u64;
                out.push((origin, t.incarnation, due));
            }
            t.since = since;
        }
        out
    }
}

/// Bounds of a [`ResendBuffer`] (each >= 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResendParams {
    /// Entries held.
    pub max_entries: usize,
    /// Values held.
    pub max_values: usize,
    /// Values resent per round (at least one entry).
    pub max_values_per_round: usize,
    /// Requested seqs waiting.
    pub max_pending: usize,
}

impl Default for ResendParams {
    fn default() -> Self {
        Self {
            max_entries: 4096,
            max_values: 4_194_304,
            max_values_per_round: 262_144,
            max_pending: 4096,
        }
    }
}

/// DF-RCV-164: the node's own last entries of its current incarnation and the seqs asked for.
#[derive(Debug)]
pub struct ResendBuffer {
    node: u64,
    incarnation: u64,
    fingerprint: [u8; 32],
    p: ResendParams,
    /// Counters (requests_received, requests_refused, entries_resent, seqs_unavailable, seqs_deferred).
    pub counters: RepairCounters,
    held: BTreeMap<u64, OwnedEntry>,
    order: VecDeque<u64>,
    values: usize,
    pending: BTreeSet<u64>,
}

impl ResendBuffer {
    /// A buffer; `Err` names a bound below 1.
    pub fn new(
        node: u64,
        incarnation: u64,
        fingerprint: [u8; 32],
        p: ResendParams,
    ) -> Result<Self, String> {
        for (name, v) in [
            ("max_entries", p.max_entries),
            ("max_values", p.max_values),
            ("max_values_per_round", p.max_values_per_round),
            ("max_pending", p.max_pending),
        ] {
            if v < 1 {
                return Err(format!("{name} must be >= 1, got {v}"));
            }
        }
        Ok(Self {
            node,
            incarnation,
            fingerprint,
            p,
            counters: RepairCounters::default(),
            held: BTreeMap::new(),
            order: VecDeque::new(),
            values: 0,
            pending: BTreeSet::new(),
        })
    }

    /// Own entries just generated (others are ignored).
    pub fn add(&mut self, entries: &[OwnedEntry]) {
        for e in entries {
            if e.origin != self.node || e.incarnation != self.incarnation {
                continue;
            }
            if let Some(old) = self.held.remove(&e.seq) {
                self.values -= old.indices.len();
                self.order.retain(|&s| s != e.seq);
            }
            self.values += e.indices.len();
            self.held.insert(e.seq, e.clone());
            self.order.push_back(e.seq);
        }
        while !self.held.is_empty()
            && (self.held.len() > self.p.max_entries || self.values > self.p.max_values)
        {
            let Some(s) = self.order.pop_front() else {
                break;
            };
            if let Some(old) = self.held.remove(&s) {
                self.values -= old.indices.len();
            }
        }
    }

    /// A decoded request: queued when addressed to this node's incarnation and manifest (true),
    /// else refused and counted (false).
    pub fn request(&mut self, req: &RepairRequest) -> bool {
        if req.origin != self.node
            || req.incarnation != self.incarnation
            || req.fingerprint != self.fingerprint
        {
            self.counters.requests_refused += 1;
            return false;
        }
        self.counters.requests_received += 1;
        for &s in &req.seqs {
            if !self.held.contains_key(&s) {
                self.counters.seqs_unavailable += 1;
            } else if !self.pending.contains(&s) {
                if self.pending.len() >= self.p.max_pending {
                    self.counters.seqs_deferred += 1;
                } else {
                    self.pending.insert(s);
                }
            }
        }
        true
    }

    /// The requested entries to publish again this round (hops 0, as generated).
    pub fn take(&mut self) -> Vec<OwnedEntry> {
        let mut out: Vec<OwnedEntry> = Vec::new();
        let mut budget = self.p.max_values_per_round;
        let want: Vec<u64> = self.pending.iter().copied().collect();
        for s in want {
            let Some(e) = self.held.get(&s) else {
                self.pending.remove(&s);
                self.counters.seqs_unavailable += 1;
                continue;
            };
            let n = e.indices.len();
            if !out.is_empty() && n > budget {
                break;
            }
            out.push(e.clone());
            budget = budget.saturating_sub(n);
            self.pending.remove(&s);
        }
        self.counters.seqs_deferred += self.pending.len() as u64;
        self.counters.entries_resent += out.len() as u64;
        out
    }

    /// Entries held.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Requested seqs waiting.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

/// Default relative tolerance of two anchors that agree (the tolerance of DF-NUM-1).
pub const DEFAULT_AGREEMENT: f64 = 5e-2;

/// `max_i |a_i - b_i| <= rel_tol * max(max_i |a_i|, max_i |b_i|)` in f64, both finite and of one
/// length (trusted snapshots, proposal spec/proposals/trusted-snapshots.md).
pub fn anchors_agree(a: &[f32], b: &[f32], rel_tol: f64) -> bool {
    if a.len() != b.len() || a.iter().chain(b).any(|x| !x.is_finite()) {
        return false;
    }
    let max_abs = |v: &[f32]| v.iter().fold(0.0f64, |m, &x| m.max(f64::from(x).abs()));
    let scale = max_abs(a).max(max_abs(b));
    let diff = a.iter().zip(b).fold(0.0f64, |m, (&x, &y)| {
        m.max((f64::from(x) - f64::from(y)).abs())
    });
    diff <= rel_tol * scale
}

/// [`confirm_snapshot`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumVerdict {
    /// The source whose anchor to install (None: none confirmed).
    pub chosen: Option<u64>,
    /// Per source: how many sources' anchors, itself included, agree with its own.
    pub confirmations: BTreeMap<u64, usize>,
    /// Sources confirmed by fewer than the quorum, ascending.
    pub outliers: Vec<u64>,
}

/// Of the verified snapshots `anchors` of members, the lowest source id whose anchor agrees with
/// those of at least `quorum` sources (itself included). O(S^2 N).
pub fn confirm_snapshot(
    anchors: &BTreeMap<u64, Vec<f32>>,
    quorum: usize,
    rel_tol: f64,
) -> QuorumVerdict {
    let confirmations: BTreeMap<u64, usize> = anchors
        .iter()
        .map(|(&i, a)| {
            let n = anchors
                .iter()
                .filter(|&(&j, b)| i == j || anchors_agree(a, b, rel_tol))
                .count();
            (i, n)
        })
        .collect();
    let q = quorum.max(1);
    QuorumVerdict {
        chosen: confirmations
            .iter()
            .find(|&(_, &c)| c >= q)
            .map(|(&i, _)| i),
        outliers: confirmations
            .iter()
            .filter(|&(_, &c)| c < q)
            .map(|(&i, _)| i)
            .collect(),
        confirmations,
    }
}
