//! A schema as `.proto` source text, and its compilation with protox.
//!
//! Both sides of the gate are held as text in memory (file name -> source) rather than read by
//! protox from disk: the broken and extended copies in `variants` are the baseline's text with
//! small edits, and they must go through exactly the compiler the real comparison uses.

use std::collections::BTreeMap;
use std::error::Error;
use std::fs;
use std::path::Path;

use protox::Compiler;
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};
use protox::prost_reflect::DescriptorPool;

/// `.proto` files by import name (`ra/ledger/v1/events.proto`), in name order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sources {
    files: BTreeMap<String, String>,
}

impl Sources {
    /// Every `.proto` file under `root`, named by its path relative to `root` (the import
    /// name, as `import` statements and `build.rs` spell it).
    pub fn read_dir(root: &Path) -> Result<Self, Box<dyn Error>> {
        let mut files = BTreeMap::new();
        collect_proto_files(root, root, &mut files)?;
        if files.is_empty() {
            return Err(format!("no .proto files under {}", root.display()).into());
        }
        Ok(Self { files })
    }

    /// Import names of the files, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }

    /// The source of `name`; panics when there is no such file (a test's own mistake).
    pub fn text(&self, name: &str) -> &str {
        self.files
            .get(name)
            .unwrap_or_else(|| panic!("no file {name} in the schema"))
    }

    /// A copy with `name`'s source replaced.
    pub fn with_text(&self, name: &str, text: String) -> Self {
        let mut files = self.files.clone();
        files.insert(name.to_owned(), text);
        Self { files }
    }

    /// Compiles every file (and what it imports, the well-known types included) into a
    /// `FileDescriptorSet` with protox, as `build.rs` does, then indexes it for lookups by
    /// full name.
    pub fn compile(&self) -> Result<DescriptorPool, Box<dyn Error>> {
        let mut resolver = ChainFileResolver::new();
        resolver.add(InMemory(self.files.clone()));
        resolver.add(GoogleFileResolver::new());
        let descriptor_set = Compiler::with_file_resolver(resolver)
            .include_imports(true)
            .open_files(self.names())?
            .file_descriptor_set();
        Ok(DescriptorPool::from_file_descriptor_set(descriptor_set)?)
    }
}

/// Walks `dir` for `*.proto` files, keyed by their path relative to `root` with `/`.
fn collect_proto_files(
    root: &Path,
    dir: &Path,
    files: &mut BTreeMap<String, String>,
) -> Result<(), Box<dyn Error>> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_proto_files(root, &path, files)?;
        } else if path.extension().is_some_and(|ext| ext == "proto") {
            let name = path
                .strip_prefix(root)?
                .components()
                .map(|part| part.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            files.insert(name, fs::read_to_string(&path)?);
        }
    }
    Ok(())
}

/// Serves files from memory, so an edited copy compiles without touching the disk.
struct InMemory(BTreeMap<String, String>);

impl FileResolver for InMemory {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match self.0.get(name) {
            Some(source) => File::from_source(name, source),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}
