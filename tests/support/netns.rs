//! Network namespaces for the tests that need two "nodes" on one machine
//! (root and iproute2; the build says whether it found them:
//! `cfg(nixl_agent_netns)`): two namespaces joined by a veth pair, or one
//! joined to this one. Deleted, with their pairs, when dropped.

use std::process::{Command, Stdio};
use std::time::Duration;

/// The longest one `ip` command may take.
const IP_WITHIN: Duration = Duration::from_secs(30);

/// `ip args`, to its end within [`IP_WITHIN`]; `Err` when there is no `ip`.
fn run_ip(args: &[&str]) -> Result<std::process::Output, String> {
    let child = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("ip: {e}"))?;
    Ok(super::wait_with_output_within(
        child,
        IP_WITHIN,
        &format!("ip {}", args.join(" ")),
    ))
}

/// Two network namespaces joined by a veth pair; deleted (with the pair)
/// when dropped, panic or not.
pub struct Netns {
    names: Vec<String>,
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = run_ip(&["netns", "del", n]);
        }
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = run_ip(args)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn effective_uid() -> Option<u32> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// The namespaces and the pair, or why they cannot be made here.
pub fn veth_pair(ns: [&str; 2], dev: [&str; 2], ips: [&str; 2]) -> Result<Netns, String> {
    match effective_uid() {
        Some(0) => {}
        uid => return Err(format!("needs root (euid {uid:?})")),
    }
    let mut guard = Netns { names: Vec::new() };
    for n in ns {
        let _ = run_ip(&["netns", "del", n]);
        ip(&["netns", "add", n])?;
        guard.names.push(n.to_string());
    }
    ip(&[
        "link", "add", dev[0], "netns", ns[0], "type", "veth", "peer", "name", dev[1], "netns", ns[1],
    ])?;
    for i in 0..2 {
        ip(&["-n", ns[i], "addr", "add", &format!("{}/24", ips[i]), "dev", dev[i]]).unwrap();
        ip(&["-n", ns[i], "link", "set", "lo", "up"]).unwrap();
        ip(&["-n", ns[i], "link", "set", dev[i], "up"]).unwrap();
    }
    Ok(guard)
}

/// A veth pair between this namespace (`dev[0]`, `ips[0]`) and a new one
/// (`ns`, `dev[1]`, `ips[1]`): a process started in `ns` is another node
/// to UCX, reachable from here.
pub fn veth_to_here(ns: &str, dev: [&str; 2], ips: [&str; 2]) -> Result<Netns, String> {
    match effective_uid() {
        Some(0) => {}
        uid => return Err(format!("needs root (euid {uid:?})")),
    }
    let _ = run_ip(&["netns", "del", ns]);
    ip(&["netns", "add", ns])?;
    let guard = Netns {
        names: vec![ns.to_string()],
    };
    ip(&[
        "link", "add", dev[0], "type", "veth", "peer", "name", dev[1], "netns", ns,
    ])?;
    ip(&["addr", "add", &format!("{}/24", ips[0]), "dev", dev[0]])?;
    ip(&["link", "set", dev[0], "up"])?;
    ip(&["-n", ns, "addr", "add", &format!("{}/24", ips[1]), "dev", dev[1]])?;
    ip(&["-n", ns, "link", "set", "lo", "up"])?;
    ip(&["-n", ns, "link", "set", dev[1], "up"])?;
    Ok(guard)
}
