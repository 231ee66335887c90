//! A cluster whose WAL starts just below a 4 GiB boundary ([`PostgresServer::start_wal_at`]):
//! one segment switch takes its LSNs from F/FF000000 to 10/0, where their text no longer
//! sorts as they do.
//!
//! [`PostgresServer::start_wal_at`]: ra_ledger_tests::postgres::PostgresServer::start_wal_at

use ra_ledger_tests::database::connect;
use ra_ledger_tests::stack::unstarted_postgres;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_can_start_its_wal_one_segment_below_a_boundary() -> anyhow::Result<()> {
    let server = unstarted_postgres()?;
    server.start_wal_at("000000010000000F000000FF")?;
    server.start()?;
    let client = connect(&server.admin_url()).await?;
    let below: String = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await?
        .get(0);
    let in_last_segment: bool = client
        .query_one(
            "SELECT $1::text::pg_lsn >= 'F/FF000000' AND $1::text::pg_lsn < '10/0'",
            &[&below],
        )
        .await?
        .get(0);
    assert!(in_last_segment, "{below}");

    client
        .batch_execute("SELECT pg_switch_wal(); CREATE TABLE after_the_boundary ()")
        .await?;
    let above: String = client
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await?
        .get(0);
    let crossed: bool = client
        .query_one("SELECT $1::text::pg_lsn > '10/0'", &[&above])
        .await?
        .get(0);
    assert!(crossed, "{above}");
    // The trap the boundary sets: as text, the later position sorts first.
    assert!(above < below, "{above} / {below}");
    server.stop("INT")?;
    Ok(())
}
