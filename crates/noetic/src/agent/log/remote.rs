//! What a process that does not run a session may do to it through the log: queue a message, ask for a stop. Both
//! are appends at the end ([`Expect::End`]) that the process running the session (if any) takes in at its next
//! checkpoint (SPEC 6.4); a process that opens the session later finds them in the log.

use super::entry::Entry;
use super::seam::{Expect, LogStore, StoreError};
use crate::agent::SteerMessage;

/// Queues `message` for `key`'s session (a session the store does not hold yet starts with it); returns the
/// position it was given.
pub async fn queue_message(store: &dyn LogStore, key: &str, message: &SteerMessage) -> Result<u64, StoreError> {
    store.append(key, Expect::End, &[Entry::MessageAccepted { message: message.clone() }]).await
}

/// Asks `key`'s running turn to stop at its next checkpoint and empties its queue; false (nothing written) when the
/// store holds no such session.
pub async fn request_stop(store: &dyn LogStore, key: &str, reason: &str) -> Result<bool, StoreError> {
    if store.last(key).await? == 0 {
        return Ok(false);
    }
    let entries = [
        Entry::StopRequested { reason: reason.to_owned() },
        Entry::MessagesDropped { ids: Vec::new(), reason: reason.to_owned() },
    ];
    store.append(key, Expect::End, &entries).await.map(|_| true)
}
