//! Configuration files as text, and errors that point into them (`file:line:col: message`).

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Deserializer};
use toml::de::{DeTable, DeValue};

/// A step on the way to a value inside a document: a table key or an array index.
#[derive(Debug, Clone, Copy)]
pub enum Seg<'a> {
    /// A key of a table.
    Key(&'a str),
    /// An element of an array.
    Index(usize),
}

/// The format of a configuration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// TOML.
    Toml,
    /// JSON.
    Json,
}

/// A configuration file's name, format and text.
#[derive(Debug, Clone)]
pub struct Source {
    /// The name shown in errors (the path as given).
    pub name: String,
    /// How the text is written.
    pub format: Format,
    /// The text.
    pub text: String,
}

impl Source {
    /// Reads a file; the format follows the extension (`.json` is JSON, anything else TOML).
    pub fn read(path: &Path) -> Result<Self, SourceError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| SourceError {
            file: name.clone(),
            at: None,
            message: format!("cannot read the file: {e}; check the path"),
        })?;
        let json = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json"));
        Ok(Source { name, format: if json { Format::Json } else { Format::Toml }, text })
    }

    /// A source from text (for tests and inline definitions).
    #[cfg(test)]
    pub fn toml(name: &str, text: &str) -> Self {
        Source { name: name.to_owned(), format: Format::Toml, text: text.to_owned() }
    }

    /// Deserializes the whole document; syntax errors, unknown keys and wrong types point at their place.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, SourceError> {
        match self.format {
            Format::Toml => toml::from_str(&self.text).map_err(|e| {
                let at = e.span().map(|s| line_col(&self.text, s.start));
                self.error(at, e.message().trim().to_owned())
            }),
            Format::Json => serde_json::from_str(&self.text).map_err(|e| {
                let at = (e.line() > 0).then(|| (e.line(), e.column()));
                let message = e.to_string();
                // serde_json appends " at line L column C"; the prefix says it already.
                let message = message.split(" at line ").next().unwrap_or(&message).to_owned();
                self.error(at, message)
            }),
        }
    }

    /// An error at a place in the document named by a path of keys and indices (the nearest place found; for
    /// JSON, which keeps no positions here, the path is named in the message instead).
    pub fn error_at(&self, path: &[Seg<'_>], message: impl Into<String>) -> SourceError {
        let message = message.into();
        match self.format {
            Format::Toml => {
                let at = locate_toml(&self.text, path).map(|offset| line_col(&self.text, offset));
                self.error(at, message)
            }
            Format::Json => self.error(None, format!("{}: {message}", json_path(path))),
        }
    }

    /// An error at a line and column (1-based), or for the whole file.
    pub fn error(&self, at: Option<(usize, usize)>, message: impl Into<String>) -> SourceError {
        SourceError { file: self.name.clone(), at, message: message.into() }
    }
}

/// An error in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceError {
    /// The file.
    pub file: String,
    /// Line and column, 1-based, when known.
    pub at: Option<(usize, usize)>,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some((line, col)) => write!(f, "{}:{line}:{col}: {}", self.file, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for SourceError {}

/// The 1-based line and column (in characters) of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// The byte offset of the deepest part of `path` found in a TOML document.
fn locate_toml(text: &str, path: &[Seg<'_>]) -> Option<usize> {
    let table = DeTable::parse(text).ok()?;
    let root = DeValue::Table(table.into_inner());
    let mut current = &root;
    let mut found = None;
    for seg in path {
        let next = match (seg, current) {
            (Seg::Key(key), DeValue::Table(t)) => {
                t.iter().find(|(k, _)| k.get_ref().as_ref() == *key).map(|(k, v)| (k.span().start, v))
            }
            (Seg::Index(i), DeValue::Array(a)) => a.get(*i).map(|v| (v.span().start, v)),
            _ => None,
        };
        let Some((start, value)) = next else { break };
        found = Some(start);
        current = value.get_ref();
    }
    found
}

fn json_path(path: &[Seg<'_>]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if out.is_empty() => out.push_str(k),
            Seg::Key(k) => out.push_str(&format!(".{k}")),
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// A number (`120`, `2.5`) or a string, kept as text so a bad value can be quoted back as written.
pub(crate) fn number_or_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Int(i64),
        Float(f64),
        Text(String),
    }
    Ok(Some(match Raw::deserialize(deserializer)? {
        Raw::Int(n) => n.to_string(),
        Raw::Float(x) => x.to_string(),
        Raw::Text(t) => t,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn offsets_become_one_based_lines_and_columns() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 6), (2, 1));
        assert_eq!(line_col(text, 10), (2, 4));
    }

    #[test]
    fn a_path_finds_the_key_of_an_array_of_tables() {
        let src = Source::toml("r.toml", "[[rule]]\nid = \"a\"\n\n[[rule]]\nid = \"b\"\nregex = \"(\"\n");
        let err = src.error_at(&[Seg::Key("rule"), Seg::Index(1), Seg::Key("regex")], "bad");
        assert_eq!(err.to_string(), "r.toml:6:1: bad");
    }
}
