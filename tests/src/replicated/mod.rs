//! A PostgreSQL primary with a physical standby that keeps copies of its failover slots
//! (PostgreSQL 17+), for tests of what happens to the relay when the primary fails.
//!
//! The two servers are two *nodes*, each with a port of its own for the whole test: a
//! standby rebuilt after a failover takes the port of the node that failed, so the
//! multi-host URL of [`ReplicatedPostgres::multi_host_url`] stays right through any number
//! of failovers, as a client's would in production.
//!
//! Every node has the same `postgresql.conf` (a base backup copies it): PostgreSQL ignores
//! the standby settings on a primary and the primary's on a standby, and a promoted standby
//! gates its logical walsenders on the same physical slot its primary did. What makes a
//! node a standby (`standby.signal`, `primary_conninfo`, `primary_slot_name`) is written
//! by `node::point_at` into its `postgresql.auto.conf`.
//!
//! The servers die with the test process ([`crate::process`]) and are stopped when the
//! value is dropped; their folders (logs included) stay under the run's folder.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::TestDatabase;
use crate::postgres::{PostgresServer, bindir};
use crate::process::{free_port, send_signal};

mod node;
mod slots;

use node::{admin, blocking, drop_physical_slot, node_settings, point_at, promote, wait_streaming};

pub use slots::SlotCopy;

/// How the pair is set up.
#[derive(Debug, Clone)]
pub struct ReplicationOptions {
    /// The standby's physical slot on the primary.
    pub physical_slot: String,
    /// Whether the primary sets `synchronized_standby_slots` to that slot: logical
    /// walsenders of failover slots then send nothing the standby has not flushed (the
    /// gate). Off, a promoted standby may lack what a consumer already read.
    pub synchronized_standby_slots: bool,
}

impl Default for ReplicationOptions {
    fn default() -> Self {
        Self {
            physical_slot: "standby_physical".into(),
            synchronized_standby_slots: true,
        }
    }
}

/// A primary and (but after a failover, until [`ReplicatedPostgres::rebuild_standby`]) a
/// physical standby.
#[derive(Debug)]
pub struct ReplicatedPostgres {
    options: ReplicationOptions,
    /// The folder of this pair's servers, under the run's.
    dir: PathBuf,
    /// Both nodes' ports, in the order of the multi-host URL.
    ports: [u16; 2],
    primary: PostgresServer,
    standby: Option<PostgresServer>,
    /// Servers that were primaries, kept for their logs (and stopped when dropped).
    retired: Vec<PostgresServer>,
    /// The standby's walreceiver, while [`ReplicatedPostgres::pause_wal_receiver`] holds it.
    paused_wal_receiver: Option<u32>,
    /// Servers made so far: each gets a folder of its own.
    made: u32,
}

/// How long a server is given to start, promote or stream.
const SERVER_TIMEOUT: Duration = Duration::from_secs(60);

impl ReplicatedPostgres {
    /// A primary and a streaming standby, with the default [`ReplicationOptions`].
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(ReplicationOptions::default()).await
    }

    /// A primary and a streaming standby, set up as `options` say.
    ///
    /// # Errors
    /// When no PostgreSQL 17+ is found ([`bindir::failover_bindir`] says where it looked and
    /// how to get one), or a server does not start.
    pub async fn start_with(options: ReplicationOptions) -> anyhow::Result<Self> {
        let bindir = bindir::failover_bindir()?;
        // The shared stack clears the run folder when it starts: start it first.
        crate::stack();
        let dir = crate::stack::run_dir().join(format!("replicated-{}", crate::random_suffix()));
        let settings = node_settings(&options);
        let primary = blocking({
            let dir = dir.clone();
            move || {
                let primary = PostgresServer::init_in(&dir.join("node0-1"), bindir)?;
                primary.configure(&settings)?;
                primary.start()?;
                Ok(primary)
            }
        })
        .await?;
        let mut pair = Self {
            ports: [primary.port, free_port()?],
            options,
            dir,
            primary,
            standby: None,
            retired: Vec::new(),
            paused_wal_receiver: None,
            made: 1,
        };
        pair.rebuild_standby().await?;
        Ok(pair)
    }

    /// The current primary.
    pub fn primary(&self) -> &PostgresServer {
        &self.primary
    }

    /// The standby, if there is one (none between a promotion and a rebuild).
    pub fn standby(&self) -> Option<&PostgresServer> {
        self.standby.as_ref()
    }

    /// The options the pair was started with.
    pub fn options(&self) -> &ReplicationOptions {
        &self.options
    }

    /// The superuser's URL of the current primary's maintenance database.
    pub fn primary_url(&self) -> String {
        self.primary.admin_url()
    }

    /// The superuser's URL of the standby's maintenance database.
    pub fn standby_url(&self) -> anyhow::Result<String> {
        Ok(self.running_standby()?.admin_url())
    }

    /// The superuser's URL of both nodes' maintenance database, as libpq (and tokio-postgres)
    /// read it: `postgres://postgres:…@127.0.0.1:P1,127.0.0.1:P2/postgres?target_session_attrs=read-write`.
    /// A client tries the nodes in order and keeps the first that accepts writes, whichever
    /// is the primary now.
    pub fn multi_host_url(&self) -> String {
        // The single-host URL, with both nodes where its one host is.
        let single = self.primary.admin_url();
        let hosts = format!("127.0.0.1:{},127.0.0.1:{}", self.ports[0], self.ports[1]);
        format!(
            "{}?target_session_attrs=read-write",
            single.replace(&format!("127.0.0.1:{}", self.primary.port), &hosts)
        )
    }

    /// A new database with the ledger's migrations, made on the primary (so on the standby
    /// too); its URL is a multi-host one ([`ReplicatedPostgres::multi_host_url`]), so it
    /// follows the primary, and it is dropped through whichever node is primary then. Its
    /// `replication_target()` is the first node's only: `ReplicationTarget` takes a URL's
    /// first host.
    pub async fn create_database(&self) -> anyhow::Result<TestDatabase> {
        TestDatabase::on(&self.multi_host_url()).await
    }

    /// The current primary's timeline.
    pub fn primary_timeline(&self) -> anyhow::Result<u32> {
        Ok(self.primary.identify_system()?.timeline)
    }

    /// The timeline the standby replays.
    pub fn standby_timeline(&self) -> anyhow::Result<u32> {
        Ok(self.running_standby()?.identify_system()?.timeline)
    }

    /// Crashes the primary: an immediate shutdown (SIGQUIT to the postmaster), with no
    /// checkpoint and no goodbye to the standby. [`ReplicatedPostgres::promote`] next.
    pub fn kill_primary(&mut self) -> anyhow::Result<()> {
        self.primary.stop("QUIT").context("killing the primary")
    }

    /// Promotes the standby and waits until it accepts writes; it is the primary from then
    /// on, and there is no standby until [`ReplicatedPostgres::rebuild_standby`]. The old
    /// primary is left as it is: kill it first ([`ReplicatedPostgres::kill_primary`]), or
    /// there are two primaries (a split brain, if a test wants one).
    ///
    /// Failover slots the standby had not marked ready are dropped by PostgreSQL here.
    pub async fn promote(&mut self) -> anyhow::Result<()> {
        self.resume_wal_receiver()?;
        let standby = self
            .standby
            .take()
            .context("there is no standby to promote")?;
        promote(&standby).await?;
        let old = std::mem::replace(&mut self.primary, standby);
        self.retired.push(old);
        Ok(())
    }

    /// A new standby of the current primary, from a fresh base backup in a new folder, on
    /// the port of the node that has none (so the multi-host URL stays right). It takes
    /// the same physical slot, which the promoted primary's `synchronized_standby_slots`
    /// still names: a leftover slot of that name on the primary is dropped first. A server
    /// still running on that port (an old primary not killed) is killed.
    pub async fn rebuild_standby(&mut self) -> anyhow::Result<()> {
        if self.standby.is_some() {
            bail!("there is a standby already: promote it, or kill the primary and promote, first");
        }
        let port = self.free_node_port();
        for server in &self.retired {
            if server.port == port && server.is_running() {
                server.stop("QUIT")?;
            }
        }
        let slot = self.options.physical_slot.clone();
        drop_physical_slot(&self.primary, &slot).await?;
        self.made += 1;
        let node = usize::from(port == self.ports[1]);
        let pg_dir = self.dir.join(format!("node{node}-{}", self.made));
        let primary = self.primary.clone();
        let standby = blocking(move || {
            let standby = PostgresServer::from_base_backup(&primary, &pg_dir, &slot, port)?;
            point_at(&standby, &primary, &slot)?;
            standby.start()?;
            Ok(standby)
        })
        .await?;
        wait_streaming(&standby).await?;
        self.standby = Some(standby);
        self.wait_replayed(SERVER_TIMEOUT).await
    }

    /// Stops the standby for good (a fast shutdown), as when its host is retired; there is
    /// no standby from then on. Its physical slot stays on the primary, inactive, until
    /// [`ReplicatedPostgres::drop_standby_slot`]: PostgreSQL's gate waits on it meanwhile.
    pub async fn stop_standby(&mut self) -> anyhow::Result<()> {
        self.resume_wal_receiver()?;
        let standby = self.standby.take().context("there is no standby to stop")?;
        blocking({
            let standby = standby.clone();
            move || standby.stop("INT")
        })
        .await
        .context("stopping the standby")?;
        self.retired.push(standby);
        Ok(())
    }

    /// Drops the standby's physical slot on the primary, as an operator does once that
    /// standby is gone for good.
    pub async fn drop_standby_slot(&self) -> anyhow::Result<()> {
        drop_physical_slot(&self.primary, &self.options.physical_slot).await
    }

    /// A clean role swap: a fast shutdown of the primary (its walsenders send the standby
    /// all its WAL first), the standby promoted, and the old primary rejoining as the new
    /// one's standby after `pg_rewind` (a no-op when nothing diverged).
    ///
    /// The old primary keeps its replication slots, as a demoted primary does in
    /// production: a failover slot made on it is now a non-synced slot with the name of one
    /// the new primary has, and the standby's slot sync stops for every slot ("same name
    /// slot already exists on the standby", cloudnative-pg#9969). See
    /// [`ReplicatedPostgres::orphaned_failover_slots`] and
    /// [`ReplicatedPostgres::drop_orphaned_failover_slots`].
    pub async fn switchover(&mut self) -> anyhow::Result<()> {
        self.resume_wal_receiver()?;
        let new_primary = self
            .standby
            .take()
            .context("there is no standby to switch to")?;
        let old_primary = self.primary.clone();
        blocking({
            let old = old_primary.clone();
            move || old.stop("INT")
        })
        .await
        .context("stopping the primary (fast)")?;
        promote(&new_primary).await?;
        self.primary = new_primary.clone();
        let slot = self.options.physical_slot.clone();
        drop_physical_slot(&new_primary, &slot).await?;
        admin(&new_primary)
            .await?
            .execute(
                "SELECT pg_create_physical_replication_slot($1, true)",
                &[&slot],
            )
            .await
            .context("creating the rejoining standby's physical slot")?;
        let standby = old_primary.clone();
        blocking(move || {
            let target = format!("--target-pgdata={}", standby.data_dir.display());
            let source = format!("--source-server={}", new_primary.conninfo());
            standby
                .run_tool("pg_rewind", [target, source])
                .context("rewinding the old primary")?;
            point_at(&standby, &new_primary, &slot)?;
            standby.start()
        })
        .await?;
        wait_streaming(&old_primary).await?;
        self.standby = Some(old_primary);
        self.wait_replayed(SERVER_TIMEOUT).await
    }

    /// Waits until the standby has replayed all the primary has written so far (its
    /// timeline included: a standby that follows a promotion is on the old timeline until
    /// it replays a record of the new one).
    pub async fn wait_replayed(&self, timeout: Duration) -> anyhow::Result<()> {
        let standby = self.running_standby()?;
        let written: String = admin(&self.primary)
            .await?
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .await?
            .get(0);
        let client = admin(standby).await?;
        let deadline = Instant::now() + timeout;
        loop {
            let replayed: bool = client
                .query_one(
                    "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::text::pg_lsn, false)",
                    &[&written],
                )
                .await?
                .get(0);
            if replayed {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the standby has not replayed up to {written} after {timeout:?}; see {}",
                    standby.log_path().display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops (SIGSTOP) the standby's walreceiver: the standby receives and confirms nothing
    /// until [`ReplicatedPostgres::resume_wal_receiver`], while it still answers queries.
    /// Returns the walreceiver's pid. Resume within `wal_sender_timeout` (60 s), or the
    /// primary drops the connection.
    pub async fn pause_wal_receiver(&mut self) -> anyhow::Result<u32> {
        if let Some(pid) = self.paused_wal_receiver {
            return Ok(pid);
        }
        let standby = self.running_standby()?;
        let client = admin(standby).await?;
        let deadline = Instant::now() + SERVER_TIMEOUT;
        let pid = loop {
            let row = client
                .query_opt(
                    "SELECT pid FROM pg_stat_wal_receiver WHERE pid IS NOT NULL",
                    &[],
                )
                .await?;
            if let Some(row) = row {
                break u32::try_from(row.get::<_, i32>(0))?;
            }
            if Instant::now() > deadline {
                bail!(
                    "the standby has no walreceiver after {SERVER_TIMEOUT:?}; see {}",
                    standby.log_path().display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        send_signal(pid, "STOP")?;
        self.paused_wal_receiver = Some(pid);
        Ok(pid)
    }

    /// Lets a paused walreceiver go on (SIGCONT); nothing when none is paused.
    pub fn resume_wal_receiver(&mut self) -> anyhow::Result<()> {
        match self.paused_wal_receiver.take() {
            Some(pid) => send_signal(pid, "CONT"),
            None => Ok(()),
        }
    }

    fn running_standby(&self) -> anyhow::Result<&PostgresServer> {
        self.standby
            .as_ref()
            .context("there is no standby (promoted and not rebuilt yet)")
    }

    /// The port of the node that is not the primary.
    fn free_node_port(&self) -> u16 {
        if self.primary.port == self.ports[0] {
            self.ports[1]
        } else {
            self.ports[0]
        }
    }
}

impl Drop for ReplicatedPostgres {
    fn drop(&mut self) {
        // A stopped walreceiver would hold up its server's shutdown.
        let _ = self.resume_wal_receiver();
        let servers = std::iter::once(&self.primary)
            .chain(&self.standby)
            .chain(&self.retired);
        for server in servers.filter(|server| server.is_running()) {
            let _ = server.stop("QUIT");
        }
    }
}
