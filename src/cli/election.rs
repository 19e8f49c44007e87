//! `leasehold leader NAME`: who leads an election (a table, or the server's JSON), with an
//! exit code that tells "nobody leads" apart; `leasehold observe NAME`: one line per change
//! until Ctrl-C, across dropped connections (the client resumes the stream after the last
//! message it read, so no term is skipped). `elect` is in `run`: it shares run's child and
//! supervisor.

use std::process::ExitCode;

use futures_util::StreamExt as _;
use serde_json::{Value, json};

use super::signals::Signals;
use super::{EXIT_FAILURE, connect, emit, print_json, report, table};
use crate::client::{Change, Observation};
use crate::config::{LeaderArgs, ObserveArgs};

/// `leader`'s exit code when nobody leads now.
pub const EXIT_NO_LEADER: u8 = 3;

/// `GET /v1/elections/{name}`: the leader and the line, as a table or the server's JSON.
pub async fn leader(args: LeaderArgs) -> ExitCode {
    let client = match connect(&args.server) {
        Ok(client) => client,
        Err(code) => return code,
    };
    let reply = match client.election(&args.name).await {
        Ok(reply) => reply,
        Err(e) => {
            report(&e);
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    if args.json {
        print_json(&reply.json);
    } else {
        emit(&table::election(&reply.body));
    }
    if reply.body.leader.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_NO_LEADER)
    }
}

/// `GET /v1/elections/{name}/observe`, a line per change, until Ctrl-C (SIGTERM, SIGHUP):
/// then 0. A refusal that reconnecting cannot mend (a key without the reader role, a bad
/// name) ends it with 1.
pub async fn observe(args: ObserveArgs) -> ExitCode {
    let client = match connect(&args.server) {
        Ok(client) => client,
        Err(code) => return code,
    };
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("leasehold observe: cannot install signal handlers: {e}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let mut changes = client.observe(&args.name);
    loop {
        let next = tokio::select! {
            next = changes.next() => next,
            _ = signals.recv() => return ExitCode::SUCCESS,
        };
        match next {
            Some(Ok(observation)) if args.json => emit(&format!("{}\n", json_line(&observation))),
            Some(Ok(observation)) => emit(&format!("{}\n", human_line(&args.name, &observation))),
            Some(Err(e)) => {
                report(&e);
                return ExitCode::from(EXIT_FAILURE);
            }
            None => return ExitCode::from(EXIT_FAILURE),
        }
    }
}

/// The change as the server sent it, with its `event` and `id`.
fn json_line(observation: &Observation) -> Value {
    let mut line = match &observation.change {
        Change::Leader(body) => serde_json::to_value(body).unwrap_or_else(|_| json!({})),
        Change::Vacant { term } => json!({"term": term}),
        Change::Resync => json!({}),
    };
    if let Some(fields) = line.as_object_mut() {
        fields.insert("event".into(), observation.event().into());
        fields.insert(
            "id".into(),
            observation.id.clone().map_or(Value::Null, Value::String),
        );
    }
    line
}

/// The change in words: `term 4: node-a leads (10.0.0.1:8080) since ...`.
fn human_line(name: &str, observation: &Observation) -> String {
    match &observation.change {
        Change::Leader(body) => format!(
            "term {}: {} leads ({}){}",
            body.term,
            body.holder.as_deref().unwrap_or("a candidate"),
            body.value.as_deref().unwrap_or(""),
            body.since
                .as_deref()
                .map(|since| format!(" since {since}"))
                .unwrap_or_default(),
        ),
        Change::Vacant { term: 0 } => "nobody leads yet".to_owned(),
        Change::Vacant { term } => format!("term {term} over: nobody leads"),
        Change::Resync => format!(
            "some terms may have been missed; `leasehold leader {name}` shows who leads now"
        ),
    }
}
