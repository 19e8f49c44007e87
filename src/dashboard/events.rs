//! `GET /events`: the live event feed (filled by the page's script from `/v1/events`).

use askama::Template;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Uri};
use serde::Deserialize;

use super::error::{PageResult, render};
use super::overview::parse_prefix;
use super::viewer::{Nav, Viewer, viewer};
use crate::auth::Peer;
use crate::state::AppState;

#[derive(Debug, Default, Deserialize)]
pub(super) struct EventsQuery {
    prefix: Option<String>,
}

/// `GET /events`: the live feed (filled by the page's script from `/v1/events`).
pub(super) async fn events_page(
    State(state): State<AppState>,
    Peer(peer): Peer,
    headers: HeaderMap,
    uri: Uri,
    Query(query): Query<EventsQuery>,
) -> PageResult {
    let Viewer { nav, .. } = match viewer(&state, &headers, &uri, peer).await {
        Ok(viewer) => viewer,
        Err(response) => return Ok(response),
    };
    let prefix = parse_prefix(query.prefix.as_deref())?;
    render(&EventsPage {
        nav,
        prefix: prefix.as_str().to_owned(),
        // The page starts with the latest events kept in Redis, then goes on live.
        events_url: format!("/v1/events?prefix={}&backlog=100", prefix.as_str()),
    })
}

#[derive(Template)]
#[template(path = "events.html")]
pub struct EventsPage {
    pub nav: Nav,
    pub prefix: String,
    pub events_url: String,
}
