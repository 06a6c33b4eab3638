//! The ledger's hash chain and its signatures: what makes a session's ledger tamper-evident.
//!
//! # The chain (version 1)
//!
//! A session's ledger entries form one chain, in the order its log holds them. Entry `i` (counted from 0 among
//! the session log's `Entry::Decision` entries) carries these fields:
//!
//! | field | value |
//! |---|---|
//! | `session_key` | the session's key |
//! | `index` | `i` |
//! | `prev_sha256` | the `sha256` of entry `i - 1`; absent on the chain's first entry |
//! | `sha256` | SHA-256 of the entry's canonical form, 64 lowercase hex digits |
//! | `signature` | with a signing key, on a turn's last entry (the one with the `outcome`) and on entries added while no turn runs (a late async verdict, `Session::record_decision`): Ed25519 over the 64 ASCII characters of `sha256`, 128 lowercase hex digits |
//!
//! **The canonical form** is the entry's JSON object as written (every field it has, `session_key`, `index` and
//! `prev_sha256` included) without its `sha256` and `signature` fields, encoded as
//! [`canonical_json`](crate::digest::canonical_json): object keys sorted by their UTF-8 bytes at every depth, no
//! whitespace, strings and numbers as `serde_json` writes them. Because the session key and the index are hashed,
//! an entry cannot be moved to another session or another place without its hash changing.
//!
//! Entries written before the chain existed have none of these fields. They may only come first: the chain then
//! starts at the first entry that has them (its index counts the older ones, and it has no `prev_sha256`). Such
//! entries are reported as "unchained before entry N", not as tampering — nothing protects them.
//!
//! A check by hand: drop `sha256` and `signature` from a line of `noetic ledger export`, sort the keys of every
//! object, print it without spaces and take the SHA-256 of its UTF-8: it is the line's `sha256`, and the next line's
//! `prev_sha256`. Python's `json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False)` prints
//! the same text, except that it writes some floats differently (`1e-05` where serde_json writes `1e-5`).
//!
//! **Keys** are files of two lines: a header, then 64 hex digits (the 32-byte Ed25519 secret key, or the public
//! key): see [`SIGNING_KEY_HEADER`] and [`PUBLIC_KEY_HEADER`]. [`verify`](super::verify) checks a chain.

use ed25519_dalek::{Signature, Signer, Verifier};
/// The Ed25519 keys (from `ed25519-dalek`): a [`SigningKey`] signs, its [`VerifyingKey`] checks.
pub use ed25519_dalek::{SigningKey, VerifyingKey};
use serde_json::{Map, Value};

use super::LedgerEntry;

/// The first line of a signing (private) key file.
pub const SIGNING_KEY_HEADER: &str = "noetic ledger signing key (Ed25519, hex)";
/// The first line of a public key file.
pub const PUBLIC_KEY_HEADER: &str = "noetic ledger public key (Ed25519, hex)";

/// The fields the canonical form leaves out.
const UNHASHED: [&str; 2] = ["sha256", "signature"];

/// Where a session's chain stands: the index the next entry gets and the hash of the last one (`None` before the
/// chain's first entry).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChainHead {
    /// The next entry's index.
    pub index: u64,
    /// The last entry's `sha256`.
    pub sha256: Option<String>,
}

impl ChainHead {
    /// The head after `ledger`, a session's entries as its log holds them: after its last entry when that is
    /// chained, else a chain that starts after the unchained entries.
    pub fn after(ledger: &[LedgerEntry]) -> ChainHead {
        match ledger.last() {
            Some(LedgerEntry { index: Some(index), sha256: Some(sha256), .. }) => {
                ChainHead { index: index + 1, sha256: Some(sha256.clone()) }
            }
            _ => ChainHead { index: ledger.len() as u64, sha256: None },
        }
    }
}

/// Makes `entry` (a ledger entry's JSON object) entry `head.index` of `session`'s chain, signed with `key` when
/// given, and moves `head` past it.
pub fn seal(entry: &mut Map<String, Value>, session: &str, head: &mut ChainHead, key: Option<&SigningKey>) {
    for field in UNHASHED {
        entry.remove(field);
    }
    entry.insert("session_key".to_owned(), Value::String(session.to_owned()));
    entry.insert("index".to_owned(), Value::from(head.index));
    match head.sha256.take() {
        Some(prev) => entry.insert("prev_sha256".to_owned(), Value::String(prev)),
        None => entry.remove("prev_sha256"),
    };
    let sha256 = content_sha256(entry);
    if let Some(key) = key {
        entry.insert("signature".to_owned(), Value::String(hex(&key.sign(sha256.as_bytes()).to_bytes())));
    }
    entry.insert("sha256".to_owned(), Value::String(sha256.clone()));
    head.index += 1;
    head.sha256 = Some(sha256);
}

/// [`seal`] on a typed entry: what a session's log does with each decision it appends.
pub fn seal_entry(
    entry: &mut LedgerEntry,
    session: &str,
    head: &mut ChainHead,
    key: Option<&SigningKey>,
) -> Result<(), serde_json::Error> {
    entry.session_key = Some(session.to_owned());
    entry.index = Some(head.index);
    entry.prev_sha256 = head.sha256.clone();
    entry.sha256 = None;
    entry.signature = None;
    let sha256 = crate::digest::typed_sha256(&*entry)?;
    entry.signature = key.map(|key| hex(&key.sign(sha256.as_bytes()).to_bytes()));
    entry.sha256 = Some(sha256.clone());
    head.index += 1;
    head.sha256 = Some(sha256);
    Ok(())
}

/// The SHA-256 of `entry`'s canonical form (its fields but `sha256` and `signature`), as 64 lowercase hex digits.
pub fn content_sha256(entry: &mut Map<String, Value>) -> String {
    let kept: Vec<(String, Value)> = UNHASHED.iter().filter_map(|field| entry.remove_entry(*field)).collect();
    let object = Value::Object(std::mem::take(entry));
    let sha256 = crate::digest::json_sha256(&object);
    if let Value::Object(fields) = object {
        *entry = fields;
    }
    entry.extend(kept);
    sha256
}

/// True when `signature` (hex) is `key`'s signature of `sha256`.
pub fn signature_holds(key: &VerifyingKey, sha256: &str, signature: &str) -> bool {
    let Some(bytes) = unhex::<64>(signature) else { return false };
    key.verify(sha256.as_bytes(), &Signature::from_bytes(&bytes)).is_ok()
}

/// Why a key file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{file}' is not a noetic ledger {kind} key: {problem}; make a key pair with `noetic ledger keygen --out FILE`"
)]
pub struct KeyError {
    /// The file (as given).
    pub file: String,
    /// `signing` or `public`.
    pub kind: &'static str,
    /// What is wrong.
    pub problem: String,
}

/// The text of a signing key file.
pub fn encode_signing_key(key: &SigningKey) -> String {
    format!("{SIGNING_KEY_HEADER}\n{}\n", hex(&key.to_bytes()))
}

/// The text of a public key file.
pub fn encode_public_key(key: &VerifyingKey) -> String {
    format!("{PUBLIC_KEY_HEADER}\n{}\n", hex(key.as_bytes()))
}

/// Reads a signing key file's text (`file` names it in the error).
pub fn parse_signing_key(text: &str, file: &str) -> Result<SigningKey, KeyError> {
    key_bytes(text, SIGNING_KEY_HEADER, PUBLIC_KEY_HEADER, file, "signing").map(|bytes| SigningKey::from_bytes(&bytes))
}

/// Reads a public key file's text (`file` names it in the error).
pub fn parse_public_key(text: &str, file: &str) -> Result<VerifyingKey, KeyError> {
    let bytes = key_bytes(text, PUBLIC_KEY_HEADER, SIGNING_KEY_HEADER, file, "public")?;
    VerifyingKey::from_bytes(&bytes).map_err(|_| KeyError {
        file: file.to_owned(),
        kind: "public",
        problem: "its 32 bytes are not a point of the Ed25519 curve".to_owned(),
    })
}

fn key_bytes(text: &str, header: &str, other: &str, file: &str, kind: &'static str) -> Result<[u8; 32], KeyError> {
    let error = |problem: String| KeyError { file: file.to_owned(), kind, problem };
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    match lines.next() {
        Some(first) if first == header => {}
        Some(first) if first == other => {
            let (is, give) =
                if kind == "signing" { ("public", "the signing key") } else { ("signing", "its .pub file") };
            return Err(error(format!("it is the {is} key of a pair (give {give})")));
        }
        Some(first) => {
            let shown: String = first.chars().take(40).collect();
            return Err(error(format!("its first line is {shown:?}, not {header:?}")));
        }
        None => return Err(error("it is empty".to_owned())),
    }
    let Some(digits) = lines.next() else {
        return Err(error("the line with the key's 64 hex digits is missing".into()));
    };
    unhex::<32>(digits)
        .ok_or_else(|| error(format!("its second line is not 64 hex digits ({} characters)", digits.len())))
}

/// Lowercase hex.
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// `N` bytes from `2N` hex digits (either case).
fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let value = |d: u8| char::from(d).to_digit(16).and_then(|v| u8::try_from(v).ok());
        *byte = value(pair[0])? << 4 | value(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use serde_json::json;

    use super::*;

    #[test]
    fn a_sealed_entry_hashes_its_canonical_form_without_its_hash_and_signature() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let mut head = ChainHead::default();
        let mut first = json!({"kind": "tool_call", "action": "allow"}).as_object().cloned().unwrap();
        seal(&mut first, "s", &mut head, None);
        let mut second = json!({"kind": "custom", "action": "allow"}).as_object().cloned().unwrap();
        seal(&mut second, "s", &mut head, Some(&key));
        let expected =
            crate::digest::sha256_hex(br#"{"action":"allow","index":0,"kind":"tool_call","session_key":"s"}"#);
        assert_eq!(first["sha256"], json!(expected));
        assert_eq!(second["prev_sha256"], json!(expected));
        assert_eq!(second["index"], json!(1));
        let sha = second["sha256"].as_str().unwrap().to_owned();
        assert_eq!(content_sha256(&mut second), sha);
        assert!(signature_holds(&key.verifying_key(), &sha, second["signature"].as_str().unwrap()));
        assert!(!signature_holds(
            &SigningKey::from_bytes(&[8; 32]).verifying_key(),
            &sha,
            second["signature"].as_str().unwrap()
        ));
        assert_eq!(head, ChainHead { index: 2, sha256: Some(sha) });
    }

    #[test]
    fn key_files_round_trip_and_a_wrong_file_is_named_with_what_is_wrong() {
        let key = SigningKey::from_bytes(&[9; 32]);
        let text = encode_signing_key(&key);
        assert_eq!(parse_signing_key(&text, "k").unwrap().to_bytes(), key.to_bytes());
        let public = encode_public_key(&key.verifying_key());
        assert_eq!(parse_public_key(&public, "k.pub").unwrap(), key.verifying_key());
        let e = parse_signing_key(&public, "k.pub").unwrap_err();
        assert_eq!(
            e.to_string(),
            "'k.pub' is not a noetic ledger signing key: it is the public key of a pair (give the signing key); make a \
             key pair with `noetic ledger keygen --out FILE`"
        );
        let e = parse_public_key("-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n", "id_ed25519").unwrap_err();
        assert!(e.problem.starts_with("its first line is \"-----BEGIN OPENSSH PRIVATE KEY-----\""), "{e}");
        let e = parse_signing_key(&format!("{SIGNING_KEY_HEADER}\nabc\n"), "k").unwrap_err();
        assert_eq!(e.problem, "its second line is not 64 hex digits (3 characters)");
    }

    #[test]
    fn an_entry_hashes_as_its_json_value_does_without_building_the_value() {
        use crate::digest::{json_sha256, typed_sha256};
        use crate::layer::Outcome;
        use crate::steering::{Evaluator, FailureCause, LedgerKind, RuleFailure, Shadow, SteeringAction};
        let entry = LedgerEntry {
            tool_name: Some("write \"it\"".into()),
            tool_args: Some(json!({"z": [1, 2.5, null, {"b": "é\n\u{1}", "a": true}], "\"q\"": -3, "A": {}})),
            usage: Some(crate::model::Usage {
                input_tokens: 3,
                output_tokens: 4,
                cost: Some(0.000_125),
                ..Default::default()
            }),
            guidance: Some("line\tbreak".into()),
            rule_id: Some("r".into()),
            evaluator: Some(Evaluator::LlmAsync),
            failures: vec![
                RuleFailure { rule_id: "a".into(), cause: FailureCause::Timeout },
                RuleFailure { rule_id: "b".into(), cause: FailureCause::Unparseable { last_reply: "?".into() } },
            ],
            duration: std::time::Duration::from_nanos(1_234_567_890),
            outcome: Some(Outcome::Success),
            shadow: Some(Shadow { live: SteeringAction::Deny }),
            escalated: true,
            session_key: Some("s".into()),
            index: Some(u64::MAX),
            prev_sha256: Some("00".into()),
            ..LedgerEntry::new(LedgerKind::Custom, SteeringAction::Guide)
        };
        let value = serde_json::to_value(&entry).unwrap();
        assert_eq!(typed_sha256(&entry).unwrap(), json_sha256(&value));
    }
}
