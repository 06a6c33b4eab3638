//! A session's ledger entries chained as they are appended to its log (see [`crate::steering::chain`]): the
//! chain follows the log's order because an entry is sealed and handed to the writer under one lock.

use super::log::Entry;
use super::logged::Logged;
use crate::context::lock;
use crate::steering::LedgerEntry;
use crate::steering::chain::{ChainHead, SigningKey, seal_entry};

/// Appends the ledger entry `entry` to `key`'s log as a decision of `turn` (`None`: made outside the steering
/// layer), chained after the session's last one and signed with `signer` when it is a turn's last entry (it has
/// the outcome) or `turn_ended`; `also` are entries to append with it.
pub(crate) fn append_decision(
    logged: &Logged,
    key: &str,
    turn: Option<u64>,
    mut entry: LedgerEntry,
    signer: Option<&SigningKey>,
    turn_ended: bool,
    also: impl FnOnce() -> Vec<Entry>,
) {
    let ends_turn = turn_ended || entry.outcome.is_some();
    let mut head = lock(&logged.chain.0);
    // Another process may have appended to the chain since (its entries are in the projection once read).
    let landed = ChainHead::after(&lock(&logged.projection).ledger);
    let mut current = match head.take() {
        Some(mine) if mine.index >= landed.index => mine,
        _ => landed,
    };
    if let Err(e) = seal_entry(&mut entry, key, &mut current, signer.filter(|_| ends_turn)) {
        tracing::error!(error = %e, "a ledger entry could not be hashed; it is logged without its chain");
    }
    let mut entries = vec![Entry::Decision { turn, entry: Box::new(entry) }];
    entries.extend(also());
    logged.submit_detached(entries);
    *head = Some(current);
}
