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

use super::note::{ALG_COSIGNATURE_V1, ALG_ED25519, NoteKey};

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
    /// Reads a policy file's text.
    pub fn parse(text: &str) -> Result<Self, PolicyError> {
        let mut policy = Policy {
            log: None,
            witnesses: Vec::new(),
            groups: Vec::new(),
            quorum: None,
        };
        let mut names: BTreeMap<String, Member> = BTreeMap::new();
        let mut quorum_lines = 0;
        for (number, raw) in text.lines().enumerate() {
            let line = number + 1;
            let error = |problem: String| PolicyError { line, problem };
            let words: Vec<&str> = raw
                .split('#')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            let Some((&keyword, args)) = words.split_first() else {
                continue;
            };
            let key = |vkey: &str, algorithm: u8| {
                NoteKey::from_vkey(vkey)
                    .map_err(|e| error(e.to_string()))
                    .and_then(|key| {
                        if key.algorithm == algorithm {
                            Ok(key)
                        } else {
                            Err(error(format!(
                                "key {vkey:?} is of algorithm {:#04x}, not {algorithm:#04x}",
                                key.algorithm
                            )))
                        }
                    })
            };
            let fresh = |name: &str, names: &BTreeMap<String, Member>| {
                if name == "none" || names.contains_key(name) {
                    Err(error(format!(
                        "name {name:?} is defined twice (or is `none`)"
                    )))
                } else {
                    Ok(())
                }
            };
            match (keyword, args) {
                ("log", [vkey] | [vkey, _]) => policy.log = Some(key(vkey, ALG_ED25519)?),
                ("witness", [name, vkey, rest @ ..]) if rest.len() <= 1 => {
                    fresh(name, &names)?;
                    let key = key(vkey, ALG_COSIGNATURE_V1)?;
                    if let Some(same) = policy.witnesses.iter().find(|w| w.key.public == key.public)
                    {
                        return Err(error(format!(
                            "witness {name} has the key of witness {}: a quorum counts keys, \
                             so give each key one witness line",
                            same.name
                        )));
                    }
                    names.insert(name.to_string(), Member::Witness(policy.witnesses.len()));
                    policy.witnesses.push(Witness {
                        name: name.to_string(),
                        key,
                        url: rest.first().map(|url| url.trim_end_matches('/').to_owned()),
                    });
                }
                ("group", [name, threshold, members @ ..]) if !members.is_empty() => {
                    fresh(name, &names)?;
                    let members = members
                        .iter()
                        .map(|member| {
                            names.get(*member).cloned().ok_or_else(|| {
                                error(format!("group {name}: {member:?} is not defined above"))
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    policy.disjoint(name, &members).map_err(error)?;
                    let threshold = match *threshold {
                        "all" => members.len(),
                        "any" => 1,
                        k => k
                            .parse::<usize>()
                            .ok()
                            .filter(|k| (1..=members.len()).contains(k))
                            .ok_or_else(|| {
                                error(format!(
                                    "group {name}: threshold {k:?} is not all, any or 1 to {}",
                                    members.len()
                                ))
                            })?,
                    };
                    names.insert(name.to_string(), Member::Group(policy.groups.len()));
                    policy.groups.push(Group { threshold, members });
                }
                ("quorum", [name]) => {
                    quorum_lines += 1;
                    policy.quorum = match *name {
                        "none" => None,
                        name => Some(names.get(name).cloned().ok_or_else(|| {
                            error(format!("quorum {name:?} is not defined above"))
                        })?),
                    };
                }
                _ => return Err(error(format!("not a policy line: {raw:?}"))),
            }
        }
        if quorum_lines != 1 {
            return Err(PolicyError {
                line: 0,
                problem: format!("{quorum_lines} quorum lines: a policy has exactly one"),
            });
        }
        Ok(policy)
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
}
