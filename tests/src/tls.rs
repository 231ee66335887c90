//! Certificates made at test time with the `openssl` command: a CA, a server certificate
//! it signed for `localhost` only (so connecting by IP address is the wrong host name), a
//! client certificate it signed, and an unrelated CA for "the wrong CA".

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// The files of a test PKI, in one folder.
#[derive(Debug, Clone)]
pub struct Pki {
    /// The folder.
    pub dir: PathBuf,
    /// The CA's certificate (PEM), what clients trust.
    pub ca: PathBuf,
    /// A CA that signed nothing here.
    pub other_ca: PathBuf,
    /// The server's certificate, for DNS name `localhost` only.
    pub server_cert: PathBuf,
    /// The server's key.
    pub server_key: PathBuf,
    /// A client certificate (CN `ra-ledger-client`), for mutual TLS.
    pub client_cert: PathBuf,
    /// The client's key.
    pub client_key: PathBuf,
}

impl Pki {
    /// Makes every certificate in `dir` (created when missing).
    pub fn generate(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let pki = Self {
            dir: dir.to_owned(),
            ca: dir.join("ca.crt"),
            other_ca: dir.join("other-ca.crt"),
            server_cert: dir.join("server.crt"),
            server_key: dir.join("server.key"),
            client_cert: dir.join("client.crt"),
            client_key: dir.join("client.key"),
        };
        for (name, subject) in [
            ("ca", "/CN=ra-ledger test CA"),
            ("other-ca", "/CN=some other CA"),
        ] {
            openssl(
                dir,
                &[
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-nodes",
                    "-days",
                    "2",
                    "-subj",
                    subject,
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign",
                    "-keyout",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.crt"),
                ],
            )?;
        }
        for (name, subject, extensions) in [
            (
                "server",
                "/CN=localhost",
                "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n",
            ),
            (
                "client",
                "/CN=ra-ledger-client",
                "extendedKeyUsage=clientAuth\n",
            ),
        ] {
            std::fs::write(dir.join(format!("{name}.ext")), extensions)?;
            openssl(
                dir,
                &[
                    "req",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-nodes",
                    "-subj",
                    subject,
                    "-keyout",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.csr"),
                ],
            )?;
            openssl(
                dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{name}.csr"),
                    "-CA",
                    "ca.crt",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-extfile",
                    &format!("{name}.ext"),
                    "-out",
                    &format!("{name}.crt"),
                ],
            )?;
        }
        Ok(pki)
    }
}

fn openssl(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .context("running openssl (Debian package openssl)")?;
    if !output.status.success() {
        bail!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// A TLS terminator in front of a plaintext port (Debian's `stunnel4`): what a Kafka client
/// reaches over TLS. It dies with the test process.
#[derive(Debug)]
pub struct TlsTerminator {
    /// The TLS port on 127.0.0.1.
    pub port: u16,
    pid: u32,
}

impl TlsTerminator {
    /// Accepts TLS on `port` with `pki`'s server certificate and forwards to `backend` on
    /// 127.0.0.1. With `mutual`, a client must present a certificate `pki`'s CA signed.
    pub fn start(pki: &Pki, port: u16, backend: u16, mutual: bool) -> anyhow::Result<Self> {
        let name = format!("stunnel-{port}");
        let log = pki.dir.join(format!("{name}.log"));
        let mut config = format!(
            "foreground = yes\npid =\noutput = {log}\ndebug = notice\n\
             [kafka]\naccept = 127.0.0.1:{port}\nconnect = 127.0.0.1:{backend}\n\
             cert = {cert}\nkey = {key}\n",
            log = log.display(),
            cert = pki.server_cert.display(),
            key = pki.server_key.display(),
        );
        if mutual {
            config.push_str(&format!(
                "CAfile = {}\nverifyChain = yes\nrequireCert = yes\n",
                pki.ca.display()
            ));
        }
        let config_path = pki.dir.join(format!("{name}.conf"));
        std::fs::write(&config_path, config)?;
        let mut command = Command::new("setpriv");
        command
            .args(["--pdeathsig", "SIGKILL", "--", "stunnel4"])
            .arg(&config_path)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let pid = crate::stack::spawn_kept(command)
            .context("starting stunnel4 (Debian package stunnel4)")?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if std::time::Instant::now() > deadline {
                bail!(
                    "stunnel4 is not listening on {port} after 10 s; see {}",
                    log.display()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Ok(Self { port, pid })
    }

    /// Stops it.
    pub fn stop(self) -> anyhow::Result<()> {
        crate::stack::stop_kept(self.pid, "KILL")
    }
}
