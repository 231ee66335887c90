//! The C2SP `tlog-witness` protocol, without the I/O: the body of an `add-checkpoint`
//! request, and what each answer means. The sending is [`crate::digest::cosign`]'s.
//!
//! The request (`POST <prefix>/add-checkpoint`):
//!
//! ```text
//! old <size the witness holds>\n
//! <base64 consistency-proof hash>\n      0 to 63 lines, from that size to the new one
//! \n
//! <the checkpoint, a signed note>
//! ```
//!
//! What an answer means, in the order [`classify`] decides it (the rules of the module
//! `cdc::publish::classify`: what to do is a pure function, its reason written beside it):
//! 1. 200: the witness's cosignature lines. They count only if the witness's key from the
//!    policy verifies them ([`super::note::NoteKey::verify_cosignature`]); a line by
//!    another key is a refusal (an unknown key), never a cosignature.
//! 2. 409 with `text/x.tlog.size`: the witness holds another size. Sent again once, with a
//!    proof from that size, when the log has it; a second 409, or a size larger than the
//!    log (the log shrank, as seen by the witness), is a refusal. A size smaller than the
//!    one the witness held before (it cosigned it, or named it in a 409) is neither: the
//!    witness lost its state or was restored from a backup, and a witness that forgot what
//!    it cosigned can no longer tell a fork from this log. An alarm of its own (issue 56,
//!    item 4), never a resend from the smaller size.
//! 3. 400, 403, 404, 422 (and any other 4xx): a refusal with the witness's reason: a bad
//!    consistency proof, an unknown log or key, an old size above the new. An alarm; the
//!    same checkpoint is never sent to it again.
//! 4. 5xx, no answer, a timeout: unavailable. The checkpoint stays short of that
//!    cosignature and is sent again on the next round.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::note::{SignatureLine, SignedNote};
use super::tree::Hash;

/// At most this many proof lines in a request (the protocol's limit).
pub const MAX_PROOF_LINES: usize = 63;

/// The body of an `add-checkpoint` request.
pub fn request_body(old: u64, proof: &[Hash], checkpoint: &SignedNote) -> String {
    let mut body = format!("old {old}\n");
    for hash in proof {
        body.push_str(&BASE64.encode(hash));
        body.push('\n');
    }
    body.push('\n');
    body.push_str(&checkpoint.text());
    body
}

/// What a witness answered, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// 200: its signature lines (not yet verified).
    Cosigned(Vec<SignatureLine>),
    /// 409: the size it holds.
    HoldsSize(u64),
    /// A definite no, with its reason.
    Refused(String),
    /// No answer worth keeping: try again later.
    Unavailable(String),
}

/// Reads an HTTP answer to `add-checkpoint` (see the rules in the module's documentation).
pub fn classify(status: u16, content_type: Option<&str>, body: &str) -> Answer {
    let reason = || {
        let text = body.trim();
        let text: String = text.chars().take(300).collect();
        format!(
            "HTTP {status}: {}",
            if text.is_empty() {
                "(no reason given)"
            } else {
                &text
            }
        )
    };
    match status {
        200 => {
            let lines: Result<Vec<_>, _> = body.lines().map(SignatureLine::parse).collect();
            match lines {
                Ok(lines) if !lines.is_empty() => Answer::Cosigned(lines),
                _ => Answer::Refused(format!(
                    "HTTP 200 without cosignature lines: {:?}",
                    body.chars().take(200).collect::<String>()
                )),
            }
        }
        409 => {
            let sized = content_type.is_some_and(|t| t.trim().starts_with("text/x.tlog.size"));
            match body.trim().parse::<u64>() {
                Ok(size) if sized => Answer::HoldsSize(size),
                _ => Answer::Refused(reason()),
            }
        }
        400..=499 => Answer::Refused(reason()),
        _ => Answer::Unavailable(reason()),
    }
}

/// What to do after a 409 that says the witness holds `held`, when the log has `size`
/// leaves and this checkpoint was sent `sent` times already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterConflict {
    /// Send again with a proof from `held`.
    ResendFrom(u64),
    /// A refusal, with why.
    Refuse(String),
    /// The witness holds less than it did: it lost its state, with why.
    LostState(String),
}

/// Rule 2 of the module's documentation: the witness answered that it holds `held`; it held
/// `before` as far as the ledger knows (0 when the ledger knows nothing of it).
pub fn after_conflict(held: u64, before: u64, size: u64, sent: u32) -> AfterConflict {
    if held > size {
        AfterConflict::Refuse(format!(
            "the witness holds size {held}, larger than this checkpoint's {size}: as the witness \
             saw it, the log lost entries"
        ))
    } else if held < before {
        AfterConflict::LostState(format!(
            "the witness holds size {held}, smaller than the {before} it held before: it lost its \
             state or was restored from a backup, and no longer tells a fork from this log"
        ))
    } else if sent > 1 {
        AfterConflict::Refuse(format!(
            "the witness answered 409 again (it holds size {held}) after a request from that \
             size: the conflict does not resolve"
        ))
    } else {
        AfterConflict::ResendFrom(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tlog::note::{Checkpoint, sign_checkpoint};
    use ed25519_dalek::{Signer as _, SigningKey};

    #[test]
    fn the_request_is_old_proof_blank_note() {
        let key = SigningKey::from_bytes(&[1; 32]);
        let note = sign_checkpoint(
            key.verifying_key(),
            |m| key.sign(m).to_bytes(),
            &Checkpoint {
                origin: "o.example/log".into(),
                size: 5,
                root: [2; 32],
            },
        );
        let body = request_body(3, &[[0; 32], [255; 32]], &note);
        let expected = format!(
            "old 3\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n\
             //////////////////////////////////////////8=\n\n{}",
            note.text()
        );
        assert_eq!(body, expected);
        assert!(request_body(0, &[], &note).starts_with("old 0\n\no.example/log\n5\n"));
    }

    #[test]
    fn every_answer_is_cosigned_held_refused_or_unavailable() {
        let line = "\u{2014} w.example/a AAAAAQAAAAAAAAAA\n";
        assert!(matches!(classify(200, None, line), Answer::Cosigned(lines) if lines.len() == 1));
        assert!(matches!(classify(200, None, "hello"), Answer::Refused(_)));
        assert_eq!(
            classify(409, Some("text/x.tlog.size"), "25\n"),
            Answer::HoldsSize(25)
        );
        // A 409 without the size's content type is no size to resend from.
        assert!(matches!(
            classify(409, Some("text/plain"), "25\n"),
            Answer::Refused(_)
        ));
        assert_eq!(
            classify(422, Some("text/plain"), "bad consistency proof\n"),
            Answer::Refused("HTTP 422: bad consistency proof".into())
        );
        assert!(
            matches!(classify(403, None, "invalid signature"), Answer::Refused(r) if r.contains("invalid signature"))
        );
        assert!(matches!(classify(404, None, ""), Answer::Refused(r) if r.contains("no reason")));
        assert!(matches!(
            classify(503, None, "busy"),
            Answer::Unavailable(_)
        ));
    }

    #[test]
    fn a_conflict_resolves_once_and_never_backwards() {
        assert_eq!(after_conflict(10, 0, 25, 1), AfterConflict::ResendFrom(10));
        assert_eq!(after_conflict(10, 10, 25, 1), AfterConflict::ResendFrom(10));
        assert!(
            matches!(after_conflict(30, 0, 25, 1), AfterConflict::Refuse(r) if r.contains("lost entries"))
        );
        assert!(
            matches!(after_conflict(10, 0, 25, 2), AfterConflict::Refuse(r) if r.contains("does not resolve"))
        );
    }

    /// A witness holding less than it held before lost its state: an alarm, not a resend.
    #[test]
    fn a_witness_holding_less_than_before_lost_its_state() {
        assert_eq!(
            after_conflict(4, 10, 25, 1),
            AfterConflict::LostState(
                "the witness holds size 4, smaller than the 10 it held before: it lost its state \
                 or was restored from a backup, and no longer tells a fork from this log"
                    .into()
            )
        );
        // A witness that forgot everything (its log added again: size 0).
        assert!(matches!(
            after_conflict(0, 10, 25, 1),
            AfterConflict::LostState(_)
        ));
        // Larger than the log is still the log's fault, as the witness sees it.
        assert!(matches!(
            after_conflict(30, 40, 25, 1),
            AfterConflict::Refuse(_)
        ));
    }
}
