//! `ledger token`: API bearer tokens and their configuration entries. The service is
//! configured with SHA-256 hashes only; the token itself goes to its holder.

use std::io::Read;

use base64::Engine;
use ra_ledger::api::{Role, token_entry};

#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Make a new random token: prints the token (for its holder) and its entry (for
    /// `tokens` or `tokens_file` of `ledger serve`).
    New {
        /// writer, operator or auditor.
        #[arg(value_parser = role)]
        role: Role,
        /// Who holds it; recorded as the actor of the events it writes.
        name: String,
    },
    /// Print the entry of an existing token, read from standard input (never from the
    /// command line, where other users of the machine could read it).
    Hash {
        /// writer, operator or auditor.
        #[arg(value_parser = role)]
        role: Role,
        /// Who holds it.
        name: String,
    },
}

fn role(text: &str) -> Result<Role, String> {
    Role::from_name(text)
        .ok_or_else(|| format!("{text:?} is not a role: expected writer, operator or auditor"))
}

pub fn run(command: TokenCommand) -> anyhow::Result<()> {
    let check_name = |name: &str| {
        anyhow::ensure!(
            !name.is_empty() && !name.contains([':', ',', '\n']) && name.trim() == name,
            "name {name:?}: must be non-empty, without ':', ',' or surrounding spaces"
        );
        Ok(())
    };
    match command {
        TokenCommand::New { role, name } => {
            check_name(&name)?;
            let mut bytes = [0u8; 32];
            rand::fill(&mut bytes);
            let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
            outln!("token: {token}");
            outln!("entry: {}", token_entry(role, &name, &token));
            eprintln!("give the token to {name}; configure the entry (it is not a secret)");
        }
        TokenCommand::Hash { role, name } => {
            check_name(&name)?;
            let mut token = String::new();
            std::io::stdin().read_to_string(&mut token)?;
            let token = token.trim_end_matches(['\n', '\r']);
            anyhow::ensure!(token.len() >= 16, "a token needs at least 16 characters");
            outln!("{}", token_entry(role, &name, token));
        }
    }
    Ok(())
}
