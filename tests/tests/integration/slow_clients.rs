//! Slow clients over real TCP: a body that never arrives, or arrives a byte at a time, is
//! answered 408 within the body-read timeout and its connection closed; with the
//! connection cap full of such clients, the next client waits only until they are cut off,
//! and the cap is counted.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ra_ledger::service::{ConnectionStats, Limits};
use ra_ledger_tests::TestDatabase;
use ra_ledger_tests::api::{TestApi, WRITER};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The body-read timeout these tests serve with.
const BODY_TIMEOUT: Duration = Duration::from_secs(1);
/// Generous bound for anything the timeout should end: ten times it, and more.
const CUT_OFF_WITHIN: Duration = Duration::from_secs(15);

/// A contact POST promising 100 bytes of body; 6 follow, then nothing.
fn slow_post() -> Vec<u8> {
    format!(
        "POST /v1/contacts HTTP/1.1\r\nHost: ledger\r\nAuthorization: Bearer {WRITER}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"jur"
    )
    .into_bytes()
}

async fn serve(
    database: &TestDatabase,
    max_connections: usize,
) -> anyhow::Result<(SocketAddr, Arc<ConnectionStats>)> {
    let api = TestApi::new(database)?;
    let stats = Arc::new(ConnectionStats::default());
    let limits = Limits {
        body_read_timeout: BODY_TIMEOUT,
        max_connections,
    };
    let address = api.serve_limited(limits, stats.clone()).await?;
    Ok((address, stats))
}

/// Reads until the server closes the connection, for at most [`CUT_OFF_WITHIN`]; returns
/// the one response's status, headers (lowercase) and JSON body.
async fn until_closed(stream: &mut TcpStream) -> anyhow::Result<(u16, String, Value)> {
    let mut bytes = Vec::new();
    tokio::time::timeout(CUT_OFF_WITHIN, stream.read_to_end(&mut bytes))
        .await
        .map_err(|_| anyhow::anyhow!("the connection is still open after {CUT_OFF_WITHIN:?}"))??;
    let text = String::from_utf8_lossy(&bytes);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("no response before the close: {text:?}"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|status| status.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no status line: {head:?}"))?;
    Ok((
        status,
        head.to_ascii_lowercase(),
        serde_json::from_str(body)?,
    ))
}

fn assert_timed_out(case: &str, (status, head, body): &(u16, String, Value)) {
    assert_eq!(*status, 408, "{case}: {head} {body}");
    assert!(head.contains("connection: close"), "{case}: {head}");
    assert!(
        head.contains("content-type: application/json"),
        "{case}: {head}"
    );
    assert_eq!(body["error"]["code"], "body_timeout", "{case}: {body}");
    assert!(body["error"]["message"].is_string(), "{case}: {body}");
}

/// A body that stops after 6 of its 100 bytes, and a chunked body that keeps dribbling a
/// byte every 200 ms: both are cut off, since the bound is on the whole body, not on
/// silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_arrives_is_answered_408_and_its_connection_closed() -> anyhow::Result<()>
{
    let database = TestDatabase::new().await?;
    let (address, _) = serve(&database, 16).await?;

    let mut stalled = TcpStream::connect(address).await?;
    stalled.write_all(&slow_post()).await?;
    assert_timed_out("6 of 100 bytes", &until_closed(&mut stalled).await?);

    let mut dribbling = TcpStream::connect(address).await?;
    dribbling
        .write_all(
            format!(
                "POST /v1/contacts HTTP/1.1\r\nHost: ledger\r\nAuthorization: Bearer {WRITER}\r\n\
                 Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            .as_bytes(),
        )
        .await?;
    let (mut reader, mut writer) = dribbling.into_split();
    let dribble = tokio::spawn(async move {
        // Stops at the first write the closed connection refuses.
        while writer.write_all(b"1\r\n \r\n").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let mut bytes = Vec::new();
    tokio::time::timeout(CUT_OFF_WITHIN, reader.read_to_end(&mut bytes)).await??;
    dribble.abort();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.starts_with("HTTP/1.1 408 "),
        "a byte every 200 ms: {text}"
    );
    assert!(text.contains("body_timeout"), "{text}");

    let client = database.connect().await?;
    let contacts: i64 = client
        .query_one("SELECT count(*) FROM contacts", &[])
        .await?
        .get(0);
    assert_eq!(contacts, 0, "nothing is written from a body cut off");
    Ok(())
}

/// With the cap at 4, five clients each hold a body that never arrives. Four are served
/// (and held), the fifth waits in the backlog, and the cap says it is full. Once the body
/// timeout cuts the first four off, the fifth and then a sixth, ordinary client are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_slow_clients_cannot_starve_a_sixth_with_the_cap_at_four() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let (address, stats) = serve(&database, 4).await?;

    let mut slow = Vec::new();
    for _ in 0..5 {
        let mut stream = TcpStream::connect(address).await?;
        stream.write_all(&slow_post()).await?;
        slow.push(stream);
    }
    // Four held open at once, never more, and the cap counted as reached.
    let full = tokio::time::timeout(CUT_OFF_WITHIN, async {
        while stats.open() < 4 || stats.cap_reached() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        full.is_ok(),
        "open {}, cap reached {}",
        stats.open(),
        stats.cap_reached()
    );
    assert_eq!(stats.open(), 4, "the cap holds");

    let mut sixth = TcpStream::connect(address).await?;
    sixth
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: ledger\r\nConnection: close\r\n\r\n")
        .await?;
    let (status, head, body) = until_closed(&mut sixth).await?;
    assert_eq!(
        (status, &body["status"]),
        (200, &Value::from("ok")),
        "{head}"
    );

    for (n, stream) in slow.iter_mut().enumerate() {
        assert_timed_out(&format!("slow client {n}"), &until_closed(stream).await?);
    }
    assert!(stats.open() <= 4, "open {}", stats.open());
    Ok(())
}
