//! `leasehold keys create|list|rotate|revoke`: API keys through the admin API, printing the
//! server's JSON (or, with `--secret-only`, just the secret) like the other script commands.

use std::process::ExitCode;

use super::{EXIT_FAILURE, finish, print_json, report};
use crate::client::{KeyCreateBody, KeyQuotasBody, KeyRole, Reply};
use crate::config::{KeyCreateArgs, KeysCommand};

pub async fn run(command: KeysCommand) -> ExitCode {
    match command {
        KeysCommand::Create(args) => create(args).await,
        KeysCommand::List(args) => match super::connect(&args.server) {
            Ok(client) => finish(client.list_keys().await.map(|r| r.json)),
            Err(code) => code,
        },
        KeysCommand::Rotate(args) => match super::connect(&args.server) {
            Ok(client) => secret_or_json(
                client.rotate_key(&args.id, args.grace).await,
                args.secret_only,
            ),
            Err(code) => code,
        },
        KeysCommand::Revoke(args) => match super::connect(&args.server) {
            Ok(client) => finish(client.revoke_key(&args.id).await.map(|r| r.json)),
            Err(code) => code,
        },
    }
}

async fn create(args: KeyCreateArgs) -> ExitCode {
    let roles = match args
        .roles
        .iter()
        .map(|r| r.parse::<KeyRole>().map_err(|_| r.clone()))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(roles) => roles,
        Err(bad) => {
            eprintln!("leasehold: unknown role {bad:?} (client, reader or admin)");
            return ExitCode::from(2);
        }
    };
    let client = match super::connect(&args.server) {
        Ok(client) => client,
        Err(code) => return code,
    };
    let body = KeyCreateBody {
        name: args.name,
        tenant: args.tenant,
        roles,
        patterns: args.patterns,
        quotas: KeyQuotasBody {
            max_leases: args.max_leases,
            max_waiters: args.max_waiters,
            max_names: args.max_names,
            max_state_bytes: args.max_state_bytes,
            max_ttl_ms: args
                .max_ttl
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            max_permits: args.max_permits,
        },
    };
    secret_or_json(client.create_key(&body).await, args.secret_only)
}

fn secret_or_json(
    result: Result<Reply<crate::client::KeySecretBody>, crate::client::ClientError>,
    secret_only: bool,
) -> ExitCode {
    match result {
        Ok(reply) if secret_only => {
            println!("{}", reply.body.secret);
            ExitCode::SUCCESS
        }
        Ok(reply) => print_json(&reply.json),
        Err(e) => {
            report(&e);
            ExitCode::from(EXIT_FAILURE)
        }
    }
}
