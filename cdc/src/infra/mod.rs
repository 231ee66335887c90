//! What every process of the project shares, the relay's or not: the ledger service, the
//! reassignment worker, the CLI's tools and the example consumer build on these too.
//!
//! - [`entry`]: the boxed futures of the long-running entry points, compiled in their own
//!   crate only.
//! - [`settings`]: the local stack's defaults, TOML and secret files, checks of names.
//! - [`pg`]: PostgreSQL connection settings and TLS.
//! - [`kafka`]: librdkafka settings and their security checks.
//! - [`partition_end`]: the context of consumers that read to a partition's end, which
//!   logs that end at `debug`, not as an error.
//! - [`runtime`]: `/metrics`, signals and periodic ticks of a long-running process.
//! - [`prometheus`]: the text exposition format of counters, gauges and histograms.
//! - [`server`]: the HTTP/1.1 serve loop of every server, the API's and every `/metrics`:
//!   the same timeouts for slow and idle clients, and a cap on open connections.
//! - [`write_stall`]: the write timeout of every HTTP server: a connection whose client
//!   reads nothing of its answers is closed.
//!
//! Nothing here depends on the relay or the consumer library; within, `settings` uses `pg`
//! (a password put into a URL) and `kafka` uses `settings` (its errors and secret files),
//! never the other way round.

pub mod entry;
pub mod kafka;
pub mod partition_end;
pub mod pg;
pub mod prometheus;
pub mod registry_access;
pub mod runtime;
pub mod server;
pub mod settings;
pub mod write_stall;
