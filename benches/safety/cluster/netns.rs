//! The network namespace one instance can live in, joined to the host by a veth pair, and the
//! shell commands that make it (root, with `ip` and `iptables`).

use std::process::Stdio;

use anyhow::{Context as _, bail};

/// The private network namespace one instance runs in.
pub(super) struct Netns {
    pub(super) name: String,
    host_if: String,
    pub(super) host_ip: String,
    pub(super) ns_ip: String,
}

impl Netns {
    pub(super) fn create(tag: u32) -> anyhow::Result<Self> {
        let subnet = 100 + tag % 100;
        let ns = Self {
            name: format!("lhsafety{tag}"),
            host_if: format!("lhs{tag}h"),
            host_ip: format!("10.231.{subnet}.1"),
            ns_ip: format!("10.231.{subnet}.2"),
        };
        let ns_if = format!("lhs{tag}n");
        ns.teardown();
        sh(&["ip", "netns", "add", &ns.name])?;
        sh(&[
            "ip",
            "link",
            "add",
            &ns.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &ns_if,
        ])?;
        sh(&["ip", "link", "set", &ns_if, "netns", &ns.name])?;
        sh(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", ns.host_ip),
            "dev",
            &ns.host_if,
        ])?;
        sh(&["ip", "link", "set", &ns.host_if, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["ip", "netns", "exec", ns.name.as_str()];
            all.extend_from_slice(args);
            sh(&all)
        };
        inside(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", ns.ns_ip),
            "dev",
            &ns_if,
        ])?;
        inside(&["ip", "link", "set", &ns_if, "up"])?;
        inside(&["ip", "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The iptables rules that drop everything between the namespace and Redis's port.
    pub(super) fn rules(&self, redis_port: u16) -> [Vec<String>; 2] {
        let port = redis_port.to_string();
        [
            [
                "INPUT",
                "-i",
                &self.host_if,
                "-p",
                "tcp",
                "--dport",
                &port,
                "-j",
                "DROP",
            ]
            .map(String::from)
            .to_vec(),
            [
                "OUTPUT",
                "-o",
                &self.host_if,
                "-p",
                "tcp",
                "--sport",
                &port,
                "-j",
                "DROP",
            ]
            .map(String::from)
            .to_vec(),
        ]
    }

    pub(super) fn teardown(&self) {
        let _ = sh_quiet(&["ip", "netns", "del", &self.name]);
        let _ = sh_quiet(&["ip", "link", "del", &self.host_if]);
    }
}

/// Runs a command and fails with its stderr when it fails.
pub(super) fn sh(args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new(args[0])
        .args(&args[1..])
        .output()
        .with_context(|| format!("cannot run {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn sh_quiet(args: &[&str]) -> std::io::Result<std::process::Output> {
    std::process::Command::new(args[0])
        .args(&args[1..])
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .output()
}

/// Whether this process may make network namespaces and iptables rules (root, with the tools).
pub fn can_partition() -> bool {
    sh_quiet(&["true"]).is_ok()
        && std::process::Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
        && sh_quiet(&["ip", "-V"]).is_ok_and(|o| o.status.success())
        && sh_quiet(&["iptables", "-V"]).is_ok_and(|o| o.status.success())
}
