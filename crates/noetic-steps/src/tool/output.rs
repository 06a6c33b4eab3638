//! What a tool returns: structured data, content blocks (text, JSON, image and resource references), or both.

use std::sync::Arc;

use serde_json::Value;

use crate::model::{ContentBlock, ToolResult, blocks_text};

/// A tool's output. Most tools return a JSON value (it converts with `From`); a tool that has more to say —
/// an image, a file it read, text beside machine-readable data — returns content blocks, with structured data
/// beside them when it has some (an MCP tool's `structuredContent`).
///
/// ```
/// use noetic::model::ContentBlock;
/// use noetic::tool::ToolOutput;
/// use serde_json::json;
///
/// let plain: ToolOutput = json!({"sum": 5}).into();
/// assert_eq!(plain.to_text(), r#"{"sum":5}"#);
///
/// let chart = ToolOutput::text("Sales rose 5 % in May.")
///     .with_block(ContentBlock::image_base64("image/png", "iVBORw0KGgo="))
///     .with_structured(json!({"may": 0.05}));
/// assert_eq!(chart.to_text(), "Sales rose 5 % in May.\n[image image/png, 8 bytes]");
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolOutput {
    /// Content blocks, in order. Empty for a plain JSON result.
    pub blocks: Vec<ContentBlock>,
    /// Structured data: checked against the tool's output schema when it declares one.
    pub structured: Option<Value>,
}

impl From<Value> for ToolOutput {
    fn from(value: Value) -> Self {
        ToolOutput { blocks: Vec::new(), structured: Some(value) }
    }
}

impl From<ContentBlock> for ToolOutput {
    fn from(block: ContentBlock) -> Self {
        ToolOutput { blocks: vec![block], structured: None }
    }
}

impl From<Vec<ContentBlock>> for ToolOutput {
    fn from(blocks: Vec<ContentBlock>) -> Self {
        ToolOutput { blocks, structured: None }
    }
}

/// The text of a JSON result for the model: a string as it is, anything else as compact JSON.
pub(crate) fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl ToolOutput {
    /// One text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::text(text).into()
    }

    /// Content blocks without structured data.
    pub fn blocks(blocks: impl IntoIterator<Item = ContentBlock>) -> Self {
        ToolOutput { blocks: blocks.into_iter().collect(), structured: None }
    }

    /// Adds a content block after the others.
    pub fn with_block(mut self, block: ContentBlock) -> Self {
        self.blocks.push(block);
        self
    }

    /// Sets the structured data.
    pub fn with_structured(mut self, value: Value) -> Self {
        self.structured = Some(value);
        self
    }

    /// What a model that reads only text sees: the blocks' text when there are blocks, else the structured data
    /// (a string as it is, anything else as compact JSON).
    pub fn to_text(&self) -> String {
        match (&self.blocks[..], &self.structured) {
            ([], Some(value)) => value_text(value),
            ([], None) => String::new(),
            (blocks, _) => blocks_text(blocks),
        }
    }

    /// The output as one JSON value (what a `tool` step's output type is read from): the structured data when
    /// there is some, else the text of text-only blocks as a string, else the blocks as a JSON array.
    pub fn into_value(self) -> Value {
        if let Some(value) = self.structured {
            return value;
        }
        if self.blocks.iter().all(ContentBlock::is_text) {
            return Value::String(blocks_text(&self.blocks));
        }
        serde_json::to_value(&self.blocks).unwrap_or(Value::Null)
    }

    /// The successful tool result for call `call_id`: the text, and the blocks and structured data only when the
    /// text does not already say everything (see [`ToolResult`]).
    pub(crate) fn into_result(self, call_id: &Arc<str>) -> ToolResult {
        let content = match (&self.blocks[..], self.structured) {
            // A plain string (most tools' answer) is the text as it is: moved, not copied.
            ([], Some(Value::String(text))) => text,
            ([], Some(value)) => value_text(&value),
            ([], None) => String::new(),
            (blocks, structured) => {
                let text = blocks_text(blocks);
                let blocks = if self.blocks.iter().all(ContentBlock::is_text) { Vec::new() } else { self.blocks };
                return ToolResult {
                    call_id: call_id.clone(),
                    content: text.into(),
                    is_error: false,
                    blocks,
                    structured,
                };
            }
        };
        ToolResult {
            call_id: call_id.clone(),
            content: content.into(),
            is_error: false,
            blocks: Vec::new(),
            structured: None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use serde_json::json;

    use super::*;

    #[test]
    fn a_plain_json_result_is_only_text_in_the_tool_result() {
        let result = ToolOutput::from(json!({"sum": 5})).into_result(&"c1".into());
        assert_eq!(result, ToolResult::ok("c1", r#"{"sum":5}"#));
        let result = ToolOutput::from(json!("sunny")).into_result(&"c2".into());
        assert_eq!(result, ToolResult::ok("c2", "sunny"));
    }

    #[test]
    fn text_blocks_become_the_text_and_structured_data_beside_them_is_kept() {
        let result = ToolOutput::text("2 files").with_structured(json!({"count": 2})).into_result(&"c1".into());
        assert_eq!(&*result.content, "2 files");
        assert!(result.blocks.is_empty(), "text blocks say nothing the content does not: {result:?}");
        assert_eq!(result.structured, Some(json!({"count": 2})));
    }

    #[test]
    fn an_image_block_is_kept_beside_its_text_form() {
        let image = ContentBlock::image_url("image/png", "https://example.com/p.png");
        let result = ToolOutput::text("the plot:").with_block(image.clone()).into_result(&"c1".into());
        assert_eq!(&*result.content, "the plot:\n[image image/png: https://example.com/p.png]");
        assert_eq!(result.blocks, vec![ContentBlock::text("the plot:"), image]);
        assert!(result.has_rich_blocks());
    }

    #[test]
    fn the_value_of_an_output_prefers_structured_data_then_text_then_the_blocks() {
        assert_eq!(ToolOutput::text("a").with_structured(json!(1)).into_value(), json!(1));
        assert_eq!(ToolOutput::blocks([ContentBlock::text("a"), ContentBlock::text("b")]).into_value(), json!("a\nb"));
        let image = ContentBlock::image_base64("image/png", "AAAA");
        assert_eq!(
            ToolOutput::from(image).into_value(),
            json!([{"type": "image", "media_type": "image/png", "source": {"base64": "AAAA"}}])
        );
    }
}
