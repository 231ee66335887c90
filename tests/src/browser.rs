//! A real headless Chromium driven over WebDriver (`fantoccini`, through Debian's
//! `chromedriver`), for the console's browser tests.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;

/// A chromedriver process, killed with this value (and with the test's thread).
#[derive(Debug)]
pub struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary(variable: &str, default: &str) -> String {
    std::env::var(variable)
        .ok()
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| default.into())
}

impl Driver {
    /// Starts chromedriver (`LEDGER_CHROMEDRIVER`, default `/usr/bin/chromedriver`) on a free
    /// port and waits until it answers.
    pub async fn start() -> anyhow::Result<Self> {
        let path = binary("LEDGER_CHROMEDRIVER", "/usr/bin/chromedriver");
        anyhow::ensure!(
            std::path::Path::new(&path).exists(),
            "no chromedriver at {path}: the browser tests need Debian's chromium and \
             chromium-driver (apt-get install chromium chromium-driver; .ci/run installs them)"
        );
        let port = crate::process::free_port()?;
        let child = Command::new("setpriv")
            .args(["--pdeathsig", "SIGKILL", "--", &path])
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {path}"))?;
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            anyhow::ensure!(
                Instant::now() < deadline,
                "chromedriver did not listen on {port}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Self { child, url })
    }

    /// A new headless browser session; `javascript: false` turns scripts off.
    pub async fn browser(&self, javascript: bool) -> anyhow::Result<Client> {
        let mut options = json!({
            "binary": binary("LEDGER_CHROMIUM", "/usr/bin/chromium"),
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,1000"],
        });
        if !javascript {
            options["prefs"] = json!({"profile.managed_default_content_settings.javascript": 2});
        }
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("browserName".into(), json!("chrome"));
        capabilities.insert("goog:chromeOptions".into(), options);
        Ok(ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&self.url)
            .await?)
    }
}

/// Where the browser tests leave their screenshots: `target/tmp/browser/` (or
/// `LEDGER_BROWSER_ARTIFACTS`).
pub fn artifacts() -> anyhow::Result<PathBuf> {
    let dir = std::env::var("LEDGER_BROWSER_ARTIFACTS")
        .ok()
        .filter(|value| !value.is_empty())
        .map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tmp/browser"),
            PathBuf::from,
        );
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Saves a screenshot of what `browser` shows as `<name>.png` among the artifacts.
pub async fn screenshot(browser: &Client, name: &str) -> anyhow::Result<PathBuf> {
    let png = browser.screenshot().await?;
    let path = artifacts()?.join(format!("{name}.png"));
    std::fs::write(&path, png).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Signs in to the console at `base` with `token`, and waits until it lands: an operator
/// on the operations page and its verdict, anyone else on the search page.
pub async fn sign_in(browser: &Client, base: &str, token: &str) -> anyhow::Result<()> {
    let landing = if token == crate::api::OPERATOR {
        "/operations"
    } else {
        "/search"
    };
    browser.goto(&format!("{base}/sign-in")).await?;
    browser
        .find(Locator::Id("token"))
        .await?
        .send_keys(token)
        .await?;
    browser
        .find(Locator::Css("main form button[type=submit]"))
        .await?
        .click()
        .await?;
    wait_for_path(browser, landing).await
}

/// Waits up to 20 s until the browser's page is at a path starting with `path`.
pub async fn wait_for_path(browser: &Client, path: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let url = browser.current_url().await?;
        if url.path().starts_with(path) {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "still at {url}, not {path}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
