//! Tables for people: what `status` and `ls` print without `--json`.

use std::fmt::Write as _;
use std::time::Duration;

use crate::client::{ElectionBody, LeaseBody, LiveBody, LockBody, SemaphoreBody};

/// Columns padded to their widest cell, two spaces apart.
fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths) {
            let _ = write!(line, "{cell:<width$}  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn or_dash(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// Milliseconds as people read a time left: `29.9s`, `4m 10s`.
fn left(ms: Option<u64>) -> String {
    match ms {
        None => "-".to_owned(),
        Some(ms) if ms < 60_000 => format!("{:.1}s", Duration::from_millis(ms).as_secs_f64()),
        Some(ms) => humantime::format_duration(Duration::from_secs(ms / 1000)).to_string(),
    }
}

pub fn lock(lock: &LockBody) -> String {
    let kind = lock.kind.as_deref().unwrap_or("free");
    let mut out = if lock.held {
        let mode = lock.mode.map(|m| match m {
            crate::wire::RwMode::Read => " (read)",
            crate::wire::RwMode::Write => " (write)",
        });
        format!(
            "lock {}: held, {kind}{}, {} left; fencing counter {}\n",
            lock.lock,
            mode.unwrap_or(""),
            left(lock.remaining_ms),
            lock.fencing_counter
        )
    } else {
        format!(
            "lock {}: free; fencing counter {}\n",
            lock.lock, lock.fencing_counter
        )
    };
    if !lock.holders.is_empty() {
        let rows: Vec<Vec<String>> = lock
            .holders
            .iter()
            .map(|h| {
                vec![
                    h.holder.clone().unwrap_or_else(|| "-".to_owned()),
                    h.lease_id.map_or_else(
                        || format!("(Redisson {})", h.holder_id),
                        |id| id.to_string(),
                    ),
                    or_dash(h.kind.as_deref()),
                    h.reentry_count.to_string(),
                    or_dash(h.fencing_token),
                    or_dash(h.acquired_at.as_deref()),
                ]
            })
            .collect();
        out.push_str(&render(
            &[
                "HOLDER",
                "LEASE",
                "KIND",
                "LEVELS",
                "FENCING TOKEN",
                "SINCE",
            ],
            &rows,
        ));
    }
    if lock.queue_length > 0 {
        let _ = writeln!(out, "{} waiting in the fair queue:", lock.queue_length);
        let rows: Vec<Vec<String>> = lock
            .queue
            .iter()
            .map(|q| {
                vec![
                    q.position.to_string(),
                    q.holder.clone().unwrap_or_else(|| "-".to_owned()),
                    or_dash(q.ticket_id),
                    or_dash(q.waiting_since.as_deref()),
                ]
            })
            .collect();
        out.push_str(&render(&["#", "WAITER", "TICKET", "SINCE"], &rows));
    }
    out
}

/// An election: its leader (or none), the last term, and the line (`leasehold leader`).
pub fn election(election: &ElectionBody) -> String {
    let mut out = match &election.leader {
        Some(leader) => {
            let mut out = format!(
                "election {}: led, term {}\n",
                election.election, leader.term
            );
            let row = vec![
                or_dash(leader.holder.as_deref()),
                or_dash(leader.value.as_deref()),
                or_dash(leader.candidate_id),
                or_dash(leader.since.as_deref()),
                or_dash(leader.expires_at.as_deref()),
            ];
            out.push_str(&render(
                &["LEADER", "VALUE", "CANDIDATE", "SINCE", "EXPIRES"],
                &[row],
            ));
            out
        }
        None => format!(
            "election {}: nobody leads; last term {}\n",
            election.election, election.term
        ),
    };
    if election.candidates_waiting > 0 {
        let _ = writeln!(out, "{} waiting in line:", election.candidates_waiting);
        let rows: Vec<Vec<String>> = election
            .candidates
            .iter()
            .map(|c| {
                vec![
                    c.position.to_string(),
                    or_dash(c.holder.as_deref()),
                    or_dash(c.candidate_id),
                    or_dash(c.since.as_deref()),
                ]
            })
            .collect();
        out.push_str(&render(&["#", "CANDIDATE", "ID", "SINCE"], &rows));
    }
    out
}

pub fn semaphore(sem: &SemaphoreBody) -> String {
    let mut out = format!(
        "semaphore {}: {} of {} permits in use, {} free; fencing counter {}\n",
        sem.semaphore, sem.used, sem.limit, sem.available, sem.fencing_counter
    );
    if !sem.holders.is_empty() {
        let rows: Vec<Vec<String>> = sem
            .holders
            .iter()
            .map(|h| {
                vec![
                    h.holder.clone().unwrap_or_else(|| "-".to_owned()),
                    h.lease_id
                        .map_or_else(|| "(Redisson clients)".to_owned(), |id| id.to_string()),
                    h.permits.to_string(),
                    or_dash(h.fencing_token),
                    or_dash(h.expires_at.as_deref()),
                ]
            })
            .collect();
        out.push_str(&render(
            &["HOLDER", "LEASE", "PERMITS", "FENCING TOKEN", "EXPIRES"],
            &rows,
        ));
    }
    out
}

pub fn lease(lease: &LeaseBody) -> String {
    let mut rows = vec![
        ("state", lease.state.as_str().to_owned()),
        ("lock", lease.lock.clone()),
        ("kind", lease.kind.clone()),
        ("holder", or_dash(lease.holder.as_deref())),
        ("fencing token", lease.fencing_token.to_string()),
    ];
    if let Some(permits) = lease.permits {
        rows.push(("permits", permits.to_string()));
    } else {
        rows.push(("levels", lease.reentry_count.to_string()));
    }
    rows.extend([
        ("ttl", left(Some(lease.ttl_ms))),
        ("time left", left(lease.remaining_ms)),
        ("acquired at", lease.acquired_at.clone()),
        ("expires at", lease.expires_at.clone()),
    ]);
    if let Some(ended) = &lease.ended_at {
        rows.push(("ended at", ended.clone()));
    }
    let mut out = format!("lease {}\n", lease.lease_id);
    for (key, value) in rows {
        let _ = writeln!(out, "  {key:<14}{value}");
    }
    out
}

pub fn live(entries: &[LiveBody]) -> String {
    if entries.is_empty() {
        return "no live locks or semaphores\n".to_owned();
    }
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            let held = match (e.used, e.limit) {
                (Some(used), Some(limit)) => format!("{used}/{limit} permits"),
                _ if e.holders > 1 => format!("{} holders", e.holders),
                _ if e.holders == 1 => "held".to_owned(),
                _ => "free".to_owned(),
            };
            vec![
                e.name.clone(),
                or_dash(e.kind.as_deref()),
                held,
                or_dash(e.holder.as_deref()),
                e.queue_length.to_string(),
                left(e.remaining_ms),
            ]
        })
        .collect();
    render(
        &["NAME", "KIND", "STATE", "HOLDER", "WAITING", "TTL LEFT"],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let text = render(
            &["A", "BB"],
            &[
                vec!["long cell".into(), "x".into()],
                vec!["y".into(), "z".into()],
            ],
        );
        assert_eq!(text, "A          BB\nlong cell  x\ny          z\n");
        assert_eq!(left(Some(1500)), "1.5s");
        assert_eq!(left(Some(250_000)), "4m 10s");
    }
}
