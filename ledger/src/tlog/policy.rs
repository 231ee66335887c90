//! Which witnesses count and how many must cosign: a policy file in the C2SP
//! `tlog-policy` form (the Sigsum policy's lines, with keys as signed-note vkeys). Pure.
//!
//! ```text
//! # comments and blank lines are ignored
//! log <vkey of the log>
//! witness <name> <vkey> [<url>]        url: where add-checkpoint is posted (its prefix)
//! group <name> <k|all|any> <member>... members: witnesses or groups defined above
//! quorum <name|none>                   the witness or group whose rule must hold
//! ```
//!
//! The rules, in the order the reader applies them: every name is defined once, before
//! it is used; a group's `k` is between 1 and its members' count; exactly one `quorum`
//! line. A checkpoint meets the policy when the quorum's witness cosigned it, or enough
//! of its group's members meet theirs.
//!
//! A quorum counts keys, not names (issue 56, item 4): two witness lines with one key, or
//! a group whose members share a witness (`group g all a a`, or two groups both holding
//! `a`), would let one witness count twice, so the policy is refused naming them. With
//! every key once and every group's members disjoint, a group met by `k` members was
//! cosigned by at least `k` distinct keys.

use std::collections::{BTreeMap, BTreeSet};

use super::note::{ALG_COSIGNATURE_V1, ALG_ED25519, NoteKey, SignedNote};

/// A witness of the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Witness {
    /// Its name in the policy (what groups list).
    pub name: String,
    /// Its cosigning key; the key's own name is the one its cosignature lines carry.
    pub key: NoteKey,
    /// The URL prefix of its `add-checkpoint`, if the policy gives one.
    pub url: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Member {
    Witness(usize),
    Group(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Group {
    threshold: usize,
    members: Vec<Member>,
}

/// A parsed policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The log's key, if a `log` line gives it.
    pub log: Option<NoteKey>,
    /// The witnesses, in the file's order.
    pub witnesses: Vec<Witness>,
    groups: Vec<Group>,
    quorum: Option<Member>,
}

/// A policy file that does not read: the line and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy line {line}: {problem}")]
pub struct PolicyError {
    /// The line's number, from 1 (0: the file as a whole).
    pub line: usize,
    /// What is wrong, naming the value.
    pub problem: String,
}

impl Policy {
    /// Reads a policy file's text: each line by [`Reader::line`], then the one quorum line
    /// checked.
    pub fn parse(text: &str) -> Result<Self, PolicyError> {
        let mut reader = Reader::default();
        for (number, raw) in text.lines().enumerate() {
            let words: Vec<&str> = raw
                .split('#')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            let Some((&keyword, args)) = words.split_first() else {
                continue;
            };
            reader
                .line(keyword, args, raw)
                .map_err(|problem| PolicyError {
                    line: number + 1,
                    problem,
                })?;
        }
        if reader.quorum_lines != 1 {
            return Err(PolicyError {
                line: 0,
                problem: format!(
                    "{} quorum lines: a policy has exactly one",
                    reader.quorum_lines
                ),
            });
        }
        Ok(reader.policy)
    }

    /// The witnesses under `member` (itself, or its group's, recursively).
    fn witnesses_under(&self, member: &Member) -> BTreeSet<usize> {
        match member {
            Member::Witness(i) => BTreeSet::from([*i]),
            Member::Group(i) => self.groups[*i]
                .members
                .iter()
                .flat_map(|member| self.witnesses_under(member))
                .collect(),
        }
    }

    /// That no witness is under two of a group's `members`: else one cosignature would
    /// count for two.
    fn disjoint(&self, group: &str, members: &[Member]) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        for member in members {
            for witness in self.witnesses_under(member) {
                if !seen.insert(witness) {
                    return Err(format!(
                        "group {group}: witness {} is under two of its members, and would \
                         count twice toward its threshold; list each witness once",
                        self.witnesses[witness].name
                    ));
                }
            }
        }
        Ok(())
    }

    /// The witnesses whose cosignature on `note` verifies with their key from this policy:
    /// the one count of cosigners that the rounds, the offline check and the bench share.
    /// A line by a key the policy does not hold, or one that does not verify, counts for
    /// no one.
    pub fn cosigners(&self, note: &SignedNote) -> Cosigners {
        let mut cosigners = Cosigners::default();
        for witness in &self.witnesses {
            if let Ok(time) = witness.key.verify_cosignature(note) {
                cosigners.names.push(witness.name.clone());
                cosigners.newest = cosigners.newest.max(Some(time));
            }
        }
        cosigners
    }

    /// Whether the witnesses named (by their policy names) meet the quorum.
    pub fn satisfied(&self, cosigned: &BTreeSet<String>) -> bool {
        match &self.quorum {
            None => true,
            Some(member) => self.holds(member, cosigned),
        }
    }

    fn holds(&self, member: &Member, cosigned: &BTreeSet<String>) -> bool {
        match member {
            Member::Witness(i) => cosigned.contains(&self.witnesses[*i].name),
            Member::Group(i) => {
                let group = &self.groups[*i];
                group
                    .members
                    .iter()
                    .filter(|member| self.holds(member, cosigned))
                    .count()
                    >= group.threshold
            }
        }
    }

    /// The quorum in words, for status pages and errors.
    pub fn describe(&self) -> String {
        match &self.quorum {
            None => "no witness needed (quorum none)".into(),
            Some(member) => self.describe_member(member),
        }
    }

    fn describe_member(&self, member: &Member) -> String {
        match member {
            Member::Witness(i) => self.witnesses[*i].name.clone(),
            Member::Group(i) => {
                let group = &self.groups[*i];
                let members: Vec<String> = group
                    .members
                    .iter()
                    .map(|m| self.describe_member(m))
                    .collect();
                format!("{} of ({})", group.threshold, members.join(", "))
            }
        }
    }
}

/// The witnesses whose cosignature verified ([`Policy::cosigners`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cosigners {
    /// Their names, in the policy's order.
    pub names: Vec<String>,
    /// The newest of their cosignatures' times (Unix seconds), if any verified.
    pub newest: Option<u64>,
}

impl Cosigners {
    /// Their names as a set, what [`Policy::satisfied`] takes.
    pub fn set(&self) -> BTreeSet<String> {
        self.names.iter().cloned().collect()
    }
}

/// A policy file being read: the policy so far, the names defined above the current line,
/// and the quorum lines seen. Each line's problem is a sentence naming the value; the
/// caller adds the line's number.
struct Reader {
    policy: Policy,
    names: BTreeMap<String, Member>,
    quorum_lines: usize,
}

impl Default for Reader {
    fn default() -> Self {
        Self {
            policy: Policy {
                log: None,
                witnesses: Vec::new(),
                groups: Vec::new(),
                quorum: None,
            },
            names: BTreeMap::new(),
            quorum_lines: 0,
        }
    }
}

impl Reader {
    /// One line's `keyword` and its `args` (`raw`: the line as written, for the error).
    fn line(&mut self, keyword: &str, args: &[&str], raw: &str) -> Result<(), String> {
        match (keyword, args) {
            ("log", [vkey] | [vkey, _]) => {
                self.policy.log = Some(key(vkey, ALG_ED25519)?);
                Ok(())
            }
            ("witness", [name, vkey, rest @ ..]) if rest.len() <= 1 => {
                self.witness(name, vkey, rest.first().copied())
            }
            ("group", [name, threshold, members @ ..]) if !members.is_empty() => {
                self.group(name, threshold, members)
            }
            ("quorum", [name]) => self.quorum(name),
            _ => Err(format!("not a policy line: {raw:?}")),
        }
    }

    /// That `name` is not defined yet (nor `none`, the quorum of no witness).
    fn fresh(&self, name: &str) -> Result<(), String> {
        if name == "none" || self.names.contains_key(name) {
            Err(format!("name {name:?} is defined twice (or is `none`)"))
        } else {
            Ok(())
        }
    }

    /// `witness <name> <vkey> [<url>]`: each key once, so that a quorum counts keys.
    fn witness(&mut self, name: &str, vkey: &str, url: Option<&str>) -> Result<(), String> {
        self.fresh(name)?;
        let key = key(vkey, ALG_COSIGNATURE_V1)?;
        let witnesses = &mut self.policy.witnesses;
        if let Some(same) = witnesses.iter().find(|w| w.key.public == key.public) {
            return Err(format!(
                "witness {name} has the key of witness {}: a quorum counts keys, \
                 so give each key one witness line",
                same.name
            ));
        }
        self.names
            .insert(name.to_string(), Member::Witness(witnesses.len()));
        witnesses.push(Witness {
            name: name.to_string(),
            key,
            url: url.map(|url| url.trim_end_matches('/').to_owned()),
        });
        Ok(())
    }

    /// `group <name> <k|all|any> <member>...`: members defined above, disjoint, and `k`
    /// between 1 and their count.
    fn group(&mut self, name: &str, threshold: &str, members: &[&str]) -> Result<(), String> {
        self.fresh(name)?;
        let members = members
            .iter()
            .map(|member| {
                self.names
                    .get(*member)
                    .cloned()
                    .ok_or_else(|| format!("group {name}: {member:?} is not defined above"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.policy.disjoint(name, &members)?;
        let threshold = match threshold {
            "all" => members.len(),
            "any" => 1,
            k => k
                .parse::<usize>()
                .ok()
                .filter(|k| (1..=members.len()).contains(k))
                .ok_or_else(|| {
                    format!(
                        "group {name}: threshold {k:?} is not all, any or 1 to {}",
                        members.len()
                    )
                })?,
        };
        let groups = &mut self.policy.groups;
        self.names
            .insert(name.to_string(), Member::Group(groups.len()));
        groups.push(Group { threshold, members });
        Ok(())
    }

    /// `quorum <name|none>`: counted, so that [`Policy::parse`] can require exactly one.
    fn quorum(&mut self, name: &str) -> Result<(), String> {
        self.quorum_lines += 1;
        self.policy.quorum = match name {
            "none" => None,
            name => Some(
                self.names
                    .get(name)
                    .cloned()
                    .ok_or_else(|| format!("quorum {name:?} is not defined above"))?,
            ),
        };
        Ok(())
    }
}

/// A key of a policy line, of `algorithm` (the log's Ed25519 or a witness's cosignature).
fn key(vkey: &str, algorithm: u8) -> Result<NoteKey, String> {
    let key = NoteKey::from_vkey(vkey).map_err(|e| e.to_string())?;
    if key.algorithm == algorithm {
        Ok(key)
    } else {
        Err(format!(
            "key {vkey:?} is of algorithm {:#04x}, not {algorithm:#04x}",
            key.algorithm
        ))
    }
}

/// What the verdict watches of the witnesses, with a witness policy (here, beside the
/// policy, so that the API's state holds it without using the verdict, which uses the API's
/// tokens).
#[derive(Debug, Clone)]
pub struct Witnessing {
    /// The policy: its witnesses and quorum.
    pub policy: std::sync::Arc<Policy>,
    /// How long the quorum may be short before the verdict is degraded: a few digest
    /// intervals.
    pub short_after: std::time::Duration,
}

impl Witnessing {
    /// The quorum may be short for three digest intervals, or three rounds when they are
    /// slower: a checkpoint waits for a round, and a witness down for a round is no news.
    pub fn new(
        policy: std::sync::Arc<Policy>,
        digest_interval: std::time::Duration,
        round_interval: std::time::Duration,
    ) -> Self {
        Self {
            policy,
            short_after: 3 * digest_interval.max(round_interval),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vkey(name: &str, seed: u8) -> String {
        NoteKey {
            name: name.into(),
            algorithm: ALG_COSIGNATURE_V1,
            public: ed25519_dalek::SigningKey::from_bytes(&[seed; 32]).verifying_key(),
        }
        .vkey()
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn two_of_two_and_two_of_three_groups_count_as_written() {
        let text = format!(
            "# the stack's witnesses\nwitness a {} http://127.0.0.1:1/\nwitness b {}\nwitness c {}\n\
             group ab all a b\ngroup two 2 a b c\ngroup either any ab c\nquorum two\n",
            vkey("w.example/a", 1),
            vkey("w.example/b", 2),
            vkey("w.example/c", 3)
        );
        let policy = Policy::parse(&text).unwrap();
        assert_eq!(
            policy.witnesses[0].url.as_deref(),
            Some("http://127.0.0.1:1")
        );
        assert!(policy.satisfied(&set(&["a", "c"])));
        assert!(!policy.satisfied(&set(&["b"])));
        assert!(!policy.satisfied(&set(&["x", "y"])));
        assert_eq!(policy.describe(), "2 of (a, b, c)");
        let either = Policy::parse(&text.replace("quorum two", "quorum either")).unwrap();
        assert!(either.satisfied(&set(&["c"])) && !either.satisfied(&set(&["a"])));
        assert!(either.satisfied(&set(&["a", "b"])));
    }

    #[test]
    fn a_bad_line_is_named_with_its_value() {
        let a = vkey("w.example/a", 1);
        let error = |text: &str| Policy::parse(text).unwrap_err().to_string();
        assert_eq!(
            error(&format!("witness a {a}\ngroup g 3 a\nquorum g\n")),
            "policy line 2: group g: threshold \"3\" is not all, any or 1 to 1"
        );
        assert_eq!(
            error(&format!("witness a {a}\nquorum b\n")),
            "policy line 2: quorum \"b\" is not defined above"
        );
        assert_eq!(
            error(&format!("witness a {a}\nwitness a {a}\nquorum a\n")),
            "policy line 2: name \"a\" is defined twice (or is `none`)"
        );
        assert_eq!(
            error(&format!("witness a {a}\n")),
            "policy line 0: 0 quorum lines: a policy has exactly one"
        );
        assert!(
            error("witness a nokey\nquorum a\n").starts_with("policy line 1: not a verifier key")
        );
        assert!(error("frobnicate\nquorum none\n").contains("not a policy line"));
    }

    /// One witness must not meet a quorum of two (issue 56, item 4).
    #[test]
    fn one_key_counts_once() {
        let a = vkey("w.example/a", 1);
        let b = vkey("w.example/b", 2);
        let error = |text: &str| Policy::parse(text).unwrap_err().to_string();
        assert_eq!(
            error(&format!("witness a {a}\ngroup g all a a\nquorum g\n")),
            "policy line 2: group g: witness a is under two of its members, and would count \
             twice toward its threshold; list each witness once"
        );
        // The same key under another name (its own key name differs too).
        let a_again = vkey("w.example/a2", 1);
        assert_eq!(
            error(&format!(
                "witness a {a}\nwitness b {a_again}\ngroup g 2 a b\nquorum g\n"
            )),
            "policy line 2: witness b has the key of witness a: a quorum counts keys, so give \
             each key one witness line"
        );
        assert!(
            error(&format!(
                "witness a {a}\nwitness b {b}\ngroup x any a\ngroup y any a b\ngroup g all x y\nquorum g\n"
            ))
            .starts_with("policy line 5: group g: witness a is under two")
        );
        let two = Policy::parse(&format!(
            "witness a {a}\nwitness b {b}\ngroup g 2 a b\nquorum g\n"
        ))
        .unwrap();
        assert!(!two.satisfied(&set(&["a"])) && two.satisfied(&set(&["a", "b"])));
    }

    /// A witness's cosignature line over `note`'s body by the key of `seed`, at `time`.
    fn cosign(note: &mut SignedNote, name: &str, seed: u8, time: u64) {
        use crate::tlog::note::{SignatureLine, cosigned_message};
        use ed25519_dalek::Signer as _;
        let key = ed25519_dalek::SigningKey::from_bytes(&[seed; 32]);
        let vkey = NoteKey::from_vkey(&vkey(name, seed)).unwrap();
        let mut signature = time.to_be_bytes().to_vec();
        signature.extend_from_slice(&key.sign(&cosigned_message(time, &note.body)).to_bytes());
        note.add([SignatureLine {
            name: vkey.name.clone(),
            key_id: vkey.key_id(),
            signature,
        }]);
    }

    /// What counts is what verifies with the policy's key: not a line by a key it does not
    /// hold, nor a line over another checkpoint; in the policy's order, with the newest time.
    #[test]
    fn cosigners_are_the_witnesses_whose_line_verifies() {
        use crate::tlog::note::{Checkpoint, sign_checkpoint};
        use ed25519_dalek::Signer as _;
        let text = format!(
            "witness b {}\nwitness a {}\nwitness c {}\ngroup g 2 a b c\nquorum g\n",
            vkey("w.example/b", 2),
            vkey("w.example/a", 1),
            vkey("w.example/c", 3)
        );
        let policy = Policy::parse(&text).unwrap();
        let log = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        let checkpoint = |size| Checkpoint {
            origin: "o.example/log".into(),
            size,
            root: [4; 32],
        };
        let mut note = sign_checkpoint(
            log.verifying_key(),
            |m| log.sign(m).to_bytes(),
            &checkpoint(5),
        );
        assert_eq!(policy.cosigners(&note), Cosigners::default());
        cosign(&mut note, "w.example/a", 1, 100);
        // Another key under c's name: not c's cosignature.
        cosign(&mut note, "w.example/c", 9, 300);
        cosign(&mut note, "w.example/b", 2, 200);
        let cosigners = policy.cosigners(&note);
        assert_eq!(cosigners.names, ["b", "a"]);
        assert_eq!(cosigners.newest, Some(200));
        assert!(policy.satisfied(&cosigners.set()));
        // The same lines over another checkpoint count for no one.
        let mut other = note.clone();
        other.body = checkpoint(6).body();
        assert_eq!(policy.cosigners(&other), Cosigners::default());
    }
}
