//! The source tree's shape: no two files of a crate import each other, directly or round a
//! ring, in the ledger, the CDC crate and the test harness (`tests/import_circles.py`).

use std::path::Path;
use std::process::Command;

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
    for (src, name) in [
        ("ledger/src", "ra_ledger"),
        ("cdc/src", "ra_ledger_cdc"),
        ("tests/src", "ra_ledger_tests"),
    ] {
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
    for (src, name) in [
        ("ledger/src", "ra_ledger"),
        ("cdc/src", "ra_ledger_cdc"),
        ("tests/src", "ra_ledger_tests"),
    ] {
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
