//! The problem codes in the OpenAPI document: the `Problem` schema's `code` as an enum of
//! every code the API can answer, from the server's own table ([`ProblemKind::ALL`]). It is
//! the one list the official clients' error types are checked against (`clients/PROTOCOL.md`:
//! each client's parity test reads it from a running server), and what a generated client
//! may switch on.

use serde_json::Value;
use utoipa::openapi::{OpenApi, RefOr, Schema};

use crate::problem::ProblemKind;

/// Writes the enum into `doc` (finished with its components: see `openapi::finish`).
pub(super) fn list_in(doc: &mut OpenApi) {
    let codes: Vec<Value> = ProblemKind::ALL
        .iter()
        .filter(|kind| kind.answered_by_api())
        .map(|kind| Value::String(kind.code().to_owned()))
        .collect();
    let property = doc
        .components
        .as_mut()
        .and_then(|components| components.schemas.get_mut("Problem"))
        .and_then(|schema| match schema {
            RefOr::T(Schema::Object(object)) => object.properties.get_mut("code"),
            _ => None,
        });
    if let Some(RefOr::T(Schema::Object(code))) = property {
        code.enum_values = Some(codes);
    }
}
