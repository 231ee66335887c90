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
        std::fs::write(
            pki.server_keystore_pem(),
            [
                std::fs::read_to_string(&pki.server_key)?,
                std::fs::read_to_string(&pki.server_cert)?,
            ]
            .concat(),
        )?;
        Ok(pki)
    }

    /// The server's key and certificate in one PEM file: a Kafka keystore of type `PEM`.
    pub fn server_keystore_pem(&self) -> PathBuf {
        self.dir.join("server-keystore.pem")
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
