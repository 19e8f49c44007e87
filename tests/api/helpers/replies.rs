//! What the server answered, read whole (`Reply`), and what a caller keeps of a grant to use
//! it again: a `Lease`, or a fair lock's `Ticket`.

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::Value;

/// An HTTP response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Reply {
    pub async fn read(response: reqwest::Response) -> Self {
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.expect("body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| panic!("body is not JSON: {}", String::from_utf8_lossy(&bytes)))
        };
        Self {
            status,
            headers,
            body,
        }
    }

    pub fn assert_status(&self, status: u16) -> &Self {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected status; body: {}",
            self.body
        );
        self
    }

    /// Asserts a problem+json answer with this status and code.
    pub fn assert_problem(&self, status: u16, code: &str) -> &Self {
        self.assert_status(status);
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        assert_eq!(self.body["code"], code, "body: {}", self.body);
        assert_eq!(self.body["status"], status);
        assert_eq!(self.body["type"], format!("/problems/{code}"));
        assert!(self.body["title"].is_string() && self.body["detail"].is_string());
        self
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn str(&self, field: &str) -> String {
        self.body[field]
            .as_str()
            .unwrap_or_else(|| panic!("no {field} in {}", self.body))
            .into()
    }

    pub fn u64(&self, field: &str) -> u64 {
        self.body[field]
            .as_u64()
            .unwrap_or_else(|| panic!("no {field} in {}", self.body))
    }
}

/// A lease (of a lock or a semaphore) as its holder knows it.
#[derive(Debug, Clone)]
pub struct Lease {
    pub lock: String,
    pub id: String,
    pub token: String,
    pub fencing_token: u64,
    /// Its URL path (`/v1/locks/{lock}/leases/{id}` or `/v1/semaphores/...`).
    pub path: String,
}

impl Lease {
    /// The lease a 201 (or a ticket's 201) answered with, at its `Location`.
    pub fn from_reply(lock: &str, reply: &Reply) -> Self {
        reply.assert_status(201);
        let id = reply.str("lease_id");
        Self {
            lock: lock.into(),
            path: reply
                .header("location")
                .map_or_else(|| format!("/v1/locks/{lock}/leases/{id}"), str::to_owned),
            id,
            token: reply.str("token"),
            fencing_token: reply.u64("fencing_token"),
        }
    }
}

/// A fair lock's ticket (a 202) as its waiter knows it.
#[derive(Debug, Clone)]
pub struct Ticket {
    pub lock: String,
    pub id: String,
    pub token: String,
    /// Its URL path (`/v1/locks/{lock}/tickets/{id}`).
    pub path: String,
}

impl Ticket {
    pub fn from_reply(lock: &str, reply: &Reply) -> Self {
        reply.assert_status(202);
        Self {
            lock: lock.into(),
            id: reply.str("ticket_id"),
            token: reply.str("token"),
            path: reply.header("location").expect("Location").to_owned(),
        }
    }

    /// The lease the ticket turns into (same id, same token) once granted.
    pub fn lease(&self, granted: &Reply) -> Lease {
        granted.assert_status(201);
        Lease {
            lock: self.lock.clone(),
            id: self.id.clone(),
            token: self.token.clone(),
            fencing_token: granted.u64("fencing_token"),
            path: granted.header("location").expect("Location").to_owned(),
        }
    }
}
