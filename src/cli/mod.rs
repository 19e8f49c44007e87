//! What each subcommand does. The client subcommands speak the wire format only: [`run`]
//! holds a lock while a command runs (and `hold` until Ctrl-C or around an interactive shell);
//! `acquire`, `heartbeat`, `release` and `status` let a shell script hold one across steps;
//! `ls` lists the live locks; `elect` (in [`run`]) runs a command while it leads an election,
//! [`election`] says who leads (`leader`) and follows each change (`observe`); [`keys`] manages
//! API keys; `completions` prints a shell's
//! completion script; [`healthcheck`] asks a local server whether it answers. [`serve`] holds
//! the parts of starting a server that need none of it (main.rs assembles the rest).
//!
//! The scripting commands print the server's JSON to stdout as one line and nothing else, so
//! `$(leasehold acquire ..)` captures exactly the lease; errors go to stderr as the problem's
//! detail and code, with a non-zero exit (see `leasehold acquire --help`). `status` and `ls`
//! print tables for people, and the server's JSON with `--json`.

pub mod election;
pub mod healthcheck;
pub mod keys;
pub mod run;
pub mod serve;
mod signals;
mod table;

use std::error::Error;
use std::process::ExitCode;

use clap::CommandFactory as _;
use serde_json::{Value, json};

use crate::client::{
    AcquireOptions, Acquired, Client, ClientError, ClientOptions, LockKind, PermitOptions, Problem,
    Reply, Resource,
};
use crate::config::{
    AcquireArgs, Cli, CompletionsArgs, LeaseArgs, LeaseRequestArgs, LsArgs, ServerArgs, StatusArgs,
};

/// Server unreachable or refusing, lease lost: anything that is not the lock being busy.
pub const EXIT_FAILURE: u8 = 1;

/// `POST /v1/locks/{name}/leases` (or `/v1/semaphores/..` with `--semaphore`), printing the
/// lease (or only its token).
pub async fn acquire(args: AcquireArgs) -> ExitCode {
    let client = match connect(&args.server) {
        Ok(client) => client,
        Err(code) => return code,
    };
    // The process that holds the lease is the script that called us.
    let holder = Holder::of(nix::unistd::getppid().as_raw(), parent_command());
    let result = match args.lease.semaphore {
        Some(limit) => client
            .acquire_permits(&args.name, &permit_options(&args.lease, limit, &holder))
            .await
            .map(|reply| Reply {
                body: Acquired::Lease(reply.body),
                json: reply.json,
            }),
        None => {
            client
                .acquire(&args.name, &acquire_options(&args.lease, &holder))
                .await
        }
    };
    match result {
        Ok(Reply {
            body: Acquired::Queued(ticket),
            ..
        }) => {
            // A script cannot keep polling: give the place up, as if the lock were busy.
            let _ = client
                .leave(&args.name, ticket.ticket.ticket_id, &ticket.token)
                .await;
            if !args.lease.quiet {
                eprintln!("the fair lock is still held by others (lock_held)");
            }
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
            let busy = e.problem().is_some_and(Problem::is_lock_held);
            if !(busy && args.lease.quiet) {
                report(&e);
            }
            if busy {
                ExitCode::from(args.lease.conflict_exit_code)
            } else {
                ExitCode::from(EXIT_FAILURE)
            }
        }
    }
}

/// `POST .../heartbeat` with the lease's token (a semaphore lease's too).
pub async fn heartbeat(args: LeaseArgs) -> ExitCode {
    let client = match connect(&args.server) {
        Ok(client) => client,
        Err(code) => return code,
    };
    finish(
        on_either(|resource| client.heartbeat(resource, &args.name, args.lease_id, &args.token))
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
        on_either(|resource| {
            client.release(resource, &args.name, args.lease_id, &args.token, true)
        })
        .await
        .map(|reply| reply.json),
    )
}

/// Calls a lease route on the lock's routes, then, when no lock lease has that id, on the
/// semaphore's: a script need not say which kind of lease it holds.
async fn on_either<T, F, Fut>(call: F) -> Result<Reply<T>, ClientError>
where
    F: Fn(Resource) -> Fut,
    Fut: Future<Output = Result<Reply<T>, ClientError>>,
{
    match call(Resource::Lock).await {
        Err(ClientError::Problem(p)) if p.code == "lease_not_found" => {
            call(Resource::Semaphore).await
        }
        other => other,
    }
}

/// A lock's or semaphore's holders, or one lease's state: a table, or the server's JSON.
pub async fn status(args: StatusArgs) -> ExitCode {
    let client = match connect(&args.server) {
        Ok(client) => client,
        Err(code) => return code,
    };
    let shown = match args.lease_id {
        Some(id) => on_either(|resource| client.lease_status(resource, &args.name, id))
            .await
            .map(|reply| (table::lease(&reply.body), reply.json)),
        None => lock_or_semaphore(&client, &args.name).await,
    };
    match shown {
        Ok((_, json)) if args.json => print_json(&json),
        Ok((text, _)) => {
            emit(&text);
            ExitCode::SUCCESS
        }
        Err(e) => {
            report(&e);
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

/// A lock's holders, or a semaphore's when the name is one: its table and JSON.
async fn lock_or_semaphore(client: &Client, name: &str) -> Result<(String, Value), ClientError> {
    let lock = client.lock_status(name).await?;
    if lock.body.kind.as_deref() == Some("semaphore") {
        let semaphore = client.semaphore_status(name).await?;
        return Ok((table::semaphore(&semaphore.body), semaphore.json));
    }
    Ok((table::lock(&lock.body), lock.json))
}

/// `GET /v1/locks?prefix=..`, every page.
pub async fn ls(args: LsArgs) -> ExitCode {
    let client = match connect(&args.server) {
        Ok(client) => client,
        Err(code) => return code,
    };
    let mut cursor: Option<String> = None;
    let mut live = Vec::new();
    loop {
        let page = match client.list(&args.prefix, cursor.as_deref()).await {
            Ok(page) => page,
            Err(e) => {
                report(&e);
                return ExitCode::from(EXIT_FAILURE);
            }
        };
        if args.json {
            emit(&format!("{}\n", page.json));
        }
        live.extend(page.body.locks);
        cursor = page.body.next_cursor;
        if cursor.is_none() {
            break;
        }
    }
    if !args.json {
        live.sort_by(|a, b| a.name.cmp(&b.name));
        emit(&table::live(&live));
    }
    ExitCode::SUCCESS
}

/// Prints the completion script of `args.shell` for the whole command line. A closed pipe
/// (`| head`) is not an error worth a panic: the script is written from a buffer.
pub fn completions(args: &CompletionsArgs) -> ExitCode {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "leasehold", &mut script);
    emit(&String::from_utf8_lossy(&script));
    ExitCode::SUCCESS
}

/// Writes to stdout; a reader that went away (`| head`) ends the output, not in a panic as
/// `print!` would.
fn emit(text: &str) {
    use std::io::Write as _;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// Who takes a lease: a label for people and the metadata that finds the process.
#[derive(Debug, Clone)]
pub(crate) struct Holder {
    label: String,
    metadata: Value,
}

impl Holder {
    /// `user@host`, with `{host, pid, command}` as metadata (`command` when known).
    pub(crate) fn of(pid: i32, command: Option<String>) -> Self {
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "localhost".to_owned());
        let user = ["USER", "LOGNAME"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|u| !u.is_empty()))
            .unwrap_or_else(|| "unknown".to_owned());
        let mut metadata = json!({"host": host, "pid": pid});
        if let Some(command) = command {
            metadata["command"] = Value::String(command);
        }
        Self {
            label: format!("{user}@{host}"),
            metadata,
        }
    }
}

/// The command line of our parent (the script calling `acquire`), as `ps` shows it.
fn parent_command() -> Option<String> {
    let ppid = nix::unistd::getppid();
    let raw = std::fs::read(format!("/proc/{ppid}/cmdline")).ok()?;
    let words: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    (!words.is_empty()).then(|| clip(&words.join(" ")))
}

/// A command line cut to a size that fits the lease's metadata (4 KiB in all).
pub(crate) fn clip(command: &str) -> String {
    const MAX: usize = 1000;
    match command.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &command[..cut]),
        None => command.to_owned(),
    }
}

pub(crate) fn acquire_options(args: &LeaseRequestArgs, holder: &Holder) -> AcquireOptions {
    AcquireOptions {
        ttl: args.ttl,
        holder: Some(args.holder.clone().unwrap_or_else(|| holder.label.clone())),
        metadata: Some(holder.metadata.clone()),
        kind: args.kind.map(LockKind::from),
        wait: args.wait,
        lock_delay: args.lock_delay,
    }
}

pub(crate) fn permit_options(
    args: &LeaseRequestArgs,
    limit: u32,
    holder: &Holder,
) -> PermitOptions {
    PermitOptions {
        limit,
        permits: args.permits,
        ttl: args.ttl,
        holder: Some(args.holder.clone().unwrap_or_else(|| holder.label.clone())),
        metadata: Some(holder.metadata.clone()),
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
    emit(&format!("{json}\n"));
    ExitCode::SUCCESS
}

/// Prints a client error on stderr: a problem as its detail and code, anything else with its
/// whole source chain (reqwest's own message names only the URL, not "connection refused").
pub(crate) fn report(e: &ClientError) {
    eprintln!("leasehold: {}", describe(e));
}

/// An error and its causes, `: `-separated.
pub(crate) fn describe(e: &dyn Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
