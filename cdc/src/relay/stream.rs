//! What a session does the same in both delivery modes once its connections are open
//! ([`super::setup::Opened`]): the connections split into what the delivery uses (the SQL
//! connection, the server) and what the reader streams (the replication stream, the
//! publication's coverage, the record of what Kafka holds), and, once the mode has built its
//! delivery, the stream behind the [`Reader`] until shutdown, then the replication stream
//! stopped. The two modes differ only between the two: how the position is read back and
//! which producer sends ([`super::at_least_once`], [`super::exactly_once`]).

use std::time::Duration;

use pgwire_replication::ReplicationClient;
use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::RelayError;
use super::coverage::Coverage;
use super::in_flight::{InFlight, Producer};
use super::published::Published;
use super::reader::{Delivery, Reader};
use super::setup::Opened;
use crate::config::RelayConfig;
use crate::history::Server;
use crate::metrics::RelayMetrics;

/// How long a clean stop waits for the replication stream to shut down.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The part of a session the reader streams.
pub(super) struct Stream {
    replication: ReplicationClient,
    coverage: Coverage,
    published: Published,
}

/// Splits `opened` into the SQL connection and the server, which the delivery uses, and the
/// [`Stream`] the reader runs.
pub(super) fn split(config: &RelayConfig, opened: Opened) -> (Client, Server, Stream) {
    let Opened {
        sql,
        replication,
        server,
        coverage,
        generation,
        ..
    } = opened;
    let published = Published::new(&config.slot, generation, &server.identity.system_id);
    let stream = Stream {
        replication,
        coverage,
        published,
    };
    (sql, server, stream)
}

impl Stream {
    /// Streams `delivery`, which sends on `producer`, until `shutdown` or an error; a clean
    /// stop ends the replication stream and logs how far the slot was confirmed.
    pub(super) async fn run<D: Delivery>(
        mut self,
        config: &RelayConfig,
        metrics: &RelayMetrics,
        shutdown: &CancellationToken,
        sql: &Client,
        delivery: D,
        producer: Producer,
    ) -> Result<(), RelayError> {
        metrics.set_streaming(true);
        let kafka = InFlight::new(producer);
        let reader = Reader::new(
            config,
            metrics,
            sql,
            delivery,
            kafka,
            self.coverage,
            self.published,
        );
        let confirmed = reader.run(&mut self.replication, shutdown).await?;
        self.replication.stop();
        let _ = tokio::time::timeout(STOP_GRACE, self.replication.shutdown()).await;
        info!(confirmed = %crate::lsn::format_lsn(confirmed), "session stopped cleanly");
        Ok(())
    }
}
