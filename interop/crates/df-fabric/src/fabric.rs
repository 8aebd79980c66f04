//! The node loop (the mirror of Python's `delta_fabric.fabric.Fabric`): a [`Fabric`] owns a
//! [`WeightStore`], a [`Transport`] and a [`df_core::Engine`].
//!
//! Per [`Fabric::step`] (call it after every local optimizer step): drain the transport without
//! waiting, let the engine validate and aggregate what arrived (it updates the anchor), add the same
//! aggregate to the store (DF-RCV-7), and every `sync_interval` steps gather the canonical vector,
//! generate the own entry and publish own + relay packets. A step with no traffic and no sync does
//! one `drain` and one modulo.
//!
//! The engine sits behind a mutex shared with the snapshot provider the fabric registers with the
//! transport, so a joiner always gets a consistent anchor taken between two steps.
//!
//! Dropping the fabric closes the transport.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use df_core::config::RelayPolicy;
use df_core::engine::Outcome;
use df_core::repair::{
    DEFAULT_AGREEMENT, GapParams, GapTracker, MAX_REQUEST_SEQS, REQUEST_VERSION_MINOR,
    RepairCounters, RepairRequest, ResendBuffer, ResendParams, confirm_snapshot, decode_request,
    encode_request, is_repair_request,
};
use df_core::wire::peek_header;
use df_core::wire::{OwnedPacket, encode_packet};
use df_core::{Engine, EngineError, ErrorCode, ReceiveResult, SyncConfig};
use log::{debug, info, warn};
use serde_json::{Value, json};

use crate::LOG_TARGET;
use crate::store::{StoreError, WeightStore};
use crate::transport::{
    SnapshotError, SnapshotErrorKind, SnapshotProvider, SnapshotSource, Transport, TransportError,
    node_hex,
};

/// Upper bound on packets taken from the transport in one step (as the Python node).
pub const DEFAULT_MAX_DRAIN: usize = 4096;

/// Seconds a member whose liveliness token went stays a member (DF-ZEN-150).
pub const DEFAULT_MEMBER_GRACE: Duration = Duration::from_secs(10);
/// Time without progress after which a live peer no longer holds pacing back (DF-ZEN-156).
pub const DEFAULT_PEER_DEADLINE: Duration = Duration::from_secs(5);

/// Longest time one join attempt may spend on one peer before the next live peer is tried.
pub const JOIN_PER_PEER: Duration = Duration::from_secs(10);

/// Everything that can go wrong in the node loop.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// The store refused an operation.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The transport failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The engine refused an operation (bad parameter, non-finite delta).
    #[error("engine: {0:?}")]
    Engine(EngineError),
    /// Joining (bootstrap from a live peer's snapshot, DF-ZEN-5) failed.
    #[error("join: {0}")]
    Join(String),
    /// The fabric was used after [`Fabric::close`].
    #[error("fabric is closed")]
    Closed,
    /// A stop signal arrived (only after [`crate::lifecycle::install`]): the node loop stops.
    #[error("stopping on {0}")]
    Stopped(crate::lifecycle::StopSignal),
    /// A thread panicked while holding the engine.
    #[error("engine lock poisoned by a panic")]
    Poisoned,
    /// A `DELTA_FABRIC_*` variable holds a bad value (`from_env`).
    #[error(transparent)]
    Env(#[from] crate::env::EnvError),
    /// [`Fabric::finish`] ran out of time: the live peers it still waited for, each with why
    /// (`still training (not finishing)`, `entries up to seq ... not applied ...`, ...). The node
    /// stays usable (call `finish` again or `close`).
    /// `absent`: how many nodes of the run's world size ([`FabricOptions::world_size`]) it never
    /// saw finish.
    #[error("finish: not done within {:.1}s, waiting for {}", .timeout.as_secs_f64(), missing_list(.missing, *.absent))]
    FinishTimeout {
        /// The `timeout` given to `finish`.
        timeout: Duration,
        /// `(peer id, why)`, ascending by id.
        missing: Vec<(u64, String)>,
        /// Nodes of the world size not seen finish (0 without a world size).
        absent: usize,
    },
}

fn missing_list(missing: &[(u64, String)], absent: usize) -> String {
    let mut parts: Vec<String> = missing
        .iter()
        .map(|(p, why)| format!("{}: {why}", node_hex(*p)))
        .collect();
    if absent > 0 {
        parts.push(format!(
            "{absent} more node(s) of the run's world size, not live"
        ));
    }
    parts.join("; ")
}

impl From<EngineError> for FabricError {
    fn from(e: EngineError) -> Self {
        FabricError::Engine(e)
    }
}

/// Late join: start from a verified anchor snapshot of a live peer instead of the store's weights.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinOptions {
    /// How long to look for a live peer and fetch its snapshot.
    pub timeout: Duration,
    /// Peers tried first when live (e.g. the configured neighbours), in this order.
    pub preferred: Vec<u64>,
    /// `true`: no verified snapshot within `timeout` is an error ([`FabricError::Join`]);
    /// `false` (`DELTA_FABRIC_BOOTSTRAP=auto`): the node then starts from the store's weights.
    pub required: bool,
}

impl Default for JoinOptions {
    fn default() -> Self {
        JoinOptions {
            timeout: Duration::from_secs(10),
            preferred: Vec::new(),
            required: true,
        }
    }
}

/// Options of a [`Fabric`] beyond the sync parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct FabricOptions {
    /// Incarnation (default: microseconds since the Unix epoch, DF-RCV-4).
    pub incarnation: Option<u64>,
    /// Most packets taken from the transport per step.
    pub max_drain: usize,
    /// Use the engine's fast (approximate) selection path.
    pub fast_selection: bool,
    /// `Some`: bootstrap from a live peer's snapshot (DF-ZEN-5) before the engine starts.
    pub join: Option<JoinOptions>,
    /// Anti-entropy by gap repair (spec section 7.9, 1.1, OPTIONAL; `df_core::repair`): ask
    /// origins again for missed entries, publish own entries again when asked.
    pub repair: bool,
    /// Trusted snapshots (proposal, spec/proposals/trusted-snapshots.md): when >= 1, a join
    /// queries every live member and installs only an anchor confirmed by this many sources
    /// ([`df_core::repair::confirm_snapshot`]); counters under `stats()["snapshot_trust"]`.
    pub snapshot_quorum: usize,
    /// The members a quorum join queries (None: every live peer); others are refused and counted.
    pub snapshot_members: Option<Vec<u64>>,
    /// DF-RCV-51 (1.1): the node ids accepted as origins (`None`: every origin, as 1.0).
    pub members: Option<HashSet<u64>>,
    /// DF-ZEN-150: the membership follows the liveliness tokens (live peers and those gone less
    /// than `member_grace` ago, intersected with `members` when both are given).
    pub live_members: bool,
    /// How long a member that left stays one (DF-ZEN-150).
    pub member_grace: Duration,
    /// DF-GEN-240 (1.1, node-local): hold the unsent residual aside in a buffer of the node's own
    /// ([`Fabric::residual`]); the working weights restart from the anchor after every generation
    /// and the residual is folded back into them just before the next one (spec section 5.11).
    pub hold_residual: bool,
    /// How many nodes the run expects in all (the launcher's `DELTA_FABRIC_NODES`): with an AUTO
    /// `average_over` the node averages over at least this many before they are all live.
    pub world_size: Option<usize>,
    /// Bounded staleness after every sync step ([`Fabric::pace`], DF-ZEN-156): the node waits
    /// (receiving and relaying) while it is more than this many sync rounds ahead of a live member
    /// peer; `Some(0)` (the default) is a barrier per sync among the live peers, as a blocking
    /// all-reduce, except that a peer without progress for `peer_deadline` no longer holds the
    /// others back. `None`: never wait (a program that drives several nodes in one thread).
    pub max_lead: Option<u64>,
    /// Time without progress after which a live peer no longer holds pacing back (DF-ZEN-156).
    pub peer_deadline: Duration,
}

impl FabricOptions {
    /// A node that behaves as a protocol 1.0 node: no residual held aside, no repair, no pacing
    /// (pair it with `SyncConfig::v1_0()`). For a cluster with 1.0 nodes, and for programs that
    /// drive several nodes in one thread.
    pub fn v1_0() -> FabricOptions {
        FabricOptions {
            repair: false,
            hold_residual: false,
            max_lead: None,
            ..FabricOptions::default()
        }
    }
}

impl Default for FabricOptions {
    /// The recommended node options: residual held aside (DF-GEN-240), gap repair on (spec
    /// section 7.9) and a pacing barrier per sync (`max_lead` 0); all are node-local, so a node with
    /// them works with any other.
    fn default() -> Self {
        FabricOptions {
            incarnation: None,
            max_drain: DEFAULT_MAX_DRAIN,
            fast_selection: false,
            join: None,
            repair: true,
            snapshot_quorum: 0,
            snapshot_members: None,
            members: None,
            live_members: false,
            member_grace: DEFAULT_MEMBER_GRACE,
            hold_residual: true,
            world_size: None,
            max_lead: Some(0),
            peer_deadline: DEFAULT_PEER_DEADLINE,
        }
    }
}

/// Microseconds since the Unix epoch (never 0): a fresh incarnation (DF-RCV-4).
pub fn default_incarnation() -> u64 {
    let us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(1);
    u64::try_from(us).unwrap_or(u64::MAX).max(1)
}

/// The node's clock for the engine (DF-RCV-175): microseconds since the Unix epoch.
pub fn now_us() -> u64 {
    let us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    u64::try_from(us).unwrap_or(u64::MAX)
}

/// Send counters of a fabric (Python `Fabric.stats()` keys).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendCounters {
    pub steps: u64,
    pub syncs: u64,
    pub bytes_sent: u64,
    pub packets_sent: u64,
    pub own_entries_sent: u64,
    pub own_values_sent: u64,
    pub relay_entries_sent: u64,
    pub relay_values_sent: u64,
    pub values_received_applied: u64,
}

/// What [`Fabric::finish`] still waits for.
#[derive(Debug, Default)]
struct FinishState {
    /// Live member peers this node waits for, and why.
    missing: BTreeMap<u64, String>,
    /// Live member peers that do not report `done` with this node in their `have`.
    not_done: BTreeSet<u64>,
    /// `(incarnation, from, to)` of announced last entries not received, per peer.
    tails: BTreeMap<u64, (u64, u64, u64)>,
    /// Finishing peers whose entries up to their announced seq this node has applied.
    have: BTreeSet<u64>,
}

/// One DeltaFabric node: a store, a transport and the engine between them (see the module docs).
pub struct Fabric<W: WeightStore, T: Transport> {
    store: W,
    transport: T,
    engine: Arc<Mutex<Engine>>,
    sync_interval: u64,
    max_drain: usize,
    fast_selection: bool,
    counters: SendCounters,
    bootstrapped: bool,
    joined_from: Option<u64>,
    accepted_by_hops: BTreeMap<u8, u64>,
    origin_progress: HashMap<u64, (u64, u64)>,
    accepted_by_origin: HashMap<u64, u64>,
    snapshots_served: Arc<AtomicU64>,
    closed: bool,
    gaps: Option<GapTracker>,
    resend: Option<ResendBuffer>,
    repair_refused: u64,
    snapshot_trust: TrustCounters,
    /// Membership (DF-RCV-51, DF-ZEN-150) and pacing (DF-ZEN-156) state.
    configured: Option<HashSet<u64>>,
    live_members: bool,
    member_grace: Duration,
    live: BTreeSet<u64>,
    left_at: HashMap<u64, Instant>,
    effective: Option<HashSet<u64>>,
    pace_base: HashMap<u64, (u64, u64)>,
    moved_at: HashMap<u64, ((u64, u64), Instant)>,
    /// DF-GEN-240: the residual held aside (empty until the first generation) and the elements
    /// it is held for (DF-GEN-244: all but the store's running statistics; empty until then).
    hold_residual: bool,
    residual: Vec<f32>,
    held: Vec<bool>,
    /// The world-size hint of an AUTO `average_over` (DF-GEN-70).
    world_size: Option<usize>,
    /// Pacing after every sync step (DF-ZEN-156).
    max_lead: Option<u64>,
    peer_deadline: Duration,
    /// Misconfigured peers (rejected for a code of [`MISCONFIGURATION`]): the first code per peer,
    /// and every `(peer, code)` already reported.
    misconfigured: BTreeMap<u64, ErrorCode>,
    misconfig_reported: HashSet<(u64, ErrorCode)>,
    /// Peers seen finished by [`Fabric::finish`] (announced finish, every entry applied here).
    finished_peers: BTreeSet<u64>,
    /// Per origin, the `(incarnation, seq)` up to which the installed snapshot holds its entries.
    snapshot_floor: HashMap<u64, (u64, u64)>,
    /// Changes on every receive that applied values and every generation that produced entries:
    /// a snapshot capture is reused only while it is unchanged.
    anchor_version: Arc<AtomicU64>,
    /// The `seq` member of the info object as last set.
    info_seq: Option<u64>,
}

/// The rejection codes that mean a peer is configured differently from this node (another model,
/// protocol version, encoding, or keys): [`Fabric`] reports each such peer once per code at
/// WARNING and lists it in `stats()["misconfigured_peers"]`.
pub const MISCONFIGURATION: [ErrorCode; 4] = [
    ErrorCode::FingerprintMismatch,
    ErrorCode::UnsupportedVersion,
    ErrorCode::UnsupportedEncoding,
    ErrorCode::BadSignature,
];

/// At most this many `(peer, code)` misconfiguration reports are kept (a bound against floods of
/// forged senders).
pub const MAX_MISCONFIGURED: usize = 1024;

/// Longest wait of one pacing call after a sync step ([`FabricOptions::max_lead`]).
pub const PACE_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest wait for packets between two reads of the peers' info in [`Fabric::finish`].
pub const FINISH_ROUND: Duration = Duration::from_millis(50);
/// Interval of the repair rounds of [`Fabric::finish`].
pub const FINISH_REPAIR_ROUND: Duration = Duration::from_millis(500);
/// Longest wait of the first sync for the run's other nodes to start (with a world size > 1).
pub const RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest wait for one peer's node information (the first sync's rendezvous, after a bootstrap).
pub const INFO_TIMEOUT: Duration = Duration::from_secs(1);

/// Counters of a quorum join (Python `stats()["snapshot_trust"]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrustCounters {
    /// Sources queried.
    pub sources_queried: u64,
    /// Sources whose snapshot failed (fetch error, killed mid-transfer, wrong length).
    pub sources_failed: u64,
    /// Live peers refused as sources: not members.
    pub sources_refused: u64,
    /// Verified snapshots not confirmed by the quorum.
    pub outliers: u64,
    /// Attempts that ended without a confirmed anchor.
    pub quorum_failed: u64,
}

impl<W: WeightStore, T: Transport> std::fmt::Debug for Fabric<W, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric")
            .field("node", &node_hex(self.transport.node_id()))
            .field("framework", &self.store.framework())
            .field("steps", &self.counters.steps)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl<W: WeightStore, T: Transport> Fabric<W, T> {
    /// A node whose anchor is the store's current weights; the node id is the transport's.
    pub fn new(store: W, transport: T, config: SyncConfig) -> Result<Self, FabricError> {
        Self::with_options(store, transport, config, FabricOptions::default())
    }

    /// A node with explicit [`FabricOptions`] (incarnation, join, ...). With `options.join`, the
    /// store is loaded with a live peer's verified snapshot first (active = anchor = snapshot).
    ///
    /// On error the transport is closed (it is dropped with the other arguments).
    pub fn with_options(
        mut store: W,
        transport: T,
        config: SyncConfig,
        options: FabricOptions,
    ) -> Result<Self, FabricError> {
        let mut transport = transport;
        let sync_interval = u64::from(config.sync_interval.max(1));
        match Self::start(&mut store, &transport, config, &options) {
            Ok((engine, joined_from, snapshot_trust)) => {
                let (gaps, resend) = if options.repair {
                    let window = engine.config().replay_window;
                    let gaps = GapTracker::new(GapParams::with_window(window))
                        .map_err(FabricError::Join)?;
                    let resend = ResendBuffer::new(
                        engine.node_id(),
                        engine.incarnation(),
                        engine.manifest().fingerprint(),
                        ResendParams::default(),
                    )
                    .map_err(FabricError::Join)?;
                    (Some(gaps), Some(resend))
                } else {
                    (None, None)
                };
                let mut fabric = Fabric {
                    store,
                    transport,
                    engine: Arc::new(Mutex::new(engine)),
                    sync_interval,
                    max_drain: options.max_drain.max(1),
                    fast_selection: options.fast_selection,
                    counters: SendCounters::default(),
                    bootstrapped: joined_from.is_some(),
                    joined_from,
                    accepted_by_hops: BTreeMap::new(),
                    origin_progress: HashMap::new(),
                    accepted_by_origin: HashMap::new(),
                    snapshots_served: Arc::new(AtomicU64::new(0)),
                    closed: false,
                    gaps,
                    resend,
                    repair_refused: 0,
                    snapshot_trust,
                    configured: options.members.clone(),
                    live_members: options.live_members,
                    member_grace: options.member_grace,
                    live: BTreeSet::new(),
                    left_at: HashMap::new(),
                    effective: None,
                    pace_base: HashMap::new(),
                    moved_at: HashMap::new(),
                    hold_residual: options.hold_residual,
                    residual: Vec::new(),
                    held: Vec::new(),
                    world_size: options.world_size,
                    max_lead: options.max_lead,
                    peer_deadline: options.peer_deadline,
                    misconfigured: BTreeMap::new(),
                    misconfig_reported: HashSet::new(),
                    finished_peers: BTreeSet::new(),
                    snapshot_floor: HashMap::new(),
                    anchor_version: Arc::new(AtomicU64::new(0)),
                    info_seq: None,
                };
                if fabric.hold_residual {
                    // DF-GEN-244: a store naming an unknown tensor is refused here
                    fabric.held_mask()?;
                }
                if options.members.is_some() || options.live_members {
                    // DF-ZEN-151, DF-ZEN-155
                    fabric
                        .transport
                        .set_members(options.members.clone(), options.live_members);
                }
                {
                    let engine = Arc::clone(&fabric.engine);
                    let mut e = engine.lock().map_err(|_| FabricError::Poisoned)?;
                    fabric.refresh_members(&mut e);
                }
                fabric.note_info_seq()?;
                fabric
                    .transport
                    .serve_snapshot(fabric.snapshot_provider())?;
                let version = Arc::clone(&fabric.anchor_version);
                fabric
                    .transport
                    .set_snapshot_version(Some(Arc::new(move || version.load(Ordering::Acquire))));
                if fabric.bootstrapped {
                    fabric.note_snapshot_floor()?;
                }
                info!(
                    target: LOG_TARGET,
                    "node {} up: framework {}, N = {}, incarnation {}{}",
                    node_hex(fabric.transport.node_id()),
                    fabric.store.framework(),
                    fabric.store.num_params(),
                    fabric.incarnation(),
                    joined_from.map_or(String::new(), |p| format!(", joined from {}", node_hex(p)))
                );
                Ok(fabric)
            }
            Err(e) => {
                warn!(target: LOG_TARGET, "node start failed: {e}; closing the transport");
                let _ = transport.close();
                Err(e)
            }
        }
    }

    fn start(
        store: &mut W,
        transport: &T,
        config: SyncConfig,
        options: &FabricOptions,
    ) -> Result<(Engine, Option<u64>, TrustCounters), FabricError> {
        let node_id = transport.node_id();
        let incarnation = options.incarnation.unwrap_or_else(default_incarnation);
        let manifest = store.manifest().clone();
        if config.relay_policy == RelayPolicy::Needed {
            // DF-RLY-63: become a neighbour of the peers before a snapshot is captured, so that
            // they relay for this node from then on.
            let mut probe = OwnedPacket::new(
                node_id,
                incarnation,
                manifest.fingerprint(),
                config.encoding,
            );
            probe.heard = Some(Vec::new());
            transport.publish(&encode_packet(&probe))?;
        }
        let mut trust = TrustCounters::default();
        let fetched = match &options.join {
            Some(j) => {
                let got = if options.snapshot_quorum > 0 {
                    fetch_quorum(transport, &manifest, j, options, &mut trust)
                } else {
                    fetch_verified(transport, &manifest, j)
                };
                match got {
                    Ok(x) => Some(x),
                    Err(e) if !j.required => {
                        info!(target: LOG_TARGET, "{e}: starting from own weights");
                        None
                    }
                    Err(e) => return Err(e),
                }
            }
            None => None,
        };
        let (anchor, joined_from) = match fetched {
            Some((from, values)) => {
                store.load(&values)?;
                // The store must now read back exactly the snapshot: active = anchor (DF-ZEN-5).
                let back = store.gather()?;
                if back.len() != values.len()
                    || back
                        .iter()
                        .zip(&values)
                        .any(|(a, b)| a.to_bits() != b.to_bits())
                {
                    return Err(FabricError::Join(
                        "the loaded snapshot does not read back bit-exactly from the store".into(),
                    ));
                }
                (values, Some(from))
            }
            None => (store.gather()?, None),
        };
        let engine = Engine::new(manifest, config, node_id, incarnation, anchor)?;
        Ok((engine, joined_from, trust))
    }

    fn snapshot_provider(&self) -> SnapshotProvider {
        let engine = Arc::clone(&self.engine);
        let served = Arc::clone(&self.snapshots_served);
        let framework = self.store.framework().to_owned();
        Arc::new(move || {
            // A copy of the anchor between two steps (the step holds the lock). After a panic in a
            // step the engine may be half-updated: serve nothing rather than a torn anchor.
            let (incarnation, fingerprint, values) = {
                let e = engine.lock().map_err(|_| {
                    SnapshotError::new(SnapshotErrorKind::ServerError, "node failed")
                })?;
                (
                    e.incarnation(),
                    e.manifest().fingerprint(),
                    e.anchor().to_vec(),
                )
            };
            served.fetch_add(1, Ordering::Relaxed);
            SnapshotSource::new(incarnation, fingerprint, values, framework.clone())
        })
    }

    fn lock(&self) -> Result<MutexGuard<'_, Engine>, FabricError> {
        self.engine.lock().map_err(|_| FabricError::Poisoned)
    }

    fn check_open(&self) -> Result<(), FabricError> {
        if self.closed {
            return Err(FabricError::Closed);
        }
        match crate::lifecycle::stop_signal() {
            Some(sig) => Err(FabricError::Stopped(sig)),
            None => Ok(()),
        }
    }

    /// Call once after every local optimizer step. Returns the number of packets published.
    /// Never waits for packets, but for the pacing after a sync step ([`FabricOptions::max_lead`]);
    /// `publish` can block too (transport congestion control). After a
    /// stop signal (with [`crate::lifecycle::install`]) it returns [`FabricError::Stopped`].
    pub fn step(&mut self) -> Result<usize, FabricError> {
        self.check_open()?;
        self.counters.steps += 1;
        let packets = self.transport.drain(self.max_drain)?;
        let sync = self.counters.steps.is_multiple_of(self.sync_interval);
        if packets.is_empty() && !sync {
            return Ok(0);
        }
        if sync && self.counters.syncs == 0 && self.world_size.is_some_and(|w| w > 1) {
            self.rendezvous(RENDEZVOUS_TIMEOUT)?;
        }
        let out = self.process(&packets, sync)?;
        if sync && let Some(m) = self.max_lead {
            self.pace(m, self.peer_deadline, PACE_TIMEOUT)?;
        }
        Ok(out)
    }

    /// Before the first generation of a run of `world_size` nodes: waits (receiving) until
    /// `world_size - 1` cluster peers serve their node information, which a node does once it has
    /// started (after its bootstrap). No anchor moves before every node of the run has started,
    /// so a node that bootstraps installs the initial weights, with no entry in flight that it
    /// could apply twice or miss (spec section 9.5). `timeout` at most, then a warning.
    fn rendezvous(&mut self, timeout: Duration) -> Result<(), FabricError> {
        let deadline = Instant::now() + timeout;
        let need = self.world_size.unwrap_or(1).saturating_sub(1);
        loop {
            let mut started = 0;
            for p in self.cluster_peers()? {
                if self.transport.query_info(p, INFO_TIMEOUT).is_ok() {
                    started += 1;
                }
            }
            if started >= need {
                return Ok(());
            }
            if Instant::now() >= deadline {
                warn!(
                    target: LOG_TARGET,
                    "first sync: {started} of the run's {need} other node(s) started within {:.0}s; \
                     going on",
                    timeout.as_secs_f64()
                );
                return Ok(());
            }
            self.transport
                .wait_for_packets(Duration::from_millis(100))?;
            self.poll()?;
        }
    }

    /// Sets the info object's `seq` member (the highest own seq sent) when it changed.
    fn note_info_seq(&mut self) -> Result<(), FabricError> {
        let seq = self.lock()?.next_seq().saturating_sub(1);
        if self.info_seq != Some(seq) {
            self.info_seq = Some(seq);
            self.transport.set_info_member("seq", Some(json!(seq)));
        }
        Ok(())
    }

    /// After a bootstrap: each live peer's highest own seq (its info's `seq`), taken as held by the
    /// snapshot just installed, so that [`Fabric::finish`] does not wait for entries that reached
    /// this node inside the snapshot rather than as packets (spec section 9.5: an entry in flight
    /// meanwhile can be applied twice or missed, as for any joiner).
    fn note_snapshot_floor(&mut self) -> Result<(), FabricError> {
        for p in self.transport.peers()? {
            let Ok(info) = self.transport.query_info(p, INFO_TIMEOUT) else {
                debug!(target: LOG_TARGET, "no node information of {} after the bootstrap", node_hex(p));
                continue;
            };
            let inc = info
                .get("incarnation")
                .and_then(Value::as_str)
                .and_then(|h| u64::from_str_radix(h, 16).ok());
            if let (Some(inc), Some(seq)) = (inc, info.get("seq").and_then(Value::as_u64)) {
                self.snapshot_floor.insert(p, (inc, seq));
            }
        }
        Ok(())
    }

    /// Per origin, the `(incarnation, seq)` up to which the snapshot this node installed holds its
    /// entries (empty without a bootstrap); [`Fabric::finish`] counts them as applied.
    pub fn snapshot_floor(&self) -> &HashMap<u64, (u64, u64)> {
        &self.snapshot_floor
    }

    /// Receives, applies and relays what is pending without generating (idle, winding down);
    /// does not count as a step.
    pub fn poll(&mut self) -> Result<usize, FabricError> {
        self.check_open()?;
        let packets = self.transport.drain(self.max_drain)?;
        if packets.is_empty() {
            return Ok(0);
        }
        self.process(&packets, false)
    }

    /// Receives what is pending and generates now, regardless of the step count.
    pub fn sync_now(&mut self) -> Result<usize, FabricError> {
        self.check_open()?;
        let packets = self.transport.drain(self.max_drain)?;
        self.process(&packets, true)
    }

    /// The engine's membership: the configured list, or with `live_members` the live peers and
    /// those gone less than `member_grace` ago (intersected with the list when there is one).
    fn refresh_members(&mut self, e: &mut Engine) {
        if !self.live_members {
            if self.effective != self.configured {
                self.effective = self.configured.clone();
                e.receiver_state_mut().set_members(self.configured.clone());
            }
            return;
        }
        let live = self.transport.peers().unwrap_or_default();
        let now = Instant::now();
        if live != self.live {
            for p in self.live.difference(&live) {
                self.left_at.insert(*p, now);
            }
            for p in &live {
                self.left_at.remove(p);
            }
            self.live = live;
            let bound = e.config().max_origins;
            while self.left_at.len() > bound {
                // bounded: the oldest departures go first
                if let Some(oldest) = self.left_at.iter().min_by_key(|x| *x.1).map(|x| *x.0) {
                    self.left_at.remove(&oldest);
                }
            }
        }
        let grace = self.member_grace;
        self.left_at
            .retain(|_, t| now.saturating_duration_since(*t) <= grace);
        let mut eff: HashSet<u64> = self.live.iter().copied().collect();
        eff.extend(self.left_at.keys().copied());
        if let Some(c) = &self.configured {
            eff.retain(|p| c.contains(p));
        }
        if self.effective.as_ref() != Some(&eff) {
            info!(target: LOG_TARGET, "membership now {} node(s)", eff.len());
            self.effective = Some(eff.clone());
            e.receiver_state_mut().set_members(Some(eff));
        }
    }

    /// The membership the engine applies now (`None`: every origin, DF-RCV-51).
    pub fn members(&self) -> Option<&HashSet<u64>> {
        self.effective.as_ref()
    }

    fn process(&mut self, packets: &[Vec<u8>], sync: bool) -> Result<usize, FabricError> {
        self.process_with(packets, sync, sync)
    }

    /// The cluster size an AUTO `average_over` is derived from (DF-GEN-70): this node and its live
    /// peers that are members (every live peer without a membership) and not misconfigured, at
    /// least the world-size hint.
    pub fn cluster_size(&self) -> Result<usize, FabricError> {
        Ok((1 + self.cluster_peers()?.len()).max(self.world_size.unwrap_or(1)))
    }

    /// The live peers this node syncs with: members (when there is a membership), and not
    /// reported as configured differently ([`Fabric::misconfigured_peers`]).
    fn cluster_peers(&self) -> Result<BTreeSet<u64>, FabricError> {
        let mut live = self.transport.peers()?;
        live.retain(|p| {
            self.effective.as_ref().is_none_or(|m| m.contains(p))
                && !self.misconfigured.contains_key(p)
        });
        Ok(live)
    }

    /// One receive step over `packets`; with `generate` one generation (a sync), with
    /// `repair_round` one round of gap repair (requests for missed entries, entries asked again).
    fn process_with(
        &mut self,
        packets: &[Vec<u8>],
        generate: bool,
        repair_round: bool,
    ) -> Result<usize, FabricError> {
        let sync = generate;
        // DF-RCV-160: a repair request is not a packet
        let split: Vec<Vec<u8>>;
        let packets = if packets.iter().any(|p| is_repair_request(p)) {
            let (requests, rest): (Vec<_>, Vec<_>) =
                packets.iter().cloned().partition(|p| is_repair_request(p));
            self.repair_requests(&requests);
            split = rest;
            &split[..]
        } else {
            packets
        };
        let engine = Arc::clone(&self.engine);
        let screened = self.transport.take_screened();
        let mut e = engine.lock().map_err(|_| FabricError::Poisoned)?;
        self.refresh_members(&mut e);
        for (code, n) in screened {
            e.count_rejected(code, n); // DF-ZEN-154: rejected before the queue
        }
        let mut relay = Vec::new();
        let mut misconfigured = Vec::new();
        if !packets.is_empty() {
            let refs: Vec<&[u8]> = packets.iter().map(Vec::as_slice).collect();
            let store = &self.store;
            // DF-RCV-50 reads the active weights at the touched indices; a store that cannot
            // gather them makes the packet count as non-finite (refused, nothing applied)
            let view = |idx: &[u32]| {
                store
                    .gather_indices(idx)
                    .unwrap_or_else(|_| vec![f32::NAN; idx.len()])
            };
            // DF-RCV-175: the node's clock, once per step, for the engine's incarnation bound
            e.set_now_us(now_us());
            let res = e.receive_with(&refs, Some(&view));
            for (i, o) in res.outcomes.iter().enumerate() {
                if let Outcome::Rejected(code) = *o
                    && MISCONFIGURATION.contains(&code)
                    && let Some(h) = peek_header(&packets[i])
                        .filter(|h| h.sender != 0 && h.sender != e.node_id())
                    && self.misconfig_reported.len() < MAX_MISCONFIGURED
                    && self.misconfig_reported.insert((h.sender, code))
                {
                    self.misconfigured.entry(h.sender).or_insert(code);
                    misconfigured.push((code, h));
                }
            }
            self.track_accepted(&res);
            if let Some(g) = self.gaps.as_mut() {
                for a in &res.accepted {
                    g.observe(a.origin, a.incarnation, a.seq);
                }
            }
            if !res.indices.is_empty() {
                self.anchor_version.fetch_add(1, Ordering::Release);
                self.store.apply(&res.indices, &res.values)?;
                self.counters.values_received_applied += res.indices.len() as u64;
            }
            relay = res.relay;
        }
        let mut own = Vec::new();
        if sync {
            self.counters.syncs += 1;
            if self.hold_residual {
                self.fold_residual()?; // DF-GEN-241
            }
            if e.config().average_over.is_none() {
                // DF-GEN-70 with AUTO: averaged over the cluster as this node sees it now
                let c = self.cluster_size()?;
                e.resolve_average(c);
            }
            let active = self.store.gather()?;
            own = e.generate(&active, self.fast_selection)?;
            if !own.is_empty() {
                self.anchor_version.fetch_add(1, Ordering::Release);
            }
            let (ci, cv) = e.last_correction();
            if !ci.is_empty() {
                // DF-GEN-70: the own weights move by what was sent only
                self.store.apply(ci, cv)?;
            }
            if self.hold_residual {
                self.set_residual_aside(e.anchor())?; // DF-GEN-242
            }
        }
        let mut resent = Vec::new();
        let mut requests = Vec::new();
        if repair_round {
            if let Some(r) = self.resend.as_mut() {
                r.add(&own);
                resent = r.take();
            }
            if let Some(g) = self.gaps.as_mut() {
                let fingerprint = e.manifest().fingerprint();
                // DF-RCV-230: no request to an origin the transport does not see live
                let live = self.transport.peers().ok();
                for (origin, incarnation, seqs) in g.round_reachable(live.as_ref()) {
                    let req = RepairRequest {
                        sender: e.node_id(),
                        sender_incarnation: e.incarnation(),
                        fingerprint,
                        origin,
                        incarnation,
                        seqs,
                        version_minor: REQUEST_VERSION_MINOR,
                    };
                    if let Ok(buf) = encode_request(&req) {
                        requests.push(buf);
                    }
                }
            }
        }
        let mut out = if own.is_empty() && relay.is_empty() && resent.is_empty() {
            // DF-RLY-63 (relay policy NEEDED): a sync round with nothing to send still advertises
            match (sync, e.advertisement()) {
                (true, Some(p)) => vec![p],
                _ => Vec::new(),
            }
        } else if resent.is_empty() {
            e.pack(&own, &relay)
        } else {
            let mut both = own.clone();
            both.extend(resent);
            e.pack(&both, &relay)
        };
        out.extend(requests);
        let ours = (e.manifest().fingerprint(), e.num_params());
        drop(e);
        if !own.is_empty() {
            self.note_info_seq()?;
        }
        for (code, h) in misconfigured {
            // after the engine's lock is released: a logger may take its time
            self.report_misconfigured(code, &h, &ours.0, ours.1);
        }
        if out.is_empty() {
            return Ok(0);
        }
        for x in &own {
            self.counters.own_entries_sent += 1;
            self.counters.own_values_sent += x.indices.len() as u64;
        }
        for x in &relay {
            self.counters.relay_entries_sent += 1;
            self.counters.relay_values_sent += x.indices.len() as u64;
        }
        for pkt in &out {
            self.transport.publish(pkt)?;
            self.counters.bytes_sent += pkt.len() as u64;
            self.counters.packets_sent += 1;
        }
        Ok(out.len())
    }

    /// Reports a misconfigured peer at WARNING (once per peer and code), naming what differs.
    fn report_misconfigured(
        &self,
        code: ErrorCode,
        h: &df_core::wire::PacketHeader,
        fingerprint: &[u8; 32],
        n: usize,
    ) {
        let what = match code {
            ErrorCode::FingerprintMismatch => format!(
                "has another model: fingerprint {}... against this node's {}... (N={n}; check \
                 the model, include_buffers and the framework mapping)",
                h.fingerprint
                    .map_or_else(|| "?".to_owned(), |f| hex_lower(&f[..8])),
                hex_lower(&fingerprint[..8])
            ),
            ErrorCode::UnsupportedVersion => format!(
                "speaks protocol {}.{}, this node {}.x",
                h.version_major,
                h.version_minor,
                df_core::wire::VERSION_MAJOR
            ),
            ErrorCode::UnsupportedEncoding => format!(
                "sends value encoding {} / index encoding {}, which this node does not receive \
                 (a cluster with 1.0 nodes uses SyncConfig::v1_0())",
                h.encoding, h.index_encoding
            ),
            _ => "sends entries whose signatures this node's keys do not verify".to_owned(),
        };
        crate::logging::warn_loudly(&format!(
            "node {} {what}: its packets are rejected ({})",
            node_hex(h.sender),
            code.as_str()
        ));
    }

    /// The peers rejected for misconfiguration (another model, protocol version, encoding or
    /// keys), each with the first such code: `stats()["misconfigured_peers"]`.
    pub fn misconfigured_peers(&self) -> &BTreeMap<u64, ErrorCode> {
        &self.misconfigured
    }

    /// One call to finish: ends the run with every node in agreement and returns the shared
    /// model. One last generation sends what this node learned since its last sync; then the
    /// node receives, relays and repairs without generating until every live member peer has
    /// finished too and this node has applied each one's entries up to the last one it announced,
    /// and until each of them reports the same of its own peers, this node among them. A node
    /// tells its last entry through the `finish` member of its info object (`{"incarnation":
    /// "<hex16>", "seq": <its highest own seq, 0 if none>, "done": <bool>, "have": [<hex16 ids of
    /// the finishing peers whose entries up to their seq it has applied>]}`, spec/proposals/
    /// finish.md; DF-ZEN-6 readers ignore it); `done` is true while it waits for no peer. Entries
    /// held by a snapshot this node bootstrapped from count as applied. With a world size
    /// ([`FabricOptions::world_size`]) the node also waits until it has seen `world_size - 1`
    /// peers finish, so that a node that restarts is not left behind. The shared model (the
    /// anchor, DF-NUM-1: the same on every node up to rounding) is then loaded into the store and
    /// returned; a residual held aside (DF-GEN-240) is dropped. A peer that leaves is no longer
    /// waited for. After `timeout`: [`FabricError::FinishTimeout`] naming the peers still waited
    /// for; the node stays usable.
    pub fn finish(&mut self, timeout: Duration) -> Result<Vec<f32>, FabricError> {
        self.check_open()?;
        let deadline = Instant::now() + timeout;
        self.sync_now()?; // the last local progress goes out
        let (inc, seq) = {
            let e = self.lock()?;
            (e.incarnation(), e.next_seq().saturating_sub(1))
        };
        let member = |done: bool, have: &BTreeSet<u64>| {
            let have: Vec<String> = have.iter().map(|p| node_hex(*p)).collect();
            json!({"incarnation": node_hex(inc), "seq": seq, "done": done, "have": have})
        };
        let mut shown = (false, BTreeSet::new());
        self.transport
            .set_info_member("finish", Some(member(shown.0, &shown.1)));
        let mut last_repair = Instant::now();
        loop {
            self.poll()?;
            let now = Instant::now();
            let left = deadline.saturating_duration_since(now);
            let state =
                self.finish_state(left.clamp(Duration::from_millis(50), Duration::from_secs(1)))?;
            let done = state.missing.is_empty();
            if done && !shown.0 {
                debug!(target: LOG_TARGET, "finish: every live peer's last entry is applied");
            }
            if shown.0 != done || shown.1 != state.have {
                // what this node's info says now (read by its peers)
                shown = (done, state.have.clone());
                self.transport
                    .set_info_member("finish", Some(member(shown.0, &shown.1)));
            }
            let absent = self.finish_absent();
            if done && state.not_done.is_empty() && absent == 0 {
                break;
            }
            if Instant::now() >= deadline {
                let mut missing = state.missing;
                if missing.is_empty() {
                    missing = state
                        .not_done
                        .into_iter()
                        .map(|p| (p, "has not applied every peer's last entry yet".to_owned()))
                        .collect();
                }
                return Err(FabricError::FinishTimeout {
                    timeout,
                    missing: missing.into_iter().collect(),
                    absent,
                });
            }
            if now.saturating_duration_since(last_repair) >= FINISH_REPAIR_ROUND {
                last_repair = now;
                self.finish_repair(&state.tails)?;
            }
            self.transport
                .wait_for_packets(FINISH_ROUND.min(deadline.saturating_duration_since(now)))?;
        }
        let anchor = self.lock()?.anchor().to_vec();
        self.store.load(&anchor)?;
        self.residual.iter_mut().for_each(|r| *r = 0.0);
        info!(
            target: LOG_TARGET,
            "finish: done after {} steps, {} syncs",
            self.counters.steps,
            self.counters.syncs
        );
        Ok(anchor)
    }

    /// How many nodes of the world size this finishing node has not seen finish yet (0 without a
    /// world size): a node of the run that restarts is waited for, not left behind.
    fn finish_absent(&self) -> usize {
        self.world_size.map_or(0, |w| {
            w.saturating_sub(1)
                .saturating_sub(self.finished_peers.len())
        })
    }

    /// For [`Fabric::finish`]: the live member peers still waited for (and why), those that do not
    /// report `done` with this node in their `have` yet, per peer whose last entries are not all
    /// here `(incarnation, from, to)`: the seqs above the highest accepted one, up to its
    /// announced last seq, and the finishing peers whose last entry this node has applied. Notes
    /// every peer seen finished.
    fn finish_state(&mut self, timeout: Duration) -> Result<FinishState, FabricError> {
        let mut st = FinishState::default();
        let me = node_hex(self.transport.node_id());
        for p in self.cluster_peers()? {
            let info = self.transport.query_info(p, timeout).ok();
            let Some(fin) = info.as_ref().and_then(|i| i.get("finish")) else {
                let why = if info.is_none() {
                    "no node information"
                } else {
                    "still training (not finishing)"
                };
                if info.is_some() || self.transport.peers()?.contains(&p) {
                    st.missing.insert(p, why.to_owned());
                    st.not_done.insert(p);
                }
                continue;
            };
            let parsed = (
                fin.get("incarnation")
                    .and_then(Value::as_str)
                    .filter(|h| h.len() == 16)
                    .and_then(|h| u64::from_str_radix(h, 16).ok()),
                fin.get("seq").and_then(Value::as_u64),
                fin.get("done").and_then(Value::as_bool),
            );
            let (Some(inc), Some(seq), Some(done)) = parsed else {
                st.missing
                    .insert(p, format!("unreadable finish member {fin}"));
                st.not_done.insert(p);
                continue;
            };
            let has_me = fin
                .get("have")
                .and_then(Value::as_array)
                .is_some_and(|h| h.iter().any(|x| x.as_str() == Some(me.as_str())));
            if !(done && has_me) {
                st.not_done.insert(p);
            }
            if seq < 1 {
                self.finished_peers.insert(p);
                st.have.insert(p);
                continue;
            }
            let progress = self.origin_progress.get(&p).copied().unwrap_or((0, 0));
            let floor = self.snapshot_floor.get(&p).copied().unwrap_or((0, 0));
            let got = progress.max(floor);
            let gaps = self.gaps.as_ref().map(|g| g.missing(p)).unwrap_or_default();
            if got < (inc, seq) {
                st.missing.insert(
                    p,
                    format!(
                        "entries up to seq {seq} of incarnation {} not applied (highest applied: \
                         seq {} of {})",
                        node_hex(inc),
                        got.1,
                        node_hex(got.0)
                    ),
                );
                if got.0 == inc {
                    st.tails.insert(p, (inc, got.1 + 1, seq));
                }
            } else if got.0 == inc && !gaps.is_empty() {
                st.missing.insert(
                    p,
                    format!(
                        "{} entries of incarnation {} missing (seq {}...)",
                        gaps.len(),
                        node_hex(inc),
                        gaps[0]
                    ),
                );
            }
            if !st.missing.contains_key(&p) {
                // finished training, every entry of it applied here
                self.finished_peers.insert(p);
                st.have.insert(p);
            }
        }
        Ok(st)
    }

    /// Gap repair while finishing: the tracker's round, and requests for the last entries of a
    /// finishing peer that never arrived (no later entry shows their gap to the tracker).
    fn finish_repair(&mut self, tails: &BTreeMap<u64, (u64, u64, u64)>) -> Result<(), FabricError> {
        if self.gaps.is_none() {
            return Ok(());
        }
        self.process_with(&[], false, true)?;
        let (me, my_inc, fingerprint) = {
            let e = self.lock()?;
            (e.node_id(), e.incarnation(), e.manifest().fingerprint())
        };
        for (&origin, &(incarnation, lo, hi)) in tails {
            let hi = hi.min(lo + MAX_REQUEST_SEQS as u64 - 1);
            let req = RepairRequest {
                sender: me,
                sender_incarnation: my_inc,
                fingerprint,
                origin,
                incarnation,
                seqs: (lo..=hi).collect(),
                version_minor: REQUEST_VERSION_MINOR,
            };
            if let Ok(buf) = encode_request(&req) {
                self.transport.publish(&buf)?;
                self.counters.bytes_sent += buf.len() as u64;
                self.counters.packets_sent += 1;
            }
        }
        Ok(())
    }

    /// DF-RCV-164: queue the requests addressed to this node; a request that does not decode, or
    /// any request when repair is off, is counted and changes nothing.
    fn repair_requests(&mut self, bufs: &[Vec<u8>]) {
        let me = self.transport.node_id();
        for buf in bufs {
            let Some(r) = self.resend.as_mut() else {
                self.repair_refused += 1;
                continue;
            };
            match decode_request(buf) {
                Ok(req) if req.origin == me => {
                    r.request(&req);
                }
                Ok(_) => {}
                Err(err) => {
                    self.repair_refused += 1;
                    debug!(target: LOG_TARGET, "repair request refused: {err}");
                }
            }
        }
    }

    /// Both sides' repair counters together (all 0 when repair is off).
    pub fn repair_counters(&self) -> RepairCounters {
        let mut c = RepairCounters {
            requests_refused: self.repair_refused,
            ..RepairCounters::default()
        };
        if let Some(g) = &self.gaps {
            c.add(&g.counters);
        }
        if let Some(r) = &self.resend {
            c.add(&r.counters);
        }
        c
    }

    /// Hop histogram and per-origin progress from the engine's accepted entry headers (no second
    /// decode of any packet).
    fn track_accepted(&mut self, res: &ReceiveResult) {
        for a in &res.accepted {
            *self.accepted_by_hops.entry(a.hops).or_default() += 1;
            *self.accepted_by_origin.entry(a.origin).or_default() += 1;
            let cur = self.origin_progress.entry(a.origin).or_insert((0, 0));
            if (a.incarnation, a.seq) > *cur {
                *cur = (a.incarnation, a.seq);
            }
        }
    }

    /// A copy of the unsent residual held aside (DF-GEN-240; zeros unless
    /// [`FabricOptions::hold_residual`]).
    pub fn residual(&self) -> Vec<f32> {
        if self.residual.is_empty() {
            vec![0.0; self.store.num_params()]
        } else {
            self.residual.clone()
        }
    }

    /// DF-GEN-244: the elements whose residual is held aside: all but those of the tensors the
    /// store names as running statistics ([`WeightStore::running_stats`]).
    fn held_mask(&mut self) -> Result<(), FabricError> {
        if !self.held.is_empty() {
            return Ok(());
        }
        let manifest = self.store.manifest();
        let mut held = vec![true; self.store.num_params()];
        for name in self.store.running_stats() {
            let Some(k) = manifest.tensors().iter().position(|t| t.name == name) else {
                return Err(FabricError::Store(StoreError::Backend(format!(
                    "running_stats names {name:?}, which is not a tensor of the manifest"
                ))));
            };
            let offsets = manifest.offsets();
            let (a, b) = (offsets[k] as usize, offsets[k + 1] as usize);
            held[a..b].iter_mut().for_each(|h| *h = false);
        }
        self.held = held;
        Ok(())
    }

    /// DF-GEN-241: `active[i] = fl32(active[i] + r[i])` at every `i` with `r[i] != 0`, then
    /// `r = 0`, immediately before a generation.
    fn fold_residual(&mut self) -> Result<(), FabricError> {
        // NaN != 0: a non-finite residual is folded back too (DF-GEN-9 then sees it)
        let mut idx = Vec::new();
        let mut vals = Vec::new();
        for (i, &r) in self.residual.iter().enumerate() {
            if r != 0.0 {
                idx.push(i as u32);
                vals.push(r);
            }
        }
        if !idx.is_empty() {
            self.store.apply(&idx, &vals)?;
        }
        self.residual.iter_mut().for_each(|r| *r = 0.0);
        Ok(())
    }

    /// DF-GEN-242: after a generation, at every held element `r = fl32(active - anchor)` and
    /// `active = anchor`; the other elements (running statistics) keep their residual in `active`.
    fn set_residual_aside(&mut self, anchor: &[f32]) -> Result<(), FabricError> {
        self.held_mask()?;
        let mut active = self.store.gather()?;
        if self.residual.len() != active.len() {
            self.residual = vec![0.0; active.len()];
        }
        for (i, a) in active.iter_mut().enumerate() {
            if self.held[i] {
                self.residual[i] = *a - anchor[i];
                *a = anchor[i]; // a gather-load round trip is exact elsewhere
            }
        }
        self.store.load(&active)?;
        Ok(())
    }

    /// The store (read the model / weights).
    pub fn store(&self) -> &W {
        &self.store
    }

    /// The store, writable (a training step on the model). Changing the weights between steps is
    /// what training does; the fabric picks the change up at the next sync.
    pub fn store_mut(&mut self) -> &mut W {
        &mut self.store
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The engine (anchor, counters, receiver state), locked.
    pub fn engine(&self) -> Result<MutexGuard<'_, Engine>, FabricError> {
        self.lock()
    }

    /// This node's id.
    pub fn node_id(&self) -> u64 {
        self.transport.node_id()
    }

    /// This node's incarnation.
    pub fn incarnation(&self) -> u64 {
        self.engine
            .lock()
            .map(|e| e.incarnation())
            .unwrap_or_else(|p| p.into_inner().incarnation())
    }

    /// Whether the anchor came from a peer's snapshot, and from whom.
    pub fn joined_from(&self) -> Option<u64> {
        self.joined_from
    }

    /// DF-RCV-51 (1.1): only these node ids are tracked as origins (`None`: every origin, as in
    /// 1.0); entries of other origins are dropped and counted as `drops.not_member`, and never take a
    /// place in the origin bound. Replaces the configured list (with `live_members`, the live set
    /// is intersected with it at the next step); the transport refuses non-members' keys too.
    pub fn set_members(&mut self, members: Option<HashSet<u64>>) -> Result<(), FabricError> {
        self.transport
            .set_members(members.clone(), self.live_members);
        self.configured = members;
        let engine = Arc::clone(&self.engine);
        let mut e = engine.lock().map_err(|_| FabricError::Poisoned)?;
        self.effective = None;
        if !self.live_members {
            self.effective = self.configured.clone();
            e.receiver_state_mut().set_members(self.configured.clone());
        } else {
            self.refresh_members(&mut e);
        }
        Ok(())
    }

    /// Signed entries (1.1, spec section 13.1; `None`: not a signed cluster): the node signs its
    /// own entries with its secret key and rejects packets with an entry not signed by its
    /// origin's pinned key (`errors.BAD_SIGNATURE`). An error when `signing` holds no secret key.
    pub fn set_signing(
        &self,
        signing: Option<df_core::signing::Signing>,
    ) -> Result<(), FabricError> {
        if signing.as_ref().is_some_and(|s| !s.can_sign()) {
            return Err(FabricError::Engine(df_core::EngineError::Invalid(
                "signing: a node of a signed cluster needs its secret key".into(),
            )));
        }
        self.engine()?.set_signing(signing)?;
        Ok(())
    }

    /// Send counters.
    pub fn counters(&self) -> SendCounters {
        self.counters
    }

    /// Accepted entries by hop count.
    pub fn accepted_by_hops(&self) -> &BTreeMap<u8, u64> {
        &self.accepted_by_hops
    }

    /// Latest `(incarnation, seq)` accepted from each origin.
    pub fn origin_progress(&self) -> &HashMap<u64, (u64, u64)> {
        &self.origin_progress
    }

    /// Entries accepted from each origin so far (the engine accepts each entry once, so a
    /// cluster where every packet reached this node shows every origin's last seq here).
    pub fn accepted_by_origin(&self) -> &HashMap<u64, u64> {
        &self.accepted_by_origin
    }

    /// Snapshots served to joiners so far.
    pub fn snapshots_served(&self) -> u64 {
        self.snapshots_served.load(Ordering::Relaxed)
    }

    /// Counters in the shape of Python's `Fabric.stats()`.
    pub fn stats(&self) -> Value {
        let e = self.engine.lock().unwrap_or_else(|p| p.into_inner());
        let c = &self.counters;
        json!({
            "node_id": node_hex(e.node_id()),
            "incarnation": e.incarnation(),
            "framework": self.store.framework(),
            "num_params": e.num_params(),
            "fingerprint": hex_lower(&e.manifest().fingerprint()),
            "bootstrapped": self.bootstrapped,
            "steps": c.steps,
            "syncs": c.syncs,
            "bytes_sent": c.bytes_sent,
            "packets_sent": c.packets_sent,
            "own_entries_sent": c.own_entries_sent,
            "own_values_sent": c.own_values_sent,
            "relay_entries_sent": c.relay_entries_sent,
            "relay_values_sent": c.relay_values_sent,
            "values_received_applied": c.values_received_applied,
            "accepted_by_hops": self.accepted_by_hops.iter()
                .map(|(h, n)| (h.to_string(), json!(n)))
                .collect::<serde_json::Map<String, Value>>(),
            "snapshots_served": self.snapshots_served(),
            "receive": e.counters().to_json(),
            "snapshot_trust": {
                "sources_queried": self.snapshot_trust.sources_queried,
                "sources_failed": self.snapshot_trust.sources_failed,
                "sources_refused": self.snapshot_trust.sources_refused,
                "outliers": self.snapshot_trust.outliers,
                "quorum_failed": self.snapshot_trust.quorum_failed,
            },
            "average_over": e.average_over(),
            "misconfigured_peers": self.misconfigured.iter()
                .map(|(p, c)| (node_hex(*p), json!(c.as_str())))
                .collect::<serde_json::Map<String, Value>>(),
            "repair": self.repair_counters().pairs().iter()
                .map(|(k, v)| ((*k).to_owned(), json!(v)))
                .collect::<serde_json::Map<String, Value>>(),
            "transport": self.transport.stats().to_json(),
        })
    }

    /// Bounded staleness (DF-ZEN-156): receive and relay while this node is more than `max_lead`
    /// sync rounds ahead of a peer that holds it back. Only live peers (the transport's liveliness)
    /// that are members hold it back, so a fake origin id never does; a peer whose progress has not
    /// moved for `peer_deadline` no longer does (once, not per call); a peer's lead is counted from
    /// the round this node was at when it first heard that peer's incarnation, so a restarted peer
    /// does not hold the others back while it catches up. `timeout` bounds one call. Returns the
    /// time spent.
    pub fn pace(
        &mut self,
        max_lead: u64,
        peer_deadline: Duration,
        timeout: Duration,
    ) -> Result<Duration, FabricError> {
        self.check_open()?;
        let t0 = Instant::now();
        while !self.pace_blockers(max_lead, peer_deadline)?.is_empty() && t0.elapsed() < timeout {
            self.transport.wait_for_packets(Duration::from_millis(20))?;
            self.poll()?;
        }
        Ok(t0.elapsed())
    }

    /// The live member peers that hold pacing back now ([`Fabric::pace`] waits while this set is not
    /// empty): for logging who a node waits for, and for tests.
    pub fn pace_blockers(
        &mut self,
        max_lead: u64,
        peer_deadline: Duration,
    ) -> Result<BTreeSet<u64>, FabricError> {
        self.check_open()?;
        let now = Instant::now();
        let mine = self.lock()?.next_seq().saturating_sub(1);
        let live = self.transport.peers()?;
        let mut blockers = BTreeSet::new();
        for p in &live {
            if self.effective.as_ref().is_some_and(|m| !m.contains(p))
                || self.misconfigured.contains_key(p)
            {
                continue; // a peer of another model or version is not in this node's cluster
            }
            let (inc, seq) = self.origin_progress.get(p).copied().unwrap_or((0, 0));
            let base = match self.pace_base.get(p) {
                Some(b) if b.0 == inc => *b,
                _ => {
                    // a new incarnation (or first sight): the lead counts from here
                    let b = (
                        inc,
                        if inc == 0 {
                            0
                        } else {
                            mine.saturating_sub(seq)
                        },
                    );
                    self.pace_base.insert(*p, b);
                    b
                }
            };
            let moved_t = match self.moved_at.get(p) {
                Some(&(prog, t)) if prog == (inc, seq) => t,
                _ => {
                    self.moved_at.insert(*p, ((inc, seq), now));
                    now
                }
            };
            if now.saturating_duration_since(moved_t) > peer_deadline {
                continue; // no progress for peer_deadline: it no longer holds this node back
            }
            if mine.saturating_sub(seq).saturating_sub(base.1) > max_lead {
                blockers.insert(*p);
            }
        }
        self.moved_at.retain(|p, _| live.contains(p));
        // the base of a peer that is gone for now is kept while its origin is tracked: a peer back
        // from a partition (the same incarnation) is behind by its lag since its incarnation was
        // first heard, not by its stale progress at its return (a base taken then let this node
        // run hundreds of rounds ahead after a heal); a new incarnation replaces the base above
        let progress = &self.origin_progress;
        self.pace_base
            .retain(|p, _| live.contains(p) || progress.contains_key(p));
        Ok(blockers)
    }

    /// Stops the node and closes the transport (peers see it go); idempotent.
    pub fn close(&mut self) -> Result<(), FabricError> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        debug!(target: LOG_TARGET, "node {} closing", node_hex(self.transport.node_id()));
        self.transport.close()?;
        Ok(())
    }
}

impl<W: WeightStore, T: Transport> Drop for Fabric<W, T> {
    fn drop(&mut self) {
        if !self.closed {
            let reason = if std::thread::panicking() {
                "panic"
            } else {
                "dropped without close()"
            };
            info!(
                target: LOG_TARGET,
                "node {} closing the transport ({reason})",
                node_hex(self.transport.node_id())
            );
            self.closed = true;
            if let Err(e) = self.transport.close() {
                warn!(target: LOG_TARGET, "closing the transport: {e}");
            }
        }
    }
}

/// A verified snapshot from a live peer: the preferred live peers first, then any other, retried
/// until `j.timeout`. Checks the length and that every value is finite (DF-ZEN-12) on top of the
/// transport's fingerprint and digest checks.
fn fetch_verified<T: Transport>(
    transport: &T,
    manifest: &df_core::Manifest,
    j: &JoinOptions,
) -> Result<(u64, Vec<f32>), FabricError> {
    let t0 = Instant::now();
    let deadline = t0 + j.timeout;
    let left = || deadline.saturating_duration_since(Instant::now());
    let fingerprint = manifest.fingerprint();
    let n = usize::try_from(manifest.num_params()).unwrap_or(usize::MAX);
    let mut last: Option<String> = None;
    loop {
        let live = transport.peers()?;
        let mut order: Vec<u64> = j
            .preferred
            .iter()
            .copied()
            .filter(|p| live.contains(p))
            .collect();
        order.extend(live.iter().copied().filter(|p| !j.preferred.contains(p)));
        for peer in order {
            if left().is_zero() {
                break;
            }
            match transport.fetch_snapshot(peer, &fingerprint, left().min(JOIN_PER_PEER)) {
                // The transport's assembler checked fingerprint, offsets, finiteness and digest
                // (DF-ZEN-12); the length must also be this manifest's N.
                Ok(s) => match crate::store::check_full(&s.values, n) {
                    Ok(()) => {
                        info!(
                            target: LOG_TARGET,
                            "joined from {} ({} values, {:.3} s)",
                            node_hex(peer),
                            n,
                            t0.elapsed().as_secs_f64()
                        );
                        return Ok((peer, s.values));
                    }
                    Err(e) => {
                        warn!(target: LOG_TARGET, "snapshot of {} rejected: {e}", node_hex(peer));
                        last = Some(format!("snapshot of {} rejected: {e}", node_hex(peer)));
                    }
                },
                Err(e) => {
                    debug!(target: LOG_TARGET, "snapshot of {}: {e}", node_hex(peer));
                    last = Some(e.to_string().replace('\n', " "));
                }
            }
        }
        if left().is_zero() {
            break;
        }
        // Wakes on a liveliness change, else retries after a short pause.
        let want = live.len() + 1;
        let _ = transport.wait_for_peers(want, &[], left().min(Duration::from_millis(100)));
    }
    Err(FabricError::Join(match last {
        Some(e) => format!("no valid snapshot within {:?} (last error: {e})", j.timeout),
        None => format!("no live peer within {:?}", j.timeout),
    }))
}

/// Trusted snapshots: every live member is queried (not the first to answer); strangers are
/// refused and counted; the anchor installed is the one `confirm_snapshot` chooses.
fn fetch_quorum<T: Transport>(
    transport: &T,
    manifest: &df_core::Manifest,
    j: &JoinOptions,
    options: &FabricOptions,
    trust: &mut TrustCounters,
) -> Result<(u64, Vec<f32>), FabricError> {
    let deadline = Instant::now() + j.timeout;
    let left = || deadline.saturating_duration_since(Instant::now());
    let fingerprint = manifest.fingerprint();
    let n = usize::try_from(manifest.num_params()).unwrap_or(usize::MAX);
    let quorum = options.snapshot_quorum;
    let mut refused: BTreeSet<u64> = BTreeSet::new();
    let mut last;
    loop {
        let live = transport.peers()?;
        let sources: Vec<u64> = live
            .iter()
            .copied()
            .filter(|p| {
                options
                    .snapshot_members
                    .as_ref()
                    .is_none_or(|m| m.contains(p))
            })
            .collect();
        for &p in &live {
            if !sources.contains(&p) && refused.insert(p) {
                trust.sources_refused += 1;
                warn!(target: LOG_TARGET, "snapshot source {} refused: not a member", node_hex(p));
            }
        }
        if sources.len() >= quorum {
            let mut anchors: BTreeMap<u64, Vec<f32>> = BTreeMap::new();
            for (i, &p) in sources.iter().enumerate() {
                let share = left() / u32::try_from(sources.len() - i).unwrap_or(u32::MAX);
                trust.sources_queried += 1;
                match transport.fetch_snapshot(
                    p,
                    &fingerprint,
                    share.max(Duration::from_millis(50)),
                ) {
                    Ok(s) if crate::store::check_full(&s.values, n).is_ok() => {
                        anchors.insert(p, s.values);
                    }
                    Ok(_) => trust.sources_failed += 1,
                    Err(e) => {
                        trust.sources_failed += 1;
                        info!(target: LOG_TARGET, "snapshot of {} failed: {e}", node_hex(p));
                    }
                }
            }
            let v = confirm_snapshot(&anchors, quorum, DEFAULT_AGREEMENT);
            trust.outliers += v.outliers.len() as u64;
            if let Some(c) = v.chosen {
                info!(
                    target: LOG_TARGET,
                    "snapshot of {} installed, confirmed by {} of {} sources",
                    node_hex(c),
                    v.confirmations[&c],
                    anchors.len()
                );
                let values = anchors.remove(&c).unwrap_or_default();
                return Ok((c, values));
            }
            trust.quorum_failed += 1;
            last = format!(
                "{} verified snapshots, none confirmed by {quorum}",
                anchors.len()
            );
        } else {
            last = format!("{} live members, quorum {quorum}", sources.len());
        }
        if left().is_zero() {
            break;
        }
        let _ =
            transport.wait_for_peers(live.len() + 1, &[], left().min(Duration::from_millis(100)));
    }
    Err(FabricError::Join(format!(
        "no snapshot confirmed within {:?}: {last}",
        j.timeout
    )))
}

fn hex_lower(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
