//! Rebuilds the crate when a migration is added or changed: `refinery::embed_migrations!`
//! reads `migrations/` at compile time, and cargo does not know it does.

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
