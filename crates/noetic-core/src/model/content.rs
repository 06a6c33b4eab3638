//! Rich tool results: the content blocks a tool's output may carry besides its text, and the one place where they
//! become the text a text-only provider shows the model.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One piece of a tool's output: text, JSON, or a reference to an image or a resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// A JSON value (shown to text-only models as compact JSON).
    Json {
        /// The value.
        value: Value,
    },
    /// An image, inline or by URL. Providers whose tool results take images (Anthropic) send it as one; the
    /// others show the model a placeholder naming it.
    Image {
        /// Its media type, e.g. `image/png`.
        media_type: String,
        /// Where its bytes are.
        source: ImageSource,
    },
    /// A reference to a resource (a file, a record) by URI, with its text when the tool included it.
    Resource {
        /// The resource's URI.
        uri: String,
        /// Its media type, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        media_type: Option<String>,
        /// Its text content, when the tool embedded it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
}

/// Where an image's bytes are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageSource {
    /// Inline, base64-encoded.
    Base64(String),
    /// At a URL the provider fetches.
    Url(String),
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }

    /// A JSON block.
    pub fn json(value: Value) -> Self {
        ContentBlock::Json { value }
    }

    /// An inline image from base64-encoded bytes.
    pub fn image_base64(media_type: impl Into<String>, data: impl Into<String>) -> Self {
        ContentBlock::Image { media_type: media_type.into(), source: ImageSource::Base64(data.into()) }
    }

    /// An image at a URL.
    pub fn image_url(media_type: impl Into<String>, url: impl Into<String>) -> Self {
        ContentBlock::Image { media_type: media_type.into(), source: ImageSource::Url(url.into()) }
    }

    /// A resource reference, optionally with its text.
    pub fn resource(uri: impl Into<String>, media_type: Option<String>, text: Option<String>) -> Self {
        ContentBlock::Resource { uri: uri.into(), media_type, text }
    }

    /// True for a text block: it says nothing the result's text does not.
    pub fn is_text(&self) -> bool {
        matches!(self, ContentBlock::Text { .. })
    }

    /// What a model that reads only text sees of this block: text as it is, JSON compact, an image or a resource
    /// as a bracketed line naming it (followed by the resource's text when embedded).
    pub fn to_text(&self) -> String {
        match self {
            ContentBlock::Text { text } => text.clone(),
            ContentBlock::Json { value } => value.to_string(),
            ContentBlock::Image { media_type, source: ImageSource::Url(url) } => format!("[image {media_type}: {url}]"),
            ContentBlock::Image { media_type, source: ImageSource::Base64(data) } => {
                // Base64 holds 3 bytes per 4 characters; trailing '=' pad the last group.
                let padding = data.bytes().rev().take_while(|&b| b == b'=').count();
                format!("[image {media_type}, {} bytes]", (data.len() / 4 * 3).saturating_sub(padding))
            }
            ContentBlock::Resource { uri, text: Some(text), .. } => format!("[resource {uri}]\n{text}"),
            ContentBlock::Resource { uri, text: None, .. } => format!("[resource {uri}]"),
        }
    }
}

/// The text of `blocks` for a model that reads only text: each block's text, one after another on new lines.
pub fn blocks_text(blocks: &[ContentBlock]) -> String {
    let mut text = String::new();
    for (i, block) in blocks.iter().enumerate() {
        if i > 0 {
            text.push('\n');
        }
        text.push_str(&block.to_text());
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use serde_json::json;

    use super::*;

    #[test]
    fn every_block_has_a_text_form_for_text_only_models() {
        let blocks = [
            ContentBlock::text("found 2 files"),
            ContentBlock::json(json!({"n": 2})),
            ContentBlock::image_base64("image/png", "iVBORw0KGgo="),
            ContentBlock::image_url("image/jpeg", "https://example.com/a.jpg"),
            ContentBlock::resource("file:///a.txt", Some("text/plain".into()), Some("hello".into())),
            ContentBlock::resource("file:///b.bin", None, None),
        ];
        assert_eq!(
            blocks_text(&blocks),
            "found 2 files\n{\"n\":2}\n[image image/png, 8 bytes]\n[image image/jpeg: https://example.com/a.jpg]\n\
             [resource file:///a.txt]\nhello\n[resource file:///b.bin]"
        );
    }

    #[test]
    fn blocks_serialise_tagged_by_type_and_read_back() {
        let block = ContentBlock::image_base64("image/png", "AAAA");
        let json = serde_json::to_value(&block).unwrap();
        assert_eq!(json, json!({"type": "image", "media_type": "image/png", "source": {"base64": "AAAA"}}));
        assert_eq!(serde_json::from_value::<ContentBlock>(json).unwrap(), block);
        let resource = serde_json::to_value(ContentBlock::resource("file:///x", None, None)).unwrap();
        assert_eq!(resource, json!({"type": "resource", "uri": "file:///x"}));
    }
}
