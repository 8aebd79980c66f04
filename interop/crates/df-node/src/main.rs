//! `df-node`: one Burn training node of the DeltaFabric demo (see the crate documentation).

use std::io::{BufRead, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use df_node::NodeError;
use df_node::node::{Channel, run_node};
use serde_json::Value;

/// Events as JSON lines on stdout; `stop` (or EOF) on stdin.
struct StdioChannel {
    stop: Arc<(Mutex<bool>, Condvar)>,
}

impl StdioChannel {
    fn new() -> Self {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let s2 = Arc::clone(&stop);
        std::thread::spawn(move || {
            let stdin = std::io::stdin();
            for line in stdin.lock().lines() {
                match line {
                    Ok(l) if l.trim() == "stop" => break,
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            let (m, c) = &*s2;
            if let Ok(mut g) = m.lock() {
                *g = true;
            }
            c.notify_all();
        });
        StdioChannel { stop }
    }
}

impl Channel for StdioChannel {
    fn emit(&mut self, event: Value) {
        let mut out = std::io::stdout().lock();
        // A closed stdout (parent gone) must not abort the node.
        let _ = writeln!(out, "{event}");
        let _ = out.flush();
    }

    fn stop_requested(&mut self, timeout: Duration) -> bool {
        let (m, c) = &*self.stop;
        let Ok(g) = m.lock() else { return true };
        match c.wait_timeout_while(g, timeout, |stopped| !*stopped) {
            Ok((g, _)) => *g,
            Err(_) => true,
        }
    }
}

fn run() -> Result<(), NodeError> {
    let opts = df_node::cli::parse_or_exit(std::env::args().skip(1));
    // SIGINT / SIGTERM: the loop stops at its next step, the transport is closed, and `main`
    // prints the reason and exits with 128 + signal.
    df_fabric::lifecycle::install().map_err(|e| NodeError::io("signal handlers", e))?;
    df_fabric::logging::init_from_env();
    df_zenoh::init_log_from_env();
    let data = df_node::data::read_dataset(&opts.data)?;
    let transport = if opts.sync {
        Some(df_node::zenoh::open(&opts)? as Box<dyn df_fabric::Transport>)
    } else {
        None
    };
    let mut ch = StdioChannel::new();
    run_node(&opts, &data, transport, &mut ch)?;
    Ok(())
}

fn main() {
    let result = run();
    // Everything of the run (the fabric and its transport) is dropped by now.
    df_fabric::lifecycle::exit_if_stopped("df-node");
    if let Err(e) = result {
        eprintln!("df-node: {e}");
        std::process::exit(if matches!(e, NodeError::Usage(_)) {
            2
        } else {
            1
        });
    }
}
