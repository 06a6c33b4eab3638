//! Keeping a call's result to the server's `max_result_bytes`: a result goes into every later model request of
//! the session, so a server must not be able to fill them with megabytes.

use noetic_core::model::{ContentBlock, ImageSource};
use noetic_steps::tool::ToolOutput;

/// How a result was cut: its size and what the model is shown of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cut {
    /// Bytes of the whole result (text, image data, resource text, JSON).
    pub(crate) total: usize,
    /// Bytes kept.
    pub(crate) kept: usize,
}

/// The bytes a block puts in front of a model.
fn size(block: &ContentBlock) -> usize {
    match block {
        ContentBlock::Text { text } => text.len(),
        ContentBlock::Image { media_type, source: ImageSource::Base64(data) | ImageSource::Url(data) } => {
            media_type.len() + data.len()
        }
        ContentBlock::Resource { uri, media_type, text } => {
            uri.len() + media_type.as_ref().map_or(0, String::len) + text.as_ref().map_or(0, String::len)
        }
        other => other.to_text().len(),
    }
}

/// The longest start of `text` of at most `max` bytes that ends on a character boundary.
fn prefix(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `block` cut to `room` bytes, if anything of it fits: text is cut, a resource keeps its URI and the start of
/// its text; an image or JSON that does not fit whole is left out.
fn shortened(block: ContentBlock, room: usize) -> Option<ContentBlock> {
    match block {
        ContentBlock::Text { text } if room > 0 => Some(ContentBlock::text(prefix(&text, room))),
        ContentBlock::Resource { uri, media_type, text } if room > uri.len() => {
            let left = room - uri.len() - media_type.as_ref().map_or(0, String::len).min(room - uri.len());
            Some(ContentBlock::resource(uri, media_type, text.map(|t| prefix(&t, left).to_owned())))
        }
        _ => None,
    }
}

/// Keeps `output` to `max` bytes. The blocks are kept in order while they fit; the first that does not is cut
/// (or left out), and the rest are left out. Structured data larger than `max` is left out: beside blocks it is
/// counted on its own (providers do not send it, it is kept for programs reading the result); alone it is what
/// the model reads, so it becomes its text, cut like any text. Returns the output and, when something was cut,
/// how much.
pub(crate) fn limit(output: ToolOutput, max: usize) -> (ToolOutput, Option<Cut>) {
    let ToolOutput { mut blocks, mut structured } = output;
    let mut total = 0;
    let mut cut = false;
    if let Some(value) = structured.take() {
        let text = ToolOutput::from(value.clone()).to_text();
        if text.len() <= max {
            structured = Some(value);
        } else if blocks.is_empty() {
            blocks.push(ContentBlock::text(text));
        } else {
            total += text.len();
            cut = true;
        }
    }
    let in_blocks: usize = blocks.iter().map(size).sum();
    total += in_blocks;
    if in_blocks <= max {
        return (ToolOutput { blocks, structured }, cut.then_some(Cut { total, kept: in_blocks }));
    }
    let mut kept = Vec::with_capacity(blocks.len());
    let mut used = 0;
    for block in blocks {
        let block_size = size(&block);
        if used + block_size <= max {
            used += block_size;
            kept.push(block);
            continue;
        }
        if let Some(short) = shortened(block, max - used) {
            used += size(&short);
            kept.push(short);
        }
        break;
    }
    (ToolOutput { blocks: kept, structured }, Some(Cut { total, kept: used }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use serde_json::json;

    use super::*;

    #[test]
    fn a_result_within_the_limit_is_kept_whole() {
        let output = ToolOutput::text("hello").with_structured(json!({"n": 1}));
        assert_eq!(limit(output.clone(), 100), (output, None));
    }

    #[test]
    fn text_past_the_limit_is_cut_on_a_character_boundary_and_later_blocks_are_left_out() {
        let output = ToolOutput::blocks([
            ContentBlock::text("abc"),
            ContentBlock::text("déf"),
            ContentBlock::image_base64("image/png", "AAAA"),
        ]);
        let (cut, how) = limit(output, 5);
        assert_eq!(cut.blocks, vec![ContentBlock::text("abc"), ContentBlock::text("d")]);
        assert_eq!(how, Some(Cut { total: 3 + 4 + 9 + 4, kept: 4 }));
    }

    #[test]
    fn an_image_that_does_not_fit_is_left_out_and_a_resource_keeps_its_uri() {
        let (cut, how) = limit(ToolOutput::blocks([ContentBlock::image_base64("image/png", "A".repeat(100))]), 50);
        assert!(cut.blocks.is_empty());
        assert_eq!(how, Some(Cut { total: 109, kept: 0 }));
        let resource = ContentBlock::resource("file:///a", None, Some("x".repeat(100)));
        let (cut, _) = limit(ToolOutput::blocks([resource]), 20);
        assert_eq!(cut.blocks, vec![ContentBlock::resource("file:///a", None, Some("x".repeat(11)))]);
    }

    #[test]
    fn structured_data_alone_becomes_its_cut_text_and_beside_blocks_is_left_out_when_too_large() {
        let big = json!({"items": "y".repeat(100)});
        let (cut, how) = limit(ToolOutput::from(big.clone()), 20);
        assert_eq!(cut.structured, None);
        assert_eq!(cut.blocks, vec![ContentBlock::text(&big.to_string()[..20])]);
        assert_eq!(how, Some(Cut { total: big.to_string().len(), kept: 20 }));
        let (cut, how) = limit(ToolOutput::text("short").with_structured(big.clone()), 20);
        assert_eq!((cut.blocks, cut.structured), (vec![ContentBlock::text("short")], None));
        assert_eq!(how, Some(Cut { total: 5 + big.to_string().len(), kept: 5 }));
    }
}
