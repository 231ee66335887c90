//! Slow clients over real TCP: a body that never arrives, or arrives a byte at a time, is
//! answered 408 within the body-read timeout and its connection closed; a client that never
//! reads its answers is closed after the write-stall timeout, while one that reads slowly
//! gets every byte; with the connection cap full of such clients, the next client waits
//! only until they are cut off, and the cap is counted. The relay's `/metrics` closes a
//! client that sends nothing, as the API does (the same server; its bounds are tested in
//! `cdc/src/infra/runtime.rs`).

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
/// The write-stall timeout these tests serve with.
const WRITE_STALL: Duration = Duration::from_secs(1);
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
        write_stall_timeout: WRITE_STALL,
        max_connections,
    };
    let address = api.serve_limited(limits, Arc::clone(&stats)).await?;
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

/// `GET /openapi.json` 100 times in one write, the last asking to close: about 7 MiB of
/// answers, more than loopback's socket buffers hold, so the server's writes wait for the
/// client.
fn pipelined_openapi() -> Vec<u8> {
    let mut requests = "GET /openapi.json HTTP/1.1\r\nHost: ledger\r\n\r\n".repeat(99);
    requests.push_str("GET /openapi.json HTTP/1.1\r\nHost: ledger\r\nConnection: close\r\n\r\n");
    requests.into_bytes()
}

/// With the cap at 4, four unauthenticated clients each pipeline 100 `GET /openapi.json`
/// and read nothing (issue 35, item 2: before, they held their connections for good and
/// a fifth client was never served). Once their answers have waited the write-stall
/// timeout they are closed, short of their answers, and a fifth client is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_their_answers_are_closed_and_free_the_cap() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let (address, stats) = serve(&database, 4).await?;

    let mut silent = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(address).await?;
        stream.write_all(&pipelined_openapi()).await?;
        silent.push(stream);
    }
    let mut fifth = TcpStream::connect(address).await?;
    fifth
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: ledger\r\nConnection: close\r\n\r\n")
        .await?;
    let (status, head, body) = until_closed(&mut fifth).await?;
    assert_eq!(
        (status, &body["status"]),
        (200, &Value::from("ok")),
        "{head}"
    );
    assert!(stats.cap_reached() > 0, "the fifth waited for a place");
    // The fifth was served once one silent client was closed; the others may still be
    // waiting out their stall (a busy server wrote them later), and reading one now would
    // restart its clock and take every answer (as it did once in CI). So every connection
    // is let go first.
    let closed = tokio::time::timeout(CUT_OFF_WITHIN, async {
        while stats.open() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(closed.is_ok(), "{} connections still open", stats.open());

    // Read now, each silent connection ends (a reset, or the end of what was sent before
    // the close) with fewer than its 100 answers.
    for (n, stream) in silent.iter_mut().enumerate() {
        let mut received = Vec::new();
        let ended = tokio::time::timeout(CUT_OFF_WITHIN, stream.read_to_end(&mut received))
            .await
            .map_err(|_| anyhow::anyhow!("silent client {n} is still open"))?;
        assert!(
            ended.is_ok()
                || ended
                    .as_ref()
                    .is_err_and(|error| error.kind() == std::io::ErrorKind::ConnectionReset),
            "silent client {n}: {ended:?}"
        );
        let answers = count_answers(&received);
        assert!(answers < 100, "silent client {n} got all {answers} answers");
    }
    Ok(())
}

/// A client that reads its 7 MiB of answers in bursts of 1 MiB with a pause of 60 % of the
/// write-stall timeout after each (a proof download over a slow link): the server's
/// writes wait during every pause, the whole takes several times the timeout, and every
/// answer arrives, since each byte read restarts the clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_that_keeps_reading_gets_every_answer() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let (address, _) = serve(&database, 4).await?;

    let socket = tokio::net::TcpSocket::new_v4()?;
    // A small receive window, so the server's writes wait on this reader, not on buffers.
    socket.set_recv_buffer_size(16 * 1024)?;
    let mut stream = socket.connect(address).await?;
    stream.write_all(&pipelined_openapi()).await?;
    let started = std::time::Instant::now();
    let mut received = Vec::new();
    let mut chunk = vec![0; 64 * 1024];
    let mut since_pause = 0;
    loop {
        let read = tokio::time::timeout(CUT_OFF_WITHIN, stream.read(&mut chunk)).await??;
        if read == 0 {
            break;
        }
        received.extend_from_slice(&chunk[..read]);
        since_pause += read;
        if since_pause >= 1024 * 1024 {
            since_pause = 0;
            tokio::time::sleep(WRITE_STALL * 6 / 10).await;
        }
    }
    let took = started.elapsed();
    assert_eq!(
        count_answers(&received),
        100,
        "{} bytes in {took:?}",
        received.len()
    );
    assert!(
        took > WRITE_STALL * 2,
        "took {took:?}: the pauses did not make the download slower than the timeout"
    );
    Ok(())
}

/// How many complete `200` answers `bytes` holds.
fn count_answers(bytes: &[u8]) -> usize {
    let text = String::from_utf8_lossy(bytes);
    let mut complete = 0;
    let mut rest = text.as_ref();
    while let Some(start) = rest.find("HTTP/1.1 200 OK\r\n") {
        rest = &rest[start..];
        let Some((head, body)) = rest.split_once("\r\n\r\n") else {
            break;
        };
        let length: usize = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .unwrap_or(usize::MAX);
        if body.len() < length {
            break;
        }
        complete += 1;
        rest = &body[length..];
    }
    complete
}

/// Issue 50, item 10: the relay's `/metrics` kept a connection that sent nothing for ever.
/// The relay as its own process, `/metrics` on a free port: a client that sends nothing is
/// closed once the head's timeout (30 s, the API's) has passed, and a scrape beside it is
/// answered with the relay's metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relays_metrics_close_a_client_that_sends_nothing() -> anyhow::Result<()> {
    let database = TestDatabase::new().await?;
    let mut topics = ra_ledger_tests::TestTopics::new();
    let config = ra_ledger_tests::relay::test_config(&database, &mut topics).await?;
    let address = format!("127.0.0.1:{}", ra_ledger_tests::process::free_port()?);
    let mut relay = crate::relay_faults::spawn_relay_with(
        &config,
        &[("LEDGER_METRICS_LISTEN", address.as_str())],
    )?;
    let outcome = async {
        let connected = tokio::time::timeout(CUT_OFF_WITHIN, async {
            loop {
                match TcpStream::connect(&address).await {
                    Ok(stream) => return stream,
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        })
        .await;
        let mut silent = connected
            .map_err(|_| anyhow::anyhow!("no /metrics on {address} after {CUT_OFF_WITHIN:?}"))?;
        let mut scrape = TcpStream::connect(&address).await?;
        scrape
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n")
            .await?;
        let mut answer = Vec::new();
        tokio::time::timeout(CUT_OFF_WITHIN, scrape.read_to_end(&mut answer)).await??;
        let answer = String::from_utf8_lossy(&answer);
        anyhow::ensure!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        anyhow::ensure!(answer.contains("ra_relay_sessions_total"), "{answer}");
        // 30 s of the head's timeout, and as much again.
        let mut received = Vec::new();
        let ended =
            tokio::time::timeout(Duration::from_secs(60), silent.read_to_end(&mut received))
                .await
                .map_err(|_| {
                    anyhow::anyhow!("the relay still holds a silent /metrics client after 60 s")
                })?;
        anyhow::ensure!(
            ended.is_ok()
                || ended
                    .as_ref()
                    .is_err_and(|error| error.kind() == std::io::ErrorKind::ConnectionReset),
            "{ended:?}"
        );
        anyhow::ensure!(
            !String::from_utf8_lossy(&received).contains("ra_relay"),
            "a client that sent nothing was answered"
        );
        Ok(())
    }
    .await;
    let _ = relay.kill();
    relay.wait()?;
    outcome
}
