//! Ledger signing keys: `noetic ledger keygen` writes an Ed25519 key pair, `--ledger-key FILE` (chat, run,
//! serve) signs each turn's last ledger entry, `noetic ledger verify --key FILE.pub` checks the signatures. The
//! file format is [`noetic::steering::chain`]'s: a header line, then 64 hex digits.

use std::io::Write;
use std::path::{Path, PathBuf};

use noetic::steering::chain::{self, SigningKey, VerifyingKey};

use crate::output::outln;

/// Where keygen writes when no `--out` is given.
pub const DEFAULT_KEY_FILE: &str = "ledger.key";

/// The public key's file beside `key`: `key` with `.pub` added.
pub fn public_path(key: &Path) -> PathBuf {
    let mut name = key.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

/// Writes a new key pair: the signing key at `out` (readable by its owner only) and the public key beside it.
/// Existing files are never overwritten.
pub fn keygen(out: Option<&Path>) -> Result<(), String> {
    let out = out.unwrap_or(Path::new(DEFAULT_KEY_FILE));
    let public = public_path(out);
    for path in [out, public.as_path()] {
        if path.exists() {
            return Err(format!(
                "'{}' exists; keygen never overwrites a key: move it away or give another --out FILE",
                path.display()
            ));
        }
    }
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret)
        .map_err(|e| format!("the operating system gave no randomness for the key ({e}); try again"))?;
    let key = SigningKey::from_bytes(&secret);
    write_new(out, &chain::encode_signing_key(&key), true)?;
    write_new(&public, &chain::encode_public_key(&key.verifying_key()), false)?;
    outln!("signing key: {} (keep it secret; sign with --ledger-key {})", out.display(), out.display());
    outln!("public key:  {} (for auditors: noetic ledger verify DB|FILE --key {})", public.display(), public.display());
    Ok(())
}

fn write_new(path: &Path, text: &str, private: bool) -> Result<(), String> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if private { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut file = options.open(path).map_err(|e| format!("cannot create '{}': {e}", path.display()))?;
    file.write_all(text.as_bytes()).map_err(|e| format!("cannot write '{}': {e}", path.display()))
}

/// Reads the signing key file given to `--ledger-key`.
pub fn signing_key(path: &Path) -> Result<SigningKey, String> {
    let text = read(path, "--ledger-key")?;
    chain::parse_signing_key(&text, &path.display().to_string()).map_err(|e| e.to_string())
}

/// Reads the public key file given to `--key`.
pub fn public_key(path: &Path) -> Result<VerifyingKey, String> {
    let text = read(path, "--key")?;
    chain::parse_public_key(&text, &path.display().to_string()).map_err(|e| e.to_string())
}

fn read(path: &Path, flag: &str) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| {
        format!(
            "cannot read the key file '{}' ({flag}): {e}; make a key pair with `noetic ledger keygen`",
            path.display()
        )
    })?;
    String::from_utf8(bytes).map_err(|_| {
        format!(
            "'{}' is not a noetic ledger key: it is not text; make a key pair with `noetic ledger keygen --out FILE`",
            path.display()
        )
    })
}
