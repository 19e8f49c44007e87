//! `serve`'s flags as clap reads them, and the checks it cannot make.

use clap::Parser as _;

use crate::config::{Cli, Command};
use crate::config::{ConfigError, DEFAULT_LISTEN, ServeArgs};
use crate::redis::AckRule;

fn serve(args: &[&str]) -> ServeArgs {
    let argv = ["leasehold", "serve"].iter().chain(args);
    match Cli::try_parse_from(argv).expect("parses").command {
        Command::Serve(args) => args,
        _ => unreachable!("a serve command"),
    }
}

#[test]
fn the_embedded_redis_gets_a_core_of_its_own() {
    let embedded = serve(&[]);
    assert_eq!(embedded.worker_threads(8), 7);
    assert_eq!(embedded.worker_threads(2), 1);
    assert_eq!(embedded.worker_threads(1), 1);
    let remote = serve(&["--redis-url", "redis://10.0.0.5:6379"]);
    assert_eq!(remote.worker_threads(8), 8);
    assert_eq!(remote.worker_threads(2), 2);
    let chosen = serve(&[
        "--redis-url",
        "redis://127.0.0.1:6379",
        "--worker-threads",
        "1",
    ]);
    assert_eq!(chosen.worker_threads(8), 1);
}

#[test]
fn sentinel_mode_takes_its_sentinels_and_master_name_instead_of_a_url() {
    let sentinel = serve(&[
        "--redis-sentinel",
        "10.0.0.1:26379,10.0.0.2:26379",
        "--redis-master-name",
        "locks",
        "--min-replica-acks",
        "2",
    ]);
    assert_eq!(
        sentinel.redis_sentinel,
        ["10.0.0.1:26379", "10.0.0.2:26379"]
    );
    assert_eq!(sentinel.redis_master_name.as_deref(), Some("locks"));
    assert_eq!(sentinel.min_replica_acks, AckRule::Exactly(2));
    assert!(
        sentinel.external_redis(),
        "no embedded Redis beside Sentinels"
    );
    assert_eq!(sentinel.worker_threads(8), 8);
    assert_eq!(serve(&[]).min_replica_acks, AckRule::Auto);
    let parse =
        |args: &[&str]| Cli::try_parse_from(["leasehold", "serve"].iter().chain(args)).map(|_| ());
    assert!(
        parse(&["--redis-sentinel", "h:1"]).is_err(),
        "a master name is needed"
    );
    assert!(
        parse(&["--redis-master-name", "m"]).is_err(),
        "Sentinels are needed"
    );
    assert!(
        parse(&[
            "--redis-sentinel",
            "h:1",
            "--redis-master-name",
            "m",
            "--redis-url",
            "redis://x"
        ])
        .is_err(),
        "a URL or Sentinels, not both"
    );
    assert!(parse(&["--min-replica-acks", "some"]).is_err());
}

#[test]
fn cluster_mode_takes_seed_nodes_instead_of_a_url_and_only_database_0() {
    let cluster = serve(&["--redis-cluster", "10.0.0.1:7000,10.0.0.2:7000"]);
    assert_eq!(cluster.redis_cluster, ["10.0.0.1:7000", "10.0.0.2:7000"]);
    assert!(
        cluster.external_redis(),
        "no embedded Redis beside a Cluster"
    );
    assert_eq!(cluster.validate(), Ok(()));
    let on_db_1 = serve(&["--redis-cluster", "h:1", "--redis-db", "1"]);
    assert_eq!(on_db_1.validate(), Err(ConfigError::ClusterDb));
    let parse =
        |args: &[&str]| Cli::try_parse_from(["leasehold", "serve"].iter().chain(args)).map(|_| ());
    assert!(
        parse(&["--redis-cluster", "h:1", "--redis-url", "redis://x"]).is_err(),
        "a URL or a Cluster, not both"
    );
    assert!(
        parse(&[
            "--redis-cluster",
            "h:1",
            "--redis-sentinel",
            "h:2",
            "--redis-master-name",
            "m"
        ])
        .is_err(),
        "Sentinels or a Cluster, not both"
    );
}

#[test]
fn the_defaults_are_a_valid_configuration() {
    let defaults = ServeArgs::defaults();
    assert_eq!(defaults.validate(), Ok(()));
    assert_eq!(defaults.listen.to_string(), DEFAULT_LISTEN);
    assert_eq!(defaults.redis_url, None, "the embedded Redis by default");
}

#[test]
fn zero_threads_is_refused() {
    let argv = ["leasehold", "serve", "--worker-threads", "0"];
    assert!(Cli::try_parse_from(argv).is_err());
}
