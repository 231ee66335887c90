//! Server processes of the test run, and what starting them needs: a free port, and a
//! keeper thread that spawns every server so that none outlives the test process.
//!
//! [`crate::stack`](mod@crate::stack) (PostgreSQL) and [`crate::broker`] (Kafka) both start their servers
//! through here; this module uses neither.

use std::collections::{BTreeSet, HashMap};
use std::net::TcpListener;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

/// What the keeper thread is asked to do.
enum Request {
    Spawn(Command, mpsc::Sender<std::io::Result<u32>>),
    Stop(u32, &'static str, mpsc::Sender<anyhow::Result<()>>),
}

/// The keeper thread spawns every server and never exits, so `PR_SET_PDEATHSIG` (which
/// fires when the *thread* that forked a child ends) fires only when the process ends.
fn keeper() -> &'static Mutex<mpsc::Sender<Request>> {
    static KEEPER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    KEEPER.get_or_init(|| {
        let (sender, receiver) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("test-stack-keeper".into())
            .spawn(move || {
                let mut children: HashMap<u32, Child> = HashMap::new();
                for request in receiver {
                    match request {
                        Request::Spawn(mut command, reply) => {
                            let spawned = command.spawn().map(|child| {
                                let pid = child.id();
                                children.insert(pid, child);
                                pid
                            });
                            let _ = reply.send(spawned);
                        }
                        Request::Stop(pid, signal, reply) => {
                            let outcome = match children.remove(&pid) {
                                None => Err(anyhow::anyhow!("no server with pid {pid}")),
                                Some(mut child) => send_signal(pid, signal).and_then(|()| {
                                    child.wait()?;
                                    Ok(())
                                }),
                            };
                            let _ = reply.send(outcome);
                        }
                    }
                }
                // The sender lives in a static: this point is never reached.
                loop {
                    std::thread::park();
                }
            })
            .expect("spawning the keeper thread");
        Mutex::new(sender)
    })
}

/// Spawns `command` from the keeper thread; returns its pid.
pub fn spawn_kept(command: Command) -> anyhow::Result<u32> {
    let (reply, answer) = mpsc::channel();
    keeper()
        .lock()
        .expect("keeper lock")
        .send(Request::Spawn(command, reply))?;
    Ok(answer.recv()??)
}

/// Sends `signal` (e.g. `INT`, `KILL`) to a kept server and waits until it exited.
pub fn stop_kept(pid: u32, signal: &'static str) -> anyhow::Result<()> {
    let (reply, answer) = mpsc::channel();
    keeper()
        .lock()
        .expect("keeper lock")
        .send(Request::Stop(pid, signal, reply))?;
    answer.recv()?
}

/// Sends `signal` to a process without waiting (e.g. `STOP`, `CONT`).
pub fn send_signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()?;
    anyhow::ensure!(status.success(), "kill -{signal} {pid} failed");
    Ok(())
}

/// A free port on 127.0.0.1, never one this process handed out before. The kernel may give
/// again a port it gave a moment ago (bound, then closed): a broker once got one port for
/// two of its listeners, and its format refused them (a loaded run, 2026-12-07).
pub fn free_port() -> anyhow::Result<u16> {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    for _ in 0..100 {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if HANDED_OUT.lock().expect("ports lock").insert(port) {
            return Ok(port);
        }
    }
    anyhow::bail!("100 free ports in a row had been handed out before")
}
