//! Response bodies with a size cap and an idle limit, over any stream of byte chunks.

use std::fmt;
use std::time::Duration;

use futures::{Stream, StreamExt};

use crate::describe_bytes;

/// Why reading a body stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError<E> {
    /// The byte stream yielded an error.
    Transport(E),
    /// The body grew past the cap (or announced a `Content-Length` past it).
    TooLarge {
        /// The cap, in bytes.
        limit: usize,
    },
    /// No bytes arrived for this long.
    Idle {
        /// The idle limit that ran out.
        after: Duration,
    },
}

impl<E: fmt::Display> fmt::Display for BodyError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::Transport(e) => e.fmt(f),
            BodyError::TooLarge { limit } => {
                write!(f, "the response body is larger than the limit of {}", describe_bytes(*limit))
            }
            BodyError::Idle { after } => write!(f, "no data arrived for {} ms", after.as_millis()),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for BodyError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BodyError::Transport(e) => e.source(),
            _ => None,
        }
    }
}

/// Passes `bytes` through, ending with [`BodyError::TooLarge`] as soon as more than `limit` bytes arrived in all,
/// and with [`BodyError::Idle`] when `idle` is set and no chunk arrives within it (each wait starts afresh, so a
/// slow but steady body is fine). Nothing follows an error. The idle limit runs on tokio's clock.
pub fn guard_body<S, B, E>(
    bytes: S,
    limit: usize,
    idle: Option<Duration>,
) -> impl Stream<Item = Result<B, BodyError<E>>> + Send + 'static
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: Send + 'static,
{
    let state = (Box::pin(bytes), 0usize, false);
    futures::stream::unfold(state, move |(mut bytes, mut total, ended)| async move {
        if ended {
            return None;
        }
        let next = match idle {
            Some(after) => match tokio::time::timeout(after, bytes.next()).await {
                Ok(next) => next,
                Err(_) => return Some((Err(BodyError::Idle { after }), (bytes, total, true))),
            },
            None => bytes.next().await,
        };
        match next {
            Some(Ok(chunk)) => {
                total = total.saturating_add(chunk.as_ref().len());
                if total > limit {
                    return Some((Err(BodyError::TooLarge { limit }), (bytes, total, true)));
                }
                Some((Ok(chunk), (bytes, total, false)))
            }
            Some(Err(e)) => Some((Err(BodyError::Transport(e)), (bytes, total, true))),
            None => None,
        }
    })
    // Fused: polling again after the end gives the end again, never a panic.
    .fuse()
}

/// Reads a whole body of at most `limit` bytes. A `content_length` over the cap fails before anything is read;
/// otherwise reading stops at the first chunk that takes the total past it, so at most `limit` bytes (plus one
/// chunk) are ever held.
///
/// # Errors
///
/// [`BodyError::TooLarge`] over the cap, [`BodyError::Transport`] when the stream fails.
///
/// ```
/// use noetic_http::{BodyError, read_body};
///
/// # futures::executor::block_on(async {
/// let body = || futures::stream::iter(["hello ", "world"].map(Ok::<_, std::io::Error>));
/// assert_eq!(read_body(body(), 11, None).await.unwrap(), b"hello world");
/// assert!(matches!(read_body(body(), 10, None).await, Err(BodyError::TooLarge { limit: 10 })));
/// # });
/// ```
pub async fn read_body<S, B, E>(bytes: S, limit: usize, content_length: Option<u64>) -> Result<Vec<u8>, BodyError<E>>
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: Send + 'static,
{
    let announced = content_length.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    if announced.is_some_and(|n| n > limit) {
        return Err(BodyError::TooLarge { limit });
    }
    let mut body = Vec::with_capacity(announced.unwrap_or(0));
    let mut chunks = std::pin::pin!(guard_body(bytes, limit, None));
    while let Some(chunk) = chunks.next().await {
        body.extend_from_slice(chunk?.as_ref());
    }
    Ok(body)
}

/// Waits for the first chunk of `bytes` (guarded as [`guard_body`] does), and gives back the whole body once it
/// has begun. A stream attempt calls this before handing anything out, so a stall or a failure before the first
/// byte is an error of the attempt — retryable like a failed call — rather than a failure mid-stream. A body that
/// ends without any byte gives an empty stream.
///
/// # Errors
///
/// What [`guard_body`] yields before the first chunk: [`BodyError::Idle`], [`BodyError::Transport`] or
/// [`BodyError::TooLarge`].
pub async fn first_chunk<S, B, E>(
    bytes: S,
    limit: usize,
    idle: Option<Duration>,
) -> Result<impl Stream<Item = Result<B, BodyError<E>>> + Send + 'static, BodyError<E>>
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: Send + 'static,
{
    let mut body = Box::pin(guard_body(bytes, limit, idle));
    let first = body.next().await.transpose()?;
    Ok(futures::stream::iter(first.map(Ok)).chain(body))
}

/// `what` is over the body cap `limit`, set by `setting` (e.g. `OpenAiConfig::max_body_bytes`): a non-retryable
/// failure, since the same request would bring the same body.
pub fn too_large(what: &str, limit: usize, status: Option<u16>, setting: &str) -> noetic_core::NoeticError {
    noetic_core::NoeticError::ModelFailed {
        message: format!(
            "{what} is larger than the limit of {} ({setting}); it was not read further and not retried — raise the \
             limit if answers this large are expected",
            describe_bytes(limit)
        ),
        status,
        raw: None,
        retryable: false,
        source: None,
    }
}

/// The text of an HTTP error answer's body, read once within `limit`: over the cap it is a [`too_large`] failure
/// naming `origin` and `setting`; a body that cannot be read is empty text (the status still tells the story).
pub async fn error_body_text<S, B, E>(
    bytes: S,
    limit: usize,
    content_length: Option<u64>,
    status: u16,
    origin: &str,
    setting: &str,
) -> Result<String, noetic_core::NoeticError>
where
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: Send + 'static,
{
    match read_body(bytes, limit, content_length).await {
        Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Err(BodyError::TooLarge { limit }) => {
            let what = format!("the error body of an HTTP {status} answer from {origin}");
            Err(too_large(&what, limit, Some(status), setting))
        }
        Err(_) => Ok(String::new()),
    }
}
