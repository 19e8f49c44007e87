//! A kept campaign waiting in line tells where it stands, as a fair lock's waiter does
//! (`clients/PROTOCOL.md`, "Why the wait"): each answer in line reaches
//! `CampaignOptions::on_in_line`, with its position, the leader now and the estimate, and
//! nothing does after the grant; a hook that panics still leaves the line.

mod support;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use leasehold_client::{CampaignOptions, Client, InLine, OnInLine, Term};
use tokio::time::{Instant, sleep, timeout};

use support::Server;

fn candidate(value: &str) -> CampaignOptions {
    CampaignOptions {
        value: value.to_owned(),
        ttl: Some(Duration::from_secs(3)), // a poll every second
        holder: Some(format!("node-{value}")),
        ..CampaignOptions::default()
    }
}

/// A server of the test's own, a client on it, and candidate A leading election `name` there
/// (nobody led it, so A leads at once): the leader the test's candidate B then waits behind.
/// The caller keeps the server: it stops when dropped.
async fn a_leading(name: &str) -> (Server, Client, Term) {
    let server = Server::start().await;
    let client = server.client();
    let a = timeout(
        Duration::from_secs(10),
        client.campaign(name, &candidate("a")),
    )
    .await
    .expect("A leads within 10 s")
    .expect("A's campaign");
    (server, client, a)
}

/// Polls `cond` every 20 ms until it holds, for at most `within`.
async fn until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < end, "{what}: not within {within:?}");
        sleep(Duration::from_millis(20)).await;
    }
}

async fn waiting(client: &Client, name: &str) -> u64 {
    client
        .election(name)
        .await
        .expect("the election")
        .body
        .candidates_waiting
}

/// `clients/parity.json` `campaignInLine`: B waits behind A and hears position 1 and A's
/// holder, value and term; A resigns, B leads, and the hook heard nothing after the grant.
#[tokio::test]
async fn a_campaign_in_line_tells_where_it_stands() {
    let name = "in-line";
    let (_server, client, a) = a_leading(name).await;

    let heard: Arc<Mutex<Vec<InLine>>> = Arc::default();
    let options = CampaignOptions {
        wait: Some(Duration::from_secs(20)),
        on_in_line: Some(OnInLine::new({
            let heard = Arc::clone(&heard);
            move |in_line| {
                let mut heard = heard.lock().unwrap_or_else(PoisonError::into_inner);
                heard.push(in_line.clone());
            }
        })),
        ..candidate("b")
    };
    let b_client = client.clone();
    let b = tokio::spawn(async move { b_client.campaign(name, &options).await });
    let count = || heard.lock().unwrap_or_else(PoisonError::into_inner).len();
    until("B hears its place", Duration::from_secs(10), || count() > 0).await;

    let first = heard.lock().unwrap_or_else(PoisonError::into_inner)[0].clone();
    assert_eq!(first.position, Some(1), "{first:?}");
    // No ended term yet: the server has no estimate to give.
    assert_eq!(first.estimated_wait, None, "{first:?}");
    let leader = first.leader.expect("A leads");
    assert_eq!(leader.holder.as_deref(), Some("node-a"), "{leader:?}");
    assert_eq!(leader.value.as_deref(), Some("a"), "{leader:?}");
    assert_eq!(leader.term, a.number(), "{leader:?}");

    a.resign().await.expect("A resigns");
    let b = timeout(Duration::from_secs(10), b)
        .await
        .expect("B leads within 10 s of A's resignation")
        .expect("B's task")
        .expect("B's campaign");
    let told = count();
    sleep(Duration::from_millis(1_500)).await; // longer than a poll: none comes after the grant
    assert_eq!(count(), told, "the hook heard an answer after the grant");
    assert!(told >= 1);
    assert!(
        b.number() > leader.term,
        "B's term {} after A's {}",
        b.number(),
        leader.term
    );
    b.resign().await.expect("B resigns");
}

/// A hook that panics unwinds through the campaign, which leaves the line all the same.
#[tokio::test]
async fn a_campaign_whose_hook_panics_leaves_the_line() {
    let name = "in-line-panics";
    let (_server, client, a) = a_leading(name).await;
    let options = CampaignOptions {
        on_in_line: Some(OnInLine::new(|_| panic!("the hook fails"))),
        ..candidate("b")
    };
    let b_client = client.clone();
    let b = tokio::spawn(async move { b_client.campaign(name, &options).await });
    let ended = timeout(Duration::from_secs(10), b)
        .await
        .expect("B's campaign ends within 10 s");
    assert!(ended.is_err_and(|e| e.is_panic()), "the hook's panic");
    let end = Instant::now() + Duration::from_secs(5);
    while waiting(&client, name).await > 0 {
        assert!(
            Instant::now() < end,
            "B still in line 5 s after its hook panicked"
        );
        sleep(Duration::from_millis(20)).await;
    }
    a.resign().await.expect("A resigns");
}
