//! Extractors whose rejections are JSON errors like every other error of the API.
//!
//! A command body must be one JSON object. serde would otherwise map a JSON array onto a
//! struct by position (`[]` would end an assignment), and PostgreSQL refuses NUL in text
//! with an error that would surface as a 500. So the body is parsed as a JSON value first,
//! checked, and only then turned into the command, with the path of a bad field in the
//! message. A number whose value is whole (`2.0`, `1e3`) is an integer, as JSON Schema (and
//! so `/openapi.json`) counts it: serde alone would refuse it where an integer is expected.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ApiError;
use crate::domain::is_hidden_control;

/// Largest request body accepted: a command is well under a kilobyte.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// A JSON object body; a bad one gets a 4xx naming what is wrong.
#[derive(Debug)]
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let axum::Json(mut value) = axum::Json::<Value>::from_request(request, state)
            .await
            .map_err(|rejection| {
                let status = rejection.status();
                let code = match status {
                    StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
                    StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
                    _ => "bad_request",
                };
                ApiError::new(status, code, rejection.body_text())
            })?;
        check_body(&value)?;
        whole_numbers_as_integers(&mut value);
        serde_path_to_error::deserialize(value)
            .map(Body)
            .map_err(|error| {
                let path = error.path().to_string();
                let inner = error.into_inner();
                if path == "." {
                    ApiError::bad_request(format!("invalid body: {inner}"))
                } else {
                    ApiError::bad_request(format!("invalid body at {path}: {inner}"))
                }
            })
    }
}

/// A body must be a JSON object, and no string in it (key or value) may hold a control
/// character: 400 `invalid_field` naming the first one found.
fn check_body(value: &Value) -> Result<(), ApiError> {
    let Value::Object(_) = value else {
        return Err(ApiError::bad_request(format!(
            "the body must be a JSON object, not {}",
            kind(value)
        )));
    };
    match find_control(value, &mut String::new()) {
        None => Ok(()),
        Some((path, c)) => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_field",
            format!(
                "{path}: contains the control character U+{:04X}; text fields are plain one-line text",
                u32::from(c)
            ),
        )),
    }
}

/// Writes every number whose value is a whole number within 64 bits (`2.0`, `-1e3`) as an
/// integer, so that a field of an integer type takes it; fractions stay as they are, and
/// are refused by that field.
fn whole_numbers_as_integers(value: &mut Value) {
    match value {
        Value::Number(number) if !number.is_i64() && !number.is_u64() => {
            let Some(float) = number.as_f64() else { return };
            // i64::MIN is exact as an f64; i64::MAX and u64::MAX are not, so the bounds are
            // the powers of two just above them, excluded.
            if float.fract() == 0.0 && float >= -(2f64.powi(63)) && float < 2f64.powi(64) {
                *value = if float < 0.0 {
                    Value::from(float as i64)
                } else {
                    Value::from(float as u64)
                };
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_numbers_as_integers),
        Value::Object(fields) => fields.values_mut().for_each(whole_numbers_as_integers),
        _ => {}
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The path (`address.city`, `items[2]`) and character of the first control character.
fn find_control(value: &Value, path: &mut String) -> Option<(String, char)> {
    match value {
        Value::String(text) => text
            .chars()
            .find(|c| is_hidden_control(*c))
            .map(|c| (path.clone(), c)),
        Value::Array(items) => items.iter().enumerate().find_map(|(index, item)| {
            let length = path.len();
            path.push_str(&format!("[{index}]"));
            let found = find_control(item, path);
            path.truncate(length);
            found
        }),
        Value::Object(fields) => fields.iter().find_map(|(key, item)| {
            let length = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(key);
            let found = key
                .chars()
                .find(|c| is_hidden_control(*c))
                .map(|c| (path.clone(), c))
                .or_else(|| find_control(item, path));
            path.truncate(length);
            found
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => None,
    }
}

/// A query string; a bad one gets `400 bad_request`.
#[derive(Debug)]
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| Query(value))
            .map_err(|rejection| ApiError::bad_request(rejection.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_large_whole_number_written_with_a_fraction_reads_as_that_integer() {
        // f64 steps by 0.5 here: the default float parser, one step off, read .5.
        let mut value: Value =
            serde_json::from_str(r#"{"expected_version": 4387017115925726.0}"#).unwrap();
        whole_numbers_as_integers(&mut value);
        assert_eq!(value["expected_version"], json!(4387017115925726_i64));
    }

    #[test]
    fn only_objects_without_control_characters_pass() {
        assert!(check_body(&json!({"name": "Lone Star", "address": {"city": "Austin"}})).is_ok());
        for body in [
            json!([]),
            json!(["a", "MP"]),
            json!(null),
            json!(3),
            json!("x"),
        ] {
            let error = check_body(&body).unwrap_err();
            assert_eq!(error.status(), StatusCode::BAD_REQUEST, "{body}");
        }
        let nul = check_body(&json!({"address": {"city": "Aus\u{0}tin"}})).unwrap_err();
        assert_eq!(nul.status(), StatusCode::BAD_REQUEST);
        assert!(format!("{nul:?}").contains("address.city"), "{nul:?}");
        let escape =
            check_body(&json!({"items": [{"name": "ok"}, {"name": "\u{1b}[31m"}]})).unwrap_err();
        assert!(
            format!("{escape:?}").contains("items[1].name"),
            "{escape:?}"
        );
        let key = check_body(&json!({"na\u{7}me": "x"})).unwrap_err();
        assert!(format!("{key:?}").contains("U+0007"), "{key:?}");
    }

    #[test]
    fn whole_numbers_become_integers_and_fractions_stay() {
        let mut body: Value =
            serde_json::from_str(r#"{"a": 2.0, "b": [-1e3, 0.5], "c": {"d": 1e300}, "e": 7}"#)
                .unwrap();
        whole_numbers_as_integers(&mut body);
        assert_eq!(body["a"], json!(2));
        assert!(body["a"].is_u64());
        assert_eq!(body["b"][0], json!(-1000));
        assert!(body["b"][0].is_i64());
        assert!(body["b"][1].is_f64(), "{body}");
        assert!(body["c"]["d"].is_f64(), "beyond 64 bits: {body}");
        assert_eq!(body["e"], json!(7));
    }
}
