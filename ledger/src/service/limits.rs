//! What one client may hold of the service: how long a request body may take to arrive,
//! how long an answer may wait for the client to read it, and how many connections are
//! open at once.
//!
//! Each bound covers a way a slow client could hold resources without end. A head has its
//! own 30 s limit, which also closes a connection idle between requests. A body gets
//! [`Limits::body_read_timeout`] (see [`super::deadline`]). Those two bound how long any one
//! connection can be held without sending a complete request. An answer the client does
//! not read gets [`Limits::write_stall_timeout`] (see [`ra_ledger_cdc::infra::write_stall`]):
//! without it, a client that asks and never reads holds its connection for good, since
//! hyper has no write timeout. The connection cap bounds how many connections exist at
//! once, so the file descriptors and memory a crowd of slow clients can take are bounded
//! too. All but the body's are the bounds of every server of the project
//! ([`ra_ledger_cdc::infra::server`], whose loop the service runs); the `/metrics`
//! servers have the same timeouts.

use std::time::Duration;

use ra_ledger_cdc::infra::server::{Bounds, DEFAULT_HEADER_READ_TIMEOUT};

/// Default of [`Limits::body_read_timeout`].
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of [`Limits::write_stall_timeout`].
pub const DEFAULT_WRITE_STALL_TIMEOUT: Duration =
    ra_ledger_cdc::infra::write_stall::DEFAULT_WRITE_STALL_TIMEOUT;
/// Default of [`Limits::max_connections`]: far below the serve unit's `LimitNOFILE=65536`,
/// far above what the pool of 16 database connections can keep busy.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1_024;

/// The bounds [`super::serve`] holds every connection to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest a request body may take to arrive in full, from the end of its head. The
    /// request is then answered 408 and its connection closed. A total bound, not an idle
    /// one: a client that sends a byte now and then is cut off as well.
    pub body_read_timeout: Duration,
    /// Longest the connection's writes may wait for the client to read, without a byte
    /// taken, before the connection is closed. An idle bound, not a total one: a large
    /// answer over a slow link takes as long as it takes while the client reads.
    pub write_stall_timeout: Duration,
    /// Most connections open at once (TLS handshakes included); more wait in the listen
    /// backlog ([`Bounds::max_connections`] says why they wait rather than get a 503).
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            write_stall_timeout: DEFAULT_WRITE_STALL_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl Limits {
    /// The bounds of the server loop: these, with the head's timeout every server has.
    pub fn bounds(&self) -> Bounds {
        Bounds {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            write_stall_timeout: self.write_stall_timeout,
            max_connections: self.max_connections,
            cap_remedy: "Raise max_connections (LEDGER_MAX_CONNECTIONS) only within the \
                         process's file descriptor limit",
        }
    }
}
