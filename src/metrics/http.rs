//! HTTP requests, by method, route template and status (counted by the front door).

use std::time::Duration;

use super::Metrics;
use super::labels::{HttpLabels, RouteLabels};

impl Metrics {
    /// One HTTP request answered.
    pub fn http_request(&self, method: &str, route: &str, status: u16, took: Duration) {
        let method = method_label(method);
        self.http_requests
            .get_or_create(&HttpLabels {
                method,
                route: route.to_owned(),
                status,
            })
            .inc();
        self.http_duration
            .get_or_create(&RouteLabels {
                method,
                route: route.to_owned(),
            })
            .observe(took.as_secs_f64());
    }
}

/// Standard methods by name; anything else is `other`, so a client cannot mint label values.
fn method_label(method: &str) -> &'static str {
    [
        "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT",
    ]
    .into_iter()
    .find(|m| *m == method)
    .unwrap_or("other")
}
