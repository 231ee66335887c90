//! Two real witnesses for the test run: `litewitness` processes (Go module
//! `filippo.io/torchwood`, v0.6.1), each with its own Ed25519 key in a dedicated
//! `ssh-agent`, on free loopback ports. They start on first use, are shared by every test
//! (each test registers a log of its own origin with both: `witnessctl add-log` and
//! `add-key` work while litewitness runs), and die with the test process like every server
//! of the run ([`crate::process`]).
//!
//! `deploy/test` builds them (`ensure_witness` in deploy/lib.sh) and exports
//! `LEDGER_WITNESS_BIN` (the folder of `litewitness` and `witnessctl`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine as _;
use ra_ledger::tlog::note::{ALG_COSIGNATURE_V1, NoteKey};

use crate::process::{free_port, spawn_kept, stop_kept};

/// A litewitness of the run.
#[derive(Debug)]
pub struct WitnessServer {
    /// Its name, the one its cosignature lines carry (`witness-a.test/…`).
    pub name: String,
    /// `http://127.0.0.1:PORT`, the prefix of its `add-checkpoint`.
    pub url: String,
    /// Its cosigning key.
    pub key: NoteKey,
    /// Its SQLite database.
    pub db: PathBuf,
    /// Its log.
    pub log: PathBuf,
    /// Its pid.
    pub pid: u32,
    bin: PathBuf,
}

impl WitnessServer {
    /// Registers a log with this witness: its origin and its key (a vkey of algorithm 0x01).
    pub fn add_log(&self, origin: &str, vkey: &str) -> anyhow::Result<()> {
        let ctl = self.bin.join("witnessctl");
        let db = self.db.to_string_lossy().into_owned();
        run(Command::new(&ctl).args(["add-log", "-db", &db, "-origin", origin]))?;
        run(Command::new(&ctl).args(["add-key", "-db", &db, "-origin", origin, "-key", vkey]))
    }

    /// Registers one more key of log `origin` (a rotation's new key, issue 56 item 4).
    pub fn add_key(&self, origin: &str, vkey: &str) -> anyhow::Result<()> {
        let db = self.db.to_string_lossy().into_owned();
        run(Command::new(self.bin.join("witnessctl"))
            .args(["add-key", "-db", &db, "-origin", origin, "-key", vkey]))
    }

    /// Removes a key of log `origin` (a rotation's old key, once the new one is cosigned).
    pub fn del_key(&self, origin: &str, vkey: &str) -> anyhow::Result<()> {
        let db = self.db.to_string_lossy().into_owned();
        run(Command::new(self.bin.join("witnessctl"))
            .args(["del-key", "-db", &db, "-origin", origin, "-key", vkey]))
    }

    /// Its line in a policy file.
    pub fn policy_line(&self, policy_name: &str) -> String {
        format!("witness {policy_name} {} {}", self.key.vkey(), self.url)
    }
}

/// The run's two witnesses, started on first use.
///
/// # Panics
/// When they cannot be started; the message says what to run or set.
pub fn witnesses() -> &'static [WitnessServer; 2] {
    static WITNESSES: OnceLock<[WitnessServer; 2]> = OnceLock::new();
    WITNESSES.get_or_init(|| {
        let start = |name: &str| {
            start(name).unwrap_or_else(|error| panic!("cannot start witness {name}: {error:#}"))
        };
        [start("a"), start("b")]
    })
}

/// A witness of a test's own, for the tests that stop one (`stop_kept` with its pid).
pub fn private_witness(name: &str) -> anyhow::Result<WitnessServer> {
    start(name)
}

/// Stops a witness started by [`private_witness`].
pub fn stop(witness: &WitnessServer) -> anyhow::Result<()> {
    stop_kept(witness.pid, "KILL")
}

fn start(name: &str) -> anyhow::Result<WitnessServer> {
    let bin = match std::env::var_os("LEDGER_WITNESS_BIN") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => bail!(
            "LEDGER_WITNESS_BIN is not set: run the tests through deploy/test, which builds \
             litewitness and witnessctl (ensure_witness in deploy/lib.sh)"
        ),
    };
    crate::stack();
    let dir = crate::stack::run_dir().join(format!("witness-{name}-{}", crate::random_suffix()));
    std::fs::create_dir_all(&dir)?;
    let key_file = dir.join("witness.key");
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&key_file))?;
    let socket = dir.join("agent.sock");
    let mut agent = Command::new("setpriv");
    agent
        .args(["--pdeathsig", "SIGKILL", "--", "ssh-agent", "-D", "-a"])
        .arg(&socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    spawn_kept(agent).context("starting ssh-agent")?;
    // Listening, not only there: the agent binds its socket (the file appears) before it
    // listens, and an ssh-add between the two was refused ("Connection refused").
    wait_for(
        || std::os::unix::net::UnixStream::connect(&socket).is_ok(),
        "ssh-agent listening on its socket",
    )?;
    run(Command::new("ssh-add")
        .arg(&key_file)
        .env("SSH_AUTH_SOCK", &socket))?;
    let public = std::fs::read_to_string(dir.join("witness.key.pub"))?;
    let fingerprint = String::from_utf8(
        Command::new("ssh-keygen")
            .args(["-l", "-E", "sha256", "-f"])
            .arg(dir.join("witness.key.pub"))
            .output()?
            .stdout,
    )?
    .split_whitespace()
    .nth(1)
    .context("ssh-keygen -l printed no fingerprint")?
    .to_owned();
    let witness_name = format!("witness-{name}.test/{}", crate::random_suffix());
    let key = NoteKey {
        name: witness_name.clone(),
        algorithm: ALG_COSIGNATURE_V1,
        public: ssh_ed25519_public(&public)?,
    };
    let port = free_port()?;
    let db = dir.join("litewitness.db");
    let log = dir.join("litewitness.log");
    let mut command = Command::new("setpriv");
    command
        .args(["--pdeathsig", "SIGKILL", "--"])
        .arg(bin.join("litewitness"))
        .args(["-name", &witness_name, "-key", &fingerprint, "-listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("-db")
        .arg(&db)
        .arg("-ssh-agent")
        .arg(&socket)
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log)?)
        .stderr(std::fs::File::options().append(true).open(&log)?);
    let pid = spawn_kept(command).context("starting litewitness")?;
    let address = format!("127.0.0.1:{port}");
    wait_for(
        || {
            std::net::TcpStream::connect(&address).is_ok()
                || !Path::new(&format!("/proc/{pid}")).exists()
        },
        "litewitness",
    )?;
    if !Path::new(&format!("/proc/{pid}")).exists() {
        bail!(
            "litewitness exited: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    // The key litewitness prints is the one computed here from the ssh key.
    let printed = std::fs::read_to_string(&log).unwrap_or_default();
    if !printed.contains(&key.vkey()) {
        bail!(
            "litewitness printed another verifier key than {}:\n{printed}",
            key.vkey()
        );
    }
    Ok(WitnessServer {
        name: witness_name,
        url: format!("http://{address}"),
        key,
        db,
        log,
        pid,
        bin,
    })
}

/// The Ed25519 key of an OpenSSH public key line (`ssh-ed25519 <base64> comment`).
fn ssh_ed25519_public(line: &str) -> anyhow::Result<ed25519_dalek::VerifyingKey> {
    let blob = line
        .split_whitespace()
        .nth(1)
        .context("no key in the .pub file")?;
    let blob = base64::engine::general_purpose::STANDARD.decode(blob)?;
    // string "ssh-ed25519", string key (each a u32 length, then the bytes).
    let key: [u8; 32] = blob
        .get(blob.len().saturating_sub(32)..)
        .and_then(|key| key.try_into().ok())
        .context("not an ssh-ed25519 key")?;
    Ok(ed25519_dalek::VerifyingKey::from_bytes(&key)?)
}

fn run(command: &mut Command) -> anyhow::Result<()> {
    let output = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

fn wait_for(mut ready: impl FnMut() -> bool, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        if Instant::now() > deadline {
            bail!("{what} not ready within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}
