//! Lifecycle of a process running a `Fabric` over a `ZenohTransport`: a program
//! that panics, returns without calling `close()`, or receives SIGTERM / SIGINT exits promptly, and
//! its peers see it go. With `df_fabric::lifecycle::install` (as df-node does), SIGTERM / SIGINT stop
//! the node loop at its next step, the fabric is dropped (transport closed), one reason line is
//! printed to stderr and the exit status is 128 + signal; without it, the signal's default
//! disposition ends the process.
//!
//! `harness = false`: `main` is both the parent (the checks) and, with `--child MODE`, the child
//! process under test, so that a panic is a real process panic (no test harness catching it).
//! Exit times are measured from the parent's go line (or from the signal) to the child's exit and
//! printed; the assertion bound is generous (the target is 2 s) so that a loaded machine does not
//! make the test flaky.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use df_core::{Manifest, SyncConfig, TensorSpec};
use df_fabric::{Fabric, FabricError, Transport, VecStore};
use df_zenoh::{TransportConfig, ZenohTransport};

/// Bound on every wait of this test (the target exit time is 2 s).
const BOUND: Duration = Duration::from_secs(30);

/// A port below the kernel's ephemeral range (never the source port of another connection).
fn free_port() -> u16 {
    df_zenoh::ports::free_port().expect("free port")
}

fn config(id: u64, ns: &str, listen: u16, connect: Option<u16>) -> TransportConfig {
    let mut c = TransportConfig::new(id);
    c.namespace = ns.to_string();
    c.listen = vec![format!("tcp/127.0.0.1:{listen}")];
    c.connect = connect
        .map(|p| vec![format!("tcp/127.0.0.1:{p}")])
        .unwrap_or_default();
    c
}

const CHILD: u64 = 0xc0;
/// The program name in the child's reason line.
const CHILD_NAME: &str = "df-lifecycle-child";
const PARENT: u64 = 0xa0;

/// The child: a fabric that steps a few times, then ends as `mode` says.
fn child(mode: &str, ns: &str, parent_port: u16) {
    let manifest = Manifest::new([TensorSpec::new("w", &[8])]).expect("manifest");
    let store = VecStore::new(manifest, vec![0.5; 8]).expect("store");
    // Connect only: no listener of its own, so no race for a free port with other processes.
    let mut c = config(CHILD, ns, 0, Some(parent_port));
    c.listen.clear();
    let t = ZenohTransport::open(c).expect("open");
    t.wait_for_peers(1, &[PARENT], BOUND).expect("parent live");
    let cfg = SyncConfig {
        sync_interval: 1,
        ..SyncConfig::v1_0()
    };
    let mut fabric =
        Fabric::with_options(store, t, cfg, df_fabric::FabricOptions::v1_0()).expect("fabric");
    for i in 0..3 {
        fabric.store_mut().values_mut()[i] += 0.25;
        fabric.step().expect("step");
    }
    // The parent sees this node live before it lets the child end: a child that ended at once could
    // come and go before the parent's liveliness subscriber ever saw it. (`clean`: the handlers are
    // installed before the parent may send its signal.)
    if mode == "clean" {
        df_fabric::lifecycle::install().expect("signal handlers");
    }
    println!("ready");
    if mode != "signal" && mode != "clean" {
        let mut go = String::new();
        std::io::stdin().read_line(&mut go).expect("go line");
    }
    match mode {
        "panic" => {
            panic!("the training script failed");
        }
        "drop" => {
            // returns: `fabric` is dropped without close()
        }
        "clean" => {
            let until = Instant::now() + BOUND;
            loop {
                match fabric.step() {
                    Ok(_) => {}
                    Err(FabricError::Stopped(_)) => break,
                    Err(e) => panic!("step: {e}"),
                }
                if Instant::now() > until {
                    eprintln!("child: no signal came");
                    std::process::exit(3);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            drop(fabric); // closes the transport
            df_fabric::lifecycle::exit_if_stopped(CHILD_NAME);
            eprintln!("child: stopped without a signal");
            std::process::exit(4);
        }
        "signal" => {
            let until = Instant::now() + BOUND;
            while Instant::now() < until {
                fabric.step().expect("step");
                std::thread::sleep(Duration::from_millis(5));
            }
            eprintln!("child: no signal came");
            std::process::exit(3);
        }
        other => panic!("unknown mode {other}"),
    }
}

struct Run {
    mode: &'static str,
    exit: std::process::ExitStatus,
    stderr: String,
    exit_after: Duration,
    peer_gone_after: Option<Duration>,
}

/// Runs the child in `mode`; with `signal`, sends it once the child is ready (`clean`: the child
/// installed the lifecycle handlers).
fn run(mode: &'static str, signal: Option<&str>, clean: bool) -> Run {
    let ns = format!("df-lifecycle/{}/{mode}", std::process::id());
    let port = free_port();
    let parent = ZenohTransport::open(config(PARENT, &ns, port, None)).expect("open parent");
    let exe = std::env::current_exe().expect("exe");
    let mut c = Command::new(exe)
        .args([
            "--child",
            match (signal, clean) {
                (None, _) => mode,
                (Some(_), false) => "signal",
                (Some(_), true) => "clean",
            },
        ])
        .args([ns.as_str(), &port.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child");
    if let Err(e) = parent.wait_for_peers(1, &[CHILD], BOUND) {
        let _ = c.kill();
        let _ = c.wait();
        let mut err = String::new();
        let _ = c.stderr.take().map(|mut s| s.read_to_string(&mut err));
        panic!("{mode}: the child did not come up: {e}; its stderr: {err}");
    }
    let mut out = BufReader::new(c.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("child line");
    assert_eq!(line.trim(), "ready", "{mode}: the child's first line");
    let mut stdin = c.stdin.take().expect("stdin");
    let t0 = Instant::now();
    if signal.is_none() {
        stdin.write_all(b"go\n").expect("go");
        stdin.flush().expect("flush");
    }
    if let Some(sig) = signal {
        let ok = Command::new("kill")
            .args([sig, &c.id().to_string()])
            .status()
            .expect("kill");
        assert!(ok.success());
    }
    let exit = loop {
        if let Some(s) = c.try_wait().expect("wait") {
            break s;
        }
        if t0.elapsed() > BOUND {
            let _ = c.kill();
            let _ = c.wait();
            panic!("{mode}: the child did not exit within {BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let exit_after = t0.elapsed();
    let mut stderr = String::new();
    c.stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("child stderr");
    let peer_gone_after = parent
        .wait_for_peer_gone(CHILD, BOUND)
        .then(|| t0.elapsed());
    Run {
        mode,
        exit,
        stderr,
        exit_after,
        peer_gone_after,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        let port = args[4].parse().expect("port");
        child(&args[2], &args[3], port);
        return;
    }
    // `cargo test -- --list` and filters: this target has one test, run it unless filtered out.
    if args.iter().any(|a| a == "--list") {
        println!("lifecycle: test");
        return;
    }
    let runs = [
        run("panic", None, false),
        run("drop", None, false),
        run("sigterm", Some("-TERM"), false),
        run("sigint", Some("-INT"), false),
        run("sigterm-clean", Some("-TERM"), true),
        run("sigint-clean", Some("-INT"), true),
    ];
    for r in &runs {
        eprintln!(
            "lifecycle {:13} exit {:?} after {:.3} s; peer saw it gone after {}",
            r.mode,
            r.exit,
            r.exit_after.as_secs_f64(),
            r.peer_gone_after
                .map_or("never".into(), |d| format!("{:.3} s", d.as_secs_f64()))
        );
    }
    let [panic, drop_, term, int, term_clean, int_clean] = &runs;
    assert_eq!(panic.exit.code(), Some(101), "a panic exits with 101");
    assert!(panic.stderr.contains("the training script failed"));
    assert_eq!(drop_.exit.code(), Some(0));
    // without the lifecycle handlers: the default disposition
    assert_eq!(term.exit.signal(), Some(15));
    assert_eq!(int.exit.signal(), Some(2));
    // with them: the loop stops, the transport is closed, one reason line, 128 + signal
    for (r, name, code) in [(term_clean, "SIGTERM", 143), (int_clean, "SIGINT", 130)] {
        assert_eq!(r.exit.code(), Some(code), "{}: {}", r.mode, r.stderr);
        let want = format!("{CHILD_NAME}: stopping on {name}");
        assert!(
            r.stderr.lines().any(|l| l == want),
            "{}: no line {want:?} in {:?}",
            r.mode,
            r.stderr
        );
    }
    for r in &runs {
        assert!(r.exit_after < BOUND, "{}: {:?}", r.mode, r.exit_after);
        assert!(
            r.peer_gone_after.is_some(),
            "{}: peers never saw it go",
            r.mode
        );
    }
    eprintln!("lifecycle: ok");
}
