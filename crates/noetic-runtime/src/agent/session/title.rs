//! A session's title: a name people know it by, kept in its log (its key stays its key).

use super::{Session, SessionError, settled};
use crate::agent::log::Entry;
use crate::context::lock;

/// The longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 120;

/// `title` as a session keeps it (trimmed), or what is wrong with it: a title is text from anyone (a page, an API
/// client), so it must hold something, fit a list line ([`MAX_TITLE_CHARS`]) and hold no control characters (no line
/// breaks, no terminal escapes).
pub fn check_title(title: &str) -> Result<String, String> {
    let title = title.trim();
    if title.is_empty() {
        return Err("the title is empty; give the session a title of at least one character".to_owned());
    }
    let chars = title.chars().count();
    if chars > MAX_TITLE_CHARS {
        return Err(format!("the title has {chars} characters; give one of at most {MAX_TITLE_CHARS}"));
    }
    if let Some(c) = title.chars().find(|c| c.is_control()) {
        return Err(format!(
            "the title holds the control character U+{:04X}; give a title of one line of plain text",
            u32::from(c)
        ));
    }
    Ok(title.to_owned())
}

impl Session {
    /// The session's title, if it was given one ([`Session::set_title`]).
    pub fn title(&self) -> Option<String> {
        let state = self.live();
        match state.logged() {
            Some(logged) => lock(&logged.projection).title.clone(),
            None => lock(&state.title).clone(),
        }
    }

    /// Gives the session a title (recorded in its log, so it holds after a restart and shows in every worker's
    /// list); the key does not change. Allowed while a turn runs, here or on another worker. The title is trimmed;
    /// an empty one, one longer than [`MAX_TITLE_CHARS`] or one with control characters is
    /// [`SessionError::InvalidTitle`] ([`check_title`]).
    pub async fn set_title(&self, title: &str) -> Result<(), SessionError> {
        let session = || self.key().to_owned();
        let title = check_title(title).map_err(|message| SessionError::InvalidTitle { session: session(), message })?;
        self.opened().await.map_err(|message| SessionError::Unavailable { session: session(), message })?;
        let receipt = self.locked(|state, _| match state.submit(vec![Entry::Titled { title: title.clone() }]) {
            Some(receipt) => Some(receipt),
            None => {
                *lock(&state.title) = Some(title.clone());
                None
            }
        });
        if let Some(receipt) = receipt {
            settled(receipt).await.map_err(|message| SessionError::Store { session: session(), message })?;
        }
        Ok(())
    }
}
