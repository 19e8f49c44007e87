//! A Redis master with replicas and, optionally, three Sentinels on loopback TCP ports,
//! each process in one temp dir, killed on drop or with the test process. The Sentinels
//! fail over fast (down after 1 s) so that a test sees a failover within seconds.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::children;

/// The name the Sentinels monitor the master under.
pub const MASTER_NAME: &str = "lh-test";

/// One redis-server (data node or Sentinel).
pub struct Node {
    pub port: u16,
    conf: PathBuf,
    sentinel: bool,
    child: Option<Child>,
}

impl Node {
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(format!("redis://{}", self.addr())).expect("redis url")
    }

    pub fn pid(&self) -> nix::unistd::Pid {
        let child = self.child.as_ref().expect("a running node");
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"))
    }

    /// SIGSTOP / SIGCONT / SIGKILL.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(self.pid(), signal).expect("signal redis-server");
    }

    /// Kills it as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it (again, after [`Self::kill`]), waiting until it answers.
    pub fn start(&mut self) {
        let mut command = children::guarded("redis-server");
        command.arg(&self.conf);
        if self.sentinel {
            command.arg("--sentinel");
        }
        command
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        self.child = Some(children::spawn(command).expect("start redis-server"));
        wait_until_answers(self.port);
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A master, its replicas and its Sentinels.
pub struct Topology {
    pub master: Node,
    pub replicas: Vec<Node>,
    pub sentinels: Vec<Node>,
    _dir: TempDir,
}

impl Topology {
    /// A master with `replicas` replicas (linked when this returns) and `sentinels`
    /// Sentinels (which have seen every replica when this returns).
    pub async fn start(replicas: usize, sentinels: usize) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lh-sentinel")
            .tempdir()
            .expect("temp dir");
        let master_port = free_port();
        let mut master = data_node(dir.path(), master_port, None);
        master.start();
        let mut linked = Vec::new();
        for _ in 0..replicas {
            let mut replica = data_node(dir.path(), free_port(), Some(master_port));
            replica.start();
            linked.push(replica);
        }
        // Linked on the replica's side, and acknowledging on the master's: after a diskless
        // sync the master streams nothing to a replica (no GETACK, so WAIT cannot count it)
        // until the replica's first acknowledgement, up to a second later.
        for replica in &linked {
            wait_for(Duration::from_secs(15), "the replica to link", || {
                info(replica.port, "replication").contains("master_link_status:up")
            });
        }
        // A write every replica acknowledged (WAIT returns at once after their first ack).
        if replicas > 0 {
            let mut conn = master.client().get_connection().expect("the master");
            let _: () = redis::cmd("SET")
                .arg("fixture:linked")
                .arg(1)
                .query(&mut conn)
                .expect("SET");
            let acked: usize = redis::cmd("WAIT")
                .arg(replicas)
                .arg(15_000)
                .query(&mut conn)
                .expect("WAIT");
            assert_eq!(acked, replicas, "the replicas never acknowledged");
        }
        let mut watching = Vec::new();
        for _ in 0..sentinels {
            let mut sentinel = sentinel_node(dir.path(), free_port(), master_port);
            sentinel.start();
            watching.push(sentinel);
        }
        for sentinel in &watching {
            wait_for(
                Duration::from_secs(15),
                "the Sentinels to see every replica",
                || sentinel_sees(sentinel.port, replicas, sentinels - 1),
            );
        }
        Self {
            master,
            replicas: linked,
            sentinels: watching,
            _dir: dir,
        }
    }

    pub fn sentinel_addrs(&self) -> Vec<String> {
        self.sentinels.iter().map(Node::addr).collect()
    }

    /// The master's address as the first Sentinel names it now.
    pub fn named_master(&self) -> Option<String> {
        let mut conn = self.sentinels.first()?.client().get_connection().ok()?;
        let (host, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(MASTER_NAME)
            .query(&mut conn)
            .ok()?;
        Some(format!("{host}:{port}"))
    }
}

fn data_node(dir: &Path, port: u16, replica_of: Option<u16>) -> Node {
    let node_dir = dir.join(port.to_string());
    std::fs::create_dir_all(&node_dir).expect("node dir");
    let mut conf = format!(
        "port {port}\nbind 127.0.0.1\ndir {}\nsave \"\"\nappendonly no\n\
         repl-diskless-sync-delay 0\nenable-debug-command yes\n",
        node_dir.display()
    );
    if let Some(master) = replica_of {
        conf.push_str(&format!("replicaof 127.0.0.1 {master}\n"));
    }
    let path = node_dir.join("redis.conf");
    std::fs::write(&path, conf).expect("write redis.conf");
    Node {
        port,
        conf: path,
        sentinel: false,
        child: None,
    }
}

fn sentinel_node(dir: &Path, port: u16, master: u16) -> Node {
    let node_dir = dir.join(format!("s{port}"));
    std::fs::create_dir_all(&node_dir).expect("node dir");
    // Sentinel rewrites its file: one writable file each.
    let conf = format!(
        "port {port}\nbind 127.0.0.1\ndir {}\n\
         sentinel monitor {MASTER_NAME} 127.0.0.1 {master} 2\n\
         sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
         sentinel failover-timeout {MASTER_NAME} 3000\n\
         sentinel parallel-syncs {MASTER_NAME} 1\n",
        node_dir.display()
    );
    let path = node_dir.join("sentinel.conf");
    std::fs::write(&path, conf).expect("write sentinel.conf");
    Node {
        port,
        conf: path,
        sentinel: true,
        child: None,
    }
}

/// A loopback port free now (the kernel's pick; a race with another process binding it in
/// between is possible but unlikely).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn wait_until_answers(port: u16) {
    wait_for(Duration::from_secs(10), "redis-server to answer", || {
        redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .and_then(|c| c.get_connection())
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok()
    });
}

/// `INFO section` of the node on `port` ("" when it does not answer).
pub fn info(port: u16, section: &str) -> String {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .and_then(|c| c.get_connection())
        .and_then(|mut c| redis::cmd("INFO").arg(section).query::<String>(&mut c))
        .unwrap_or_default()
}

fn sentinel_sees(port: u16, replicas: usize, peers: usize) -> bool {
    let Ok(mut conn) =
        redis::Client::open(format!("redis://127.0.0.1:{port}")).and_then(|c| c.get_connection())
    else {
        return false;
    };
    let fields: redis::RedisResult<Vec<String>> = redis::cmd("SENTINEL")
        .arg("MASTER")
        .arg(MASTER_NAME)
        .query(&mut conn);
    let Ok(fields) = fields else { return false };
    let field = |name: &str| {
        fields
            .chunks(2)
            .find(|kv| kv[0] == name)
            .and_then(|kv| kv.get(1))
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0)
    };
    field("num-slaves") >= replicas && field("num-other-sentinels") >= peers
}

/// Polls `check` every 50 ms until it holds, failing the test after `limit`.
pub fn wait_for(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
