//! The source tree's shape: no two files of a crate import each other, directly or round a
//! ring, in the ledger, the CDC crate, the test tooling, the benchmarks, the test harness
//! and the protocol model (`tests/import_circles.py`); no two of their top-level modules
//! use each other; no environment variable is named or read outside the settings'
//! declaration; and the product binary carries no benchmark, demo or test tooling (no
//! `testing` feature, no subcommand).

use std::path::Path;
use std::process::Command;

/// Each crate's source folder and its name in paths, for the import checks.
const CRATES: [(&str, &str); 6] = [
    ("ledger/src", "ra_ledger"),
    ("cdc/src", "ra_ledger_cdc"),
    ("testing/src", "ra_ledger_testing"),
    ("bench/src", "ra_ledger_bench"),
    ("tests/src", "ra_ledger_tests"),
    ("model/src", "ra_ledger_model"),
];

fn circles(src: &Path, crate_name: &str) -> anyhow::Result<(bool, String)> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("import_circles.py");
    let output = Command::new("python3")
        .arg(script)
        .arg(src)
        .arg(crate_name)
        .output()?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    Ok((output.status.success(), text))
}

#[test]
fn no_crate_has_an_import_circle() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (src, name) in CRATES {
        let (clean, report) = circles(&root.join(src), name)?;
        assert!(clean, "{src}:\n{report}");
        assert!(report.contains("0 circles"), "{src}: {report}");
    }
    Ok(())
}

/// Nor do two top-level modules of a crate use each other (an arrow back up): each
/// module's place in the map of its crate's `lib.rs` is a layer.
#[test]
fn no_crate_has_an_arrow_back_up() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (src, name) in CRATES {
        let (_, report) = circles(&root.join(src), name)?;
        assert!(report.contains("0 arrows back up"), "{src}: {report}");
    }
    Ok(())
}

/// The checker finds an arrow back up between two top-level modules whose files form no
/// circle.
#[test]
fn the_checker_finds_an_arrow_back_up() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("arrows-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("a"))?;
    std::fs::create_dir_all(dir.join("b"))?;
    std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\n")?;
    std::fs::write(dir.join("a/mod.rs"), "mod one;\nmod two;\n")?;
    std::fs::write(dir.join("b/mod.rs"), "mod three;\n")?;
    std::fs::write(dir.join("a/one.rs"), "use crate::b::three::Thing;\n")?;
    std::fs::write(dir.join("b/three.rs"), "use crate::a::two::Other;\n")?;
    std::fs::write(dir.join("a/two.rs"), "pub struct Other;\n")?;
    let (clean, report) = circles(&dir, "demo")?;
    std::fs::remove_dir_all(&dir)?;
    assert!(!clean, "{report}");
    assert!(report.contains("0 circles"), "{report}");
    assert!(report.contains("1 arrows back up"), "{report}");
    Ok(())
}

/// The checker finds a circle when there is one, through a grouped `use` and round a ring
/// of three, and not a module using its parent.
#[test]
fn the_checker_finds_a_ring_of_files() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("circles-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("b"))?;
    std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\nmod c;\n")?;
    std::fs::write(dir.join("a.rs"), "use crate::b::{self, Thing};\n")?;
    std::fs::write(dir.join("b/mod.rs"), "mod inner;\nuse crate::c::Other;\n")?;
    std::fs::write(dir.join("b/inner.rs"), "use super::Thing;\n")?;
    std::fs::write(
        dir.join("c.rs"),
        "// use crate::b; in a comment is no use\n",
    )?;
    let (clean, report) = circles(&dir, "demo")?;
    assert!(clean, "no circle yet: {report}");
    std::fs::write(dir.join("c.rs"), "fn f() { crate::a::g() }\n")?;
    let (clean, report) = circles(&dir, "demo")?;
    std::fs::remove_dir_all(&dir)?;
    assert!(!clean, "{report}");
    assert!(report.contains("1 circles"), "{report}");
    Ok(())
}

/// A circle through a grouped `use super::{…}` (issue 58, item 1: `relay/setup` and
/// `relay/recover` used each other so, unseen): found.
#[test]
fn the_checker_finds_a_circle_through_a_grouped_super_use() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("super-circles-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("relay"))?;
    std::fs::write(dir.join("lib.rs"), "mod relay;\n")?;
    std::fs::write(dir.join("relay/mod.rs"), "mod setup;\nmod recover;\n")?;
    std::fs::write(
        dir.join("relay/setup.rs"),
        "use super::recover::from_snapshot;\n",
    )?;
    std::fs::write(dir.join("relay/recover.rs"), "pub fn from_snapshot() {}\n")?;
    let (clean, report) = circles(&dir, "demo")?;
    assert!(clean, "no circle yet: {report}");
    std::fs::write(
        dir.join("relay/recover.rs"),
        "use super::{RelayError, setup::{find_primary}};\npub fn from_snapshot() {}\n",
    )?;
    let (clean, report) = circles(&dir, "demo")?;
    std::fs::remove_dir_all(&dir)?;
    assert!(!clean, "{report}");
    assert!(
        report.contains("relay/recover <-> relay/setup")
            || report.contains("relay/setup <-> relay/recover"),
        "{report}"
    );
    Ok(())
}

/// The settings' declaration (`cdc/src/infra/settings/env.rs`): the one file of the crates'
/// code that names an environment variable of the project, and the one that reads the
/// environment.
const DECLARATION: &str = "cdc/src/infra/settings/env.rs";

/// Reads of the environment that are no setting of the project, each with why.
const NOT_SETTINGS: [(&str, &str); 1] = [
    // The operator's login name, recorded as who asked for a replay.
    ("ledger/src/cli/replay.rs", "std::env::var(\"USER\")"),
];

/// Where `text`, the code of `file`, names or reads an environment variable outside the
/// declaration: a string literal that is a variable's whole name (`"LEDGER_…"`,
/// `"CONSUMER_…"`), or a call of `std::env::var`. Comments and unit tests are left out.
fn reads_outside(file: &str, text: &str) -> Vec<String> {
    let name = regex::Regex::new(r#""(LEDGER|CONSUMER)_[A-Z0-9_]+""#).expect("a regex");
    let read = regex::Regex::new(r"std::env::var(_os)?\([^)]*\)").expect("a regex");
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    let mut found = Vec::new();
    for (number, line) in code.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        for hit in name.find_iter(line).chain(read.find_iter(line)) {
            let allowed = NOT_SETTINGS
                .iter()
                .any(|(path, call)| file.ends_with(path) && hit.as_str() == *call);
            if !allowed {
                found.push(format!("{file}:{}: {}", number + 1, hit.as_str()));
            }
        }
    }
    found
}

/// Every `.rs` file below `dir`, into `out`.
pub(crate) fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// Every setting is declared once: no code of the ledger, the CDC crate, the test tooling or
/// the benchmarks names or reads an environment variable but the declaration, whose names the configs' tables and the
/// tools' flags take; and every name declared there is used.
/// The operators' settings reference names every variable of the one declaration: the
/// reference promises to be complete, and a variable added to `env.rs` without a line there
/// (`LEDGER_RELAY_DELIVERY`, the example consumer's two, found so) fails here.
#[test]
fn every_declared_environment_variable_is_in_the_operators_reference() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let declaration = std::fs::read_to_string(root.join(DECLARATION))?;
    let reference = std::fs::read_to_string(root.join("docs/operators.md"))?;
    let constant = regex::Regex::new(r#"pub const \w+: &str = "(\w+)";"#)?;
    let names: Vec<&str> = constant
        .captures_iter(&declaration)
        .filter_map(|declared| declared.get(1).map(|m| m.as_str()))
        .collect();
    assert!(names.len() > 40, "{names:?}");
    let missing: Vec<&str> = names
        .into_iter()
        .filter(|name| {
            !regex::Regex::new(&format!(r"\b{name}\b"))
                .expect("a variable's name is a regex")
                .is_match(&reference)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "declared in {DECLARATION}, not in docs/operators.md: {missing:?}"
    );
    Ok(())
}

/// Each config's part of the operators' reference names every key of its file, as its
/// declaration holds them (`KEYS`, from `settings!`): a field added to a config and not to
/// the reference fails here, naming it. A key counts as named in backticks (`` `key` ``,
/// `` `key = …` ``, `` `[key]` ``) or as a line of a TOML example (`key = …`, `[key]`).
#[test]
fn every_config_key_is_in_its_part_of_the_operators_reference() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let reference = std::fs::read_to_string(root.join("docs/operators.md"))?;
    let configs: [(&str, &[&str]); 3] = [
        ("### `ledger serve`", ra_ledger::config::ServeConfig::KEYS),
        (
            "### `ledger relay`",
            ra_ledger_cdc::config::RelayConfig::KEYS,
        ),
        ("### `ledger worker`", ra_ledger::config::WorkerConfig::KEYS),
    ];
    // A section ends at the next heading (a code block's `# comment` is not one).
    let next = regex::Regex::new(r"\n#{1,4} ")?;
    let mut missing = Vec::new();
    for (heading, keys) in configs {
        let start = reference
            .find(&format!("{heading}\n"))
            .unwrap_or_else(|| panic!("docs/operators.md has no heading {heading}"));
        let section = &reference[start + heading.len()..];
        let section = &section[..next.find(section).map_or(section.len(), |m| m.start())];
        assert!(keys.len() > 10, "{heading}: {keys:?}");
        for key in keys {
            let named = regex::Regex::new(&format!(r"(?m)`\[?{key}(\]|`| =)|^\[?{key}(\]| =)"))?;
            if !named.is_match(section) {
                missing.push(format!("{heading}: `{key}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "declared, not in docs/operators.md:\n{}",
        missing.join("\n")
    );
    Ok(())
}

#[test]
fn every_environment_variable_is_read_through_its_one_declaration() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for src in ["ledger/src", "cdc/src", "testing/src", "bench/src"] {
        rust_files(&root.join(src), &mut files)?;
    }
    let declaration = std::fs::read_to_string(root.join(DECLARATION))?;
    let mut outside = Vec::new();
    let mut code = String::new();
    for path in &files {
        let file = path.strip_prefix(&root)?.display().to_string();
        if file == DECLARATION {
            continue;
        }
        let text = std::fs::read_to_string(path)?;
        outside.extend(reads_outside(&file, &text));
        code.push_str(&text);
    }
    assert!(
        outside.is_empty(),
        "read outside {DECLARATION}:\n{}",
        outside.join("\n")
    );
    let constant = regex::Regex::new(r#"pub const (\w+): &str = "(\w+)";"#)?;
    let mut names: Vec<&str> = Vec::new();
    for declared in constant.captures_iter(&declaration) {
        let (constant, name) = (&declared[1], declared.get(2).map_or("", |m| m.as_str()));
        let used = regex::Regex::new(&format!(r"\benv::{constant}\b"))?;
        assert!(
            used.is_match(&code),
            "{name} ({constant}) is declared but nothing reads it"
        );
        names.push(name);
    }
    assert!(names.len() > 40, "{names:?}");
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "a variable declared twice");
    Ok(())
}

/// The check finds a variable named in code, and a read of the environment, and passes
/// over comments and unit tests.
#[test]
fn the_declaration_check_finds_a_second_reading() {
    let text = "/// Reads `\"LEDGER_LISTEN\"`.\n\
                let a = \"LEDGER_LISTEN\";\n\
                let b = std::env::var(\"HOME\");\n\
                #[cfg(test)]\n\
                let c = \"LEDGER_POOL_SIZE\";\n";
    let found = reads_outside("ledger/src/x.rs", text);
    assert_eq!(
        found,
        [
            "ledger/src/x.rs:2: \"LEDGER_LISTEN\"",
            "ledger/src/x.rs:3: std::env::var(\"HOME\")"
        ]
    );
    let allowed = reads_outside(
        "ledger/src/cli/replay.rs",
        "let user = std::env::var(\"USER\");\n",
    );
    assert!(allowed.is_empty(), "{allowed:?}");
}

/// The lines of `text`, a crate's code, that compile something only with a `testing`
/// feature: `cfg(feature = "testing")` alone or inside `all(…)`, `any(…)`, `cfg_attr`.
/// Comments are left out.
fn testing_cfgs(file: &str, text: &str) -> Vec<String> {
    let cfg = regex::Regex::new(r#"cfg(_attr)?\(.*feature\s*=\s*"testing""#).expect("a regex");
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//") && cfg.is_match(line))
        .map(|(number, line)| format!("{file}:{}: {}", number + 1, line.trim()))
        .collect()
}

/// The subcommands a clap `--help` lists: the first word of each line of its `Commands:`
/// section.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| line.trim_end() != "Commands:")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// The product carries no test tooling: `ledger/Cargo.toml` declares no `testing` feature
/// and depends on neither the tooling nor the benchmarks, no file of the ledger's or the CDC
/// crate's code compiles anything under a `testing` feature, and no manifest of the
/// workspace turns one on. A plain `cargo build --release` at the root so builds a `ledger`
/// without them (issue 49: the tests' `features = ["testing"]` put them into it).
#[test]
fn the_product_has_no_testing_feature() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest = std::fs::read_to_string(root.join("ledger/Cargo.toml"))?;
    let feature = regex::Regex::new(r"(?m)^\s*testing\s*=")?;
    assert!(
        !feature.is_match(&manifest),
        "ledger/Cargo.toml declares a testing feature"
    );
    for tooling in ["ra-ledger-testing", "ra-ledger-bench"] {
        assert!(
            !manifest.contains(tooling),
            "ledger/Cargo.toml depends on {tooling}"
        );
    }
    let turned_on = regex::Regex::new(r#"features\s*=\s*\[[^\]]*"testing""#)?;
    for crate_dir in ["proto", "ledger", "cdc", "testing", "bench", "tests"] {
        let path = root.join(crate_dir).join("Cargo.toml");
        let text = std::fs::read_to_string(&path)?;
        assert!(
            !turned_on.is_match(&text) && !text.contains("ra-ledger/testing"),
            "{crate_dir}/Cargo.toml turns on a testing feature"
        );
    }
    let mut files = Vec::new();
    for src in ["ledger/src", "cdc/src"] {
        rust_files(&root.join(src), &mut files)?;
    }
    assert!(files.len() > 100, "{} files", files.len());
    let mut found = Vec::new();
    for path in &files {
        let file = path.strip_prefix(&root)?.display().to_string();
        found.extend(testing_cfgs(&file, &std::fs::read_to_string(path)?));
    }
    assert!(found.is_empty(), "testing cfgs:\n{}", found.join("\n"));
    Ok(())
}

/// The check finds a `testing` cfg alone, inside `all(…)` and as a `cfg_attr`, and passes
/// over comments and other features.
#[test]
fn the_testing_cfg_check_finds_each_form() {
    let text = "#[cfg(feature = \"testing\")]\n\
                mod a;\n\
                #[cfg(all(test, feature = \"testing\"))]\n\
                #[cfg_attr(feature = \"testing\", derive(Debug))]\n\
                // #[cfg(feature = \"testing\")] in a comment\n\
                #[cfg(feature = \"tls\")]\n";
    let found = testing_cfgs("ledger/src/x.rs", text);
    assert_eq!(
        found,
        [
            "ledger/src/x.rs:1: #[cfg(feature = \"testing\")]",
            "ledger/src/x.rs:3: #[cfg(all(test, feature = \"testing\"))]",
            "ledger/src/x.rs:4: #[cfg_attr(feature = \"testing\", derive(Debug))]",
        ]
    );
}

/// The parse of `--help` reads the subcommands and nothing below them.
#[test]
fn subcommands_are_read_from_a_help() {
    let help = "About\n\nUsage: ledger [OPTIONS] <COMMAND>\n\nCommands:\n  \
                migrate  Apply pending\n  serve    Run the ledger\n  help     Print this\n\n\
                Options:\n      --database-url <URL>\n";
    assert_eq!(subcommands(help), ["migrate", "serve", "help"]);
}

/// `ledger --help` (the product binary `deploy/test` built) lists the product's commands
/// and neither `bench` nor `demo`; `ledger-bench --help` lists the demo and every benchmark
/// `docs/benchmarks.md` reports.
#[tokio::test]
async fn the_benchmarks_and_the_demo_are_ledger_bench_not_ledger() -> anyhow::Result<()> {
    let ledger = subcommands(&ra_ledger_tests::cli::help(&ra_ledger_tests::cli::binary()?).await?);
    for product in ["migrate", "serve", "relay", "worker", "verify", "runs"] {
        assert!(
            ledger.iter().any(|command| command == product),
            "{ledger:?}"
        );
    }
    for tooling in ["bench", "demo"] {
        assert!(
            !ledger.iter().any(|command| command == tooling),
            "ledger lists {tooling}: {ledger:?}"
        );
    }
    let bench =
        subcommands(&ra_ledger_tests::cli::help(&ra_ledger_tests::cli::bench_binary()?).await?);
    for expected in [
        "demo", "write", "import", "as-of", "digest", "witness", "reassign", "relay", "latency",
        "replay", "outbox", "rebuild", "kills", "peers", "watcher", "soak",
    ] {
        assert!(
            bench.iter().any(|command| command == expected),
            "ledger-bench lacks {expected}: {bench:?}"
        );
    }
    Ok(())
}

/// The tests a row of the catalogue of drifts names (its last column): each backquoted
/// path's last segment, the test function's name; a `…` shorthand names a sibling of the
/// test before it and is left out.
fn catalogue_tests(row: &str) -> Vec<String> {
    let Some(column) = row.trim_end_matches('|').rsplit('|').next() else {
        return Vec::new();
    };
    column
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|path| path.contains("::") && !path.contains('…'))
        .filter_map(|path| path.rsplit("::").next().map(str::to_owned))
        .collect()
}

/// docs/operators.md's catalogue of drifts (issue 55, item 8) lists at least 30, each with
/// a test, and every test it names exists as a function of the workspace's tests: a row
/// cannot promise a test nobody wrote, or keep naming one that was renamed.
#[test]
fn every_drift_of_the_catalogue_names_a_test_that_exists() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let docs = std::fs::read_to_string(root.join("docs/operators.md"))?;
    let start = docs
        .find("### The catalogue of drifts")
        .ok_or_else(|| anyhow::anyhow!("docs/operators.md has no catalogue of drifts"))?;
    let rows: Vec<&str> = docs[start..]
        .lines()
        .skip_while(|line| !line.starts_with("| # |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .collect();
    assert!(rows.len() >= 30, "{} drifts in the catalogue", rows.len());
    let mut sources = String::new();
    let mut files = Vec::new();
    for dir in ["tests/tests", "cdc/src", "ledger/src"] {
        rust_files(&root.join(dir), &mut files)?;
    }
    for file in files {
        sources.push_str(&std::fs::read_to_string(file)?);
    }
    for row in rows {
        let tests = catalogue_tests(row);
        assert!(!tests.is_empty(), "a drift without a test: {row}");
        for test in tests {
            assert!(
                sources.contains(&format!("fn {test}(")),
                "the catalogue names a test that does not exist: {test}"
            );
        }
    }
    Ok(())
}

#[test]
fn the_catalogue_check_reads_the_last_column() {
    assert_eq!(
        catalogue_tests(
            "| 1 | the `a::b` drift | refuses | `relay::x`, `…_y`, unit test `m::tests::z` |"
        ),
        ["x", "z"]
    );
    assert!(catalogue_tests("| 2 | a drift | refuses | none |").is_empty());
}
