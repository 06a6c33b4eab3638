//! Checking a session's ledger chain (see [`chain`](super::chain)): the first entry that was edited, removed,
//! reordered or inserted, and with a public key the turn ends' signatures.
//!
//! What a chain proves, and what it does not:
//!
//! * Without a key it catches accidents and partial edits: an entry changed, dropped, moved or added in the middle
//!   is named. It does not stop someone who rewrites every entry from the changed one to the end (the hashes are
//!   public arithmetic), and it cannot tell that entries were cut off the end.
//! * With a key, each turn's last entry carries the key holder's signature over its hash, which covers every entry
//!   before it: a rewrite fails at the first signed entry after the change, and a chain that ends in an unsigned
//!   entry was cut short (or its last turn did not end). Cutting the chain just after a signed entry is only seen
//!   by comparing with the number of entries expected ([`verify`]'s `expected`).
//! * Entries from before the chain existed ("unchained") may only come first, and nothing protects them.

use ed25519_dalek::VerifyingKey;
use serde::Serialize;
use serde_json::{Map, Value};

use super::chain::{content_sha256, signature_holds};

/// What is wrong with a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Tamper {
    /// The entry's content does not match its hash.
    Edited,
    /// The entry is missing.
    Removed,
    /// The entry is not where its index puts it.
    Reordered,
    /// The entry is not part of the chain: added, or a copy.
    Inserted,
    /// The chain ends before it should.
    Truncated,
    /// The entry should be signed and is not.
    Unsigned,
    /// The entry's signature is not the key's.
    BadSignature,
}

impl Tamper {
    /// The word a report uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Tamper::Edited => "edited",
            Tamper::Removed => "removed",
            Tamper::Reordered => "reordered",
            Tamper::Inserted => "inserted",
            Tamper::Truncated => "truncated",
            Tamper::Unsigned => "unsigned",
            Tamper::BadSignature => "wrong signature",
        }
    }
}

/// The first bad entry of a session's chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Broken {
    /// The session.
    pub session: String,
    /// The bad entry's index in the chain.
    pub index: u64,
    /// Where it was noticed among the entries given (from 0): a caller maps it to a line.
    pub position: usize,
    /// What is wrong.
    pub tamper: Tamper,
    /// How it shows.
    pub detail: String,
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "session {:?}, entry {}: {} — {}", self.session, self.index, self.tamper.as_str(), self.detail)
    }
}

/// A session whose chain holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Intact {
    /// The session.
    pub session: String,
    /// How many entries it has.
    pub entries: usize,
    /// How many come before the chain (written before it existed: not protected).
    pub unchained: usize,
    /// How many carry a signature (checked only with a key).
    pub signed: usize,
}

/// Checks `entries`, one session's ledger entries in their order (their JSON objects), as `session`'s chain; with
/// `key`, every turn end (an entry with an `outcome`) and the chain's last entry must carry `key`'s signature;
/// with `expected`, the chain must hold that many entries.
pub fn verify(
    session: &str,
    entries: &mut [Map<String, Value>],
    key: Option<&VerifyingKey>,
    expected: Option<u64>,
) -> Result<Intact, Broken> {
    let unchained = entries.iter().take_while(|e| !e.contains_key("sha256")).count();
    let broken = |index: u64, position: usize, tamper: Tamper, detail: String| Broken {
        session: session.to_owned(),
        index,
        position,
        tamper,
        detail,
    };
    let indices: Vec<Option<u64>> = entries.iter().map(|e| e.get("index").and_then(Value::as_u64)).collect();
    let mut signed = 0;
    let mut prev: Option<String> = None;
    for position in unchained..entries.len() {
        let want = position as u64;
        let entry = &mut entries[position];
        let Some(sha256) = entry.get("sha256").and_then(Value::as_str).map(str::to_owned) else {
            return Err(broken(want, position, Tamper::Inserted, "it has no hash, after entries that have".into()));
        };
        if content_sha256(entry) != sha256 {
            return Err(broken(want, position, Tamper::Edited, "its content does not match its sha256".into()));
        }
        let owner = entry.get("session_key").and_then(Value::as_str);
        if owner != Some(session) {
            let detail = format!("it belongs to the chain of session {:?}", owner.unwrap_or(""));
            return Err(broken(want, position, Tamper::Inserted, detail));
        }
        let Some(index) = indices[position] else {
            return Err(broken(want, position, Tamper::Edited, "its index is missing".into()));
        };
        if index > want {
            let later = &indices[position + 1..];
            let (tamper, detail) = if later.contains(&Some(index)) {
                (Tamper::Inserted, format!("an entry {index} stands here, and entry {index} comes again later"))
            } else if later.contains(&Some(want)) {
                (Tamper::Reordered, format!("it comes later, after entry {index}"))
            } else {
                (Tamper::Removed, format!("the entry at its place is entry {index}"))
            };
            return Err(broken(want, position, tamper, detail));
        }
        if index < want {
            let (tamper, detail) = if indices[unchained..position].contains(&Some(index)) {
                (Tamper::Inserted, format!("a second entry {index} follows entry {}", want - 1))
            } else {
                (Tamper::Reordered, format!("it comes after entry {}", want - 1))
            };
            return Err(broken(want, position, tamper, detail));
        }
        let claimed = entry.get("prev_sha256").and_then(Value::as_str);
        match (&prev, claimed) {
            (None, Some(_)) => {
                let detail = "the chain starts with it, but it follows an entry that is not there".to_owned();
                return Err(broken(want.saturating_sub(1), position, Tamper::Removed, detail));
            }
            (Some(_), None) => {
                let detail = "it starts a chain of its own in the middle of this one".to_owned();
                return Err(broken(want, position, Tamper::Inserted, detail));
            }
            (Some(prev), Some(claimed)) if prev != claimed => {
                let detail = format!("entry {want} does not follow it: it was replaced");
                return Err(broken(want - 1, position - 1, Tamper::Edited, detail));
            }
            _ => {}
        }
        let signature = entry.get("signature").and_then(Value::as_str);
        if let Some(key) = key {
            let ends_turn = entry.get("outcome").is_some_and(|o| !o.is_null());
            match signature {
                Some(signature) if !signature_holds(key, &sha256, signature) => {
                    let detail = "its signature is not this key's".to_owned();
                    return Err(broken(want, position, Tamper::BadSignature, detail));
                }
                None if ends_turn => {
                    let detail = "it ends a turn and carries no signature".to_owned();
                    return Err(broken(want, position, Tamper::Unsigned, detail));
                }
                _ => {}
            }
        }
        signed += usize::from(signature.is_some());
        prev = Some(sha256);
    }
    let count = entries.len() as u64;
    if let Some(expected) = expected.filter(|&e| e > count) {
        let detail = format!("the chain holds {count} entries, {expected} were expected");
        return Err(broken(count, entries.len(), Tamper::Truncated, detail));
    }
    if key.is_some() {
        let last_signed = entries.last().and_then(|e| e.get("signature")).is_some();
        if !last_signed && !entries.is_empty() {
            let detail = if unchained == entries.len() {
                "no entry is chained or signed".to_owned()
            } else {
                format!(
                    "the chain ends with entry {}, which is not signed: the entries after it were cut off (or its turn never ended)",
                    count - 1
                )
            };
            return Err(broken(count, entries.len(), Tamper::Truncated, detail));
        }
    }
    Ok(Intact { session: session.to_owned(), entries: entries.len(), unchained, signed })
}
