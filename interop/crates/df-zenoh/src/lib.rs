//! The DeltaFabric v1 Zenoh binding (spec section 9, DF-ZEN), without tokio: every Zenoh call is
//! resolved with [`zenoh::Wait`].
//!
//! Key expressions under a namespace `NS` (node ids as 16 lowercase hex digits):
//! - `NS/v1/delta/<hex16>`: the node's packets (own + relayed); encoding `application/octet-stream`
//!   with schema `deltafabric.v1.Packet`, congestion control BLOCK, reliable, priority DATA. The node
//!   subscribes to its neighbours' keys, or to `NS/v1/delta/*` (its own key ignored).
//! - `NS/v1/alive/<hex16>`: liveliness token; a liveliness subscriber (with history) keeps the live
//!   peer set.
//! - `NS/v1/snapshot/<hex16>`: queryable answering `chunk=<i>&chunk_size=<c>` (pairs separated by `&`
//!   or `;`) with one `SnapshotChunk` (values `[i*c, min((i+1)*c, N))`), see [`ZenohTransport::serve_snapshot`].
//! - `NS/v1/info/<hex16>`: queryable answering JSON `{node, incarnation, fingerprint, framework, N,
//!   supports}` plus the members the node added (`Transport::set_info_member`, e.g. `seq` and
//!   `finish`).
//!
//! Received packets go through a callback into a bounded queue. [`QueuePolicy::DropOldest`] (the
//! default) never blocks Zenoh's receive path and counts every dropped packet in
//! [`TransportStats::dropped_packets`]; [`QueuePolicy::Block`] makes the callback wait for room (back-pressure
//! to the senders through congestion control BLOCK; two nodes that both block while publishing to
//! each other can stall, so use it only with a consumer that drains independently of publishing).

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use df_core::ErrorCode;
pub use df_core::snapshot::{DEFAULT_CHUNK_SIZE, parse_chunk_params, trim_blanks};
use df_core::snapshot::{
    SnapshotAssembler, SnapshotError, SnapshotErrorKind, SnapshotServer, fetch_snapshot_chunks,
    format_chunk_params,
};
use df_fabric::queue::{PacketQueue, TokenBuckets};
use df_fabric::transport::{peer_timeout_message, peers_satisfied};
use serde_json::{Value, json};
use zenoh::Wait;
use zenoh::bytes::Encoding;
use zenoh::liveliness::LivelinessToken;
use zenoh::pubsub::{Publisher, Subscriber};
use zenoh::qos::{CongestionControl, Priority};
use zenoh::query::{ConsolidationMode, QueryTarget, Queryable};
use zenoh::sample::SampleKind;
use zenoh::{Config, Session};

pub mod env;
pub mod ports;

pub use env::FabricFromEnv;

/// Default cluster namespace.
pub const DEFAULT_NAMESPACE: &str = "deltafabric/default";
/// Encoding schema of delta packets (DF-ZEN-1).
pub const PACKET_SCHEMA: &str = "deltafabric.v1.Packet";
/// Encoding schema of snapshot chunk replies.
pub const SNAPSHOT_SCHEMA: &str = "deltafabric.v1.SnapshotChunk";

/// Turns on Zenoh's own logs (`tracing`) from the environment: `RUST_LOG` as Zenoh reads it, else
/// the level in `DELTA_FABRIC_LOG` for the `zenoh` targets. Silent when neither is set. Pair it with
/// `df_fabric::logging::init_from_env` for DeltaFabric's records.
pub fn init_log_from_env() {
    if std::env::var_os("RUST_LOG").is_some() {
        zenoh::try_init_log_from_env();
    } else if let Ok(level) = std::env::var("DELTA_FABRIC_LOG")
        && let Some(l) = df_fabric::logging::parse_level(&level)
    {
        zenoh::init_log_from_env_or(format!("zenoh={}", l.as_str().to_ascii_lowercase()));
    }
}

/// A node id as 16 lowercase hex digits.
pub fn node_hex(node: u64) -> String {
    format!("{node:016x}")
}
/// `NS/v1/delta/<hex16>`.
pub fn delta_key(ns: &str, node: u64) -> String {
    format!("{ns}/v1/delta/{}", node_hex(node))
}
/// `NS/v1/alive/<hex16>`.
pub fn alive_key(ns: &str, node: u64) -> String {
    format!("{ns}/v1/alive/{}", node_hex(node))
}
/// `NS/v1/snapshot/<hex16>`.
pub fn snapshot_key(ns: &str, node: u64) -> String {
    format!("{ns}/v1/snapshot/{}", node_hex(node))
}
/// `NS/v1/info/<hex16>`.
pub fn info_key(ns: &str, node: u64) -> String {
    format!("{ns}/v1/info/{}", node_hex(node))
}

/// The node id at the end of a key expression (16 lowercase hex digits), if any.
pub fn parse_node(key: &str) -> Option<u64> {
    let tail = key.rsplit('/').next()?;
    if tail.len() != 16
        || !tail
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    u64::from_str_radix(tail, 16).ok().filter(|&n| n != 0)
}

/// Zenoh session mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Peer-to-peer.
    #[default]
    Peer,
    /// Client of a router or peer.
    Client,
}

/// What the receive callback does when the queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueuePolicy {
    /// Drop the oldest queued packet (counted in [`TransportStats::dropped_packets`]).
    #[default]
    DropOldest,
    /// Wait for room (back-pressure; see the crate doc).
    Block,
}

/// How to open a transport.
#[derive(Debug, Clone, PartialEq)]
pub struct TransportConfig {
    /// Cluster namespace `NS`.
    pub namespace: String,
    /// This node's id (non-zero).
    pub node_id: u64,
    /// Peer or client.
    pub mode: Mode,
    /// Listen endpoints, e.g. `tcp/127.0.0.1:7447`.
    pub listen: Vec<String>,
    /// Connect endpoints.
    pub connect: Vec<String>,
    /// A Zenoh config file used as is (the fields above are then ignored, but see
    /// `endpoints_over_file`).
    pub config_file: Option<PathBuf>,
    /// With a `config_file`: a non-empty `listen` / `connect` replaces the file's endpoints (what
    /// `DELTA_FABRIC_LISTEN` / `_CONNECT` do next to `DELTA_FABRIC_ZENOH_CONFIG`, as in Python);
    /// off by default (the file is used unchanged).
    pub endpoints_over_file: bool,
    /// Multicast scouting (and gossip); off by default.
    pub multicast: bool,
    /// Neighbours whose delta keys to subscribe to; `None`: all (`NS/v1/delta/*`).
    pub neighbours: Option<Vec<u64>>,
    /// Receive queue capacity in packets.
    pub queue_capacity: usize,
    /// Receive queue bound in bytes (the payloads queued; the same default as the Python
    /// transport's `queue_bytes`, [`DEFAULT_QUEUE_BYTES`]): with `DropOldest` the oldest packets
    /// leave until the new one fits; one packet larger than the bound is still queued alone.
    pub queue_bytes: usize,
    /// Receive queue policy.
    pub queue_policy: QueuePolicy,
    /// The node's `max_packet_size` (bounds the snapshot chunks it serves: `4c + 1024 <= M`).
    pub max_packet_size: usize,
    /// Packets per second each sender (the node id of the delta key a sample came on) may queue
    /// (DF-ZEN-153; 0: no limit).
    pub rate_limit: f64,
    /// Packets a sender may queue at once (0: `max(1, rate_limit)`).
    pub rate_burst: f64,
}

impl TransportConfig {
    /// A peer on the default namespace with no endpoints (set `listen` / `connect`).
    pub fn new(node_id: u64) -> Self {
        TransportConfig {
            namespace: DEFAULT_NAMESPACE.to_string(),
            node_id,
            mode: Mode::Peer,
            listen: Vec::new(),
            connect: Vec::new(),
            config_file: None,
            endpoints_over_file: false,
            multicast: false,
            neighbours: None,
            queue_capacity: 1024,
            queue_bytes: DEFAULT_QUEUE_BYTES,
            queue_policy: QueuePolicy::DropOldest,
            max_packet_size: df_core::DEFAULT_MAX_PACKET_SIZE,
            rate_limit: 0.0,
            rate_burst: 0.0,
        }
    }

    /// Zenoh's `transport/link/rx/max_message_size` for this node (DF-SEC-1, DF-SEC-50):
    /// `max_packet_size` plus [`ZENOH_MESSAGE_MARGIN`], so that Zenoh drops a larger message
    /// before reassembling it (its default is 1 GiB).
    pub fn max_message_size(&self) -> usize {
        self.max_packet_size.saturating_add(ZENOH_MESSAGE_MARGIN)
    }

    /// The Zenoh config this transport opens its session with (a config file as is, but for the
    /// message size cap and, with `endpoints_over_file`, a non-empty `listen` / `connect`).
    pub fn zenoh_config(&self) -> Result<Config, TransportError> {
        let set = |c: &mut Config, k: &str, v: String| {
            c.insert_json5(k, &v)
                .map_err(|e| TransportError::Config(format!("{k}: {e}")))
        };
        let cap = self.max_message_size().to_string();
        if let Some(p) = &self.config_file {
            let mut c = Config::from_file(p).map_err(|e| {
                TransportError::Config(format!(
                    "zenoh config {}: {}",
                    p.display(),
                    e.to_string().lines().next().unwrap_or("unreadable")
                ))
            })?;
            set(&mut c, "transport/link/rx/max_message_size", cap)?;
            if self.endpoints_over_file && !self.listen.is_empty() {
                set(&mut c, "listen/endpoints", json!(self.listen).to_string())?;
            }
            if self.endpoints_over_file && !self.connect.is_empty() {
                set(&mut c, "connect/endpoints", json!(self.connect).to_string())?;
            }
            return Ok(c);
        }
        let mut c = Config::default();
        set(&mut c, "transport/link/rx/max_message_size", cap)?;
        let mode = match self.mode {
            Mode::Peer => "peer",
            Mode::Client => "client",
        };
        set(&mut c, "mode", json!(mode).to_string())?;
        set(&mut c, "listen/endpoints", json!(self.listen).to_string())?;
        set(&mut c, "connect/endpoints", json!(self.connect).to_string())?;
        set(
            &mut c,
            "scouting/multicast/enabled",
            json!(self.multicast).to_string(),
        )?;
        set(
            &mut c,
            "scouting/gossip/enabled",
            json!(self.multicast).to_string(),
        )?;
        Ok(c)
    }
}

/// The `from=<hex16>` parameter of a snapshot query (DF-ZEN-155), or `None` when it is absent or
/// not 16 lowercase hex digits naming a non-zero id. Read by the rules of DF-ZEN-42 (the first
/// `from` counts; only spaces and tabs around the key and value are removed).
pub fn query_from(params: &str) -> Option<u64> {
    params
        .split(['&', ';'])
        .find_map(|part| {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            (trim_blanks(k) == "from").then(|| trim_blanks(v))
        })
        .and_then(parse_node)
}

/// Default receive queue bound in bytes (256 MiB, as the Python transport's).
pub const DEFAULT_QUEUE_BYTES: usize = 256 * 1024 * 1024;

/// Bytes above `max_packet_size` that Zenoh may reassemble for one message (key expression,
/// attachment and framing of a packet or snapshot chunk of `max_packet_size` bytes); DF-SEC-50.
pub const ZENOH_MESSAGE_MARGIN: usize = 65_536;

pub use df_fabric::transport::{
    SnapshotProvider, SnapshotSource, SnapshotVersion, Transport, TransportError, TransportStats,
    VerifiedSnapshot,
};

fn zerr(e: impl fmt::Display) -> TransportError {
    TransportError::Network(format!("zenoh: {e}"))
}

struct Shared {
    /// The receive queue with one share per sender (DF-ZEN-152) and the rate limit (DF-ZEN-153).
    queue: Mutex<PacketQueue>,
    queue_cv: Condvar,
    peers: Mutex<BTreeSet<u64>>,
    peers_cv: Condvar,
    /// DF-ZEN-154: payloads rejected before the queue (`OVERSIZE`, `BAD_IDENTIFIER`), taken by
    /// the node.
    screened_oversize: AtomicU64,
    screened_bad_identifier: AtomicU64,
    /// The configured membership (DF-ZEN-151) and whether it follows liveliness (DF-ZEN-150).
    members: Mutex<(Option<HashSet<u64>>, bool)>,
    rejected_not_member: AtomicU64,
    snapshot_refused: AtomicU64,
    published: AtomicU64,
    published_bytes: AtomicU64,
    provider: Mutex<Option<SnapshotProvider>>,
    /// The version of what the provider captures (`Transport::set_snapshot_version`).
    version: Mutex<Option<SnapshotVersion>>,
    /// The info members added by `set_info_member` (DF-ZEN-6 allows members readers ignore).
    info_extra: Mutex<serde_json::Map<String, Value>>,
    /// Set by close: a blocked receive callback gives up instead of waiting for room.
    closing: std::sync::atomic::AtomicBool,
    /// Which capture answers which request (DF-ZEN-5, -11), shared by the queryable threads.
    server: Mutex<SnapshotServer>,
    /// Never served: what the server's capture closure returns on a path that cannot be taken
    /// (a capture is requested only when `needs_capture` said so, with the same clock reading).
    placeholder: SnapshotSource,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// The receive path of one sample (DF-ZEN-154, -151, -153, -152, in this order).
    fn receive(&self, buf: &[u8], key: &str, max_packet_size: usize, policy: QueuePolicy) {
        // a RepairRequest (DFR1, DF-RCV-160) shares the delta key: it is not a packet, the node
        // decodes it with its own checks
        let code = if df_core::repair::is_repair_request(buf) {
            None
        } else {
            df_core::wire::screen(buf, max_packet_size)
        };
        match code {
            Some(ErrorCode::Oversize) => {
                self.screened_oversize.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Some(_) => {
                self.screened_bad_identifier.fetch_add(1, Ordering::Relaxed);
                return;
            }
            None => {}
        }
        let sender = parse_node(key).unwrap_or(0);
        if let Some(m) = &lock(&self.members).0
            && !m.contains(&sender)
        {
            self.rejected_not_member.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut q = lock(&self.queue);
        if policy == QueuePolicy::Block {
            while q.full_for(buf.len()) {
                if self.closing.load(Ordering::Acquire) {
                    return;
                }
                q = self.queue_cv.wait(q).unwrap_or_else(|p| p.into_inner());
            }
        }
        q.push(buf.to_vec(), sender, Instant::now());
        drop(q);
        self.queue_cv.notify_all();
    }

    /// Whether a snapshot query with these parameters may be answered (DF-ZEN-155).
    fn may_answer(&self, params: &str) -> bool {
        let (members, live) = &*lock(&self.members);
        let asker = query_from(params);
        let member = members
            .as_ref()
            .is_none_or(|m| asker.is_some_and(|a| m.contains(&a)));
        let is_live = !*live || asker.is_some_and(|a| lock(&self.peers).contains(&a));
        member && is_live
    }

    /// Runs `f` on the snapshot server at one clock reading, with a capture taken from the
    /// provider only when the server needs one (DF-ZEN-11: chunk 0 and info may capture, later
    /// chunks reuse the capture they started from). `versioned`: a capture is reused only at the provider's current version (snapshot
    /// requests); info requests (whose members do not depend on the anchor) reuse one by age, so
    /// that the info queries of finishing peers do not copy the anchor after every receive.
    fn with_server<R>(
        &self,
        fresh: bool,
        versioned: bool,
        f: impl FnOnce(&mut SnapshotServer, Instant, &dyn Fn() -> SnapshotSource) -> R,
    ) -> Result<R, SnapshotError> {
        let provider = lock(&self.provider).clone().ok_or_else(|| {
            SnapshotError::new(SnapshotErrorKind::ServerError, "no snapshot served")
        })?;
        let version = if versioned {
            lock(&self.version).clone()
        } else {
            None
        };
        let mut server = lock(&self.server);
        // read before the capture: a change in between makes the next request capture again
        server.set_version(version.map(|v| v()));
        let now = Instant::now();
        let captured = if server.needs_capture(fresh, now) {
            Some(provider()?)
        } else {
            None
        };
        let capture = || captured.clone().unwrap_or_else(|| self.placeholder.clone());
        Ok(f(&mut server, now, &capture))
    }
}

/// One node's Zenoh session with its publisher, subscribers, liveliness token and queryables.
pub struct ZenohTransport {
    cfg: TransportConfig,
    session: Session,
    publisher: Publisher<'static>,
    _subscribers: Vec<Subscriber<()>>,
    _alive_sub: Subscriber<()>,
    _queryables: Vec<Queryable<()>>,
    token: Option<LivelinessToken>,
    shared: Arc<Shared>,
    closed: bool,
}

impl fmt::Debug for ZenohTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZenohTransport")
            .field("node", &node_hex(self.cfg.node_id))
            .field("namespace", &self.cfg.namespace)
            .finish()
    }
}

impl ZenohTransport {
    /// Opens the session and declares the publisher, the delta subscribers, the snapshot and info
    /// queryables (before the token, so a peer that sees the token can query them), the liveliness
    /// subscriber (with history) and the liveliness token.
    pub fn open(cfg: TransportConfig) -> Result<ZenohTransport, TransportError> {
        if cfg.node_id == 0 {
            return Err(TransportError::Config("node id must be non-zero".into()));
        }
        let ns = cfg.namespace.trim_end_matches('/').to_string();
        if ns.is_empty() || ns.contains(['*', '$', '?', '#']) || ns.split('/').any(str::is_empty) {
            return Err(TransportError::Config(format!(
                "bad namespace {:?}",
                cfg.namespace
            )));
        }
        let mut cfg = cfg;
        cfg.namespace = ns.clone();
        let session = zenoh::open(cfg.zenoh_config()?).wait().map_err(zerr)?;
        let cfgerr = |e: SnapshotError| TransportError::Config(e.to_string());
        let burst = if cfg.rate_burst > 0.0 {
            cfg.rate_burst
        } else {
            cfg.rate_limit.max(1.0)
        };
        let buckets = TokenBuckets::new(cfg.rate_limit, burst).map_err(TransportError::Config)?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(PacketQueue::new(
                cfg.queue_capacity,
                cfg.queue_bytes,
                buckets,
            )),
            queue_cv: Condvar::new(),
            peers: Mutex::default(),
            peers_cv: Condvar::new(),
            screened_oversize: AtomicU64::new(0),
            screened_bad_identifier: AtomicU64::new(0),
            members: Mutex::new((None, false)),
            rejected_not_member: AtomicU64::new(0),
            snapshot_refused: AtomicU64::new(0),
            published: AtomicU64::new(0),
            published_bytes: AtomicU64::new(0),
            provider: Mutex::new(None),
            version: Mutex::new(None),
            info_extra: Mutex::new(serde_json::Map::new()),
            closing: std::sync::atomic::AtomicBool::new(false),
            server: Mutex::new(
                SnapshotServer::new(cfg.node_id, cfg.max_packet_size).map_err(cfgerr)?,
            ),
            placeholder: SnapshotSource::new(1, [0; 32], vec![0.0f32], "none").map_err(cfgerr)?,
        });
        let me = cfg.node_id;
        let own_key = delta_key(&ns, me);
        let publisher = session
            .declare_publisher(own_key.clone())
            .congestion_control(CongestionControl::Block)
            .priority(Priority::Data)
            .encoding(Encoding::APPLICATION_OCTET_STREAM.with_schema(PACKET_SCHEMA))
            .wait()
            .map_err(zerr)?;
        let keys: Vec<String> = match &cfg.neighbours {
            None => vec![format!("{ns}/v1/delta/*")],
            Some(list) => list
                .iter()
                .filter(|&&n| n != me && n != 0)
                .map(|&n| delta_key(&ns, n))
                .collect(),
        };
        let mut subscribers = Vec::with_capacity(keys.len());
        for k in keys {
            let sh = shared.clone();
            let own = own_key.clone();
            let (mps, pol) = (cfg.max_packet_size, cfg.queue_policy);
            let sub = session
                .declare_subscriber(k)
                .callback(move |s| {
                    if s.kind() != SampleKind::Put || s.key_expr().as_str() == own {
                        return;
                    }
                    sh.receive(&s.payload().to_bytes(), s.key_expr().as_str(), mps, pol);
                })
                .wait()
                .map_err(zerr)?;
            subscribers.push(sub);
        }
        let mut queryables = Vec::with_capacity(2);
        {
            let sh = shared.clone();
            let key = snapshot_key(&ns, me);
            let reply_key = key.clone();
            let mps = cfg.max_packet_size;
            let q = session
                .declare_queryable(key)
                .complete(true)
                .callback(move |query| {
                    // DF-ZEN-5: the sans-IO server policy of df_core::snapshot answers.
                    let params = query.parameters().as_str().to_owned();
                    if !sh.may_answer(&params) {
                        // DF-ZEN-155: a short error, never a chunk, for a non-member
                        sh.snapshot_refused.fetch_add(1, Ordering::Relaxed);
                        let _ = query.reply_err("not a member").wait();
                        return;
                    }
                    let answer = parse_chunk_params(&params, mps).and_then(|(chunk, _)| {
                        sh.with_server(chunk == 0, true, |srv, now, capture| {
                            srv.answer(&params, now, capture)
                        })?
                    });
                    let _ = match answer {
                        Ok(buf) => query
                            .reply(reply_key.clone(), buf)
                            .encoding(
                                Encoding::APPLICATION_OCTET_STREAM.with_schema(SNAPSHOT_SCHEMA),
                            )
                            .wait(),
                        Err(e) => query.reply_err(e.to_string()).wait(),
                    };
                })
                .wait()
                .map_err(zerr)?;
            queryables.push(q);
        }
        {
            let sh = shared.clone();
            let key = info_key(&ns, me);
            let reply_key = key.clone();
            let q = session
                .declare_queryable(key)
                .complete(true)
                .callback(move |query| {
                    let info =
                        sh.with_server(true, false, |srv, now, capture| srv.info(now, capture));
                    let _ = match info {
                        Ok(mut info) => {
                            if let Some(o) = info.as_object_mut() {
                                o.extend(lock(&sh.info_extra).clone());
                            }
                            query
                                .reply(reply_key.clone(), info.to_string())
                                .encoding(Encoding::APPLICATION_JSON)
                                .wait()
                        }
                        Err(e) => query.reply_err(e.to_string()).wait(),
                    };
                })
                .wait()
                .map_err(zerr)?;
            queryables.push(q);
        }
        let alive_sub = {
            let sh = shared.clone();
            session
                .liveliness()
                .declare_subscriber(format!("{ns}/v1/alive/*"))
                .history(true)
                .callback(move |s| {
                    let Some(node) = parse_node(s.key_expr().as_str()) else {
                        return;
                    };
                    if node == me {
                        return;
                    }
                    let mut p = lock(&sh.peers);
                    match s.kind() {
                        SampleKind::Put => p.insert(node),
                        SampleKind::Delete => p.remove(&node),
                    };
                    drop(p);
                    sh.peers_cv.notify_all();
                })
                .wait()
                .map_err(zerr)?
        };
        let token = session
            .liveliness()
            .declare_token(alive_key(&ns, me))
            .wait()
            .map_err(zerr)?;
        Ok(ZenohTransport {
            cfg,
            session,
            publisher,
            _subscribers: subscribers,
            _alive_sub: alive_sub,
            _queryables: queryables,
            token: Some(token),
            shared,
            closed: false,
        })
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.cfg.namespace
    }
    /// The Zenoh session (for extra declarations).
    pub fn session(&self) -> &Session {
        &self.session
    }

    fn check_open(&self) -> Result<(), TransportError> {
        if self.closed {
            Err(TransportError::Closed)
        } else {
            Ok(())
        }
    }

    /// The live peers (liveliness tokens seen, own excluded).
    fn live(&self) -> BTreeSet<u64> {
        lock(&self.shared.peers).clone()
    }

    /// Waits until `node` is no longer live; `false` on timeout.
    pub fn wait_for_peer_gone(&self, node: u64, timeout: Duration) -> bool {
        let p = lock(&self.shared.peers);
        let (p, _) = self
            .shared
            .peers_cv
            .wait_timeout_while(p, timeout, |p| p.contains(&node))
            .unwrap_or_else(|e| e.into_inner());
        !p.contains(&node)
    }

    /// Queries the info queryable of `peer`.
    pub fn info(&self, peer: u64, timeout: Duration) -> Result<Value, TransportError> {
        let replies = self
            .session
            .get(info_key(&self.cfg.namespace, peer))
            .target(QueryTarget::BestMatching)
            .consolidation(ConsolidationMode::None)
            .timeout(timeout)
            .wait()
            .map_err(zerr)?;
        let mut err = None;
        while let Ok(r) = replies.recv() {
            match r.result() {
                Ok(s) => {
                    return serde_json::from_slice(&s.payload().to_bytes()).map_err(|e| {
                        TransportError::Snapshot(SnapshotError::new(
                            SnapshotErrorKind::ServerError,
                            format!("info JSON: {e}"),
                        ))
                    });
                }
                Err(e) => err = Some(String::from_utf8_lossy(&e.payload().to_bytes()).into_owned()),
            }
        }
        Err(match err {
            Some(e) => TransportError::Snapshot(SnapshotError::new(
                SnapshotErrorKind::ServerError,
                format!("info of {}: {e}", node_hex(peer)),
            )),
            None => TransportError::Timeout(format!("no info from {}", node_hex(peer))),
        })
    }

    /// One chunk query (the I/O of [`fetch_snapshot_chunks`]): the reply bytes, or a typed error
    /// (`ServerError` for an error reply, `Timeout` when nobody answered in time).
    fn get_chunk(
        &self,
        peer: u64,
        chunk: u64,
        size: usize,
        timeout: Duration,
    ) -> Result<Vec<u8>, SnapshotError> {
        let sel = format!(
            "{}?{}&from={}",
            snapshot_key(&self.cfg.namespace, peer),
            format_chunk_params(chunk, size),
            node_hex(self.cfg.node_id)
        );
        let replies = self
            .session
            .get(sel)
            .target(QueryTarget::BestMatching)
            .consolidation(ConsolidationMode::None)
            .timeout(timeout.max(Duration::from_millis(1)))
            .wait()
            .map_err(|e| SnapshotError::new(SnapshotErrorKind::NoServer, e.to_string()))?;
        let mut err = None;
        while let Ok(r) = replies.recv() {
            match r.result() {
                Ok(s) => return Ok(s.payload().to_bytes().into_owned()),
                Err(e) => err = Some(String::from_utf8_lossy(&e.payload().to_bytes()).into_owned()),
            }
        }
        Err(match err {
            Some(e) => SnapshotError::new(
                SnapshotErrorKind::ServerError,
                format!("node {}: {e}", node_hex(peer)),
            ),
            None => SnapshotError::new(
                SnapshotErrorKind::Timeout,
                format!(
                    "no snapshot chunk {chunk} from {} within {timeout:?}",
                    node_hex(peer)
                ),
            ),
        })
    }

    /// [`Transport::fetch_snapshot`] with an explicit chunk size: the chunks of `peer`'s snapshot go
    /// through a [`df_core::snapshot::SnapshotAssembler`] (node, fingerprint, snapshot id, total, offsets,
    /// finite values, digest: DF-ZEN-12); restarts from chunk 0 (at most 4 times) when the server
    /// switches snapshots.
    pub fn fetch_snapshot_chunked(
        &self,
        peer: u64,
        fingerprint: &[u8; 32],
        chunk_size: usize,
        timeout: Duration,
    ) -> Result<VerifiedSnapshot, TransportError> {
        self.check_open()?;
        let asm = SnapshotAssembler::new(*fingerprint, chunk_size)?.expect_node(peer);
        let request =
            |chunk: u64, size: usize, left: Duration| self.get_chunk(peer, chunk, size, left);
        Ok(fetch_snapshot_chunks(
            request,
            &asm,
            Instant::now() + timeout,
            4,
            Instant::now,
        )?)
    }
}

impl Transport for ZenohTransport {
    fn node_id(&self) -> u64 {
        self.cfg.node_id
    }

    /// Publishes one packet on this node's delta key (blocks under congestion).
    fn publish(&self, packet: &[u8]) -> Result<(), TransportError> {
        self.check_open()?;
        self.publisher.put(packet.to_vec()).wait().map_err(zerr)?;
        self.shared.published.fetch_add(1, Ordering::Relaxed);
        self.shared
            .published_bytes
            .fetch_add(packet.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn set_snapshot_version(&self, version: Option<SnapshotVersion>) {
        *lock(&self.shared.version) = version;
    }

    fn set_info_member(&self, name: &str, value: Option<Value>) {
        let mut m = lock(&self.shared.info_extra);
        match value {
            Some(v) => m.insert(name.to_owned(), v),
            None => m.remove(name),
        };
    }

    fn query_info(&self, peer: u64, timeout: Duration) -> Result<Value, TransportError> {
        self.check_open()?;
        self.info(peer, timeout)
    }

    fn take_screened(&self) -> Vec<(ErrorCode, u64)> {
        let o = self.shared.screened_oversize.swap(0, Ordering::Relaxed);
        let b = self
            .shared
            .screened_bad_identifier
            .swap(0, Ordering::Relaxed);
        [(ErrorCode::Oversize, o), (ErrorCode::BadIdentifier, b)]
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    fn set_members(&self, members: Option<HashSet<u64>>, live: bool) {
        *lock(&self.shared.members) = (members, live);
    }

    fn drain(&self, max: usize) -> Result<Vec<Vec<u8>>, TransportError> {
        self.check_open()?;
        let mut q = lock(&self.shared.queue);
        let out = q.drain(max);
        drop(q);
        self.shared.queue_cv.notify_all();
        Ok(out)
    }

    fn wait_for_packets(&self, timeout: Duration) -> Result<bool, TransportError> {
        self.check_open()?;
        let q = lock(&self.shared.queue);
        let (q, _) = self
            .shared
            .queue_cv
            .wait_timeout_while(q, timeout, |q| q.is_empty())
            .unwrap_or_else(|p| p.into_inner());
        Ok(!q.is_empty())
    }

    fn peers(&self) -> Result<BTreeSet<u64>, TransportError> {
        self.check_open()?;
        Ok(self.live())
    }

    fn wait_for_peers(
        &self,
        n: usize,
        expected: &[u64],
        timeout: Duration,
    ) -> Result<BTreeSet<u64>, TransportError> {
        self.check_open()?;
        let p = lock(&self.shared.peers);
        let (p, _) = self
            .shared
            .peers_cv
            .wait_timeout_while(p, timeout, |p| !peers_satisfied(n, expected, p))
            .unwrap_or_else(|e| e.into_inner());
        if peers_satisfied(n, expected, &p) {
            Ok(p.clone())
        } else {
            Err(TransportError::Timeout(peer_timeout_message(
                n, expected, &p, timeout,
            )))
        }
    }

    /// Serves snapshots and info from `provider` (DF-ZEN-5). Chunk-0 and info requests capture a
    /// new snapshot unless the last one is younger than 10 s and was taken at the version
    /// [`Transport::set_snapshot_version`] tells now; later chunks use the last capture.
    fn serve_snapshot(&self, provider: SnapshotProvider) -> Result<(), TransportError> {
        self.check_open()?;
        *lock(&self.shared.provider) = Some(provider);
        // A new provider: the next request captures from it.
        let fresh = SnapshotServer::new(self.cfg.node_id, self.cfg.max_packet_size)?;
        *lock(&self.shared.server) = fresh;
        Ok(())
    }

    /// [`ZenohTransport::fetch_snapshot_chunked`] with [`DEFAULT_CHUNK_SIZE`] values per chunk.
    fn fetch_snapshot(
        &self,
        peer: u64,
        fingerprint: &[u8; 32],
        timeout: Duration,
    ) -> Result<VerifiedSnapshot, TransportError> {
        self.fetch_snapshot_chunked(peer, fingerprint, DEFAULT_CHUNK_SIZE, timeout)
    }

    fn stats(&self) -> TransportStats {
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let q = lock(&self.shared.queue);
        TransportStats {
            published_packets: ld(&self.shared.published),
            published_bytes: ld(&self.shared.published_bytes),
            received_packets: q.received,
            received_bytes: q.received_bytes,
            dropped_packets: q.dropped,
            dropped_bytes: q.dropped_bytes,
            queued_packets: q.len() as u64,
            queued_bytes: q.bytes(),
            rejected_not_member: ld(&self.shared.rejected_not_member),
            rate_limited: q.rate_limited,
            snapshot_refused: ld(&self.shared.snapshot_refused),
        }
    }

    /// Undeclares the token (peers see this node go) and closes the session; idempotent.
    fn close(&mut self) -> Result<(), TransportError> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        self.shared.closing.store(true, Ordering::Release);
        // Wake anyone blocked on the queue (Block policy) or on the peer set.
        self.shared.queue_cv.notify_all();
        self.shared.peers_cv.notify_all();
        let token = self.token.take().map(|t| t.undeclare().wait());
        let closed = self.session.close().wait();
        log::debug!(target: "delta_fabric", "zenoh session of {} closed", node_hex(self.cfg.node_id));
        if let Some(Err(e)) = token {
            return Err(zerr(e));
        }
        closed.map_err(zerr)
    }
}

impl Drop for ZenohTransport {
    fn drop(&mut self) {
        if let Err(e) = Transport::close(self) {
            log::warn!(target: "delta_fabric", "closing the zenoh session: {e}");
        }
    }
}
