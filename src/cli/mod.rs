//! The client subcommands: [`run`] holds a lock while a command runs; `acquire`, `heartbeat`,
//! `release` and `status` let a shell script hold one across steps.
//!
//! The scripting commands print the server's JSON to stdout as one line and nothing else, so
//! `$(leasehold acquire ..)` captures exactly the lease; errors go to stderr as the problem's
//! detail and code, with a non-zero exit (see `leasehold acquire --help`).

pub mod keys;
pub mod run;
mod signals;

use std::error::Error;
use std::process::ExitCode;

use serde_json::Value;

use crate::client::{
    AcquireOptions, Acquired, Client, ClientError, ClientOptions, Reply, Resource,
};
use crate::config::{AcquireArgs, LeaseArgs, LeaseRequestArgs, ServerArgs, StatusArgs};

/// Server unreachable or refusing, lease lost: anything that is not the lock being busy.
pub const EXIT_FAILURE: u8 = 1;

/// `POST /v1/locks/{name}/leases`, printing the lease (or only its token).
pub async fn acquire(args: AcquireArgs) -> ExitCode {
    let client = match connect(&args.server) {
        Ok(client) => client,
        Err(code) => return code,
    };
    match client
        .acquire(&args.name, &acquire_options(&args.lease))
        .await
    {
        Ok(Reply {
            body: Acquired::Queued(ticket),
            ..
        }) => {
            // A script cannot keep polling: give the place up, as if the lock were busy.
            let _ = client
                .leave(&args.name, ticket.ticket.ticket_id, &ticket.token)
                .await;
            eprintln!("the fair lock is still held by others (lock_held)");
            ExitCode::from(args.lease.conflict_exit_code)
        }
        Ok(Reply {
            body: Acquired::Lease(lease),
            ..
        }) if args.token_only => {
            println!("{}", lease.token.expose());
            ExitCode::SUCCESS
        }
        Ok(reply) => print_json(&reply.json),
        Err(e) => {
            report(&e);
            match e.problem() {
                Some(p) if p.is_lock_held() => ExitCode::from(args.lease.conflict_exit_code),
                _ => ExitCode::from(EXIT_FAILURE),
            }
        }
    }
}

/// `POST .../heartbeat` with the lease's token.
pub async fn heartbeat(args: LeaseArgs) -> ExitCode {
    let client = match connect(&args.server) {
        Ok(client) => client,
        Err(code) => return code,
    };
    finish(
        client
            .heartbeat(Resource::Lock, &args.name, args.lease_id, &args.token)
            .await
            .map(|reply| reply.json),
    )
}

/// `DELETE ...?all=true`: a script that took the lock with `acquire` holds one level, but a
/// lease it re-entered (with curl) is freed as well, which is what "release" means to it.
pub async fn release(args: LeaseArgs) -> ExitCode {
    let client = match connect(&args.server) {
        Ok(client) => client,
        Err(code) => return code,
    };
    finish(
        client
            .release(Resource::Lock, &args.name, args.lease_id, &args.token, true)
            .await
            .map(|reply| reply.json),
    )
}

/// `GET /v1/locks/{name}` or `GET /v1/locks/{name}/leases/{id}`.
pub async fn status(args: StatusArgs) -> ExitCode {
    let client = match connect(&args.server) {
        Ok(client) => client,
        Err(code) => return code,
    };
    finish(match args.lease_id {
        Some(id) => client
            .lease_status(Resource::Lock, &args.name, id)
            .await
            .map(|reply| reply.json),
        None => client.lock_status(&args.name).await.map(|reply| reply.json),
    })
}

pub(crate) fn acquire_options(args: &LeaseRequestArgs) -> AcquireOptions {
    AcquireOptions {
        ttl: args.ttl,
        holder: args.holder.clone(),
        kind: args.kind,
        wait: args.wait,
    }
}

fn connect(args: &ServerArgs) -> Result<Client, ExitCode> {
    client(args).map_err(|e| {
        report(&e);
        ExitCode::from(EXIT_FAILURE)
    })
}

/// The client the shared options describe: server URL, API key, CA file.
pub(crate) fn client(args: &ServerArgs) -> Result<Client, ClientError> {
    let options = ClientOptions {
        api_key: args.api_key.clone(),
        ca_file: args.ca_file.clone(),
    };
    Client::with_options(args.server.clone(), &options)
}

fn finish(result: Result<Value, ClientError>) -> ExitCode {
    match result {
        Ok(json) => print_json(&json),
        Err(e) => {
            report(&e);
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

fn print_json(json: &Value) -> ExitCode {
    println!("{json}");
    ExitCode::SUCCESS
}

/// Prints a client error on stderr: a problem as its detail and code, anything else with its
/// whole source chain (reqwest's own message names only the URL, not "connection refused").
pub(crate) fn report(e: &ClientError) {
    eprintln!("leasehold: {}", describe(e));
}

pub(crate) fn describe(e: &ClientError) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
