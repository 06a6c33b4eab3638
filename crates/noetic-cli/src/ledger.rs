//! Steering ledgers as JSON lines: written by `chat`/`run` with `--ledger-out FILE`, shown by `noetic ledger`.

use std::io::Write;
use std::path::Path;

use noetic::steering::LedgerEntry;

use crate::output::{errln, outln};
use crate::render::{Style, is_routine, ledger_line, routine_left_out};

/// Appends entries to `path`, one JSON object a line (the file is created if needed).
pub fn append(path: &Path, entries: &[LedgerEntry]) -> Result<(), String> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open the ledger file '{}': {e}", path.display()))?;
    let mut text = String::new();
    for entry in entries {
        let line = serde_json::to_string(entry).map_err(|e| format!("cannot write a ledger entry as JSON: {e}"))?;
        text.push_str(&line);
        text.push('\n');
    }
    file.write_all(text.as_bytes()).map_err(|e| format!("cannot write to the ledger file '{}': {e}", path.display()))
}

/// Prints the entries of a JSON-lines ledger file. Lines that are not ledger entries are reported with their
/// number (on stderr) and make the command fail after the good ones are shown.
pub fn show(path: &Path, plain: bool, json: bool, verbose: bool) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!("cannot read the ledger file '{}': {e}; write one with --ledger-out FILE", path.display())
    })?;
    let style = Style::detect(plain);
    let (mut shown, mut bad, mut routine) = (0, 0, 0);
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<LedgerEntry>(line) {
            Ok(entry) if json => {
                let line =
                    serde_json::to_string(&entry).map_err(|e| format!("cannot write a ledger entry as JSON: {e}"))?;
                outln!("{line}");
                shown += 1;
            }
            Ok(entry) if !verbose && is_routine(&entry) => routine += 1,
            Ok(entry) => {
                outln!("{}", ledger_line(&style, &entry));
                shown += 1;
            }
            Err(e) => {
                errln!("{}:{}: not a ledger entry: {e}", path.display(), number + 1);
                bad += 1;
            }
        }
    }
    if !json {
        if let Some(line) = routine_left_out(routine, "--verbose") {
            outln!("{}", style.dim(&line));
        }
        let all = shown + routine;
        outln!("{}", style.dim(&format!("{all} entr{} in {}", if all == 1 { "y" } else { "ies" }, path.display())));
    }
    if bad > 0 {
        return Err(format!(
            "{bad} line(s) of '{}' are not ledger entries (see above); the file should hold one JSON entry a line as \
             written by --ledger-out",
            path.display()
        ));
    }
    Ok(())
}
