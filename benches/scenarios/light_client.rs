//! A light HTTP client for the loops whose figures the client's own cost would blur: the
//! uncontended loop and the parked waiters' drain. The client shares the cores with the server
//! and Redis, so what it spends per request is taken from them: reqwest on a multi-threaded
//! runtime spent ~49 µs of CPU per request, wrk (a thread and a Lua VM per connection) ~33 µs,
//! hyper's client connection API ~9 µs, this one ~7.5 µs (16 connections, 2 cores). One
//! keep-alive HTTP/1.1 connection per simulated client, or streams on a shared h2c connection.

use std::time::{Duration, Instant};

use hyper::client::conn::http2;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::Deserialize;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// How long one request may take, a server-side wait included (waits here are at most 110 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The most an answer's head and body may take: the server's answers here are a few hundred
/// bytes, so more means something is wrong.
const MAX_ANSWER: usize = 64 * 1024;

enum Sender {
    H1(H1),
    H2(http2::SendRequest<String>),
}

/// An HTTP/1.1 keep-alive connection written and read directly: one write and (usually) one
/// read per request, with no connection task, channel or header map between the loop and the
/// socket. The server answers with a Content-Length body, which is all this reads.
struct H1 {
    tcp: TcpStream,
    /// The request being written, reused.
    out: Vec<u8>,
    /// Bytes read and not yet taken by an answer.
    inbox: Vec<u8>,
}

/// An answer: its status, its Location header, its body.
struct Answer {
    status: StatusCode,
    location: Option<String>,
    body: Vec<u8>,
}

/// One simulated client: its own HTTP/1.1 connection, or a handle on a shared h2c one.
pub struct Conn {
    send: Sender,
    /// host:port, for the Host header and HTTP/2's :authority.
    host: String,
}

/// A new lease as the loops need it: where to release it, and the token that proves it.
pub struct Held {
    pub path: String,
    pub token: String,
}

#[derive(Deserialize)]
struct Granted<'a> {
    #[serde(borrow)]
    token: &'a str,
}

/// `http://host:port` as the host:port to connect to.
pub fn authority(url: &str) -> anyhow::Result<String> {
    Ok(url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("the light client speaks plain http:// only: {url}"))?
        .trim_end_matches('/')
        .to_owned())
}

async fn connect(authority: &str) -> anyhow::Result<TcpStream> {
    let tcp = TcpStream::connect(authority).await?;
    tcp.set_nodelay(true)?;
    Ok(tcp)
}

impl H1 {
    /// Writes one request, with at most one header of its own, and reads its answer.
    async fn exchange(
        &mut self,
        host: &str,
        request_line: (&Method, &str),
        header: Option<(&str, &str)>,
        body: &str,
    ) -> anyhow::Result<Answer> {
        use std::io::Write as _;
        let (method, path) = request_line;
        self.out.clear();
        write!(self.out, "{method} {path} HTTP/1.1\r\nhost: {host}\r\n")?;
        if let Some((name, value)) = header {
            write!(self.out, "{name}: {value}\r\n")?;
        }
        write!(self.out, "content-length: {}\r\n\r\n{body}", body.len())?;
        self.tcp.write_all(&self.out).await?;
        loop {
            if let Some((answer, used)) = parse_answer(&self.inbox)? {
                self.inbox.drain(..used);
                return Ok(answer);
            }
            anyhow::ensure!(
                self.inbox.len() < MAX_ANSWER,
                "an answer of more than {MAX_ANSWER} bytes"
            );
            self.inbox.reserve(4096);
            if self.tcp.read_buf(&mut self.inbox).await? == 0 {
                anyhow::bail!("the server closed the connection before answering");
            }
        }
    }
}

/// The first whole answer in `bytes` and how many bytes it took, or None while more must be
/// read.
fn parse_answer(bytes: &[u8]) -> anyhow::Result<Option<(Answer, usize)>> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut head = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(head_len) = head.parse(bytes)? else {
        return Ok(None);
    };
    let status = StatusCode::from_u16(head.code.unwrap_or(0))?;
    let (mut length, mut location) = (None, None);
    for header in head.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            length = Some(std::str::from_utf8(header.value)?.trim().parse::<usize>()?);
        } else if header.name.eq_ignore_ascii_case("location") {
            location = Some(std::str::from_utf8(header.value)?.to_owned());
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            anyhow::bail!("the light client reads Content-Length bodies only");
        }
    }
    // 1xx, 204 and 304 have no body; every other answer here carries a Content-Length.
    let length = match length {
        Some(length) => length,
        None if status.is_informational()
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED =>
        {
            0
        }
        None => anyhow::bail!("an answer ({status}) with no Content-Length"),
    };
    let end = head_len + length;
    if bytes.len() < end {
        return Ok(None);
    }
    let body = bytes[head_len..end].to_vec();
    Ok(Some((
        Answer {
            status,
            location,
            body,
        },
        end,
    )))
}

impl Conn {
    /// A new HTTP/1.1 connection to `authority` (host:port), read and written by the calling
    /// task itself. hyper's client connection spent ~9 µs of CPU per request here: a connection
    /// task and a channel to it, a header map per request and per answer.
    pub async fn open(authority: &str) -> anyhow::Result<Self> {
        let h1 = H1 {
            tcp: connect(authority).await?,
            out: Vec::with_capacity(512),
            inbox: Vec::with_capacity(4096),
        };
        Ok(Self {
            send: Sender::H1(h1),
            host: authority.to_owned(),
        })
    }

    /// A new h2c connection (HTTP/2 with prior knowledge) to `authority`; clone it for each
    /// client that shares it.
    pub async fn open_h2(authority: &str) -> anyhow::Result<Self> {
        let tcp = TokioIo::new(connect(authority).await?);
        let (send, conn) = http2::handshake(TokioExecutor::new(), tcp).await?;
        tokio::spawn(conn);
        Ok(Self {
            send: Sender::H2(send),
            host: authority.to_owned(),
        })
    }

    /// Another client on the same h2c connection (None for HTTP/1.1: one client each).
    pub fn share(&self) -> Option<Self> {
        match &self.send {
            Sender::H2(send) => Some(Self {
                send: Sender::H2(send.clone()),
                host: self.host.clone(),
            }),
            Sender::H1(_) => None,
        }
    }

    /// Acquires a new lease on `lock`, waiting up to `wait_ms` server-side: 201 or an error.
    pub async fn acquire(&mut self, lock: &str, body: &str, wait_ms: u64) -> anyhow::Result<Held> {
        let path = if wait_ms == 0 {
            format!("/v1/locks/{lock}/leases")
        } else {
            format!("/v1/locks/{lock}/leases?wait_ms={wait_ms}")
        };
        let answer = self
            .send(
                Method::POST,
                &path,
                Some(("content-type", "application/json")),
                body,
            )
            .await?;
        anyhow::ensure!(
            answer.status == StatusCode::CREATED,
            "acquire answered {}: {}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        );
        let granted: Granted = serde_json::from_slice(&answer.body)?;
        Ok(Held {
            path: answer.location.unwrap_or_default(),
            token: granted.token.to_owned(),
        })
    }

    /// `GET path`: 200 or an error (the floor loop's request).
    pub async fn get(&mut self, path: &str) -> anyhow::Result<()> {
        let answer = self.send(Method::GET, path, None, "").await?;
        anyhow::ensure!(
            answer.status == StatusCode::OK,
            "GET {path} answered {}",
            answer.status
        );
        Ok(())
    }

    /// Releases `held`: 200 or an error.
    pub async fn release(&mut self, held: &Held) -> anyhow::Result<()> {
        let bearer = format!("Bearer {}", held.token);
        let answer = self
            .send(
                Method::DELETE,
                &held.path,
                Some(("authorization", &bearer)),
                "",
            )
            .await?;
        anyhow::ensure!(
            answer.status == StatusCode::OK,
            "release answered {}: {}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        );
        Ok(())
    }

    /// Sends one request with at most one header of its own, and reads its whole answer.
    async fn send(
        &mut self,
        method: Method,
        path: &str,
        header: Option<(&str, &str)>,
        body: &str,
    ) -> anyhow::Result<Answer> {
        let exchange = async {
            match &mut self.send {
                Sender::H1(h1) => h1.exchange(&self.host, (&method, path), header, body).await,
                Sender::H2(send) => {
                    use http_body_util::BodyExt as _;
                    // HTTP/2 names the server in the :authority pseudo-header, from the URI.
                    let mut request = Request::builder()
                        .method(method)
                        .uri(format!("http://{}{path}", self.host));
                    if let Some((name, value)) = header {
                        request = request.header(name, value);
                    }
                    send.ready().await?;
                    let reply = send.send_request(request.body(body.to_owned())?).await?;
                    let status = reply.status();
                    let location = reply
                        .headers()
                        .get("location")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    let body = reply.into_body().collect().await?.to_bytes().to_vec();
                    anyhow::Ok(Answer {
                        status,
                        location,
                        body,
                    })
                }
            }
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| anyhow::anyhow!("no answer within {REQUEST_TIMEOUT:?}"))?
    }
}

/// Which lock names the uncontended loop's clients cycle through.
#[derive(Debug, Clone, Copy)]
pub enum Names {
    /// Each client its own name, `u-<i>` for client `i`.
    PerClient,
    /// `n` names `u-0` .. `u-<n-1>` shared out: client `i` cycles through `u-<j>` for every `j`
    /// with `j % clients == i`, in order, round and round (at least one name per client).
    Spread(usize),
    /// No lock at all: each "cycle" is two `GET /healthz`, the floor of two HTTP requests on
    /// the same stack.
    Floor,
}

/// What the loop did: every acquire's and release's time, and the cycles completed on each
/// name (indexed by the name's number: client `i` for [`Names::PerClient`]).
pub struct Cycles {
    pub acquire: Vec<Duration>,
    pub release: Vec<Duration>,
    pub by_name: Vec<u64>,
}

/// Each of `connections` clients acquires and releases lock names (see [`Names`]) in a loop
/// until `deadline`, all on the calling thread's runtime; client `i` talks to server
/// `authorities[i % len]`, on a connection of its own or, with `http2`, as a stream of one h2c
/// connection per server shared by all its clients.
pub async fn cycle_loop(
    authorities: &[String],
    (connections, http2): (usize, bool),
    names: Names,
    deadline: Instant,
) -> anyhow::Result<Cycles> {
    let total = match names {
        Names::PerClient | Names::Floor => connections,
        Names::Spread(n) => {
            anyhow::ensure!(
                n >= connections,
                "{n} names for {connections} connections: each needs one at least"
            );
            n
        }
    };
    let mut shared = Vec::new();
    if http2 {
        for authority in authorities {
            shared.push(Conn::open_h2(authority).await?);
        }
    }
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..connections {
        let mut conn = match shared.get(i % authorities.len()).and_then(Conn::share) {
            Some(stream) => stream,
            None => Conn::open(&authorities[i % authorities.len()]).await?,
        };
        // This client's names: (number, name).
        let mine: Vec<(usize, String)> = (i..total)
            .step_by(connections)
            .map(|j| (j, format!("u-{j}")))
            .collect();
        tasks.spawn(async move {
            let (mut acq, mut rel) = (Vec::new(), Vec::new());
            let mut done = vec![0u64; mine.len()];
            let mut k = 0;
            while Instant::now() < deadline {
                let lock = &mine[k].1;
                let t0 = Instant::now();
                let t1 = if let Names::Floor = names {
                    conn.get("/healthz").await?;
                    let t1 = Instant::now();
                    conn.get("/healthz").await?;
                    t1
                } else {
                    let held = conn.acquire(lock, r#"{"ttl_ms":30000}"#, 0).await?;
                    let t1 = Instant::now();
                    conn.release(&held).await?;
                    t1
                };
                acq.push(t1 - t0);
                rel.push(t1.elapsed());
                done[k] += 1;
                k = (k + 1) % mine.len();
            }
            let by_name: Vec<(usize, u64)> = mine.iter().map(|(j, _)| *j).zip(done).collect();
            anyhow::Ok((acq, rel, by_name))
        });
    }
    let mut cycles = Cycles {
        acquire: Vec::new(),
        release: Vec::new(),
        by_name: vec![0; total],
    };
    while let Some(done) = tasks.join_next().await {
        let (a, r, by_name) = done??;
        cycles.acquire.extend(a);
        cycles.release.extend(r);
        for (j, n) in by_name {
            cycles.by_name[j] = n;
        }
    }
    Ok(cycles)
}
