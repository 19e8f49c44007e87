//! A page that could not be shown: the same [`Problem`] the API answers with, rendered as an
//! HTML page (its status, its title from the one problem table, its detail, and its
//! `Retry-After`). One error, two renderings: the API's JSON and this page cannot disagree
//! on what a failure is called or which status it has.

use askama::Template;
use axum::http::{HeaderValue, header};
use axum::response::{Html, IntoResponse, Response};

use super::nav::Nav;
use crate::locks::LockError;
use crate::problem::{Problem, ProblemKind};

#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub nav: Nav,
    pub status: u16,
    pub title: &'static str,
    pub detail: String,
}

/// A problem on its way to be rendered as a page.
#[derive(Debug)]
pub struct PageError(pub Problem);

impl PageError {
    pub fn new(kind: ProblemKind, detail: impl Into<String>) -> Self {
        Self(Problem::new(kind, detail))
    }
}

impl From<Problem> for PageError {
    fn from(problem: Problem) -> Self {
        Self(problem)
    }
}

impl From<LockError> for PageError {
    fn from(e: LockError) -> Self {
        Self(Problem::from(e))
    }
}

impl From<crate::leases::LeaseError> for PageError {
    fn from(e: crate::leases::LeaseError) -> Self {
        Self(Problem::from(e))
    }
}

impl From<askama::Error> for PageError {
    fn from(e: askama::Error) -> Self {
        tracing::error!(error = %e, "a dashboard template failed");
        Self::new(ProblemKind::Internal, "internal error")
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let kind = self.0.kind();
        let status = kind.status();
        let page = ErrorPage {
            nav: Nav::default(),
            status: status.as_u16(),
            title: kind.title(),
            detail: self.0.detail().to_owned(),
        };
        let mut response = match page.render() {
            Ok(html) => (status, Html(html)).into_response(),
            Err(_) => status.into_response(),
        };
        if let Some(secs) = self.0.retry_after_secs()
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        response
    }
}

pub type PageResult = Result<Response, PageError>;

pub fn render(page: &impl Template) -> PageResult {
    Ok(Html(page.render()?).into_response())
}
