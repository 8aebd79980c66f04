//! Free TCP ports for nodes that listen later (launchers, tests, benchmarks): the mirror of
//! Python's `delta_fabric.ports`.
//!
//! `bind("127.0.0.1:0")` hands out a port from the kernel's *ephemeral* range, the range it also
//! uses for the source ports of outgoing connections. A port picked that way and released, for a
//! node that starts a moment later, can meanwhile become the source port of another connection
//! (Zenoh opens several): the node's listen then fails with `EADDRINUSE`, and a connection to a
//! port that nothing should listen on can even succeed (TCP self-connect). The ports given here lie
//! *below* the ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range` on Linux, else 32768),
//! which the kernel never hands out as source ports; each is checked free by binding it, and a
//! process never gets the same port twice from this module.

use std::collections::HashSet;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

/// Ports below this are never chosen (privileged).
pub const LOWEST: u16 = 1024;
/// How wide the range below the ephemeral range that ports are drawn from is.
pub const SPAN: u16 = 12000;
/// Where Linux keeps the ephemeral range.
pub const EPHEMERAL_RANGE: &str = "/proc/sys/net/ipv4/ip_local_port_range";

fn handed_out() -> &'static Mutex<HashSet<u16>> {
    static SET: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    SET.get_or_init(|| Mutex::new(HashSet::new()))
}

/// The lowest port of the kernel's ephemeral range as written in `path` (32768 where it cannot be
/// read or is out of range).
pub fn ephemeral_low_from(path: &Path) -> u16 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|low| u32::from(LOWEST) < *low && *low <= 65535)
        .map_or(32768, |low| low as u16)
}

/// The lowest port of the kernel's ephemeral range (32768 where it cannot be read).
pub fn ephemeral_low() -> u16 {
    ephemeral_low_from(Path::new(EPHEMERAL_RANGE))
}

/// `n` distinct TCP ports, free on `host` now and never handed out before by this process, drawn
/// at random from `[lo, hi]`. An error of kind `AddrNotAvailable` when no `n` such ports are found.
pub fn free_ports_in(n: usize, host: IpAddr, lo: u16, hi: u16) -> io::Result<Vec<u16>> {
    let mut given = handed_out().lock().unwrap_or_else(|e| e.into_inner());
    draw(n, host, lo, hi, &mut given)
}

/// [`free_ports_in`] against the set `given` of ports already handed out (extended on success).
fn draw(
    n: usize,
    host: IpAddr,
    lo: u16,
    hi: u16,
    given: &mut HashSet<u16>,
) -> io::Result<Vec<u16>> {
    let mut rng = RandomState::new().build_hasher();
    let width = u64::from(hi.saturating_sub(lo)) + 1;
    let mut out = Vec::with_capacity(n);
    for i in 0..50 * width {
        if out.len() == n {
            break;
        }
        rng.write_u64(i);
        let port = lo + (rng.finish() % width) as u16;
        if given.contains(&port) || out.contains(&port) {
            continue;
        }
        if TcpListener::bind(SocketAddr::new(host, port)).is_err() {
            continue;
        }
        out.push(port);
    }
    if out.len() < n {
        return Err(io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            format!("no {n} free TCP ports on {host} in [{lo}, {hi}]"),
        ));
    }
    given.extend(out.iter().copied());
    Ok(out)
}

/// `n` distinct TCP ports, free on `host` now and below the ephemeral range.
pub fn free_ports_on(n: usize, host: IpAddr) -> io::Result<Vec<u16>> {
    let hi = ephemeral_low() - 1;
    let lo = LOWEST.max(hi.saturating_sub(SPAN));
    free_ports_in(n, host, lo, hi)
}

/// `n` distinct TCP ports, free on 127.0.0.1 now and below the ephemeral range.
pub fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    free_ports_on(n, IpAddr::from([127, 0, 0, 1]))
}

/// One port of [`free_ports`].
pub fn free_port() -> io::Result<u16> {
    free_ports(1).map(|p| p[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_free_and_below_the_ephemeral_range() {
        let low = ephemeral_low();
        let mut got = free_ports(20).expect("ports");
        for _ in 0..20 {
            got.push(free_port().expect("port"));
        }
        let distinct: HashSet<u16> = got.iter().copied().collect();
        assert_eq!(distinct.len(), 40);
        for p in got {
            assert!((LOWEST..low).contains(&p), "{p} not in [{LOWEST}, {low})");
            TcpListener::bind(("127.0.0.1", p)).expect("still free");
        }
    }

    #[test]
    fn a_port_in_use_is_never_given() {
        // Hold one port of a range of 8: it is never handed out, the other free ones are.
        let low = ephemeral_low();
        let (lo, hi) = (low - 8, low - 1);
        let held = (lo..=hi)
            .find_map(|p| TcpListener::bind(("127.0.0.1", p)).ok())
            .expect("a free port in the 8 below the ephemeral range");
        let busy = held.local_addr().expect("addr").port();
        let host = IpAddr::from([127, 0, 0, 1]);
        let mut given = HashSet::new();
        let free = draw(2, host, lo, hi, &mut given).expect("two of the other 7");
        assert!(!free.contains(&busy) && free.iter().all(|p| (lo..=hi).contains(p)));
        assert_eq!(given, free.iter().copied().collect());
        // What was handed out is never handed out again.
        let more = draw(1, host, lo, hi, &mut given).expect("one more");
        assert!(!free.contains(&more[0]) && more[0] != busy);
    }

    #[test]
    fn range_exhausted_is_a_clear_error() {
        let host = IpAddr::from([127, 0, 0, 1]);
        let held = (LOWEST + 5000..ephemeral_low())
            .find_map(|p| TcpListener::bind(("127.0.0.1", p)).ok())
            .expect("a free port");
        let p = held.local_addr().expect("addr").port();
        let mut given = HashSet::new();
        let e = draw(1, host, p, p, &mut given).expect_err("the one port is held");
        assert_eq!(e.kind(), io::ErrorKind::AddrNotAvailable);
        assert_eq!(
            e.to_string(),
            format!("no 1 free TCP ports on 127.0.0.1 in [{p}, {p}]")
        );
        drop(held);
        // Two ports from a range of one: refused, and nothing is marked handed out.
        assert!(draw(2, host, p, p, &mut given).is_err());
        assert!(given.is_empty());
        // The port once handed out is not handed out again.
        assert_eq!(draw(1, host, p, p, &mut given).expect("free now"), vec![p]);
        assert!(draw(1, host, p, p, &mut given).is_err());
    }

    #[test]
    fn ephemeral_low_reads_the_kernel_range() {
        let dir = std::env::temp_dir().join(format!("df-ports-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        for (text, want) in [
            ("40000\t60999\n", 40000),
            ("garbage", 32768),
            ("", 32768),
            ("80 90", 32768),
        ] {
            let f = dir.join("range");
            std::fs::write(&f, text).expect("write");
            assert_eq!(ephemeral_low_from(&f), want, "{text:?}");
        }
        assert_eq!(ephemeral_low_from(&dir.join("missing")), 32768);
        std::fs::remove_dir_all(&dir).expect("clean");
    }
}
