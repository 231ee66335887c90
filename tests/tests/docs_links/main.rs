//! The documentation's links lead somewhere: every relative link in `README.md` and
//! `docs/**/*.md` names a file or folder of the repository, every anchor a heading of its
//! target (GitHub's anchors), every external link is a well-formed `http(s)` URL (not
//! fetched: CI has no network). And `README.md` stays a guide, at most 300 lines; the detail
//! lives in `docs/`.
//!
//! No database and no broker: `deploy/test -p ra-ledger-tests --test docs_links`.

mod check;
mod markdown;

use std::fs;
use std::path::{Path, PathBuf};

use check::{Problem, check};

/// The most lines `README.md` may have: past that it stops being a guide one reads first.
const README_MAX_LINES: usize = 300;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the repository")
        .to_owned()
}

/// `README.md` and every `.md` file under `docs/`, relative to `root`, in a stable order.
fn documentation(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = vec![PathBuf::from("README.md")];
    let mut folders = vec![PathBuf::from("docs")];
    while let Some(folder) = folders.pop() {
        for entry in fs::read_dir(root.join(&folder))? {
            let entry = entry?;
            let path = folder.join(entry.file_name());
            if entry.file_type()?.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files[1..].sort();
    Ok(files)
}

#[test]
fn every_link_of_the_readme_and_the_docs_leads_somewhere() {
    let root = repository();
    let files = documentation(&root).expect("read README.md and docs/");
    assert!(
        files.len() > 1,
        "found no Markdown under docs/ in {}",
        root.display()
    );
    let report = check(&root, &files).expect("read the documentation");
    assert!(
        report.links > files.len(),
        "only {} links in {} files: is the link finder still finding links?",
        report.links,
        files.len()
    );
    let problems: Vec<String> = report.problems.iter().map(Problem::to_string).collect();
    assert!(
        problems.is_empty(),
        "{} of {} links lead nowhere:\n{}",
        problems.len(),
        report.links,
        problems.join("\n")
    );
}

#[test]
fn the_readme_stays_a_guide_of_at_most_300_lines() {
    let readme = fs::read_to_string(repository().join("README.md")).expect("read README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move the detail to a page \
         under docs/ (operators, consumers, auditors, api, benchmarks) and link it"
    );
}

/// A scratch folder of Markdown files, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(files: &[(&str, &str)]) -> Scratch {
        let root = std::env::temp_dir().join(format!(
            "docs-links-{}-{}",
            std::process::id(),
            ra_ledger_tests::random_suffix()
        ));
        for (path, text) in files {
            let path = root.join(path);
            fs::create_dir_all(path.parent().expect("a file in a folder")).expect("mkdir");
            fs::write(path, text).expect("write");
        }
        Scratch(root)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_checker_names_a_missing_file_a_missing_anchor_and_a_malformed_url() {
    let scratch = Scratch::new(&[
        (
            "README.md",
            "# Guide\n\
             \n\
             [ok](docs/a.md#the-heading) [ok too](#guide) ![picture](docs/pic.png)\n\
             [missing file](docs/nope.md)\n\
             [missing anchor](docs/a.md#no-such-heading)\n\
             [bad url](https://exa mple.com/x) [bad port](http://example.com:80a/)\n\
             [out](../outside.md) [anchor on a picture](docs/pic.png#top)\n\
             \n\
             `[in code](docs/nope.md)`\n\
             ```\n\
             [in a fence](docs/nope.md)\n\
             ```\n",
        ),
        (
            "docs/a.md",
            "# The heading\n\nsee [back](../README.md#guide)\n",
        ),
        ("docs/pic.png", "not really"),
    ]);
    let files = [PathBuf::from("README.md"), PathBuf::from("docs/a.md")];
    let report = check(&scratch.0, &files).expect("check");
    let broken: Vec<(usize, &str)> = report
        .problems
        .iter()
        .map(|p| (p.line, p.target.as_str()))
        .collect();
    assert_eq!(
        broken,
        [
            (4, "docs/nope.md"),
            (5, "docs/a.md#no-such-heading"),
            (6, "https://exa"),
            (6, "http://example.com:80a/"),
            (7, "../outside.md"),
            (7, "docs/pic.png#top"),
        ],
        "{:#?}",
        report.problems
    );
    assert_eq!(report.links, 10, "links inside code are not links");
    let reasons: Vec<&str> = report.problems.iter().map(|p| p.reason.as_str()).collect();
    assert_eq!(reasons[0], "docs/nope.md does not exist");
    assert_eq!(
        reasons[1],
        "docs/a.md has no heading with the anchor #no-such-heading"
    );
    assert_eq!(reasons[4], "../outside.md leads out of the repository");
}

#[test]
fn anchors_follow_githubs_rules() {
    let text = [
        "# RA Ledger",
        "## Bulk onboarding (`ledger import`)",
        "### For auditors: what a digest proves, and what it does not",
        "## On Apache Kafka: what the stand-in broker had bent, and what became of it",
        "## Slow clients (issue 25, item 8)",
        "## `schema_version`",
        "## Tests",
        "## Tests",
        "## See [the API](api.md) ##",
        "```",
        "# not a heading",
        "```",
        "    # indented code, not a heading",
        "#hashtag, not a heading",
    ]
    .join("\n");
    assert_eq!(
        markdown::anchors(&text),
        [
            "ra-ledger",
            "bulk-onboarding-ledger-import",
            "for-auditors-what-a-digest-proves-and-what-it-does-not",
            "on-apache-kafka-what-the-stand-in-broker-had-bent-and-what-became-of-it",
            "slow-clients-issue-25-item-8",
            "schema_version",
            "tests",
            "tests-1",
            "see-the-api",
        ]
    );
}

#[test]
fn urls_are_well_formed_or_named() {
    for good in [
        "https://maud.lambda.xyz",
        "https://docs.rs/cookie",
        "http://127.0.0.1:18080/v1/contacts?x=1#top",
        "http://localhost:9092/",
    ] {
        assert_eq!(check::well_formed_url(good), Ok(()), "{good}");
    }
    for (bad, why) in [
        ("https://", "host \"\" is not a host name"),
        ("https://nodot/x", "host \"nodot\" is not a host name"),
        (
            "https://-bad.example/",
            "host \"-bad.example\" is not a host name",
        ),
        ("https://example.com:/", "port \"\" is not a number"),
        (
            "https://example.com/a b",
            "' ' may not appear unescaped in a URL",
        ),
        (
            "https://example.com/<x>",
            "'<' may not appear unescaped in a URL",
        ),
    ] {
        let error = check::well_formed_url(bad).expect_err(bad);
        assert!(error.ends_with(why), "{bad}: {error}");
    }
}
