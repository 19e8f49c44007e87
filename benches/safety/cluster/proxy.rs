//! The reply-lost fault's proxy: a TCP forwarder in front of one cluster node, whose port the
//! node announces (`cluster-announce-port`), so that everything that finds the node through
//! the cluster (the instances, the Redisson-layout sessions, and the other nodes' replicas)
//! goes through it. While armed, it cuts a connection from 127.0.0.1 (the instances; the
//! nodes connect from 127.0.1.n and are never cut) right after forwarding a request that
//! holds an `FCALL`, before relaying its reply: the function ran, its answer is lost, and
//! redis-rs's cluster client re-sends it on a new connection, where it runs again.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A connection is cut at most this often per proxy while armed, so that most re-sent calls
/// go through (and so run twice) rather than fail every retry.
const CUT_EVERY: Duration = Duration::from_millis(150);

pub(super) struct Proxy {
    /// The port the node announces (this proxy's).
    pub(super) port: u16,
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Listens on `listener` (bound to 127.0.0.1) and forwards to 127.0.0.1:`node`.
    pub(super) fn start(listener: std::net::TcpListener, node: u16) -> anyhow::Result<Self> {
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let listener = TcpListener::from_std(listener)?;
        let armed = Arc::new(AtomicBool::new(false));
        let cuts = Arc::new(AtomicU64::new(0));
        let last_cut = Arc::new(tokio::sync::Mutex::new(tokio::time::Instant::now()));
        let task = tokio::spawn({
            let (armed, cuts) = (armed.clone(), cuts.clone());
            async move {
                while let Ok((client, peer)) = listener.accept().await {
                    let (armed, cuts, last_cut) = (armed.clone(), cuts.clone(), last_cut.clone());
                    tokio::spawn(async move {
                        if let Ok(server) = TcpStream::connect(("127.0.0.1", node)).await {
                            let cuttable = peer.ip() == IpAddr::from([127, 0, 0, 1]);
                            let _ = client.set_nodelay(true);
                            let _ = server.set_nodelay(true);
                            forward(client, server, cuttable, armed, cuts, last_cut).await;
                        }
                    });
                }
            }
        });
        Ok(Self {
            port,
            armed,
            cuts,
            task,
        })
    }

    pub(super) fn arm(&self, on: bool) {
        self.armed.store(on, Ordering::Relaxed);
    }

    /// Connections cut after an FCALL so far.
    pub(super) fn cuts(&self) -> u64 {
        self.cuts.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(
    client: TcpStream,
    server: TcpStream,
    cuttable: bool,
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicU64>,
    last_cut: Arc<tokio::sync::Mutex<tokio::time::Instant>>,
) {
    let (mut client_rd, mut client_wr) = client.into_split();
    let (mut server_rd, mut server_wr) = server.into_split();
    // Set before a cut request is forwarded: its reply (and all after) must never reach the
    // client.
    let cutting = Arc::new(AtomicBool::new(false));
    let replies = tokio::spawn({
        let cutting = cutting.clone();
        async move {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match server_rd.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if cutting.load(Ordering::SeqCst) || client_wr.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match client_rd.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        let cut = cuttable
            && armed.load(Ordering::Relaxed)
            && chunk.windows(5).any(|w| w.eq_ignore_ascii_case(b"FCALL"))
            && {
                let mut last = last_cut.lock().await;
                let due = last.elapsed() >= CUT_EVERY;
                if due {
                    *last = tokio::time::Instant::now();
                }
                due
            };
        if cut {
            cutting.store(true, Ordering::SeqCst);
        }
        if server_wr.write_all(chunk).await.is_err() {
            break;
        }
        if cut {
            // Time for the node to run it; then both sides go.
            tokio::time::sleep(Duration::from_millis(30)).await;
            cuts.fetch_add(1, Ordering::Relaxed);
            break;
        }
    }
    replies.abort();
}
