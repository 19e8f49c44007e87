//! Asking the Sentinels which node is the master, and taking a node on only once it says
//! `ROLE` master itself.

use std::collections::HashMap;
use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::{AsyncConnectionConfig, IntoConnectionInfo, RedisConnectionInfo};
use futures_util::future::join_all;

use super::SentinelSettings;

#[derive(Debug, thiserror::Error)]
pub enum SentinelError {
    #[error("no Sentinel answered ({0})")]
    NoneAnswered(String),
    #[error("no Sentinel knows a master named {0:?}")]
    UnknownMaster(String),
    #[error("{node} says it is a {role}, not the master")]
    NotMaster { node: String, role: String },
    #[error("Sentinel or node address {0:?} is not host:port")]
    Address(String),
    #[error(transparent)]
    Redis(#[from] ::redis::RedisError),
}

/// `host:port` split; IPv6 hosts in brackets (`[::1]:26379`).
pub fn host_port(addr: &str) -> Result<(String, u16), SentinelError> {
    let bad = || SentinelError::Address(addr.to_owned());
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = port.parse().map_err(|_| bad())?;
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_owned(), port))
}

fn config(timeout: Duration) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout.min(Duration::from_millis(500))))
        .set_response_timeout(Some(timeout))
}

/// What the Sentinels said in one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// The master every answering Sentinel names, the one most name (in a tie, the one the
    /// earliest listed Sentinel names): a Sentinel cut off with the old master keeps naming
    /// it.
    pub master: String,
    /// Replicas of that master some answering Sentinel could promote (it does not flag them
    /// down); `None` when fewer than a majority of the Sentinels answered, so that a
    /// Sentinel cut off with an old master cannot count its lost replicas out alone.
    pub promotable: Option<u32>,
}

/// One Sentinel's answer: the master it names, and the replicas of it it could promote.
type Answer = Option<(String, u32)>;

/// Asks every Sentinel at once (see [`Named`]).
pub async fn ask_sentinels(
    settings: &SentinelSettings,
    timeout: Duration,
) -> Result<Named, SentinelError> {
    let asks = settings
        .sentinels
        .iter()
        .map(|sentinel| ask_one(settings, sentinel, timeout));
    let answers = join_all(asks).await;
    let mut votes: HashMap<String, (usize, usize)> = HashMap::new();
    let mut errors = Vec::new();
    let mut counted: Vec<(String, u32)> = Vec::new();
    for (order, answer) in answers.into_iter().enumerate() {
        match answer {
            Ok(Some((addr, promotable))) => {
                votes.entry(addr.clone()).or_insert((0, order)).0 += 1;
                counted.push((addr, promotable));
            }
            Ok(None) => {}
            Err(e) => errors.push(e.to_string()),
        }
    }
    if let Some((master, _)) = votes
        .into_iter()
        .max_by(|(_, (a, ao)), (_, (b, bo))| a.cmp(b).then(bo.cmp(ao)))
    {
        let majority = settings.sentinels.len() / 2 + 1;
        let promotable = (counted.len() >= majority).then(|| {
            counted
                .iter()
                .filter(|(named, _)| *named == master)
                .map(|(_, n)| *n)
                .max()
                .unwrap_or(0)
        });
        return Ok(Named { master, promotable });
    }
    if errors.len() == settings.sentinels.len() {
        return Err(SentinelError::NoneAnswered(errors.join("; ")));
    }
    Err(SentinelError::UnknownMaster(settings.master_name.clone()))
}

async fn ask_one(
    settings: &SentinelSettings,
    sentinel: &str,
    timeout: Duration,
) -> Result<Answer, SentinelError> {
    let client = sentinel_client(settings, sentinel)?;
    let ask = async {
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config(timeout))
            .await?;
        let mut pipe = ::redis::pipe();
        pipe.cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&settings.master_name)
            .cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(&settings.master_name);
        pipe.query_async::<(Option<(String, u16)>, ::redis::Value)>(&mut conn)
            .await
    };
    let (named, replicas) = match tokio::time::timeout(timeout, ask).await {
        Err(_) => return Err(SentinelError::NoneAnswered(format!("{sentinel} timed out"))),
        // A master it does not know: `REPLICAS` fails too.
        Ok(Err(e)) if e.code() == Some("ERR") => return Ok(None),
        Ok(answer) => answer?,
    };
    Ok(named.map(|(host, port)| {
        let addr = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        (addr, promotable(&replicas))
    }))
}

/// The replicas in a `SENTINEL REPLICAS` reply that the Sentinel does not flag down: those
/// it could promote.
fn promotable(reply: &::redis::Value) -> u32 {
    let ::redis::Value::Array(replicas) = reply else {
        return 0;
    };
    let healthy = replicas.iter().filter(|replica| {
        let fields: Vec<String> = ::redis::from_redis_value_ref(replica).unwrap_or_default();
        let flags = fields
            .chunks(2)
            .find(|kv| kv[0] == "flags")
            .and_then(|kv| kv.get(1))
            .map_or("", String::as_str);
        !flags.is_empty()
            && !flags
                .split(',')
                .any(|f| matches!(f, "s_down" | "o_down" | "disconnected"))
    });
    u32::try_from(healthy.count()).unwrap_or(u32::MAX)
}

/// A client for the Sentinel at `sentinel`, with the Sentinels' password.
pub(super) fn sentinel_client(
    settings: &SentinelSettings,
    sentinel: &str,
) -> Result<::redis::Client, SentinelError> {
    let (host, port) = host_port(sentinel)?;
    let mut redis = RedisConnectionInfo::default();
    if let Some(password) = &settings.sentinel_password {
        redis = redis.set_password(password);
    }
    let info = crate::redis::connect::tcp_addr(settings.tls, host, port)
        .into_connection_info()?
        .set_redis_settings(redis);
    Ok(::redis::Client::open(info)?)
}

/// Connects to `node` and checks that it is a master.
pub async fn take_on(
    settings: &SentinelSettings,
    node: &str,
    timeout: Duration,
) -> Result<(::redis::Client, MultiplexedConnection), SentinelError> {
    let client = data_client(settings, node)?;
    let take = async {
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config(timeout))
            .await?;
        let role: Vec<::redis::Value> = ::redis::cmd("ROLE").query_async(&mut conn).await?;
        let role = match role.first() {
            Some(::redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(::redis::Value::SimpleString(s)) => s.clone(),
            _ => "node of unknown role".to_owned(),
        };
        Ok::<_, SentinelError>((conn, role))
    };
    let (conn, role) = tokio::time::timeout(timeout, take)
        .await
        .map_err(|_| SentinelError::NoneAnswered(format!("{node} timed out")))??;
    if role != "master" {
        return Err(SentinelError::NotMaster {
            node: node.to_owned(),
            role,
        });
    }
    Ok((client, conn))
}

/// A client for the data node at `node`, with the data nodes' credentials and database.
pub fn data_client(
    settings: &SentinelSettings,
    node: &str,
) -> Result<::redis::Client, SentinelError> {
    let (host, port) = host_port(node)?;
    let mut redis = RedisConnectionInfo::default().set_db(settings.db);
    if let Some(username) = &settings.username {
        redis = redis.set_username(username);
    }
    if let Some(password) = &settings.password {
        redis = redis.set_password(password);
    }
    let info = crate::redis::connect::tcp_addr(settings.tls, host, port)
        .into_connection_info()?
        .set_redis_settings(redis);
    Ok(::redis::Client::open(info)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_counts_the_replicas_it_does_not_flag_down() {
        let replica = |flags: &str| {
            ::redis::Value::Array(
                [
                    "name",
                    "127.0.0.1:7001",
                    "flags",
                    flags,
                    "master-link-status",
                    "ok",
                ]
                .into_iter()
                .map(|s| ::redis::Value::BulkString(s.as_bytes().to_vec()))
                .collect(),
            )
        };
        let reply = ::redis::Value::Array(vec![
            replica("slave"),
            replica("s_down,slave,disconnected"),
            replica("slave,disconnected"),
            replica("o_down,slave"),
            replica("slave,promoted"),
        ]);
        assert_eq!(promotable(&reply), 2);
        assert_eq!(promotable(&::redis::Value::Array(vec![])), 0);
        assert_eq!(promotable(&::redis::Value::Nil), 0);
    }

    #[test]
    fn addresses_split_into_host_and_port() {
        assert_eq!(
            host_port("127.0.0.1:26379").expect("valid"),
            ("127.0.0.1".into(), 26379)
        );
        assert_eq!(
            host_port("[::1]:26379").expect("valid"),
            ("::1".into(), 26379)
        );
        assert_eq!(
            host_port("sentinel-a:5000").expect("valid"),
            ("sentinel-a".into(), 5000)
        );
        for bad in ["", "host", ":26379", "host:port", "host:70000"] {
            assert!(host_port(bad).is_err(), "{bad:?}");
        }
    }
}
