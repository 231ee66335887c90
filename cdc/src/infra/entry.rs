//! The futures a library hands to the crates above it: [`Entry`], boxed, compiled once.
//!
//! In an optimized build rustc lets every crate that polls an `async fn`'s future compile a
//! copy of that future's body of its own: closures and coroutines are always "cross-crate
//! inlinable". The copy polls the futures the body awaits, which are copied too, down the
//! whole tree. So the `ledger` binary, 2,600 lines of argument parsing and printing, compiled
//! the service, the relay, the worker and the replays a second time: 100 of the release
//! build's 614 CPU seconds, and the last 58 s of its wall clock on two cores, where nothing
//! else could run beside it (docs/benchmarks.md, "The test suite and the stack").
//!
//! The long-running entry points the binary and the benchmarks call (a process's main loop,
//! a replay, a rebuild) therefore return an [`Entry`]: a box made by a function that is never
//! inlined (`#[inline(never)]`), so that its body is compiled in its own crate only, and the
//! caller polls it through the box's virtual call. One allocation and one indirect call per
//! poll of a task that runs for seconds to days; the futures inside are as before.
//!
//! Short helpers (a query, a connection) are left as `async fn`: their copies are small.

use std::future::Future;
use std::pin::Pin;

/// A future whose body is compiled in the crate that made it (see the module's docs).
pub type Entry<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
