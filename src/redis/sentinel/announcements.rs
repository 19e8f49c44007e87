//! Sentinel's `+switch-master` messages: one subscription per Sentinel, each of which asks
//! for a new round at once (the round itself asks every Sentinel, so one message is enough,
//! and a missed one is caught by the next poll).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::Follower;
use super::resolve::sentinel_client;

/// The pause before subscribing again to a Sentinel that went away.
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(1);

/// One listener per Sentinel, until `shutdown`.
pub(super) fn spawn(follower: Arc<Follower>, shutdown: CancellationToken) -> Vec<JoinHandle<()>> {
    follower
        .settings
        .sentinels
        .clone()
        .into_iter()
        .map(|sentinel| tokio::spawn(listen(follower.clone(), sentinel, shutdown.clone())))
        .collect()
}

async fn listen(follower: Arc<Follower>, sentinel: String, shutdown: CancellationToken) {
    loop {
        let heard = async {
            let client = client(&follower, &sentinel)?;
            let mut pubsub = tokio::time::timeout(follower.timeout, client.get_async_pubsub())
                .await
                .map_err(|_| timed_out())??;
            pubsub.subscribe("+switch-master").await?;
            let mut messages = pubsub.on_message();
            while let Some(msg) = messages.next().await {
                let payload: String = msg.get_payload().unwrap_or_default();
                tracing::info!(sentinel = %sentinel, switch = %payload, "Sentinel announced a new master");
                follower.kick.notify_one();
            }
            Ok::<(), redis::RedisError>(())
        };
        tokio::select! {
            result = heard => {
                if let Err(e) = result {
                    tracing::debug!(sentinel = %sentinel, error = %e, "no +switch-master subscription");
                }
            }
            () = shutdown.cancelled() => return,
        }
        tokio::select! {
            () = tokio::time::sleep(RESUBSCRIBE_AFTER) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

fn timed_out() -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Io, "Sentinel subscribe timed out"))
}

fn client(follower: &Follower, sentinel: &str) -> redis::RedisResult<redis::Client> {
    sentinel_client(&follower.settings, sentinel)
        .map_err(|e| redis::RedisError::from((redis::ErrorKind::Io, "Sentinel", e.to_string())))
}
