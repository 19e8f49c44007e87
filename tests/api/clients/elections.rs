//! The Rust client's elections against a real server: a kept campaign ([`Term`]) leads,
//! hands over on resignation to a higher term, learns at once that an admin ended its term,
//! proclaims what observers then see; `observe` resumes after a dropped connection without
//! missing a term; a follower's proclamation is a typed 409.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt as _;
use leasehold::client::{
    CampaignOptions, Change, Client, ClientError, Observations, ProblemCode, Standing, Term,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::{admin_client, client, problem};
use crate::helpers::{TestApp, spawn_app};

fn value(value: &str) -> CampaignOptions {
    CampaignOptions {
        value: value.to_owned(),
        ttl: Some(Duration::from_secs(30)),
        holder: Some(format!("node-{value}")),
        ..CampaignOptions::default()
    }
}

async fn leads(client: &Client, name: &str, v: &str) -> Term {
    timeout(Duration::from_secs(5), client.campaign(name, &value(v)))
        .await
        .expect("leads at once")
        .expect("campaign")
}

/// A campaign that waits in line, in a task of its own; returns once it is in line.
async fn in_line(app: &TestApp, client: &Client, name: &str, v: &str) -> JoinHandle<Term> {
    let waiting_before = waiting(app, name).await;
    let (client, name_owned, v) = (client.clone(), name.to_owned(), v.to_owned());
    let task = tokio::spawn(async move {
        client
            .campaign(&name_owned, &value(&v))
            .await
            .expect("campaign")
    });
    for _ in 0..500 {
        if waiting(app, name).await > waiting_before {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the candidate never stood in line");
}

async fn waiting(app: &TestApp, name: &str) -> u64 {
    client(app)
        .election(name)
        .await
        .expect("election")
        .body
        .candidates_waiting
}

async fn next(changes: &mut Observations) -> Change {
    timeout(Duration::from_secs(10), changes.next())
        .await
        .expect("a change within 10 s")
        .expect("the stream goes on")
        .expect("no error")
        .change
}

fn leader(change: &Change) -> (u64, String) {
    match change {
        Change::Leader(body) => (body.term, body.value.clone().unwrap_or_default()),
        other => panic!("expected a leader, got {other:?}"),
    }
}

#[tokio::test]
async fn a_kept_campaign_leads_and_hands_over_on_resignation_with_a_higher_term() {
    let app = spawn_app().await;
    let client = client(&app);
    let first = leads(&client, "scheduler", "10.0.0.1").await;
    assert_eq!(first.election(), "scheduler");
    assert_eq!(first.value(), "10.0.0.1");
    let now = client
        .leader("scheduler")
        .await
        .expect("leader")
        .expect("led");
    assert_eq!(now.term, first.number());
    assert_eq!(now.value.as_deref(), Some("10.0.0.1"));
    assert!(
        client
            .check_term("scheduler", first.number())
            .await
            .expect("check")
            .body
            .current
    );

    let second = in_line(&app, &client, "scheduler", "10.0.0.2").await;
    assert!(!second.is_finished(), "it waits while the first leads");
    let signal = first.signal();
    let old = first.number();
    first.resign().await.expect("resigned");
    assert!(!signal.is_lost(), "a resignation is no loss");
    let second = timeout(Duration::from_secs(5), second)
        .await
        .expect("the next candidate leads at once")
        .expect("task");
    assert!(second.number() > old, "{} > {old}", second.number());
    let now = client
        .leader("scheduler")
        .await
        .expect("leader")
        .expect("led");
    assert_eq!(now.value.as_deref(), Some("10.0.0.2"));
    assert!(
        !client
            .check_term("scheduler", old)
            .await
            .expect("check")
            .body
            .current
    );
    drop(second); // resigned in the background
    for _ in 0..200 {
        if client.leader("scheduler").await.expect("leader").is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("a dropped term is resigned in the background");
}

#[tokio::test]
async fn an_admin_ending_the_term_fires_the_loss_signal_at_once() {
    let app = spawn_app().await;
    let client = client(&app);
    let term = leads(&client, "ended", "a").await;
    let mut signal = term.signal();
    let ended = admin_client(&app)
        .end_term("ended", Some("client test"))
        .await
        .expect("end term")
        .body;
    assert!(ended.released);
    let lost = timeout(Duration::from_secs(3), signal.lost())
        .await
        .expect("told long before the next heartbeat");
    assert_eq!(lost.lease_id, term.id());
    assert!(term.lost_error().is_some());
    let id = term.id();
    match term.resign().await {
        Err(ClientError::Lost(lost)) => assert_eq!(lost.lease_id, id),
        other => panic!("the resignation reports the loss: {other:?}"),
    }
}

#[tokio::test]
async fn a_proclamation_is_what_observers_see_next_and_a_followers_is_a_typed_409() {
    let app = spawn_app().await;
    let client = client(&app);
    let term = leads(&client, "proclaimed", "first").await;
    let mut changes = client.observe("proclaimed");
    assert_eq!(
        leader(&next(&mut changes).await),
        (term.number(), "first".to_owned())
    );
    term.proclaim("second").await.expect("proclaimed");
    assert_eq!(term.value(), "second");
    assert_eq!(
        leader(&next(&mut changes).await),
        (term.number(), "second".to_owned())
    );

    // A follower (a candidate in line) may not proclaim.
    let Standing::InLine(follower) = client
        .stand("proclaimed", &value("third"))
        .await
        .expect("stood")
        .body
    else {
        panic!("the leader still leads");
    };
    let refused = problem(
        client
            .proclaim("proclaimed", follower.id(), &follower.token, "mine")
            .await,
    );
    assert_eq!(refused.status, 409);
    assert_eq!(refused.kind(), Some(ProblemCode::TicketPending));
    let too_long = problem(term.proclaim(&"x".repeat(4097)).await);
    assert_eq!(too_long.status, 422);
    assert_eq!(too_long.kind(), Some(ProblemCode::InvalidBody));
    client
        .resign("proclaimed", follower.id(), &follower.token)
        .await
        .expect("left the line");
    term.resign().await.expect("resigned");
    assert!(matches!(next(&mut changes).await, Change::Vacant { .. }));
    let unknown = problem(
        client
            .poll_candidate("proclaimed", follower.id(), &follower.token, Duration::ZERO)
            .await,
    );
    assert!(matches!(unknown.status, 404 | 410), "{unknown:?}");
}

/// A TCP proxy in front of the app whose connections can be cut, and refused until
/// reopened: a dropped observe stream, on demand.
struct Proxy {
    url: String,
    open: Arc<AtomicBool>,
    links: Arc<std::sync::Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    async fn start(app: &TestApp) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let upstream = app
            .url("")
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let open = Arc::new(AtomicBool::new(true));
        let links = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (is_open, all) = (open.clone(), links.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !is_open.load(Ordering::SeqCst) {
                    continue; // dropped: the client sees its connection closed
                }
                let upstream = upstream.clone();
                let link = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                all.lock().expect("links").push(link);
            }
        });
        Self {
            url,
            open,
            links,
            accept,
        }
    }

    fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for link in self.links.lock().expect("links").drain(..) {
            link.abort();
        }
    }

    fn reopen(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

#[tokio::test]
async fn observe_resumes_after_a_dropped_connection_without_missing_a_term() {
    let app = spawn_app().await;
    let client = client(&app);
    let first = leads(&client, "resumed", "a").await;
    let second = in_line(&app, &client, "resumed", "b").await;
    let third = in_line(&app, &client, "resumed", "c").await;
    let proxy = Proxy::start(&app).await;
    let observer = Client::new(proxy.url.parse().expect("url")).expect("client");
    let mut changes = observer.observe("resumed");
    let start = first.number();
    assert_eq!(leader(&next(&mut changes).await), (start, "a".to_owned()));

    // Two terms begin while the observer is cut off.
    proxy.cut();
    first.resign().await.expect("resigned");
    let second = timeout(Duration::from_secs(5), second)
        .await
        .expect("b leads")
        .expect("task");
    second.resign().await.expect("resigned");
    let third = timeout(Duration::from_secs(5), third)
        .await
        .expect("c leads")
        .expect("task");
    proxy.reopen();

    let (term_b, value_b) = leader(&next(&mut changes).await);
    let (term_c, value_c) = leader(&next(&mut changes).await);
    assert_eq!(value_b, "b", "the missed term comes first");
    assert_eq!(value_c, "c");
    assert!(start < term_b && term_b < term_c && term_c == third.number());
    third.resign().await.expect("resigned");
}
