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

/// The master every answering Sentinel names, the one most name (in a tie, the one the
/// earliest listed Sentinel names): a Sentinel cut off with the old master keeps naming it.
pub async fn ask_sentinels(
    settings: &SentinelSettings,
    timeout: Duration,
) -> Result<String, SentinelError> {
    let asks = settings
        .sentinels
        .iter()
        .map(|sentinel| ask_one(settings, sentinel, timeout));
    let answers = join_all(asks).await;
    let mut votes: HashMap<String, (usize, usize)> = HashMap::new();
    let mut errors = Vec::new();
    for (order, answer) in answers.into_iter().enumerate() {
        match answer {
            Ok(Some(addr)) => votes.entry(addr).or_insert((0, order)).0 += 1,
            Ok(None) => {}
            Err(e) => errors.push(e.to_string()),
        }
    }
    if let Some((addr, _)) = votes
        .into_iter()
        .max_by(|(_, (a, ao)), (_, (b, bo))| a.cmp(b).then(bo.cmp(ao)))
    {
        return Ok(addr);
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
) -> Result<Option<String>, SentinelError> {
    let client = sentinel_client(settings, sentinel)?;
    let ask = async {
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config(timeout))
            .await?;
        ::redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&settings.master_name)
            .query_async::<Option<(String, u16)>>(&mut conn)
            .await
    };
    let named = tokio::time::timeout(timeout, ask)
        .await
        .map_err(|_| SentinelError::NoneAnswered(format!("{sentinel} timed out")))??;
    Ok(named.map(|(host, port)| {
        if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    }))
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
