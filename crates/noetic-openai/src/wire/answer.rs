//! Typed views of chat-completions answers — a whole response and a streamed chunk — read straight from the text
//! without a `serde_json::Value` tree. They take the shapes servers send; a body they do not take (an error
//! object, an oddly typed field, a duplicated key) is left to the tolerant `Value` reading, which decides as
//! before. So both readings give the same result wherever the typed one succeeds.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use noetic_core::model::Usage;
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};

/// A non-streamed answer, or one streamed chunk (`message` or `delta` in its choice).
#[derive(Deserialize)]
pub(super) struct Answer<'a> {
    #[serde(default)]
    error: Option<IgnoredAny>,
    #[serde(default, borrow)]
    object: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub choices: Option<First<Choice<'a>>>,
    #[serde(default)]
    pub usage: Option<WireUsage>,
    /// Borrowed from the answer: a response shares the name (`ModelResponse::shared_model_name`).
    #[serde(default, borrow)]
    pub model: Option<Cow<'a, str>>,
}

impl<'a> Answer<'a> {
    /// The typed reading of `text`, when it takes it and it is not an error object.
    pub fn read(text: &'a str) -> Option<Self> {
        serde_json::from_str::<Answer<'a>>(text).ok().and_then(Answer::unless_error)
    }

    /// [`Answer::read`] of a whole (non-streamed) answer: scanned by hand where the scan is sure of it (see
    /// `scan`), else read as `read` reads it.
    pub fn read_whole(text: &'a str) -> Option<Self> {
        match scan::answer(text) {
            Some(answer) => answer.unless_error(),
            None => Answer::read(text),
        }
    }

    fn unless_error(self) -> Option<Self> {
        (self.error.is_none() && self.object.as_deref() != Some("error")).then_some(self)
    }

    /// The first choice, when there is one.
    pub fn choice(&mut self) -> Option<Choice<'a>> {
        self.choices.take().and_then(|first| first.0)
    }
}

/// The first element of an array; the others are skipped unread.
pub(super) struct First<T>(pub Option<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for First<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FirstVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for FirstVisitor<T> {
            type Value = First<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<First<T>, A::Error> {
                let first = seq.next_element()?;
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(First(first))
            }
        }
        deserializer.deserialize_seq(FirstVisitor(PhantomData))
    }
}

/// A choice: its message (whole answers) or delta (streamed chunks), and why it finished.
#[derive(Deserialize)]
pub(super) struct Choice<'a> {
    #[serde(default, borrow)]
    pub message: Option<Message<'a>>,
    #[serde(default, borrow)]
    pub delta: Option<Message<'a>>,
    #[serde(default, borrow)]
    pub finish_reason: Option<Cow<'a, str>>,
}

/// A message or a delta.
#[derive(Deserialize)]
pub(super) struct Message<'a> {
    #[serde(default)]
    pub content: Option<Content>,
    #[serde(default)]
    pub refusal: Option<String>,
    #[serde(default, borrow)]
    pub tool_calls: Option<Vec<Call<'a>>>,
}

/// A tool call, or a piece of one in a stream. Its strings are borrowed from the answer when they hold no escape:
/// a call's id, name and arguments are made once, where they are kept.
#[derive(Deserialize)]
pub(super) struct Call<'a> {
    #[serde(default)]
    pub index: Option<u64>,
    #[serde(default, borrow)]
    pub id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub function: Option<Function<'a>>,
}

/// A call's function: its name and its arguments as JSON text (the typed reading takes only a string).
#[derive(Deserialize)]
pub(super) struct Function<'a> {
    #[serde(default, borrow)]
    pub name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub arguments: Option<Cow<'a, str>>,
    /// The arguments' text as the answer held it, escaped (between the quotes), when they held an escape; the
    /// scan's alone (see `escaped`).
    #[serde(skip)]
    pub escaped: Option<&'a str>,
}

/// Message content as text: a string, or the `text` of each part of an array of content parts.
pub(super) struct Content(pub String);

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Part<'a> {
            #[serde(default, borrow)]
            text: Option<Cow<'a, str>>,
        }
        struct ContentVisitor;
        impl<'de> Visitor<'de> for ContentVisitor {
            type Value = Content;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of content parts")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Content, E> {
                Ok(Content(text.to_owned()))
            }
            fn visit_string<E: de::Error>(self, text: String) -> Result<Content, E> {
                Ok(Content(text))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
                let mut text = String::new();
                while let Some(part) = seq.next_element::<Part<'de>>()? {
                    text.push_str(part.text.as_deref().unwrap_or(""));
                }
                Ok(Content(text))
            }
        }
        deserializer.deserialize_any(ContentVisitor)
    }
}

/// A `usage` object.
#[derive(Deserialize)]
pub(super) struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<Count>,
    #[serde(default)]
    completion_tokens: Option<Count>,
    #[serde(default)]
    prompt_tokens_details: Option<Details>,
    #[serde(default)]
    cost: Option<f64>,
}

#[derive(Deserialize)]
struct Details {
    #[serde(default)]
    cached_tokens: Option<Count>,
}

impl WireUsage {
    /// Usage and cost as the tolerant reading gives them (absent fields count as zero; no cost unless reported).
    pub fn usage(&self) -> Usage {
        let count = |c: &Option<Count>| c.as_ref().map_or(0, |c| c.0);
        Usage {
            input_tokens: count(&self.prompt_tokens),
            output_tokens: count(&self.completion_tokens),
            cached_tokens: self.prompt_tokens_details.as_ref().map_or(0, |d| count(&d.cached_tokens)),
            cost: self.cost,
        }
    }
}

/// A token count: a whole number, or a number rounded toward zero with negatives as zero.
struct Count(u64);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CountVisitor;
        impl Visitor<'_> for CountVisitor {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Count, E> {
                Ok(Count(n))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Count, E> {
                Ok(Count(u64::try_from(n).unwrap_or(0)))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Count, E> {
                Ok(Count(n.max(0.0) as u64))
            }
        }
        deserializer.deserialize_any(CountVisitor)
    }
}

mod scan;

pub(super) use scan::surely_json;

#[cfg(test)]
mod tests;
