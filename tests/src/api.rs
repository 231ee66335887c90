//! Drives the ledger's HTTP API in process: the real router, state and database, without
//! a TCP hop.

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use ra_ledger::api::{AppState, ConsoleState, CursorKey, Role, Tokens, token_entry};
use ra_ledger::commands::Ledger;
use ra_ledger::service::{self, ConnectionStats, Limits};
use serde_json::{Value, json};
use tower::ServiceExt;
use uuid::Uuid;

use crate::TestDatabase;

/// Writer token of test APIs.
pub const WRITER: &str = "writer-token-for-tests";
/// Auditor token of test APIs.
pub const AUDITOR: &str = "auditor-token-for-tests";
/// Operator token of test APIs (replays).
pub const OPERATOR: &str = "operator-token-for-tests";

/// The API over one test database.
#[derive(Debug, Clone)]
pub struct TestApi {
    router: Router,
    served: Router,
    /// The command side, for tests that call it directly.
    pub ledger: Ledger,
}

/// A response: status and JSON body.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status.
    pub status: StatusCode,
    /// Parsed body (`null` when empty or not JSON).
    pub body: Value,
    /// The body as text (a signed note, a PEM key).
    pub text: String,
}

impl Reply {
    /// The body, after checking the status is `status`; a reply with another status fails
    /// the test at the caller's line, showing the body.
    #[track_caller]
    pub fn expect(&self, status: StatusCode) -> &Value {
        assert_eq!(self.status, status, "{:?}", self.body);
        &self.body
    }

    /// Checks that the reply is an error of `status` with the `error.code` `code`; another
    /// fails the test at the caller's line, showing the body.
    #[track_caller]
    pub fn expect_error(&self, status: StatusCode, code: &str) {
        assert_eq!(self.status, status, "{:?}", self.body);
        assert_eq!(self.error_code(), code, "{:?}", self.body);
    }

    /// The `error.code` of an error body.
    pub fn error_code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or_default()
    }

    /// A string field of the body.
    pub fn str(&self, field: &str) -> String {
        self.body[field].as_str().unwrap_or_default().to_owned()
    }
}

impl TestApi {
    /// The API over `database`.
    pub fn new(database: &TestDatabase) -> anyhow::Result<Self> {
        Self::with_relay_slot(database, "ra_ledger_relay")
    }

    /// The API over `database`, its console reading the relay's slot `slot`.
    pub fn with_relay_slot(database: &TestDatabase, slot: &str) -> anyhow::Result<Self> {
        Self::with_console(database, slot, None)
    }

    /// The API over `database`, its verdict and console watching the witnesses of
    /// `witnessing` too.
    pub fn with_witnessing(
        database: &TestDatabase,
        witnessing: ra_ledger::tlog::policy::Witnessing,
    ) -> anyhow::Result<Self> {
        Self::with_console(database, "ra_ledger_relay", Some(witnessing))
    }

    fn with_console(
        database: &TestDatabase,
        slot: &str,
        witnessing: Option<ra_ledger::tlog::policy::Witnessing>,
    ) -> anyhow::Result<Self> {
        let pool = ra_ledger::db::command_pool(
            &database.url,
            "ledger-api-test",
            8,
            std::time::Duration::from_secs(5),
        )?;
        let ledger = Ledger::new(pool.clone());
        let tokens = Tokens::parse(&format!(
            "{},{},{}",
            token_entry(Role::Writer, "test-writer", WRITER),
            token_entry(Role::Auditor, "test-auditor", AUDITOR),
            token_entry(Role::Operator, "test-operator", OPERATOR)
        ))?;
        let state = AppState {
            ledger: ledger.clone(),
            tokens,
            cursor_key: CursorKey::new(b"test cursor key"),
            digest_public_key: None,
            digest_tree: Default::default(),
            console: ConsoleState {
                session_keys: ra_ledger::session_key::SessionKeys::random(),
                secure_cookies: false,
                relay_slot: slot.into(),
                witnessing,
            },
        };
        let router = service::app(state, pool);
        Ok(Self {
            router: ra_ledger::api::layered(router.clone()),
            served: router,
            ledger,
        })
    }

    /// Serves the API over real TCP on a free loopback port, as `ledger serve` does, until
    /// the test's runtime ends. Returns the address.
    pub async fn serve(&self) -> anyhow::Result<std::net::SocketAddr> {
        self.serve_limited(Limits::default(), Default::default())
            .await
    }

    /// Like [`TestApi::serve`], holding connections to `limits`, counted in `stats`.
    pub async fn serve_limited(
        &self,
        limits: Limits,
        stats: std::sync::Arc<ConnectionStats>,
    ) -> anyhow::Result<std::net::SocketAddr> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        tokio::spawn(service::serve(
            listener,
            self.served.clone(),
            None,
            limits,
            stats,
            std::future::pending(),
        ));
        Ok(address)
    }

    /// Like [`TestApi::serve`], over TLS with `tls`.
    pub async fn serve_tls(
        &self,
        tls: std::sync::Arc<rustls::ServerConfig>,
    ) -> anyhow::Result<std::net::SocketAddr> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        tokio::spawn(service::serve(
            listener,
            self.served.clone(),
            Some(tls),
            Limits::default(),
            Default::default(),
            std::future::pending(),
        ));
        Ok(address)
    }

    /// Sends a request with an optional token and JSON body.
    pub async fn call(
        &self,
        method: Method,
        uri: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        match body {
            Some(body) => {
                self.raw(
                    method,
                    uri,
                    token,
                    Some("application/json"),
                    body.to_string().into_bytes(),
                )
                .await
            }
            None => self.raw(method, uri, token, None, Vec::new()).await,
        }
    }

    /// Sends a request with an optional token, content type and body bytes.
    pub async fn raw(
        &self,
        method: Method,
        uri: &str,
        token: Option<&str>,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        self.send(request.body(Body::from(body)).expect("a valid request"))
            .await
    }

    /// Sends a bodiless request with `authorization` as the raw header value.
    pub async fn with_authorization(
        &self,
        method: Method,
        uri: &str,
        authorization: &[u8],
    ) -> Reply {
        let value = axum::http::HeaderValue::from_bytes(authorization).expect("a header value");
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", value)
            .body(Body::empty())
            .expect("a valid request");
        self.send(request).await
    }

    async fn send(&self, request: Request<Body>) -> Reply {
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("the router is infallible");
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 16 * 1024 * 1024)
            .await
            .expect("a body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        let text = String::from_utf8_lossy(&bytes).into_owned();
        Reply { status, body, text }
    }

    /// POST as the writer.
    pub async fn post(&self, uri: &str, body: Value) -> Reply {
        self.call(Method::POST, uri, Some(WRITER), Some(body)).await
    }

    /// POST as the operator.
    pub async fn operate(&self, uri: &str, body: Value) -> Reply {
        self.call(Method::POST, uri, Some(OPERATOR), Some(body))
            .await
    }

    /// GET as the auditor.
    pub async fn get(&self, uri: &str) -> Reply {
        self.call(Method::GET, uri, Some(AUDITOR), None).await
    }

    /// Creates a contact in `jurisdiction` (its first is the primary); panics unless 201.
    /// Returns its id.
    pub async fn contact(&self, jurisdiction: &str, name: &str) -> String {
        let reply = self
            .post("/v1/contacts", contact_body(jurisdiction, name))
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:?}", reply.body);
        reply.str("contact_id")
    }

    /// Assigns `business` in Texas to the primary contact there; panics unless 201. Returns
    /// the new assignment's id.
    pub async fn assign(&self, business: Uuid) -> String {
        let reply = self
            .post(
                "/v1/assignments",
                json!({"business_id": business, "jurisdiction": "TX"}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:?}", reply.body);
        reply.str("assignment_id")
    }
}

/// A valid contact body for `jurisdiction`.
pub fn contact_body(jurisdiction: &str, name: &str) -> Value {
    serde_json::json!({
        "jurisdiction": jurisdiction,
        "name": name,
        "address": {"line1": "211 E 7th St", "line2": "Suite 620", "city": "Austin", "region": "TX", "postal_code": "78701"}
    })
}

/// A Texas primary contact and one business assigned to it: (contact, business,
/// assignment) ids.
pub async fn one_assignment(api: &TestApi) -> (String, String, String) {
    let contact = api
        .post("/v1/contacts", contact_body("TX", "Lone Star Agents"))
        .await;
    assert_eq!(contact.status, StatusCode::CREATED, "{:?}", contact.body);
    let business = Uuid::now_v7().to_string();
    let assignment = api
        .post(
            "/v1/assignments",
            json!({"business_id": business, "jurisdiction": "TX"}),
        )
        .await;
    assert_eq!(
        assignment.status,
        StatusCode::CREATED,
        "{:?}",
        assignment.body
    );
    (
        contact.str("contact_id"),
        business,
        assignment.str("assignment_id"),
    )
}
