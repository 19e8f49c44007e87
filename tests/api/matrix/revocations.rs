//! The route matrix's last step for every kind of lease: an operator's revocation reaches
//! the lease wherever it lives. Its holder's watch tells `revocation_requested` first, then,
//! at the deadline, `lost` with reason `revoked` (the lease evicted where it lives), and its
//! heartbeat says so.

use reqwest::Method;
use serde_json::json;

use super::kinds::{Held, Kind, read_lost};
use crate::helpers::TestApp;

/// The name is free again: granted at once. An operator's revocation reaches it.
pub(super) async fn check_revocation(app: &TestApp, caller: &TestApp, kind: Kind) {
    let label = kind.label();
    let again = caller.send(kind.acquire(caller, 0)).await;
    again.assert_status(201);
    let next = Held::of(&again);
    let watch = caller
        .http
        .get(caller.url(&format!("{}/watch", next.path)))
        .bearer_auth(&next.token)
        .send()
        .await
        .expect("watch");
    assert_eq!(watch.status(), 200, "{label}: watch");
    let asked = app
        .admin(
            Method::POST,
            &kind.revoke_path(0),
            Some(json!({"grace_ms": 300, "reason": "matrix"})),
        )
        .await;
    asked.assert_status(200);
    assert!(
        asked.body["leases"]
            .as_array()
            .is_some_and(|l| !l.is_empty()),
        "{label}: revoke asked nobody: {}",
        asked.body
    );
    let said = read_lost(watch).await;
    let (before, lost) = said
        .split_once("event: lost")
        .unwrap_or_else(|| panic!("{label}: the watch never said lost: {said:?}"));
    assert!(
        before.contains("event: revocation_requested") && before.contains("\"reason\":\"matrix\""),
        "{label}: the holder was not told of the revocation before it was lost: {said:?}"
    );
    assert!(
        lost.contains("\"reason\":\"revoked\""),
        "{label}: lost for another reason: {said:?}"
    );
    let beat = caller
        .send(
            caller
                .http
                .post(caller.url(&format!("{}/heartbeat", next.path)))
                .bearer_auth(&next.token),
        )
        .await;
    beat.assert_status(410);
}
