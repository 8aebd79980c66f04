//! A minimal logger for binaries and examples: DeltaFabric's records (target `delta_fabric`) on
//! stderr, one line each, at the level named by `DELTA_FABRIC_LOG` (or `RUST_LOG` when that is
//! unset): `error`, `warn`, `info`, `debug`, `trace` or `off`. Silent when neither is set.
//!
//! Libraries never install a logger; a program that has its own (`env_logger`, `tracing-log`, ...)
//! simply does not call [`init_from_env`].

use log::{LevelFilter, Log, Metadata, Record};

struct StderrLogger {
    level: LevelFilter,
}

impl Log for StderrLogger {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= self.level && m.target().starts_with(crate::LOG_TARGET)
    }

    fn log(&self, r: &Record<'_>) {
        if self.enabled(r.metadata()) {
            eprintln!("{} {}: {}", r.level(), r.target(), r.args());
        }
    }

    fn flush(&self) {}
}

/// The level a `DELTA_FABRIC_LOG` / `RUST_LOG` value asks for: a bare level (`debug`), or the
/// level of a `delta_fabric=<level>` directive in a comma-separated list. `None`: not understood.
pub fn parse_level(spec: &str) -> Option<LevelFilter> {
    let mut found = None;
    for part in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match part.split_once('=') {
            Some((target, level)) if target.trim() == crate::LOG_TARGET => {
                found = level.trim().parse().ok();
            }
            Some(_) => {}
            None if found.is_none() => found = part.parse().ok(),
            None => {}
        }
    }
    found
}

/// Installs the stderr logger when `DELTA_FABRIC_LOG` or `RUST_LOG` names a level for
/// `delta_fabric`; returns the level installed. Does nothing when another logger is already set.
pub fn init_from_env() -> Option<LevelFilter> {
    let spec = std::env::var("DELTA_FABRIC_LOG")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .or_else(|| std::env::var("RUST_LOG").ok())?;
    let level = parse_level(&spec)?;
    if level == LevelFilter::Off {
        return Some(level);
    }
    log::set_boxed_logger(Box::new(StderrLogger { level })).ok()?;
    log::set_max_level(level);
    Some(level)
}

/// A WARNING that a user must see even when nothing configured logging (a misconfigured cluster):
/// logged under [`crate::LOG_TARGET`], and also written to stderr as one line
/// (`delta-fabric: warning: ...`) when no logger would show it, unless `DELTA_FABRIC_LOG` is
/// `off`.
pub fn warn_loudly(msg: &str) {
    log::warn!(target: crate::LOG_TARGET, "{msg}");
    if log::log_enabled!(target: crate::LOG_TARGET, log::Level::Warn) {
        return; // the program's logger (or DELTA_FABRIC_LOG) shows it
    }
    let off = std::env::var("DELTA_FABRIC_LOG")
        .ok()
        .and_then(|v| parse_level(&v))
        .is_some_and(|l| l < LevelFilter::Warn);
    if !off {
        eprintln!("delta-fabric: warning: {msg}");
    }
}

/// Says once per process, as a loud warning ([`warn_loudly`]), that the node `node_id` on a
/// network transport runs unsigned: then any process that reaches its network can publish entries
/// under a member's id (spec section 13). Called by the Zenoh node constructors when no keys are
/// given; a node on the in-memory transport is reachable only from its process and says nothing.
pub fn say_unsigned(node_id: u64) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        warn_loudly(&format!(
            "node {node_id:016x} runs unsigned: any process that reaches its Zenoh network can \
             publish entries under a member's id; a signed cluster pins every member's key \
             (DELTA_FABRIC_KEYS and DELTA_FABRIC_SECRET_KEY, or Fabric::set_signing; spec section \
             13.1)"
        ));
    });
}
