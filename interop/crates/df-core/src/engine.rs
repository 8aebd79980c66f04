//! The sync engine: generation (DF-GEN), receive processing (DF-RCV) and relay packing (DF-RLY).
//!
//! The engine owns the anchor; the caller owns the active weights and applies
//! [`ReceiveResult::apply_to`] to them. All arithmetic is f32 in the order the spec fixes, so the
//! results are bit-identical to the Python reference.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use serde_json::{Value, json};

use crate::config::{ConfigError, RelayPolicy, SyncConfig};
use crate::error::{DecodeError, ErrorCode};
use crate::manifest::Manifest;
use crate::replay::{Admission, ReceiverState, ReplayWindow};
use crate::selection::{Selector, num_selected};
use crate::signing::Signing;
use crate::wire::{
    MIN_SIGNED_MAX_PACKET_SIZE, OwnedEntry, OwnedPacket, PACKET_OVERHEAD_BOUND, Packet,
    decode_packet, encode_packet, entry_size_bound_signed, heard_size_bound, validate_packet,
};

/// Engine errors (misuse by the caller, never caused by received bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineError {
    /// A buffer does not have N values.
    WrongLength {
        /// N.
        expected: usize,
        /// What was passed.
        got: usize,
    },
    /// The delta holds an infinite value (DF-GEN-9: nothing was sent and no state changed).
    NonFinite {
        /// Flat index of the first such value.
        index: u32,
    },
    /// Invalid construction parameter.
    Invalid(String),
    /// A configuration parameter outside its allowed range (DF-PAR-11).
    Config(ConfigError),
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::WrongLength { expected, got } => {
                write!(f, "buffer has {got} values, expected {expected}")
            }
            EngineError::NonFinite { index } => write!(f, "non-finite delta at index {index}"),
            EngineError::Invalid(s) => f.write_str(s),
            EngineError::Config(e) => write!(f, "configuration: {e}"),
        }
    }
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EngineError::Config(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ConfigError> for EngineError {
    fn from(e: ConfigError) -> Self {
        EngineError::Config(e)
    }
}

/// Receiver counters: rejected packets per code, dropped entries per reason, acceptances.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets given to `receive`.
    pub packets_received: u64,
    /// Packets that passed decode and validate.
    pub packets_accepted: u64,
    /// Packets rejected (sum of `errors`).
    pub packets_rejected: u64,
    /// Entries accepted by the replay window.
    pub entries_accepted: u64,
    /// Relay entries produced.
    pub entries_relayed: u64,
    /// Indices of the aggregates applied.
    pub values_applied: u64,
    /// Rejections per code, in [`ErrorCode::ALL`] order.
    pub errors: [u64; ErrorCode::ALL.len()],
    /// Drops per reason, in [`Admission::DROPS`] order.
    pub drops: [u64; Admission::DROPS.len()],
    /// Relay candidates not relayed because every neighbour already has them (DF-RLY-60, 1.1).
    pub relay_suppressed: u64,
}

impl Counters {
    fn count_error(&mut self, c: ErrorCode) {
        if let Some(p) = ErrorCode::ALL.iter().position(|x| *x == c) {
            self.errors[p] += 1;
        }
    }
    fn count_drop(&mut self, a: Admission) {
        if let Some(p) = Admission::DROPS.iter().position(|x| *x == a) {
            self.drops[p] += 1;
        }
    }
    /// Rejections of one code.
    pub fn error(&self, c: ErrorCode) -> u64 {
        ErrorCode::ALL
            .iter()
            .position(|x| *x == c)
            .map_or(0, |p| self.errors[p])
    }
    /// Drops of one reason.
    pub fn drop_count(&self, a: Admission) -> u64 {
        Admission::DROPS
            .iter()
            .position(|x| *x == a)
            .map_or(0, |p| self.drops[p])
    }
    /// Flat JSON, every code and reason present (same shape as the Python reference).
    pub fn to_json(&self) -> Value {
        let errors: serde_json::Map<String, Value> = ErrorCode::ALL
            .iter()
            .zip(self.errors)
            .map(|(c, n)| (c.as_str().to_string(), json!(n)))
            .collect();
        let drops: serde_json::Map<String, Value> = Admission::DROPS
            .iter()
            .zip(self.drops)
            .map(|(a, n)| (a.as_str().to_string(), json!(n)))
            .collect();
        json!({
            "packets_received": self.packets_received,
            "packets_accepted": self.packets_accepted,
            "packets_rejected": self.packets_rejected,
            "entries_accepted": self.entries_accepted,
            "entries_relayed": self.entries_relayed,
            "values_applied": self.values_applied,
            "relay_suppressed": self.relay_suppressed,
            "errors": errors,
            "drops": drops,
        })
    }
}

/// What happened to one received packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Decoded and validated (its entries may still have been dropped one by one).
    Ok,
    /// Rejected as a whole with this code; no state changed.
    Rejected(ErrorCode),
}

/// The header of one entry the replay window accepted (DF-RCV-3, DF-RCV-4), with where it was:
/// what a node layer needs (e.g. to track live origins) without decoding the packets again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AcceptedEntry {
    /// Origin node id.
    pub origin: u64,
    /// Origin incarnation.
    pub incarnation: u64,
    /// Sequence number within (origin, incarnation).
    pub seq: u64,
    /// `Entry.hops` as received (before the relay increment).
    pub hops: u8,
    /// Index of the packet in the `packets` given to [`Engine::receive`].
    pub packet: usize,
    /// Index of the entry in that packet.
    pub entry: usize,
}

/// The result of one receive step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReceiveResult {
    /// Aggregate indices, ascending.
    pub indices: Vec<u32>,
    /// Aggregate values (DF-RCV-6), already applied to the anchor.
    pub values: Vec<f32>,
    /// Relay entries in acceptance order (DF-RLY), values = damped values passing the threshold.
    pub relay: Vec<OwnedEntry>,
    /// One outcome per packet, in order.
    pub outcomes: Vec<Outcome>,
    /// Per packet, the admission of each entry (empty for a rejected packet).
    pub entry_outcomes: Vec<Vec<Admission>>,
    /// The accepted entries in acceptance order (packet order, then entry order): one per
    /// [`Admission::Accepted`] of `entry_outcomes`.
    pub accepted: Vec<AcceptedEntry>,
    /// What this step added to the counters.
    pub counters: Counters,
}

impl ReceiveResult {
    /// DF-RCV-7 on the caller's active weights: `active[i] = fl32(active[i] + agg[i])`.
    pub fn apply_to(&self, active: &mut [f32]) {
        for (&i, &v) in self.indices.iter().zip(&self.values) {
            if let Some(a) = active.get_mut(i as usize) {
                *a += v;
            }
        }
    }
}

/// The node's active weights as [`Engine::receive_with`] reads them for DF-RCV-50: the values at
/// the given flat indices (a result of another length counts as non-finite).
pub type ActiveView<'a> = &'a dyn Fn(&[u32]) -> Vec<f32>;

/// The protocol state of one node.
#[derive(Debug)]
pub struct Engine {
    manifest: Manifest,
    config: SyncConfig,
    node_id: u64,
    incarnation: u64,
    anchor: Vec<f32>,
    next_seq: u64,
    state: ReceiverState,
    counters: Counters,
    selector: Selector,
    d: Vec<f32>,
    sel: Vec<u32>,
    agg: Vec<f32>,
    touched: Vec<bool>,
    touched_list: Vec<u32>,
    relay_dropped_oversize: std::sync::atomic::AtomicU64,
    // Relay policy NEEDED (spec section 8.6): senders heard in this and the last sync round, and
    // their advertisements with their age in rounds.
    heard_now: BTreeSet<u64>,
    heard_prev: BTreeSet<u64>,
    adverts: HashMap<u64, (BTreeSet<u64>, u8)>,
    correction_indices: Vec<u32>,
    correction_values: Vec<f32>,
    // Signed entries (spec 1.1 section 13.1): `Some` in a signed cluster.
    signing: Option<Signing>,
    // DF-GEN-70: the `average_over` generations use (AUTO counts as 1 until the node resolves it).
    average: u32,
}

impl Engine {
    /// A node with this manifest, config, id, incarnation and initial anchor (N values).
    pub fn new(
        manifest: Manifest,
        config: SyncConfig,
        node_id: u64,
        incarnation: u64,
        anchor: Vec<f32>,
    ) -> Result<Engine, EngineError> {
        let n = usize::try_from(manifest.num_params())
            .map_err(|_| EngineError::Invalid("N does not fit in usize".into()))?;
        if n == 0 {
            return Err(EngineError::Invalid("manifest has no values".into()));
        }
        if anchor.len() != n {
            return Err(EngineError::WrongLength {
                expected: n,
                got: anchor.len(),
            });
        }
        if node_id == 0 || incarnation == 0 {
            return Err(EngineError::Invalid(
                "node id and incarnation must be non-zero".into(),
            ));
        }
        config.validate().map_err(EngineError::Config)?;
        let mut state = ReceiverState::new(
            node_id,
            config.replay_window,
            config.max_incarnations,
            config.max_origins,
        );
        state.set_max_seq_jump(config.max_seq_jump);
        state.set_max_incarnation_ahead(config.max_incarnation_ahead);
        state.set_incarnation_grace(config.incarnation_grace);
        let average = config.average_count();
        Ok(Engine {
            average,
            manifest,
            config,
            node_id,
            incarnation,
            anchor,
            next_seq: 1,
            state,
            counters: Counters::default(),
            selector: Selector::new(),
            d: Vec::new(),
            sel: Vec::new(),
            agg: Vec::new(),
            touched: Vec::new(),
            touched_list: Vec::new(),
            relay_dropped_oversize: std::sync::atomic::AtomicU64::new(0),
            heard_now: BTreeSet::new(),
            heard_prev: BTreeSet::new(),
            adverts: HashMap::new(),
            correction_indices: Vec::new(),
            correction_values: Vec::new(),
            signing: None,
        })
    }

    /// The node's clock for the next receive steps (DF-RCV-175, 1.1): microseconds since the Unix
    /// epoch, read by the node layer (the engine does no I/O). Only `max_incarnation_ahead`
    /// (DF-PAR-175) uses it; until a reading is given, that bound is not applied.
    pub fn set_now_us(&mut self, now_us: u64) {
        self.state.set_now_us(now_us);
    }

    /// The clock reading given by [`Engine::set_now_us`], if any.
    pub fn now_us(&self) -> Option<u64> {
        self.state.now_us()
    }

    /// Puts the node in a signed cluster (spec section 13.1; `None`: not signed): it signs its own
    /// entries (with its secret key), rejects packets with an entry not signed by its origin's
    /// pinned key (`BAD_SIGNATURE`, DF-SEC-142) and relays the origin's values and signature
    /// (DF-RLY-140).
    ///
    /// Refused, with nothing changed, when `max_packet_size` cannot hold a signed entry of one
    /// value (below [`MIN_SIGNED_MAX_PACKET_SIZE`], DF-RLY-141).
    pub fn set_signing(&mut self, signing: Option<Signing>) -> Result<(), EngineError> {
        if signing.is_some() && self.config.max_packet_size < MIN_SIGNED_MAX_PACKET_SIZE {
            return Err(EngineError::Config(ConfigError::OutOfRange {
                name: "max_packet_size",
                allowed: format!(">= {MIN_SIGNED_MAX_PACKET_SIZE} in a signed cluster"),
                got: self.config.max_packet_size.to_string(),
            }));
        }
        self.signing = signing;
        Ok(())
    }

    /// The signing keys, in a signed cluster.
    pub fn signing(&self) -> Option<&Signing> {
        self.signing.as_ref()
    }

    /// Values per own entry before splitting (DF-GEN-6), by the size bound of a signed entry in a
    /// signed cluster (DF-RLY-141).
    pub fn max_values_per_entry(&self) -> usize {
        if self.signing.is_none() {
            return self.config.max_values_per_entry();
        }
        let room = self
            .config
            .max_packet_size
            .saturating_sub(PACKET_OVERHEAD_BOUND + entry_size_bound_signed(0, true));
        (room / 8).max(1)
    }

    /// DF-SEC-142 (step 16 of DF-RCV-20): every entry carries a valid signature by its origin's
    /// pinned key over the packet's fingerprint and encoding, which is the node's own (DF-SEC-143).
    fn check_signatures(&self, p: &Packet<'_>) -> Result<(), DecodeError> {
        let Some(s) = &self.signing else {
            return Ok(());
        };
        if !p.entries.is_empty() && p.encoding != self.config.encoding {
            return Err(DecodeError::new(
                ErrorCode::BadSignature,
                format!(
                    "encoding {} is not the signed cluster's {}",
                    p.encoding.name(),
                    self.config.encoding.name()
                ),
            ));
        }
        for (j, e) in p.entries.iter().enumerate() {
            s.verify(
                &p.fingerprint,
                p.encoding,
                e.origin,
                e.incarnation,
                e.seq,
                &e.indices,
                &e.values,
                e.signature.as_ref(),
            )
            .map_err(|why| {
                DecodeError::new(ErrorCode::BadSignature, format!("entries[{j}]: {why}"))
            })?;
        }
        Ok(())
    }

    /// N.
    pub fn num_params(&self) -> usize {
        self.anchor.len()
    }
    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }
    /// The config.
    pub fn config(&self) -> &SyncConfig {
        &self.config
    }
    /// The `average_over` the next generation uses (DF-GEN-70): the configured one, or with AUTO
    /// (`config().average_over` `None`) the last [`Engine::resolve_average`] (1 before any).
    pub fn average_over(&self) -> u32 {
        self.average
    }
    /// With an AUTO `average_over`, sets the one the next generations use to
    /// [`crate::config::outer_average`] of `nodes` (the node's cluster size, itself included);
    /// a configured `average_over` is kept. Returns the one in use.
    pub fn resolve_average(&mut self, nodes: usize) -> u32 {
        if self.config.average_over.is_none() {
            self.average =
                crate::config::outer_average(nodes, self.config.sync_interval, self.config.ratio);
        }
        self.average
    }
    /// Own node id.
    pub fn node_id(&self) -> u64 {
        self.node_id
    }
    /// Own incarnation.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }
    /// The anchor (last synchronised state).
    pub fn anchor(&self) -> &[f32] {
        &self.anchor
    }
    /// Replaces the anchor (e.g. from a snapshot).
    pub fn set_anchor(&mut self, anchor: &[f32]) -> Result<(), EngineError> {
        if anchor.len() != self.anchor.len() {
            return Err(EngineError::WrongLength {
                expected: self.anchor.len(),
                got: anchor.len(),
            });
        }
        self.anchor.copy_from_slice(anchor);
        Ok(())
    }
    /// The seq the next generated entry will carry.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
    /// Sets the next seq (>= 1).
    pub fn set_next_seq(&mut self, seq: u64) {
        self.next_seq = seq.max(1);
    }
    /// Cumulative counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
    /// Replay windows and incarnation tables.
    pub fn receiver_state(&self) -> &ReceiverState {
        &self.state
    }
    /// Mutable receiver state (to restore a window history).
    pub fn receiver_state_mut(&mut self) -> &mut ReceiverState {
        &mut self.state
    }
    /// Entries [`Engine::pack`] dropped because they do not fit a packet even alone.
    pub fn relay_dropped_oversize(&self) -> u64 {
        self.relay_dropped_oversize
            .load(std::sync::atomic::Ordering::Relaxed)
    }
    /// How the last selection was resolved.
    pub fn last_selection_path(&self) -> crate::selection::Path {
        self.selector.last_path
    }

    /// One generation (DF-GEN-1..8): selects from `active - anchor`, updates the anchor by the
    /// decoded sent values (error feedback) and returns the entries (consecutive seqs, split so
    /// that each fits a packet alone). Empty when no candidate exists (no seq consumed).
    pub fn generate(&mut self, active: &[f32], fast: bool) -> Result<Vec<OwnedEntry>, EngineError> {
        let n = self.anchor.len();
        if active.len() != n {
            return Err(EngineError::WrongLength {
                expected: n,
                got: active.len(),
            });
        }
        if self.signing.as_ref().is_some_and(|s| !s.can_sign()) {
            // DF-SEC-140: a node of a signed cluster cannot publish unsigned entries
            return Err(EngineError::Invalid(
                "signed cluster: this node has no secret key to sign with".into(),
            ));
        }
        self.end_round();
        self.correction_indices.clear();
        self.correction_values.clear();
        self.d.clear();
        self.d
            .extend(active.iter().zip(&self.anchor).map(|(&a, &b)| a - b));
        let k = num_selected(n, self.config.ratio);
        self.selector.select(&self.d, k, fast, &mut self.sel);
        if self.sel.is_empty() {
            return Ok(Vec::new());
        }
        // DF-GEN-9: check d itself before anything changes; F16/BF16 would clamp an infinity to
        // a finite value. (NaN deltas are never selected.)
        if let Some(&i) = self.sel.iter().find(|&&i| !self.d[i as usize].is_finite()) {
            return Err(EngineError::NonFinite { index: i });
        }
        // DF-GEN-6: split into entries that fit a packet alone; then, per entry, the values are
        // the quantized deltas (DF-GEN-4, by the encodings table) and the anchor moves by them
        // (DF-GEN-5, error feedback).
        let vc = self.config.encoding.codec();
        let per = self.max_values_per_entry();
        let fp = self.manifest.fingerprint();
        let mut out = Vec::with_capacity(self.sel.len().div_ceil(per));
        // DF-GEN-70: with average_over C > 1 the sent value is fl32(w * d) and the own
        // weights keep only what is sent (the correction fl32(v' - d), applied by the caller).
        let averaging = self.average > 1;
        let w = (1.0f64 / f64::from(self.average)) as f32;
        for ci in self.sel.chunks(per) {
            let mut values: Vec<f32> = if averaging {
                ci.iter().map(|&i| w * self.d[i as usize]).collect()
            } else {
                ci.iter().map(|&i| self.d[i as usize]).collect()
            };
            vc.quantize_slice(&mut values);
            for (&i, &v) in ci.iter().zip(&values) {
                self.anchor[i as usize] += v;
                if averaging {
                    self.correction_indices.push(i);
                    self.correction_values.push(v - self.d[i as usize]);
                }
            }
            // DF-SEC-140: in a signed cluster the origin signs every own entry
            let signature = self.signing.as_ref().and_then(|s| {
                s.sign(
                    &fp,
                    self.config.encoding,
                    self.node_id,
                    self.incarnation,
                    self.next_seq,
                    ci,
                    &values,
                )
                .map(|sig| sig.to_vec())
            });
            out.push(OwnedEntry {
                origin: self.node_id,
                incarnation: self.incarnation,
                seq: self.next_seq,
                hops: 0,
                indices: ci.to_vec(),
                values,
                signature,
            });
            self.next_seq += 1;
        }
        Ok(out)
    }

    /// What the last [`Engine::generate`] asks the caller to add to its active weights
    /// (DF-GEN-70): `fl32(v' - d)` at the sent indices, ascending; empty unless
    /// the `average_over` in use ([`Engine::average_over`]) is greater than 1.
    pub fn last_correction(&self) -> (&[u32], &[f32]) {
        (&self.correction_indices, &self.correction_values)
    }

    /// One receive step over `packets` in arrival order (DF-RCV-1..7, DF-RLY): every packet is
    /// decoded and validated before any state changes; accepted entries pass the replay window
    /// and incarnation table; their damped values are summed into one aggregate, applied once to
    /// the anchor (the caller applies the result to its active weights). Only the anchor is checked
    /// for DF-RCV-50; [`Engine::receive_with`] also checks the active weights.
    pub fn receive(&mut self, packets: &[&[u8]]) -> ReceiveResult {
        self.receive_with(packets, None)
    }

    /// [`Engine::receive`] with the node's active weights for DF-RCV-50: `active(indices)` returns
    /// them at the given flat indices (for example `WeightStore::gather_indices`). A packet whose
    /// accepted entries would make the step's aggregate, or `anchor` or `active` after the apply,
    /// non-finite at an index is refused whole with `NON_FINITE_RESULT`: its admissions are undone.
    pub fn receive_with(
        &mut self,
        packets: &[&[u8]],
        active: Option<ActiveView<'_>>,
    ) -> ReceiveResult {
        let n = self.anchor.len();
        if self.agg.len() != n {
            self.agg = vec![0.0; n];
            self.touched = vec![false; n];
        }
        let alpha = self.config.alpha as f32;
        let threshold = self.config.relay_threshold;
        let fp = self.manifest.fingerprint();
        let mut res = ReceiveResult::default();
        let c = &mut res.counters;
        self.touched_list.clear();
        let mut u: Vec<f32> = Vec::new();
        let needed = self.config.relay_policy == RelayPolicy::Needed;
        // senders of every copy of an entry in this step (DF-RLY-60), counted once a packet is accepted
        let mut copies: HashMap<(u64, u64, u64), Vec<u64>> = HashMap::new();
        let mut p_copies: Vec<(u64, u64, u64)> = Vec::new();
        // per packet: saved incarnation tables, undo log of the aggregate, indices touched
        let mut saved: HashMap<u64, Option<Vec<(u64, ReplayWindow)>>> = HashMap::new();
        let mut undo: Vec<(u32, f32, bool)> = Vec::new();
        let mut p_idx: Vec<u32> = Vec::new();
        for (packet_index, buf) in packets.iter().enumerate() {
            c.packets_received += 1;
            let pkt = match decode_packet(buf, self.config.max_packet_size)
                .and_then(|p| validate_packet(&p, &fp, n as u64, self.config.hop_limit).map(|()| p))
                .and_then(|p| self.check_signatures(&p).map(|()| p))
            {
                Ok(p) => p,
                Err(e) => {
                    c.packets_rejected += 1;
                    c.count_error(e.code);
                    res.outcomes.push(Outcome::Rejected(e.code));
                    res.entry_outcomes.push(Vec::new());
                    continue;
                }
            };
            saved.clear();
            undo.clear();
            p_idx.clear();
            p_copies.clear();
            let accepted_before = res.accepted.len();
            let relay_before = res.relay.len();
            let mut admissions = Vec::with_capacity(pkt.entries.len());
            for (entry_index, e) in pkt.entries.iter().enumerate() {
                // only an entry that will be accepted changes the state: save its origin's table
                // once per packet, before the first change (O(1) per entry)
                if !saved.contains_key(&e.origin)
                    && self.state.check(e.origin, e.incarnation, e.seq) == Admission::Accepted
                {
                    saved.insert(e.origin, self.state.save(e.origin));
                }
                let a = self.state.admit(e.origin, e.incarnation, e.seq);
                admissions.push(a);
                if needed {
                    p_copies.push((e.origin, e.incarnation, e.seq));
                }
                if a != Admission::Accepted {
                    continue;
                }
                res.accepted.push(AcceptedEntry {
                    origin: e.origin,
                    incarnation: e.incarnation,
                    seq: e.seq,
                    hops: e.hops,
                    packet: packet_index,
                    entry: entry_index,
                });
                u.clear();
                u.extend(e.values.iter().map(|&v| alpha * v));
                if self.signing.is_some() {
                    // DF-RCV-140: the origin's values, damped once per hop
                    for _ in 0..e.hops {
                        u.iter_mut().for_each(|x| *x *= alpha);
                    }
                }
                for (&i, &x) in e.indices.iter().zip(&u) {
                    let iu = i as usize;
                    undo.push((i, self.agg[iu], self.touched[iu]));
                    p_idx.push(i);
                    if self.touched[iu] {
                        self.agg[iu] += x;
                    } else {
                        self.touched[iu] = true;
                        self.agg[iu] = 0.0f32 + x;
                        self.touched_list.push(i);
                    }
                }
                if e.hops < self.config.hop_limit && self.signing.is_some() {
                    // DF-RLY-140: the origin's values and signature, whole, when a damped value
                    // passes the threshold (DF-RLY-2)
                    if u.iter().any(|&x| f64::from(x.abs()) >= threshold) {
                        let mut r = e.to_owned_entry();
                        r.hops = e.hops + 1;
                        res.relay.push(r);
                    }
                } else if e.hops < self.config.hop_limit {
                    let mut r = OwnedEntry {
                        origin: e.origin,
                        incarnation: e.incarnation,
                        seq: e.seq,
                        hops: e.hops + 1,
                        indices: Vec::new(),
                        values: Vec::new(),
                        signature: None,
                    };
                    for (&i, &x) in e.indices.iter().zip(&u) {
                        if f64::from(x.abs()) >= threshold {
                            r.indices.push(i);
                            r.values.push(x);
                        }
                    }
                    if !r.indices.is_empty() {
                        res.relay.push(r);
                    }
                }
            }
            // sorted and unique, as `WeightStore::gather_indices` takes them
            p_idx.sort_unstable();
            p_idx.dedup();
            if !p_idx.is_empty() && !self.finite_result(&p_idx, active) {
                // DF-RCV-50: the packet changes nothing but its counter
                for &(i, old, was) in undo.iter().rev() {
                    self.agg[i as usize] = old;
                    self.touched[i as usize] = was;
                }
                let keep =
                    self.touched_list.len() - undo.iter().filter(|(_, _, was)| !*was).count();
                self.touched_list.truncate(keep);
                for (o, t) in saved.drain() {
                    self.state.restore(o, t);
                }
                res.accepted.truncate(accepted_before);
                res.relay.truncate(relay_before);
                c.packets_rejected += 1;
                c.count_error(ErrorCode::NonFiniteResult);
                res.outcomes
                    .push(Outcome::Rejected(ErrorCode::NonFiniteResult));
                res.entry_outcomes.push(Vec::new());
                continue;
            }
            c.packets_accepted += 1;
            res.outcomes.push(Outcome::Ok);
            if needed {
                for &key in &p_copies {
                    copies.entry(key).or_default().push(pkt.sender);
                }
                if pkt.sender != self.node_id {
                    // DF-RLY-61, DF-RLY-62: heard directly; its advertisement replaces the stored one
                    self.heard_now.insert(pkt.sender);
                    if let Some(h) = &pkt.heard {
                        self.adverts
                            .insert(pkt.sender, (h.iter().copied().collect(), 0));
                    }
                }
            }
            for &a in &admissions {
                if a == Admission::Accepted {
                    c.entries_accepted += 1;
                } else {
                    c.count_drop(a);
                }
            }
            res.entry_outcomes.push(admissions);
        }
        if needed && !res.relay.is_empty() {
            // DF-RLY-60, after every advertisement of the step is known
            let before = res.relay.len();
            let relay = std::mem::take(&mut res.relay);
            res.relay = relay
                .into_iter()
                .filter(|e| self.relay_needed(e, &copies))
                .collect();
            res.counters.relay_suppressed += (before - res.relay.len()) as u64;
        }
        res.counters.entries_relayed += res.relay.len() as u64;
        self.touched_list.sort_unstable();
        res.indices.reserve(self.touched_list.len());
        res.values.reserve(self.touched_list.len());
        for &i in &self.touched_list {
            let iu = i as usize;
            let v = self.agg[iu];
            self.touched[iu] = false;
            self.anchor[iu] += v;
            res.indices.push(i);
            res.values.push(v);
        }
        res.counters.values_applied += res.indices.len() as u64;
        let c = &res.counters;
        let t = &mut self.counters;
        t.packets_received += c.packets_received;
        t.packets_accepted += c.packets_accepted;
        t.packets_rejected += c.packets_rejected;
        t.entries_accepted += c.entries_accepted;
        t.entries_relayed += c.entries_relayed;
        t.values_applied += c.values_applied;
        t.relay_suppressed += c.relay_suppressed;
        for (a, b) in t.errors.iter_mut().zip(c.errors) {
            *a += b;
        }
        for (a, b) in t.drops.iter_mut().zip(c.drops) {
            *a += b;
        }
        res
    }

    /// DF-RLY-60: whether some neighbour (a sender heard in this or the last sync round, which
    /// hears this node too on symmetric links) other than the origin may lack the entry: its
    /// current advertisement does not list the origin and no copy of the entry came from it in
    /// this step.
    fn relay_needed(&self, e: &OwnedEntry, copies: &HashMap<(u64, u64, u64), Vec<u64>>) -> bool {
        let got = copies.get(&(e.origin, e.incarnation, e.seq));
        self.heard_now.union(&self.heard_prev).any(|&peer| {
            peer != e.origin
                && !got.is_some_and(|g| g.contains(&peer))
                && !self
                    .adverts
                    .get(&peer)
                    .is_some_and(|(ids, _)| ids.contains(&e.origin))
        })
    }

    /// A generation ends the node's sync round: heard sets and advertisements age by one round;
    /// an advertisement received two rounds ago or earlier is forgotten (DF-RLY-62).
    fn end_round(&mut self) {
        self.heard_prev = std::mem::take(&mut self.heard_now);
        self.adverts.retain(|_, (_, age)| *age < 1);
        for (_, age) in self.adverts.values_mut() {
            *age += 1;
        }
    }

    /// The node ids this node advertises (DF-RLY-61): the senders of packets it accepted in its
    /// current and its previous sync round, ascending.
    pub fn heard(&self) -> Vec<u64> {
        self.heard_now.union(&self.heard_prev).copied().collect()
    }

    /// A peer left the cluster (its liveliness token is gone): it is no longer a neighbour.
    pub fn forget_peer(&mut self, peer: u64) {
        self.heard_now.remove(&peer);
        self.heard_prev.remove(&peer);
        self.adverts.remove(&peer);
    }

    /// With relay policy NEEDED, a packet with no entry that carries this node's advertisement
    /// (DF-RLY-63: published in a sync round that has nothing else to send); `None` otherwise.
    pub fn advertisement(&self) -> Option<Vec<u8>> {
        if self.config.relay_policy != RelayPolicy::Needed {
            return None;
        }
        let mut p = OwnedPacket::new(
            self.node_id,
            self.incarnation,
            self.manifest.fingerprint(),
            self.config.encoding,
        );
        p.index_encoding = self.config.index_encoding;
        self.add_advert(&mut p, PACKET_OVERHEAD_BOUND);
        Some(encode_packet(&p))
    }

    /// DF-RLY-61: with relay policy NEEDED the advertisement rides on every packet whose size
    /// estimate (DF-RLY-3) leaves room for it.
    fn add_advert(&self, p: &mut OwnedPacket, estimate: usize) {
        if self.config.relay_policy == RelayPolicy::Needed {
            let h = self.heard();
            if estimate + heard_size_bound(h.len()) <= self.config.max_packet_size {
                p.heard = Some(h);
            }
        }
    }

    /// Counts `n` packets that the transport rejected before its queue with `code` (DF-ZEN-154:
    /// `Oversize` or `BadIdentifier`) as the engine counts its own (DF-RCV-10).
    pub fn count_rejected(&mut self, code: ErrorCode, n: u64) {
        let c = &mut self.counters;
        c.packets_received += n;
        c.packets_rejected += n;
        if let Some(p) = ErrorCode::ALL.iter().position(|x| *x == code) {
            c.errors[p] += n;
        }
    }

    /// DF-RCV-50 at the indices `idx` (sorted, unique) a packet touched: the running aggregate `agg[i]`,
    /// `fl32(anchor[i] + agg[i])` and `fl32(active[i] + agg[i])` are all finite.
    fn finite_result(&self, idx: &[u32], active: Option<ActiveView<'_>>) -> bool {
        let ok = idx.iter().all(|&i| {
            let a = self.agg[i as usize];
            a.is_finite() && (self.anchor[i as usize] + a).is_finite()
        });
        if !ok {
            return false;
        }
        let Some(view) = active else {
            return true;
        };
        let act = view(idx);
        act.len() == idx.len()
            && act
                .iter()
                .zip(idx)
                .all(|(&x, &i)| (x + self.agg[i as usize]).is_finite())
    }

    /// Packs own entries (first) then relay entries, in order, into as few packets as the greedy
    /// rule allows (DF-RLY-3): a new packet starts when adding the next entry would exceed
    /// `max_packet_size` by the size bounds. Sender = this node (DF-RLY-4); send encoding applied.
    pub fn pack(&self, own: &[OwnedEntry], relay: &[OwnedEntry]) -> Vec<Vec<u8>> {
        self.pack_packets(own, relay)
            .iter()
            .map(encode_packet)
            .collect()
    }

    /// [`Engine::pack`] before serialisation.
    ///
    /// An entry whose size bound exceeds a packet alone is encoded alone: it gets its own packet
    /// when the exact size fits, otherwise it is dropped (a relay entry cannot be split: the parts
    /// would share one seq) and counted in [`Engine::relay_dropped_oversize`]. [`Engine::generate`]
    /// never makes such an own entry. Same rule as the Python reference.
    pub fn pack_packets(&self, own: &[OwnedEntry], relay: &[OwnedEntry]) -> Vec<OwnedPacket> {
        let limit = self.config.max_packet_size;
        let mut out = Vec::new();
        let new_packet = || {
            let mut p = OwnedPacket::new(
                self.node_id,
                self.incarnation,
                self.manifest.fingerprint(),
                self.config.encoding,
            );
            p.index_encoding = self.config.index_encoding; // section 6.8 (1.1)
            p
        };
        let mut cur = new_packet();
        let mut size = PACKET_OVERHEAD_BOUND;
        for e in own.iter().chain(relay) {
            let b = entry_size_bound_signed(e.indices.len(), e.signature.is_some());
            if PACKET_OVERHEAD_BOUND + b > limit {
                let mut alone = new_packet();
                alone.entries.push(e.clone());
                self.add_advert(&mut alone, PACKET_OVERHEAD_BOUND + b);
                if encode_packet(&alone).len() > limit {
                    self.relay_dropped_oversize
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    continue;
                }
                if !cur.entries.is_empty() {
                    self.add_advert(&mut cur, size);
                    out.push(std::mem::replace(&mut cur, new_packet()));
                    size = PACKET_OVERHEAD_BOUND;
                }
                out.push(alone);
                continue;
            }
            if !cur.entries.is_empty() && size + b > limit {
                self.add_advert(&mut cur, size);
                out.push(std::mem::replace(&mut cur, new_packet()));
                size = PACKET_OVERHEAD_BOUND;
            }
            size += b;
            cur.entries.push(e.clone());
        }
        if !cur.entries.is_empty() {
            self.add_advert(&mut cur, size);
            out.push(cur);
        }
        out
    }
}
