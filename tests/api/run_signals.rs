//! `leasehold run` and the holder signals (issue 56): an operator's revocation reaches the
//! command as SIGTERM at once, long before its deadline; the command that then exits has its
//! lease released (an ordinary release), so the next holder need not wait for the deadline.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use crate::helpers::cli::{code, file, finish, run_sh, stderr, temp_dir, wait_for_file};
use crate::helpers::spawn_app;

#[tokio::test]
async fn a_revocation_stops_the_command_at_once_and_the_lease_is_released() {
    let app = spawn_app().await;
    let dir = temp_dir();
    let (ready, termed) = (file(&dir, "ready"), file(&dir, "termed"));
    let run = run_sh(
        &app,
        &["--ttl", "60s"],
        "revoked-job",
        r#"trap 'echo term > "$2"; exit 0' TERM; echo ready > "$1"; while :; do sleep 0.01; done"#,
        &[&ready, &termed],
    )
    .spawn()
    .expect("start leasehold run");
    wait_for_file(&ready).await;
    // Let the watch open (it starts with the command).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = Instant::now();
    app.admin(
        Method::POST,
        "/v1/admin/locks/revoked-job/revoke",
        Some(json!({"grace_ms": 30_000, "reason": "maintenance"})),
    )
    .await
    .assert_status(200);
    wait_for_file(&termed).await;
    let out = finish(run).await;
    let stopped = asked.elapsed();
    let said = stderr(&out);
    assert!(said.contains("maintenance"), "{said}");
    // Cut short: never a success, even when the command exits 0 on SIGTERM.
    assert_ne!(code(&out), 0, "{said}");
    assert!(
        stopped < Duration::from_secs(20),
        "stopped after {stopped:?}"
    );
    println!("run: revocation asked -> command stopped and run ended: {stopped:?}");
    // Released at once, not at the deadline: the next holder gets it now.
    app.lease("revoked-job", json!({})).await;
}
