//! What a process that does not run a session may do to it through the log: queue a message, ask for a stop,
//! rename it. All are appends at the end ([`Expect::End`]) that the process running the session (if any) takes in at its next
//! checkpoint (SPEC 6.4); a process that opens the session later finds them in the log.

use super::entry::Entry;
use super::seam::{Expect, LogStore, StoreError};
use crate::agent::{SteerMessage, check_title};

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

/// Gives `key`'s session the title `title` (trimmed): what the session writes for
/// [`Session::set_title`](crate::agent::Session::set_title), from a process that does not run it. Returns the title
/// kept, `None` (nothing written) when the store holds no such session; a title [`check_title`] refuses is
/// [`StoreError::Refused`] saying why.
pub async fn rename(store: &dyn LogStore, key: &str, title: &str) -> Result<Option<String>, StoreError> {
    let title = check_title(title).map_err(|message| StoreError::Refused { message })?;
    if store.last(key).await? == 0 {
        return Ok(None);
    }
    store.append(key, Expect::End, &[Entry::Titled { title: title.clone() }]).await?;
    Ok(Some(title))
}
