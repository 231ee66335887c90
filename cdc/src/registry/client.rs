//! A client of the Confluent-compatible schema registry API (Confluent Schema Registry,
//! Apicurio Registry's `/apis/ccompat/v7`, Karapace): the few calls the relay, replays,
//! the demo and the tests make. Every call is bounded in time; none is made per record.

use std::time::Duration;

use reqwest::{StatusCode, Url};
use serde::Deserialize;
use serde_json::json;

use crate::confluent_wire::SchemaId;
use crate::infra::settings::http_base_url;

/// The API's content type.
const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// How long one call may take, connecting included.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The registry behind one base URL.
#[derive(Debug, Clone)]
pub struct SchemaRegistry {
    base: Url,
    http: reqwest::Client,
}

/// What went wrong with the registry; each names the registry and what was asked.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The URL is not an `http://` or `https://` URL.
    #[error("schema_registry_url = {url:?}: {reason}")]
    BadUrl {
        /// The setting's value.
        url: String,
        /// Why.
        reason: String,
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
            Self::BadUrl { .. } | Self::Incompatible { .. } => false,
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

impl SchemaRegistry {
    /// The registry at `url`, the base of its Confluent-compatible API.
    pub fn new(url: &str) -> Result<Self, RegistryError> {
        let bad = |reason: &str| RegistryError::BadUrl {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let base = http_base_url(url).map_err(|reason| bad(&reason))?;
        let http = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .connect_timeout(CALL_TIMEOUT)
            .build()
            .map_err(|error| bad(&error.to_string()))?;
        Ok(Self { base, http })
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
            if serde_json::from_str::<ErrorBody>(&body)
                .is_ok_and(|error| error.error_code == SUBJECT_NOT_FOUND)
            {
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
        RegistryError::Refused {
            url: self.url().to_owned(),
            doing: doing.to_owned(),
            status: status.as_u16(),
            message: error_message(body),
        }
    }
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
    let mut reason = error.to_string();
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
