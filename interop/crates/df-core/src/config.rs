//! Sync parameters (spec section 3, DF-PAR): [`SyncConfig`].

use serde_json::Value;

use crate::replay::DEFAULT_MAX_ORIGINS;
use crate::wire::{PACKET_OVERHEAD_BOUND, ValueEncoding, entry_size_bound};

/// Protocol parameters (spec section 3, DF-PAR) plus the send encoding.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncConfig {
    /// Damping per hop (DF-RCV-5), used as `alpha as f32`.
    pub alpha: f64,
    /// Selection ratio r (DF-GEN-2).
    pub ratio: f64,
    /// Local steps between two generations (used by the node, not the engine).
    pub sync_interval: u32,
    /// Damped values with `|u| < threshold` are not relayed (compared as real numbers: f64).
    pub relay_threshold: f64,
    /// Maximum `Entry.hops`.
    pub hop_limit: u8,
    /// Maximum packet size in bytes.
    pub max_packet_size: usize,
    /// Replay window width W.
    pub replay_window: u64,
    /// Incarnations tracked per origin.
    pub max_incarnations: usize,
    /// Origins tracked (receiver bound, not fixed by the spec's table; spec DF-SEC-2).
    pub max_origins: usize,
    /// Send encoding of own and relayed entries.
    pub encoding: ValueEncoding,
}

impl Default for SyncConfig {
    fn default() -> Self {
        SyncConfig {
            alpha: 1.0,
            ratio: 0.05,
            sync_interval: 10,
            relay_threshold: 1e-6,
            hop_limit: 16,
            max_packet_size: crate::wire::DEFAULT_MAX_PACKET_SIZE,
            replay_window: 1024,
            max_incarnations: 4,
            max_origins: DEFAULT_MAX_ORIGINS,
            encoding: ValueEncoding::F32,
        }
    }
}

impl SyncConfig {
    /// Reads the keys present in a JSON object (Python `SyncSyncConfig.to_json` shape); others keep
    /// their defaults. Unknown keys are ignored.
    pub fn from_json(v: &Value) -> Result<SyncConfig, String> {
        let mut c = SyncConfig::default();
        let f = |k: &str| v.get(k).and_then(Value::as_f64);
        let u = |k: &str| v.get(k).and_then(Value::as_u64);
        if let Some(x) = f("alpha") {
            c.alpha = x;
        }
        if let Some(x) = f("ratio") {
            c.ratio = x;
        }
        if let Some(x) = f("relay_threshold") {
            c.relay_threshold = x;
        }
        if let Some(x) = u("sync_interval") {
            c.sync_interval = u32::try_from(x).map_err(|_| "sync_interval too large")?;
        }
        if let Some(x) = u("hop_limit") {
            c.hop_limit = u8::try_from(x).map_err(|_| "hop_limit > 255")?;
        }
        if let Some(x) = u("max_packet_size") {
            c.max_packet_size = usize::try_from(x).map_err(|_| "max_packet_size too large")?;
        }
        if let Some(x) = u("replay_window") {
            c.replay_window = x;
        }
        if let Some(x) = u("max_incarnations") {
            c.max_incarnations = usize::try_from(x).map_err(|_| "max_incarnations too large")?;
        }
        if let Some(x) = u("max_origins") {
            c.max_origins = usize::try_from(x).map_err(|_| "max_origins too large")?;
        }
        match v.get("encoding") {
            None => {}
            Some(Value::String(s)) => {
                c.encoding =
                    ValueEncoding::from_name(s).ok_or_else(|| format!("bad encoding {s}"))?
            }
            Some(Value::Number(n)) => {
                c.encoding = n
                    .as_u64()
                    .and_then(|x| u8::try_from(x).ok())
                    .and_then(ValueEncoding::from_u8)
                    .ok_or("bad encoding")?
            }
            Some(_) => return Err("bad encoding".into()),
        }
        Ok(c)
    }

    /// Largest number of values one generated entry may carry so that a packet holding it alone
    /// stays within `max_packet_size` (by the size bounds of [`crate::wire`]).
    pub fn max_values_per_entry(&self) -> usize {
        let room = self
            .max_packet_size
            .saturating_sub(PACKET_OVERHEAD_BOUND + entry_size_bound(0));
        (room / 8).max(1)
    }
}
