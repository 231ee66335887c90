//! A client of the Confluent-compatible schema registry API (Confluent Schema Registry,
//! Apicurio Registry's `/apis/ccompat/v7`, Karapace): the few calls the relay, replays,
//! the demo and the tests make. Every call is bounded in time; none is made per record.
//!
//! Credentials are those of [`RegistryAccess`]: a user and a password read from a file
//! (basic auth), never in the URL, which errors and logs show; a CA file trusted instead
//! of the built-in roots, the registry's certificate always verified. A URL that carries
//! user information is refused, and shown redacted.

use std::time::Duration;

use reqwest::{StatusCode, Url};
use serde::Deserialize;
use serde_json::json;

use crate::confluent_wire::SchemaId;
pub use crate::infra::registry_access::RegistryAccess;
use crate::infra::registry_access::{AccessError, URL};
use crate::infra::settings::{read_secret, redact_url};

/// The API's content type.
const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// How long one call may take, connecting included.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The registry behind one base URL.
#[derive(Debug, Clone)]
pub struct SchemaRegistry {
    base: Url,
    http: reqwest::Client,
    /// Basic auth: the user and the password.
    credentials: Option<(String, String)>,
}

impl From<AccessError> for RegistryError {
    fn from(error: AccessError) -> Self {
        Self::Setting {
            field: error.field,
            value: error.value,
            reason: error.reason,
        }
    }
}

/// What went wrong with the registry; each names the registry and what was asked.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A setting that cannot work: a URL that is not an `http://` or `https://` one, or
    /// carries credentials; a user without a password file; a CA file that holds no
    /// certificate.
    #[error("{field} = {value:?}: {reason}")]
    Setting {
        /// The setting.
        field: &'static str,
        /// Its value (a URL redacted, never a secret).
        value: String,
        /// Why, and what to do.
        reason: String,
    },
    /// The registry does not know the credentials (401), or the user may not do what was
    /// asked (403).
    #[error("the schema registry at {url} answered {status} while {doing}: {message}. {remedy}")]
    Denied {
        /// The registry.
        url: String,
        /// What was being done.
        doing: String,
        /// 401 or 403.
        status: u16,
        /// The registry's message.
        message: String,
        /// What to do.
        remedy: &'static str,
    },
    /// No answer: the registry is down, or not at this address.
    #[error(
        "the schema registry at {url} did not answer ({reason}) while {doing}. Check that it runs (deploy/stack status) and that schema_registry_url names its Confluent-compatible API (Apicurio: http://HOST:PORT/apis/ccompat/v7)"
    )]
    Unreachable {
        /// The registry.
        url: String,
        /// What was being done.
        doing: String,
        /// The transport's error.
        reason: String,
    },
    /// The registry refused the schema as incompatible with what the subject holds; its own
    /// words are in `reason`.
    #[error(
        "the schema registry at {url} refused events.proto under subject {subject} as incompatible with the versions it holds (compatibility {level}); the registry says: {reason}. This build's events.proto breaks the contract that topic's readers rely on (docs/event-schema-evolution.md)"
    )]
    Incompatible {
        /// The registry.
        url: String,
        /// The subject.
        subject: String,
        /// The subject's compatibility level.
        level: String,
        /// The registry's message, as it gave it.
        reason: String,
    },
    /// Any other refusal: the status and the registry's message.
    #[error("the schema registry at {url} answered {status} while {doing}: {message}")]
    Refused {
        /// The registry.
        url: String,
        /// What was being done.
        doing: String,
        /// The HTTP status.
        status: u16,
        /// The registry's message (its `message` field, else the body).
        message: String,
    },
}

impl RegistryError {
    /// Whether asking again later may succeed: no answer, or the registry's own trouble (a
    /// 5xx, or 429 too many requests). A bad URL, an incompatible schema and any other 4xx
    /// stay what they are until an operator changes something.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unreachable { .. } => true,
            Self::Refused { status, .. } => *status >= 500 || *status == 429,
            Self::Setting { .. } | Self::Denied { .. } | Self::Incompatible { .. } => false,
        }
    }
}

/// A registry's error body: `{"error_code": 40401, "message": "..."}`.
#[derive(Debug, Deserialize)]
struct ErrorBody {
    #[serde(default)]
    error_code: i64,
    #[serde(default)]
    message: String,
}

/// Confluent's error code for a subject it does not know.
const SUBJECT_NOT_FOUND: i64 = 40401;
/// Confluent's error code for a schema the subject does not hold.
const SCHEMA_NOT_FOUND: i64 = 40403;
/// Confluent's error code for a subject without a compatibility level of its own.
const SUBJECT_LEVEL_NOT_CONFIGURED: i64 = 40408;

/// What a 401 asks of the operator.
const UNAUTHORIZED_REMEDY: &str = "The registry does not know these credentials: check schema_registry_user and the password in schema_registry_password_file (LEDGER_SCHEMA_REGISTRY_USER, LEDGER_SCHEMA_REGISTRY_PASSWORD_FILE)";
/// What a 403 asks of the operator.
const FORBIDDEN_REMEDY: &str = "This user may not do that: with read-only credentials the relay only looks up its schema, so register it first with `ledger relay register` and credentials that may write (docs/operators.md#the-schema-registry), or give the relay such credentials";

impl SchemaRegistry {
    /// The registry at `url`, the base of its Confluent-compatible API, without
    /// credentials.
    pub fn new(url: &str) -> Result<Self, RegistryError> {
        Self::connect(&RegistryAccess::url(url))
    }

    /// The registry `access` describes: its password read from its file, its CA trusted
    /// instead of the built-in roots. Errors name the setting and never hold the password.
    pub fn connect(access: &RegistryAccess) -> Result<Self, RegistryError> {
        let base = access.check()?;
        let mut builder = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .connect_timeout(CALL_TIMEOUT);
        if let Some(path) = &access.ca_file {
            let setting = |reason: String| RegistryError::Setting {
                field: "schema_registry_ca_file",
                value: path.display().to_string(),
                reason,
            };
            let pem =
                std::fs::read(path).map_err(|error| setting(format!("cannot read it: {error}")))?;
            let certificates = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|error| setting(format!("not a PEM certificate: {error}")))?;
            if certificates.is_empty() {
                return Err(setting("no PEM certificate in it".into()));
            }
            builder = builder.tls_built_in_root_certs(false);
            for certificate in certificates {
                builder = builder.add_root_certificate(certificate);
            }
        }
        let http = builder.build().map_err(|error| RegistryError::Setting {
            field: URL,
            value: redact_url(&access.url),
            reason: error.to_string(),
        })?;
        let credentials = match (&access.user, &access.password_file) {
            (Some(user), Some(path)) => {
                let password =
                    read_secret("schema_registry_password_file", path).map_err(|error| {
                        RegistryError::Setting {
                            field: "schema_registry_password_file",
                            value: path.display().to_string(),
                            reason: error.to_string(),
                        }
                    })?;
                Some((user.clone(), password))
            }
            _ => None,
        };
        Ok(Self {
            base,
            http,
            credentials,
        })
    }

    /// The base URL, as given.
    pub fn url(&self) -> &str {
        self.base.as_str().trim_end_matches('/')
    }

    /// Sets the compatibility level of `subject` (`PUT /config/{subject}`).
    pub async fn set_compatibility(&self, subject: &str, level: &str) -> Result<(), RegistryError> {
        let doing = format!("setting compatibility {level} on subject {subject}");
        let response = self
            .send(
                self.http
                    .put(self.endpoint(&["config", subject]))
                    .json(&json!({ "compatibility": level })),
                &doing,
            )
            .await?;
        self.expect_success(response, &doing).await.map(drop)
    }

    /// The compatibility level of `subject`, its own or else the registry's default.
    pub async fn compatibility(&self, subject: &str) -> Result<String, RegistryError> {
        #[derive(Deserialize)]
        struct Level {
            #[serde(rename = "compatibilityLevel")]
            level: String,
        }
        let doing = format!("reading the compatibility of subject {subject}");
        let mut url = self.endpoint(&["config", subject]);
        url.set_query(Some("defaultToGlobal=true"));
        let response = self.send(self.http.get(url), &doing).await?;
        let body = self.expect_success(response, &doing).await?;
        Ok(parse::<Level>(&body, &doing, self)?.level)
    }

    /// The compatibility level `subject` has of its own; `None` when it has none. Apicurio
    /// answers the registry's default for a subject without one: a level equal to that
    /// default counts as none ([`own_level`]).
    pub async fn own_compatibility(&self, subject: &str) -> Result<Option<String>, RegistryError> {
        #[derive(Deserialize)]
        struct Level {
            #[serde(rename = "compatibilityLevel")]
            level: String,
        }
        let doing = format!("reading the compatibility of subject {subject}");
        let response = self
            .send(self.http.get(self.endpoint(&["config", subject])), &doing)
            .await?;
        let subject_level = if response.status() == StatusCode::NOT_FOUND {
            let body = response.text().await.unwrap_or_default();
            if !is_error(&body, &[SUBJECT_NOT_FOUND, SUBJECT_LEVEL_NOT_CONFIGURED]) {
                return Err(self.refused(&doing, StatusCode::NOT_FOUND, &body));
            }
            None
        } else {
            let body = self.expect_success(response, &doing).await?;
            Some(parse::<Level>(&body, &doing, self)?.level)
        };
        let Some(subject_level) = subject_level else {
            return Ok(None);
        };
        let doing = "reading the registry's default compatibility";
        let response = self
            .send(self.http.get(self.endpoint(&["config"])), doing)
            .await?;
        let body = self.expect_success(response, doing).await?;
        let default = parse::<Level>(&body, doing, self)?.level;
        Ok(own_level(subject_level, &default))
    }

    /// The id of `schema` under `subject` when the subject holds it (`POST
    /// /subjects/{subject}`, a read: read-only credentials may ask); `None` when it does
    /// not, or the subject does not exist.
    pub async fn look_up(
        &self,
        subject: &str,
        schema: &str,
    ) -> Result<Option<SchemaId>, RegistryError> {
        #[derive(Deserialize)]
        struct Found {
            id: SchemaId,
        }
        let doing = format!("looking up events.proto under subject {subject}");
        let response = self
            .send(
                self.http
                    .post(self.endpoint(&["subjects", subject]))
                    .json(&json!({ "schemaType": "PROTOBUF", "schema": schema })),
                &doing,
            )
            .await?;
        if response.status() == StatusCode::NOT_FOUND {
            let body = response.text().await.unwrap_or_default();
            if is_error(&body, &[SUBJECT_NOT_FOUND, SCHEMA_NOT_FOUND]) {
                return Ok(None);
            }
            return Err(self.refused(&doing, StatusCode::NOT_FOUND, &body));
        }
        let body = self.expect_success(response, &doing).await?;
        Ok(Some(parse::<Found>(&body, &doing, self)?.id))
    }

    /// Registers `schema` (a `.proto` file's text) under `subject`, or finds it there: the
    /// registry answers the same id for a schema it holds already. A schema incompatible
    /// with the subject's versions is [`RegistryError::Incompatible`], with the registry's
    /// reason.
    pub async fn register(&self, subject: &str, schema: &str) -> Result<SchemaId, RegistryError> {
        #[derive(Deserialize)]
        struct Registered {
            id: SchemaId,
        }
        let doing = format!("registering events.proto under subject {subject}");
        let response = self
            .send(
                self.http
                    .post(self.endpoint(&["subjects", subject, "versions"]))
                    .json(&json!({ "schemaType": "PROTOBUF", "schema": schema })),
                &doing,
            )
            .await?;
        if response.status() == StatusCode::CONFLICT {
            let reason = error_message(&response.text().await.unwrap_or_default());
            let level = self
                .compatibility(subject)
                .await
                .unwrap_or_else(|_| "unknown".into());
            return Err(RegistryError::Incompatible {
                url: self.url().to_owned(),
                subject: subject.to_owned(),
                level,
                reason,
            });
        }
        let body = self.expect_success(response, &doing).await?;
        Ok(parse::<Registered>(&body, &doing, self)?.id)
    }

    /// Whether `schema` is compatible with the latest version under `subject`, by the
    /// subject's level (`POST /compatibility/subjects/{subject}/versions/latest`).
    pub async fn is_compatible(&self, subject: &str, schema: &str) -> Result<bool, RegistryError> {
        #[derive(Deserialize)]
        struct Answer {
            is_compatible: bool,
        }
        let doing = format!("checking a schema against subject {subject}");
        let response = self
            .send(
                self.http
                    .post(self.endpoint(&[
                        "compatibility",
                        "subjects",
                        subject,
                        "versions",
                        "latest",
                    ]))
                    .json(&json!({ "schemaType": "PROTOBUF", "schema": schema })),
                &doing,
            )
            .await?;
        let body = self.expect_success(response, &doing).await?;
        Ok(parse::<Answer>(&body, &doing, self)?.is_compatible)
    }

    /// The id of the latest schema under `subject`; `None` when the registry knows no such
    /// subject.
    pub async fn latest_id(&self, subject: &str) -> Result<Option<SchemaId>, RegistryError> {
        #[derive(Deserialize)]
        struct Version {
            id: SchemaId,
        }
        let doing = format!("reading the latest schema of subject {subject}");
        let response = self
            .send(
                self.http
                    .get(self.endpoint(&["subjects", subject, "versions", "latest"])),
                &doing,
            )
            .await?;
        if response.status() == StatusCode::NOT_FOUND {
            let body = response.text().await.unwrap_or_default();
            if is_error(&body, &[SUBJECT_NOT_FOUND]) {
                return Ok(None);
            }
            return Err(self.refused(&doing, StatusCode::NOT_FOUND, &body));
        }
        let body = self.expect_success(response, &doing).await?;
        Ok(Some(parse::<Version>(&body, &doing, self)?.id))
    }

    /// The text of the schema `id` (`GET /schemas/ids/{id}`).
    pub async fn schema(&self, id: SchemaId) -> Result<String, RegistryError> {
        #[derive(Deserialize)]
        struct Schema {
            schema: String,
        }
        let doing = format!("reading schema {id}");
        let response = self
            .send(
                self.http
                    .get(self.endpoint(&["schemas", "ids", &id.to_string()])),
                &doing,
            )
            .await?;
        let body = self.expect_success(response, &doing).await?;
        Ok(parse::<Schema>(&body, &doing, self)?.schema)
    }

    /// The URL of `segments` under the base, each one escaped (a subject may hold any
    /// character a topic name may).
    fn endpoint(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("an http URL has a path")
            .pop_if_empty()
            .extend(segments);
        url
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        doing: &str,
    ) -> Result<reqwest::Response, RegistryError> {
        let request = match &self.credentials {
            Some((user, password)) => request.basic_auth(user, Some(password)),
            None => request,
        };
        request
            .header(reqwest::header::ACCEPT, CONTENT_TYPE)
            .header(reqwest::header::CONTENT_TYPE, CONTENT_TYPE)
            .send()
            .await
            .map_err(|error| RegistryError::Unreachable {
                url: self.url().to_owned(),
                doing: doing.to_owned(),
                reason: transport_reason(&error),
            })
    }

    async fn expect_success(
        &self,
        response: reqwest::Response,
        doing: &str,
    ) -> Result<String, RegistryError> {
        let status = response.status();
        let body = response
            .text()
            .await
            .map_err(|error| RegistryError::Unreachable {
                url: self.url().to_owned(),
                doing: doing.to_owned(),
                reason: transport_reason(&error),
            })?;
        if status.is_success() {
            Ok(body)
        } else {
            Err(self.refused(doing, status, &body))
        }
    }

    fn refused(&self, doing: &str, status: StatusCode, body: &str) -> RegistryError {
        let remedy = match status {
            StatusCode::UNAUTHORIZED => Some(UNAUTHORIZED_REMEDY),
            StatusCode::FORBIDDEN => Some(FORBIDDEN_REMEDY),
            _ => None,
        };
        if let Some(remedy) = remedy {
            return RegistryError::Denied {
                url: self.url().to_owned(),
                doing: doing.to_owned(),
                status: status.as_u16(),
                message: error_message(body),
                remedy,
            };
        }
        RegistryError::Refused {
            url: self.url().to_owned(),
            doing: doing.to_owned(),
            status: status.as_u16(),
            message: error_message(body),
        }
    }
}

/// Whether `body` is a registry's error body with one of `codes`.
fn is_error(body: &str, codes: &[i64]) -> bool {
    serde_json::from_str::<ErrorBody>(body).is_ok_and(|error| codes.contains(&error.error_code))
}

/// The level a subject has of its own, from what the registry answered for it and its
/// default: a level equal to the default is none (Apicurio answers the default for a
/// subject without one; an admin who set the default's level on a subject loses nothing
/// when it is set again). Pure.
pub fn own_level(answered: String, default: &str) -> Option<String> {
    (answered != default).then_some(answered)
}

/// The `message` of a registry's error body, else the body itself (shortened).
fn error_message(body: &str) -> String {
    match serde_json::from_str::<ErrorBody>(body) {
        Ok(error) if !error.message.is_empty() => error.message,
        _ => body.chars().take(500).collect(),
    }
}

/// A transport error with its causes: reqwest's own text says only "error sending request".
fn transport_reason(error: &reqwest::Error) -> String {
    // reqwest's own text names the URL, which the error names already.
    let mut reason = if error.is_timeout() {
        "timed out".to_owned()
    } else if error.is_connect() {
        "cannot connect".to_owned()
    } else {
        "the request failed".to_owned()
    };
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        reason.push_str(": ");
        reason.push_str(&cause.to_string());
        source = cause.source();
    }
    reason
}

fn parse<T: serde::de::DeserializeOwned>(
    body: &str,
    doing: &str,
    registry: &SchemaRegistry,
) -> Result<T, RegistryError> {
    serde_json::from_str(body).map_err(|error| RegistryError::Refused {
        url: registry.url().to_owned(),
        doing: doing.to_owned(),
        status: 200,
        message: format!("an answer this client cannot read ({error}): {body}"),
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn urls_are_checked_and_subjects_escaped() {
        let registry = SchemaRegistry::new("http://127.0.0.1:18081/apis/ccompat/v7").unwrap();
        assert_eq!(registry.url(), "http://127.0.0.1:18081/apis/ccompat/v7");
        assert_eq!(
            registry
                .endpoint(&["subjects", "t.a/b-value", "versions"])
                .as_str(),
            "http://127.0.0.1:18081/apis/ccompat/v7/subjects/t.a%2Fb-value/versions"
        );
        let slash = SchemaRegistry::new("https://registry.example/ccompat/").unwrap();
        assert_eq!(
            slash.endpoint(&["config", "x"]).as_str(),
            "https://registry.example/ccompat/config/x"
        );
        for bad in ["127.0.0.1:18081", "ftp://h/x", "not a url"] {
            let error = SchemaRegistry::new(bad).unwrap_err().to_string();
            assert!(
                error.starts_with(&format!("schema_registry_url = {bad:?}")),
                "{error}"
            );
        }
    }

    #[test]
    fn credentials_never_ride_in_the_url_and_a_password_crosses_only_tls() {
        let error = SchemaRegistry::new("http://reguser:s3cretPW@127.0.0.1:18081/apis/ccompat/v6")
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with(
                "schema_registry_url = \"http://<redacted>@127.0.0.1:18081/apis/ccompat/v6\": a registry URL carries no credentials"
            ) && error.contains("schema_registry_password_file"),
            "{error}"
        );
        assert!(
            !error.contains("s3cretPW") && !error.contains("reguser"),
            "{error}"
        );
        let access = |url: &str, user: Option<&str>, file: Option<&str>| RegistryAccess {
            url: url.to_owned(),
            user: user.map(str::to_owned),
            password_file: file.map(PathBuf::from),
            ca_file: None,
        };
        let no_file = access("https://r.example/ccompat", Some("relay"), None)
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            no_file
                .starts_with("schema_registry_password_file = \"\": schema_registry_user is set"),
            "{no_file}"
        );
        let no_user = access("https://r.example/ccompat", None, Some("/run/pw"))
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            no_user.starts_with("schema_registry_user = \"\""),
            "{no_user}"
        );
        let clear = access("http://r.example/ccompat", Some("relay"), Some("/run/pw"))
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            clear.contains("would cross the network in clear"),
            "{clear}"
        );
        for fine in [
            "https://r.example/ccompat",
            "http://127.0.0.1:18081/ccompat",
            "http://localhost:18081/ccompat",
            "http://[::1]:18081/ccompat",
        ] {
            access(fine, Some("relay"), Some("/run/pw"))
                .check()
                .unwrap();
        }
        let missing = SchemaRegistry::connect(&access(
            "https://r.example/ccompat",
            Some("relay"),
            Some("/nonexistent/registry-password"),
        ))
        .unwrap_err()
        .to_string();
        assert!(
            missing
                .starts_with("schema_registry_password_file = \"/nonexistent/registry-password\""),
            "{missing}"
        );
        let no_ca = SchemaRegistry::connect(&RegistryAccess {
            ca_file: Some("/nonexistent/ca.crt".into()),
            ..RegistryAccess::url("https://r.example/ccompat")
        })
        .unwrap_err()
        .to_string();
        assert!(
            no_ca.starts_with("schema_registry_ca_file = \"/nonexistent/ca.crt\": cannot read it"),
            "{no_ca}"
        );
    }

    #[test]
    fn a_level_equal_to_the_default_is_none_of_the_subjects_own() {
        assert_eq!(own_level("NONE".into(), "NONE"), None);
        assert_eq!(
            own_level("FULL_TRANSITIVE".into(), "NONE").as_deref(),
            Some("FULL_TRANSITIVE")
        );
        assert_eq!(own_level("BACKWARD".into(), "BACKWARD"), None);
    }

    #[test]
    fn a_refusal_quotes_the_registry_message() {
        assert_eq!(
            error_message(r#"{"error_code":409,"message":"Incompatible artifact: x"}"#),
            "Incompatible artifact: x"
        );
        assert_eq!(
            error_message("<html>bad gateway</html>"),
            "<html>bad gateway</html>"
        );
    }
}
