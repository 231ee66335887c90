//! `POST /v1/assignments/batch`: all items or none, errors naming the item's index.

use super::*;

fn item(business: &str, jurisdiction: &str) -> Value {
    json!({"business_id": business, "jurisdiction": jurisdiction})
}

fn fresh(n: usize) -> Vec<Value> {
    (0..n)
        .map(|_| item(&Uuid::now_v7().to_string(), "TX"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_starts_every_item_or_none_and_names_the_bad_one() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let world = world(&database).await;
    let api = &world.api;
    let before = database.counts().await?;
    let taken = item(&world.business, "TX");
    let mut one_bad = fresh(4);
    one_bad.insert(2, item(&Uuid::now_v7().to_string(), "XX"));
    let mut one_taken = fresh(4);
    one_taken.insert(3, taken.clone());
    let twice = Uuid::now_v7().to_string();
    let mut duplicated = fresh(3);
    duplicated.push(item(&twice, "TX"));
    duplicated.push(item(&twice, "TX"));
    let mut late = fresh(2);
    late.push(json!({"business_id": Uuid::now_v7(), "jurisdiction": "TX",
                     "effective_at": "2999-01-01T00:00:00Z"}));
    let mut no_primary = fresh(2);
    no_primary.push(item(&Uuid::now_v7().to_string(), "WY"));
    for (what, body, status, names) in [
        ("empty", json!({"items": []}), 422, "items"),
        (
            "over the limit",
            json!({"items": fresh(1_001)}),
            422,
            "1001",
        ),
        ("no items field", json!({}), 400, "items"),
        (
            "unknown field",
            json!({"items": fresh(1), "atomic": false}),
            400,
            "atomic",
        ),
        (
            "items not an array",
            json!({"items": {"0": taken}}),
            400,
            "items",
        ),
        (
            "one bad jurisdiction among good ones",
            json!({"items": one_bad}),
            422,
            "items[2].jurisdiction",
        ),
        (
            "one already assigned among good ones",
            json!({"items": one_taken}),
            409,
            "items[3]",
        ),
        (
            "the same business twice",
            json!({"items": duplicated}),
            422,
            "items[4]",
        ),
        (
            "an effective time far ahead",
            json!({"items": late}),
            422,
            "items[2].effective_at",
        ),
        (
            "a jurisdiction with no primary contact",
            json!({"items": no_primary}),
            409,
            "items[2]",
        ),
        (
            "a bad business id",
            json!({"items": [{"business_id": "x", "jurisdiction": "TX"}]}),
            400,
            "business_id",
        ),
    ] {
        let reply = api.post("/v1/assignments/batch", body).await;
        assert_eq!(reply.status.as_u16(), status, "{what}: {:?}", reply.body);
        let message = reply.body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(names), "{what}: {message}");
        assert_eq!(database.counts().await?, before, "{what} wrote something");
    }
    let auditor = api
        .call(
            Method::POST,
            "/v1/assignments/batch",
            Some(AUDITOR),
            Some(json!({"items": fresh(2)})),
        )
        .await;
    assert_eq!(auditor.status, StatusCode::FORBIDDEN);
    assert_eq!(database.counts().await?, before);

    // 1,000 good items (over the single-request body limit): every one started, in order,
    // each with its event, outbox row and projection row.
    let items = fresh(1_000);
    let reply = api
        .post("/v1/assignments/batch", json!({"items": items}))
        .await;
    reply.expect(StatusCode::CREATED);
    let started = reply.body["items"].as_array().expect("items");
    assert_eq!(started.len(), 1_000);
    for (sent, got) in items.iter().zip(started) {
        assert_eq!(sent["business_id"], got["business_id"]);
        assert_eq!(got["contact_id"], json!(world.contact));
    }
    let after = database.counts().await?;
    assert_eq!(after[0] - before[0], 1_000, "events");
    assert_eq!(after[1] - before[1], 1_000, "outbox rows");
    assert_eq!(after[3] - before[3], 1_000, "assignments");
    // The same batch again: every business is taken now; nothing changes.
    let again = api
        .post("/v1/assignments/batch", json!({"items": items}))
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert!(
        again.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("items[0]")
    );
    assert_eq!(database.counts().await?, after);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_batches_racing_for_the_same_businesses_start_each_once() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let world = world(&database).await;
    let api = &world.api;
    let before = database.counts().await?;
    for round in 0..3 {
        let items = fresh(300);
        let reversed: Vec<Value> = items.iter().rev().cloned().collect();
        let (first, second) = tokio::join!(
            api.post("/v1/assignments/batch", json!({"items": items})),
            api.post("/v1/assignments/batch", json!({"items": reversed})),
        );
        let mut statuses = [first.status.as_u16(), second.status.as_u16()];
        statuses.sort();
        assert_eq!(statuses, [201, 409], "round {round}: {first:?} {second:?}");
        let refused = if first.status == StatusCode::CONFLICT {
            &first
        } else {
            &second
        };
        let message = refused.body["error"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(message.starts_with("items["), "round {round}: {message}");
    }
    let after = database.counts().await?;
    assert_eq!(after[0] - before[0], 900, "events");
    assert_eq!(after[1] - before[1], 900, "outbox rows");
    assert_eq!(after[3] - before[3], 900, "assignments");
    Ok(())
}
