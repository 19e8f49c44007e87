//! The dashboard's pages rendered against real Redis state, sign-in, CSRF refusals, force
//! release from the browser's forms, escaping of hostile input, and the `/v1/events` feed.

pub(crate) mod elections;
mod events;
mod pages;
mod session;

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::HeaderMap;

use crate::helpers::TestApp;

/// An HTML page (or any non-JSON answer), read whole.
pub struct Page {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Page {
    pub fn assert_status(&self, status: u16) -> &Self {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.body);
        self
    }

    pub fn assert_contains(&self, text: &str) -> &Self {
        assert!(
            self.body.contains(text),
            "{text:?} not in the page:\n{}",
            self.body
        );
        self
    }

    pub fn assert_lacks(&self, text: &str) -> &Self {
        assert!(
            !self.body.contains(text),
            "{text:?} is in the page:\n{}",
            self.body
        );
        self
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The value of the first `name="csrf"` hidden input.
    pub fn csrf(&self) -> String {
        let start = self
            .body
            .find(r#"name="csrf" value=""#)
            .unwrap_or_else(|| panic!("no CSRF field in the page:\n{}", self.body))
            + r#"name="csrf" value=""#.len();
        let len = self.body[start..].find('"').expect("closing quote");
        self.body[start..start + len].to_owned()
    }

    /// The table row of the overview that shows `lock`.
    pub fn row(&self, lock: &str) -> &str {
        let marker = format!(r#"<tr data-lock="{lock}">"#);
        let start = self
            .body
            .find(&marker)
            .unwrap_or_else(|| panic!("no row for {lock}:\n{}", self.body));
        let end = self.body[start..].find("</tr>").expect("row end");
        &self.body[start..start + end]
    }
}

/// A browser-like client of one app: keeps its session cookie, follows no redirects and
/// sends `Origin` on POSTs like a browser does (unless told otherwise).
pub struct Browser {
    http: reqwest::Client,
    base: String,
    pub cookie: Option<String>,
}

impl Browser {
    pub fn new(app: &TestApp) -> Self {
        Self {
            http: leasehold::client::http_builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(30))
                .build()
                .expect("client"),
            base: app.url(""),
            cookie: None,
        }
    }

    pub async fn get(&self, path: &str) -> Page {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(cookie) = &self.cookie {
            req = req.header("cookie", cookie);
        }
        read(req.send().await.expect("request")).await
    }

    /// POSTs a form; `origin` is the Origin header to send (None: none at all).
    pub async fn post_form(
        &self,
        path: &str,
        fields: &[(&str, &str)],
        origin: Option<&str>,
    ) -> Page {
        let body = fields
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        if let Some(origin) = origin {
            req = req.header("origin", origin);
        }
        if let Some(cookie) = &self.cookie {
            req = req.header("cookie", cookie);
        }
        read(req.send().await.expect("request")).await
    }

    pub fn origin(&self) -> String {
        self.base.trim_end_matches('/').to_owned()
    }

    /// Signs in with `token`; keeps the session cookie when it worked.
    pub async fn sign_in(&mut self, token: &str) -> Page {
        let origin = self.origin();
        let page = self
            .post_form("/login", &[("token", token), ("next", "/")], Some(&origin))
            .await;
        if let Some(set) = page.header("set-cookie") {
            self.cookie = Some(set.split(';').next().expect("cookie pair").to_owned());
        }
        page
    }
}

async fn read(response: reqwest::Response) -> Page {
    Page {
        status: response.status(),
        headers: response.headers().clone(),
        body: response.text().await.expect("body"),
    }
}

fn encode(raw: &str) -> String {
    raw.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
