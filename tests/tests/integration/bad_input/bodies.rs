//! Command bodies: one JSON object, and no control character in any text field.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_are_not_one_json_object_are_refused() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let world = world(&database).await;
    let before = database.counts().await?;
    for (uri, _) in world.writes() {
        for body in [
            json!([]),
            json!([Uuid::now_v7(), "MP"]),
            json!("text"),
            json!(3),
            json!(true),
            json!(null),
        ] {
            let reply = world.api.post(&uri, body.clone()).await;
            check(&format!("POST {uri} {body}"), &reply, 400, "bad_request");
        }
        // Not JSON, no content type, far too large.
        let reply = world
            .api
            .raw(
                Method::POST,
                &uri,
                Some(WRITER),
                Some("application/json"),
                b"{not json".to_vec(),
            )
            .await;
        check(
            &format!("POST {uri} broken JSON"),
            &reply,
            400,
            "bad_request",
        );
        let reply = world
            .api
            .raw(Method::POST, &uri, Some(WRITER), None, b"{}".to_vec())
            .await;
        check(
            &format!("POST {uri} without content type"),
            &reply,
            415,
            "unsupported_media_type",
        );
        let huge = format!("{{\"name\": \"{}\"}}", "a".repeat(100_000)).into_bytes();
        let reply = world
            .api
            .raw(
                Method::POST,
                &uri,
                Some(WRITER),
                Some("application/json"),
                huge,
            )
            .await;
        check(
            &format!("POST {uri} 100 KB"),
            &reply,
            413,
            "payload_too_large",
        );
    }
    assert_eq!(
        database.counts().await?,
        before,
        "refused requests wrote nothing"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_in_any_text_field_are_refused_naming_the_field() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let world = world(&database).await;
    let before = database.counts().await?;
    let text_fields: Vec<(String, Value, Vec<&str>)> = world
        .writes()
        .into_iter()
        .map(|(uri, body)| {
            let fields = match uri.as_str() {
                "/v1/contacts" => vec![
                    "jurisdiction",
                    "name",
                    "address.line1",
                    "address.line2",
                    "address.city",
                    "address.region",
                    "address.postal_code",
                ],
                "/v1/assignments" => vec!["business_id", "jurisdiction"],
                uri if uri.ends_with("/supersede") => vec![
                    "name",
                    "address.line1",
                    "address.line2",
                    "address.city",
                    "address.region",
                    "address.postal_code",
                ],
                _ => vec!["effective_at"],
            };
            (uri, body, fields)
        })
        .collect();
    for (uri, body, fields) in &text_fields {
        for field in fields {
            for bad in [
                "a\u{0}b",
                "\u{1b}[31mred",
                "two\nlines",
                "del\u{7f}",
                "\u{202e}evil",
            ] {
                let reply = world.api.post(uri, with(body, field, json!(bad))).await;
                let case = format!("POST {uri} {field}={bad:?}");
                check(&case, &reply, 400, "invalid_field");
                let message = reply.body["error"]["message"].as_str().unwrap_or_default();
                assert!(
                    message.starts_with(&format!("{field}:")),
                    "{case}: {message}"
                );
            }
        }
    }
    assert_eq!(
        database.counts().await?,
        before,
        "refused requests wrote nothing"
    );
    Ok(())
}
