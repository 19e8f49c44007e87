//! A scenario client's leases over HTTP: acquire (waiting, polling a fair ticket), release.

use serde_json::Value;

/// A new lease at `path` (a lock's or a semaphore's leases), without waiting.
pub(super) async fn acquire_at(
    http: &reqwest::Client,
    url: &str,
    path: &str,
    body: Value,
) -> anyhow::Result<Held> {
    let reply = http.post(format!("{url}{path}")).json(&body).send().await?;
    let status = reply.status().as_u16();
    let location = reply
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .unwrap_or_default();
    let body: Value = reply.json().await?;
    anyhow::ensure!(status == 201, "acquire answered {status}: {body}");
    Ok(Held {
        path: location,
        token: body["token"].as_str().unwrap_or_default().to_owned(),
        fence: body["fencing_token"].as_u64().unwrap_or(0),
    })
}

/// A granted lease as a client knows it.
pub(super) struct Held {
    path: String,
    token: String,
    pub(super) fence: u64,
}

pub(super) async fn acquire(
    http: &reqwest::Client,
    url: &str,
    lock: &str,
    body: Value,
    wait_ms: u64,
) -> anyhow::Result<Held> {
    let reply = http
        .post(format!("{url}/v1/locks/{lock}/leases?wait_ms={wait_ms}"))
        .json(&body)
        .send()
        .await?;
    let status = reply.status().as_u16();
    let location = reply
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut body: Value = reply.json().await?;
    let mut location = location.unwrap_or_default();
    if status == 202 {
        // A fair ticket: poll it until granted.
        let token = body["token"].as_str().unwrap_or_default().to_owned();
        loop {
            let poll = http
                .post(format!("{url}{location}?wait_ms={wait_ms}"))
                .bearer_auth(&token)
                .send()
                .await?;
            let s = poll.status().as_u16();
            let next_location = poll
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            body = poll.json().await?;
            if s == 201 {
                location = next_location.unwrap_or_default();
                break;
            }
            anyhow::ensure!(s == 202, "ticket poll answered {s}: {body}");
        }
    } else {
        anyhow::ensure!(status == 201, "acquire answered {status}: {body}");
    }
    Ok(Held {
        path: location,
        token: body["token"].as_str().unwrap_or_default().to_owned(),
        fence: body["fencing_token"].as_u64().unwrap_or(0),
    })
}

pub(super) async fn release(http: &reqwest::Client, url: &str, held: &Held) -> anyhow::Result<()> {
    let reply = http
        .delete(format!("{url}{}", held.path))
        .bearer_auth(&held.token)
        .send()
        .await?;
    anyhow::ensure!(reply.status() == 200, "release answered {}", reply.status());
    Ok(())
}
