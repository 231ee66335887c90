//! The HTTP API (`ledger serve`): JSON commands and audit queries, bearer-token auth,
//! an OpenAPI document at `/openapi.json`, and the consumers' contracts under `/contracts/`
//! ([`contracts`]). One module per resource; [`layers`] gives every error the same JSON
//! shape; [`crate::service`] serves it.

mod assignments;
mod audit;
mod auth;
mod contacts;
pub mod contracts;
mod cursor;
mod digests;
mod error;
mod extract;
mod layers;
mod replays;
mod runs;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post};
use uuid::Uuid;

pub use audit::{DEFAULT_PAGE, MAX_PAGE};
pub use auth::{Principal, Role, TokenSpecError, Tokens, bearer_principal, entry as token_entry};
pub use cursor::CursorKey;
pub use error::ApiError;

use crate::commands::Ledger;
use crate::store::Metadata;

/// Largest body of `POST /v1/assignments/batch`.
pub const BATCH_BODY_BYTES: usize = 256 * 1024;

/// Shared state of the handlers.
#[derive(Debug, Clone)]
pub struct AppState {
    /// Command side.
    pub ledger: Ledger,
    /// Configured tokens.
    pub tokens: Tokens,
    /// Signs history cursors.
    pub cursor_key: CursorKey,
    /// The digests' public key (PEM), when digests are on.
    pub digest_public_key: Option<String>,
    /// The digest builder's tree in memory, which proofs take their paths from.
    pub digest_tree: crate::digest::log::TreeCache,
    /// What only the console uses.
    pub console: ConsoleState,
}

/// The console's part of [`AppState`]: its sessions, its cookies and the slot it shows.
/// Beside [`AppState`] rather than in [`crate::console`], which uses the API's state: the
/// API need not know the console.
#[derive(Debug, Clone)]
pub struct ConsoleState {
    /// Signs the console's sessions and CSRF tokens (not the cursor key: see
    /// [`crate::session_key`]).
    pub session_keys: crate::session_key::SessionKeys,
    /// The console's cookies carry `Secure` (the service speaks TLS).
    pub secure_cookies: bool,
    /// The relay's replication slot, whose lag the console's operations page shows.
    pub relay_slot: String,
    /// With a witness policy: the witnesses the verdict and the operations page watch.
    pub witnessing: Option<crate::tlog::policy::Witnessing>,
}

/// The API routes (health endpoints are added by the caller).
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/openapi.json", get(openapi))
        .route(contracts::ASYNCAPI_PATH, get(contracts::asyncapi))
        .route(
            &contracts::events_proto_path(),
            get(contracts::events_proto),
        )
        .route("/v1/contacts", post(contacts::create_contact))
        .route("/v1/contacts/{id}", get(contacts::get_contact))
        .route(
            "/v1/contacts/{id}/supersede",
            post(contacts::supersede_contact),
        )
        .route("/v1/contacts/{id}/lineage", get(contacts::contact_lineage))
        .route(
            "/v1/contacts/{id}/reassignment-runs",
            post(runs::start_reassignment).get(runs::contact_runs),
        )
        .route("/v1/reassignment-runs/{id}", get(runs::reassignment_run))
        .route("/v1/digests/public-key", get(digests::public_key))
        .route("/v1/digests/latest", get(digests::latest))
        .route("/v1/checkpoints/latest", get(digests::latest_checkpoint))
        .route("/v1/events/{id}/proof", get(digests::event_proof))
        .route("/v1/replays", post(replays::request_replay))
        .route("/v1/replays/{id}", get(replays::replay_status))
        .route("/v1/replays/{id}/cancel", post(replays::cancel_replay))
        .route("/v1/assignments", post(assignments::assign))
        .route(
            "/v1/assignments/batch",
            // 1,000 items of about 75 bytes: more than the default limit.
            post(assignments::assign_batch).layer(DefaultBodyLimit::max(BATCH_BODY_BYTES)),
        )
        .route("/v1/assignments/{id}", get(assignments::get_assignment))
        .route(
            "/v1/assignments/{id}/end",
            post(assignments::end_assignment),
        )
        .route(
            "/v1/assignments/{id}/replace",
            post(assignments::replace_assignment),
        )
        .route(
            "/v1/businesses/{business_id}/jurisdictions/{jurisdiction}/registered-agent",
            get(audit::registered_agent_at),
        )
        .route(
            "/v1/businesses/{business_id}/jurisdictions/{jurisdiction}/registered-agents",
            get(audit::registered_agents_during),
        )
        .route(
            "/v1/businesses/{business_id}/assignments",
            get(audit::assignment_history),
        )
        .with_state(state)
}

/// Layers every router the service serves (the API and the health endpoints): bodies
/// larger than [`extract::MAX_BODY_BYTES`] refused, unknown routes answered, and every
/// error in the API's JSON shape, including the body-less ones the routing layer makes and
/// a handler that panicked.
pub fn layered(router: Router) -> Router {
    let routes = router
        .fallback(layers::unknown_route)
        .layer(DefaultBodyLimit::max(extract::MAX_BODY_BYTES));
    // Around the whole router, not each route: a route's 405 gets its `Allow` header
    // outside the layers of the route.
    Router::new()
        .fallback_service(routes)
        .layer(middleware::from_fn(layers::json_errors))
        .layer(middleware::from_fn(crate::trace::http_layer))
}

async fn openapi() -> ([(axum::http::HeaderName, &'static str); 1], &'static str) {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        include_str!("openapi.json"),
    )
}

fn metadata(principal: &auth::Principal) -> Metadata {
    let request = Uuid::now_v7();
    Metadata {
        actor: principal.name.clone(),
        correlation_id: request,
        causation_id: Some(request),
        traceparent: crate::trace::current().map(|span| span.to_string()),
    }
}

fn uuid_param(name: &str, value: &str) -> Result<Uuid, ApiError> {
    value
        .parse()
        .map_err(|_| ApiError::bad_request(format!("{name} {value:?} is not a UUID")))
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};
    use serde_json::Value;
    use uuid::Uuid;

    use crate::commands::{
        Assign, ChangeAssignment, CreateContact, StartReassignment, SupersedeContact,
    };
    use crate::domain::{ContactStatus, EndReason, Jurisdiction, PostalAddress};
    use crate::queries::{AssignmentView, ContactView, RegisteredAgent};

    /// The keys of `value` equal the properties of the schema it is described by, objects
    /// within it by theirs (`$ref`s followed); what differs, by path.
    fn differences(document: &Value, schema: &Value, value: &Value, path: &str) -> Vec<String> {
        let schema = match schema["$ref"].as_str() {
            Some(reference) => {
                let pointer = reference.trim_start_matches('#');
                document.pointer(pointer).expect("the $ref resolves")
            }
            None => schema,
        };
        let Some(object) = value.as_object() else {
            return Vec::new();
        };
        let properties = schema["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("{path}: no properties in the document"));
        let mut found = Vec::new();
        for key in object.keys().filter(|key| !properties.contains_key(*key)) {
            found.push(format!("{path}.{key} is served, not in openapi.json"));
        }
        for key in properties.keys().filter(|key| !object.contains_key(*key)) {
            found.push(format!("{path}.{key} is in openapi.json, not served"));
        }
        for (key, inner) in object {
            if let Some(described) = properties.get(key) {
                found.extend(differences(
                    document,
                    described,
                    inner,
                    &format!("{path}.{key}"),
                ));
            }
        }
        found
    }

    /// Every field of the views the API serves as JSON is a property of its schema in
    /// `openapi.json`, and the other way round, and one of the view's `COLUMNS`. The views
    /// are written out whole (no `..`), so a field added to one does not compile here until
    /// it is, and then this test names the schema or the list that lacks it.
    #[test]
    fn the_views_served_have_exactly_the_properties_openapi_json_gives_them() {
        let document: Value = serde_json::from_str(include_str!("openapi.json")).unwrap();
        let time = DateTime::<Utc>::UNIX_EPOCH;
        let id = Uuid::nil();
        let assignment = AssignmentView {
            assignment_id: id,
            business_id: id,
            jurisdiction: Jurisdiction::parse("jurisdiction", "TX").unwrap(),
            contact_id: id,
            started_at: time,
            ended_at: Some(time),
            end_reason: Some(EndReason::Replaced),
            replaces: Some(id),
            replaced_by: Some(id),
            recorded_at: time,
            ended_recorded_at: Some(time),
        };
        let contact = ContactView {
            contact_id: id,
            jurisdiction: Jurisdiction::parse("jurisdiction", "TX").unwrap(),
            name: "Office".into(),
            address: PostalAddress {
                line1: "1 Main St".into(),
                line2: String::new(),
                city: "Austin".into(),
                region: "TX".into(),
                postal_code: "78701".into(),
            },
            status: ContactStatus::OnFile,
            supersedes: Some(id),
            superseded_by: Some(id),
            created_at: time,
            recorded_at: time,
            superseded_at: Some(time),
            superseded_recorded_at: Some(time),
            version: 2,
        };
        let agent = RegisteredAgent {
            assignment,
            contact,
            contact_status: ContactStatus::OnFile,
        };
        let served = serde_json::to_value(&agent).unwrap();
        let schema = serde_json::json!({"$ref": "#/components/schemas/RegisteredAgent"});
        let found = differences(&document, &schema, &served, "RegisteredAgent");
        assert!(found.is_empty(), "{found:#?}");
        // And each view reads what it serves: its fields are its COLUMNS (a contact's
        // address is five columns, its version the stream's).
        let keys =
            |value: &Value| -> Vec<String> {
                let mut keys = Vec::new();
                for (key, inner) in value.as_object().unwrap() {
                    match key.as_str() {
                        "address" => keys.extend(inner.as_object().unwrap().keys().map(|line| {
                            match line.as_str() {
                                "line1" | "line2" => format!("address_{line}"),
                                _ => line.clone(),
                            }
                        })),
                        "version" => keys.push("stream_version".into()),
                        _ => keys.push(key.clone()),
                    }
                }
                keys.sort();
                keys
            };
        let sorted = |columns: &[&str]| -> Vec<String> {
            let mut columns: Vec<String> = columns.iter().map(|c| (*c).to_owned()).collect();
            columns.sort();
            columns
        };
        assert_eq!(
            keys(&served["assignment"]),
            sorted(&AssignmentView::COLUMNS)
        );
        assert_eq!(keys(&served["contact"]), sorted(&ContactView::COLUMNS));
    }

    /// The field names a struct's `Deserialize` asks for: serde's derive passes them all to
    /// `deserialize_struct`, which this deserializer records before it refuses.
    struct FieldNames(std::cell::RefCell<Vec<&'static str>>);

    impl<'de> serde::Deserializer<'de> for &FieldNames {
        type Error = serde::de::value::Error;

        fn deserialize_any<V: serde::de::Visitor<'de>>(
            self,
            _: V,
        ) -> Result<V::Value, Self::Error> {
            Err(serde::de::Error::custom("not a struct"))
        }

        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            self.0.borrow_mut().extend(fields);
            Err(serde::de::Error::custom("names recorded"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }

    fn field_names<T: serde::de::DeserializeOwned>() -> Vec<&'static str> {
        let names = FieldNames(std::cell::RefCell::new(Vec::new()));
        let _refused = T::deserialize(&names);
        names.0.into_inner()
    }

    /// Every field a request body is read into is a property of its schema in
    /// `openapi.json`, and the other way round: a field added to a command's input (the
    /// value of a new event field, say) is documented, or this test names it. schemathesis
    /// finds only a property documented and refused, not one accepted and undocumented.
    #[test]
    fn the_request_bodies_read_exactly_the_properties_openapi_json_gives_them() {
        let document: Value = serde_json::from_str(include_str!("openapi.json")).unwrap();
        let mut found = Vec::new();
        for (schema, fields) in [
            ("CreateContact", field_names::<CreateContact>()),
            ("SupersedeContact", field_names::<SupersedeContact>()),
            ("StartReassignment", field_names::<StartReassignment>()),
            ("Assign", field_names::<Assign>()),
            ("ChangeAssignment", field_names::<ChangeAssignment>()),
            (
                "AssignBatch",
                field_names::<super::assignments::AssignBatch>(),
            ),
            ("PostalAddress", field_names::<PostalAddress>()),
        ] {
            assert!(!fields.is_empty(), "{schema}: no field names recorded");
            let properties = document["components"]["schemas"][schema]["properties"]
                .as_object()
                .unwrap_or_else(|| panic!("{schema} has no properties in openapi.json"));
            for field in &fields {
                if !properties.contains_key(*field) {
                    found.push(format!("{schema}.{field} is read, not in openapi.json"));
                }
            }
            for property in properties.keys() {
                if !fields.contains(&property.as_str()) {
                    found.push(format!("{schema}.{property} is in openapi.json, not read"));
                }
            }
        }
        assert!(found.is_empty(), "{found:#?}");
    }
}
