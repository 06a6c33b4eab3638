//! `noetic ledger verify` and `noetic ledger export`: a ledger's hash chain checked (see
//! [`noetic::steering::verify`]), from a session database or a JSON-lines file, and a database's ledgers written as
//! JSON lines an auditor checks without the database.

use std::collections::BTreeMap;
use std::path::Path;

use noetic::agent::log::{Entry, LogStore};
use noetic::steering::chain::VerifyingKey;
use noetic::steering::verify::{Broken, verify};
use serde_json::{Map, Value};

use crate::output::{errln, outln};

/// One session's entries, with where each was read (a file's line, a log's position).
struct Chain {
    entries: Vec<Map<String, Value>>,
    places: Vec<String>,
}

/// What `verify` and `export` read: sessions by key, in key order.
type Ledgers = BTreeMap<String, Chain>;

/// What `noetic ledger verify` checks.
pub struct VerifyArgs<'a> {
    /// A session database (SQLite file, postgres:// URL) or a JSON-lines ledger file.
    pub source: &'a Path,
    /// The public key whose signatures the turn ends must carry.
    pub key: Option<&'a Path>,
    /// Only these sessions (all when empty).
    pub sessions: &'a [String],
    /// How many entries each session's chain must hold.
    pub expected: Option<u64>,
}

/// Checks every session's chain; prints one line per session and fails when one is broken.
pub async fn verify_command(args: VerifyArgs<'_>) -> Result<(), String> {
    let key = args.key.map(crate::ledger::key::public_key).transpose()?;
    let ledgers = select(read(args.source).await?, args.sessions, args.source)?;
    let mut broken = 0;
    for (session, mut chain) in ledgers {
        match verify(&session, &mut chain.entries, key.as_ref(), args.expected) {
            Ok(intact) => outln!("{}", intact_line(&intact, key.as_ref())),
            Err(problem) => {
                broken += 1;
                errln!("{}: {problem}", place(&chain.places, &problem));
            }
        }
    }
    match broken {
        0 => Ok(()),
        n => Err(format!(
            "{n} session(s) of '{}' do not verify (see above): the ledger was changed after it was written",
            shown(args.source)
        )),
    }
}

fn intact_line(intact: &noetic::steering::verify::Intact, key: Option<&VerifyingKey>) -> String {
    let mut line = format!("session {:?}: {} entries, chain intact", intact.session, intact.entries);
    if intact.unchained > 0 {
        line.push_str(&format!(
            " (unchained before entry {}: written before the chain, not protected)",
            intact.unchained
        ));
    }
    if key.is_some() {
        line.push_str(&format!(", {} signature(s) checked", intact.signed));
    }
    line
}

/// Where `problem` was seen: the place of the entry it names (or after the last one).
fn place(places: &[String], problem: &Broken) -> String {
    places.get(problem.position).cloned().unwrap_or_else(|| match places.last() {
        Some(last) => format!("after {last}"),
        None => "(empty)".to_owned(),
    })
}

/// Writes the ledgers of `db` as JSON lines to `out` (stdout without it): every entry with its session key and
/// index, in chain order, session after session.
pub async fn export_command(db: &Path, sessions: &[String], out: Option<&Path>) -> Result<(), String> {
    if !crate::sessions::is_postgres(db) && !is_sqlite(db)? {
        return Err(format!(
            "'{}' is not a session database (SQLite file or postgres:// URL); a ledger file needs no export: \
             verify it with `noetic ledger verify FILE`",
            shown(db)
        ));
    }
    let ledgers = select(read(db).await?, sessions, db)?;
    let mut text = String::new();
    for (session, chain) in ledgers {
        for (index, mut entry) in chain.entries.into_iter().enumerate() {
            entry.entry("session_key").or_insert_with(|| Value::String(session.clone()));
            entry.entry("index").or_insert_with(|| Value::from(index as u64));
            text.push_str(&Value::Object(entry).to_string());
            text.push('\n');
        }
    }
    match out {
        Some(path) => std::fs::write(path, text).map_err(|e| format!("cannot write '{}': {e}", path.display())),
        None => {
            outln!("{}", text.trim_end_matches('\n'));
            Ok(())
        }
    }
}

/// Only the sessions asked for (all when none are named); a name that is not there is an error.
fn select(mut all: Ledgers, sessions: &[String], source: &Path) -> Result<Ledgers, String> {
    if sessions.is_empty() {
        return Ok(all);
    }
    let mut chosen = Ledgers::new();
    for name in sessions {
        let chain = all.remove(name).ok_or_else(|| {
            format!("no session '{name}' in '{}'; `noetic sessions --db …` lists a database's", shown(source))
        })?;
        chosen.insert(name.clone(), chain);
    }
    Ok(chosen)
}

/// The ledgers of a database or a file.
async fn read(source: &Path) -> Result<Ledgers, String> {
    if crate::sessions::is_postgres(source) || is_sqlite(source)? { read_db(source).await } else { read_file(source) }
}

/// How a source is named in messages: a PostgreSQL URL without its password.
fn shown(source: &Path) -> String {
    let text = source.display().to_string();
    if !crate::sessions::is_postgres(source) {
        return text;
    }
    let Some(start) = text.find("://").map(|i| i + 3) else { return text };
    match (text[start..].find('@'), text[start..].find(':')) {
        (Some(at), Some(colon)) if colon < at => format!("{}{}", &text[..start + colon], &text[start + at..]),
        _ => text,
    }
}

/// True for an SQLite file (by its header); an error when `path` cannot be read.
fn is_sqlite(path: &Path) -> Result<bool, String> {
    use std::io::Read;
    let mut header = [0u8; 16];
    let mut file = std::fs::File::open(path).map_err(|e| {
        format!(
            "cannot read '{}': {e}; give a session database (SQLite file, postgres:// URL) or a ledger file \
             (--ledger-out, `noetic ledger export`)",
            path.display()
        )
    })?;
    let n = file.read(&mut header).map_err(|e| format!("cannot read '{}': {e}", path.display()))?;
    Ok(n == 16 && &header == b"SQLite format 3\0")
}

async fn read_db(db: &Path) -> Result<Ledgers, String> {
    let unreadable = |e: &dyn std::fmt::Display| {
        format!(
            "cannot read the session database '{}': {e}; check that it is a database noetic wrote (an SQLite file, \
             or a postgres:// URL that is reachable)",
            shown(db)
        )
    };
    let store = crate::sessions::open_at(db).await.map_err(|e| unreadable(&e))?.shared();
    let mut ledgers = Ledgers::new();
    for line in store.list().await.map_err(|e| unreadable(&e))? {
        let chain = decisions(store.as_ref(), &line.key).await.map_err(|e| unreadable(&e))?;
        if !chain.entries.is_empty() {
            ledgers.insert(line.key, chain);
        }
    }
    Ok(ledgers)
}

/// `key`'s ledger entries as its log holds them, each with its log position.
async fn decisions(store: &dyn LogStore, key: &str) -> Result<Chain, Box<dyn std::error::Error>> {
    let mut chain = Chain { entries: Vec::new(), places: Vec::new() };
    let mut after = 0;
    loop {
        let page = store.read(key, after, 500).await?;
        let Some(last) = page.last() else { break };
        after = last.pos;
        for record in page {
            if let Entry::Decision { entry, .. } = record.entry {
                let Value::Object(object) = serde_json::to_value(&*entry)? else { continue };
                chain.entries.push(object);
                chain.places.push(format!("session {key:?}, log position {}", record.pos));
            }
        }
    }
    Ok(chain)
}

/// A JSON-lines ledger: each line one entry, grouped by its `session_key` (entries without one, written before
/// the chain or without a session log, under "").
fn read_file(path: &Path) -> Result<Ledgers, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("cannot read the ledger file '{}': {e}", path.display()))?;
    let mut ledgers = Ledgers::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{}:{}", path.display(), number + 1);
        let entry = match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(entry)) => entry,
            Ok(_) => return Err(format!("{at}: the line is not a JSON object; the file is damaged at this line")),
            Err(e) => {
                return Err(format!(
                    "{at}: the line is not JSON ({e}); the file is damaged at this line (restore it, or export the \
                     ledger again from the database)"
                ));
            }
        };
        let session = entry.get("session_key").and_then(Value::as_str).unwrap_or_default().to_owned();
        let chain = ledgers.entry(session).or_insert_with(|| Chain { entries: Vec::new(), places: Vec::new() });
        chain.entries.push(entry);
        chain.places.push(at);
    }
    Ok(ledgers)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_database_url_is_named_without_its_password() {
        let shown = |s: &str| super::shown(std::path::Path::new(s));
        assert_eq!(shown("postgres://ada:secret@db:5432/noetic"), "postgres://ada@db:5432/noetic");
        assert_eq!(shown("postgresql://db/noetic"), "postgresql://db/noetic");
        assert_eq!(shown("ledger.jsonl"), "ledger.jsonl");
    }
}
