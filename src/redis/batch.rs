//! Several commands sent together: on one server one pipeline (one round trip); in a
//! cluster, where a pipeline must stay in one slot (redis-rs refuses one that crosses slots),
//! one pipeline per slot, sent at once, the replies put back in the commands' order. For
//! reads and writes over many locks at a time (listing, the names index, the quotas).

use ::redis::cluster_routing::Slot;
use ::redis::{Cmd, FromRedisValue, RedisResult, Value};
use futures_util::future::try_join_all;

use super::Redis;

/// A command and where its reply goes among the wanted ones (`None`: ignored).
type Placed = (Option<usize>, Cmd);

/// Commands to send together.
#[derive(Default)]
pub struct Batch {
    cmds: Vec<(Cmd, bool)>,
}

impl Batch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `cmd`; its reply is one of [`Batch::run`]'s.
    pub fn add(&mut self, cmd: Cmd) -> &mut Self {
        self.cmds.push((cmd, false));
        self
    }

    /// Adds `cmd` whose reply is not wanted (it is left out of [`Batch::run`]'s).
    pub fn add_ignored(&mut self, cmd: Cmd) -> &mut Self {
        self.cmds.push((cmd, true));
        self
    }

    pub fn is_empty(&self) -> bool {
        self.cmds.is_empty()
    }

    /// Sends them; the replies of those not ignored, in order.
    pub async fn run<T: FromRedisValue>(self, redis: &Redis) -> RedisResult<Vec<T>> {
        if self.cmds.is_empty() {
            return Ok(Vec::new());
        }
        let values: Vec<Value> = if redis.cluster().is_none() {
            let mut pipe = ::redis::pipe();
            for (cmd, ignored) in &self.cmds {
                pipe.add_command(cmd.clone());
                if *ignored {
                    pipe.ignore();
                }
            }
            pipe.query_async(&mut redis.clone()).await?
        } else {
            self.run_by_slot(redis).await?
        };
        values
            .into_iter()
            .map(|v| ::redis::from_redis_value(v).map_err(Into::into))
            .collect()
    }

    async fn run_by_slot(self, redis: &Redis) -> RedisResult<Vec<Value>> {
        // Commands by slot, each remembering its place among the wanted replies.
        let mut groups: Vec<(Slot, Vec<Placed>)> = Vec::new();
        let mut wanted = 0;
        for (cmd, ignored) in self.cmds {
            let place = (!ignored).then(|| {
                wanted += 1;
                wanted - 1
            });
            let slot = first_key_slot(&cmd);
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, cmds)) => cmds.push((place, cmd)),
                None => groups.push((slot, vec![(place, cmd)])),
            }
        }
        let replies = try_join_all(groups.into_iter().map(|(_, cmds)| async move {
            let mut pipe = ::redis::pipe();
            for (_, cmd) in &cmds {
                pipe.add_command(cmd.clone());
            }
            let values: Vec<Value> = pipe.query_async(&mut redis.clone()).await?;
            Ok::<_, ::redis::RedisError>(
                cmds.into_iter()
                    .map(|(place, _)| place)
                    .zip(values)
                    .collect::<Vec<_>>(),
            )
        }))
        .await?;
        let mut ordered: Vec<Value> = vec![Value::Nil; wanted];
        for (place, value) in replies.into_iter().flatten() {
            if let Some(slot) = place.and_then(|p| ordered.get_mut(p)) {
                *slot = value;
            }
        }
        Ok(ordered)
    }
}

/// The slot of a command's first key (its first argument after the name; every command
/// batched here has its key there).
fn first_key_slot(cmd: &Cmd) -> Slot {
    match cmd.args_iter().nth(1) {
        Some(::redis::Arg::Simple(key)) => Slot::for_key(key),
        _ => Slot::for_key(b""),
    }
}
