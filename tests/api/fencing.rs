//! Fencing tokens: strictly increasing across holders, kept on reentry, never reset.

use serde_json::json;

use crate::helpers::spawn_app;

#[tokio::test]
async fn fencing_tokens_grow_across_holders_and_survive_release_and_expiry() {
    let app = spawn_app().await;
    let mut seen = Vec::new();
    for round in 0..4 {
        let lease = app.lease("jobs", json!({"ttl_ms": 60_000})).await;
        // Reentry keeps the token.
        let again = app
            .acquire_with("jobs", 0, json!({}), Some(&lease.token))
            .await;
        assert_eq!(again.u64("fencing_token"), lease.fencing_token);
        seen.push(lease.fencing_token);
        if round % 2 == 0 {
            app.release(&lease, true).await.assert_status(200);
        } else {
            // Let it expire: shorten its TTL, then a waiting acquire returns once it ran out.
            app.heartbeat(&lease, json!({"ttl_ms": 100}))
                .await
                .assert_status(200);
            let next = app.acquire_with("jobs", 5000, json!({}), None).await;
            let next = crate::helpers::Lease::from_reply("jobs", &next);
            seen.push(next.fencing_token);
            app.release(&next, true).await.assert_status(200);
        }
    }
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing: {seen:?}"
    );
    assert_eq!(
        app.inspect_lock("jobs").await.u64("fencing_counter"),
        *seen.last().unwrap_or(&0)
    );
}

#[tokio::test]
async fn each_lock_has_its_own_counter() {
    let app = spawn_app().await;
    let a = app.lease("a", json!({})).await;
    let b = app.lease("b", json!({})).await;
    assert_eq!(
        app.inspect_lock("a").await.u64("fencing_counter"),
        a.fencing_token
    );
    assert_eq!(
        app.inspect_lock("b").await.u64("fencing_counter"),
        b.fencing_token
    );
}
