//! Markdown a model wrote, for the terminal: code fences framed, headings bold, list items with bullets,
//! emphasis, inline code and links styled. Line by line, so streamed text is rendered as each line completes.
//!
//! The model's text is untrusted: every piece of it goes through [`printable`] (after pulldown-cmark has decoded
//! entities such as `&#27;`), so the only escape codes in the output are the renderer's own colours.

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

use super::{Style, printable};

/// Renders streamed markdown line by line.
pub struct Markdown {
    style: Style,
    /// The open code fence's marker (three or more backticks or tildes), while inside one.
    fence: Option<String>,
    /// Text of the line not finished yet.
    pending: String,
}

impl Markdown {
    /// A renderer at the start of a text.
    pub fn new(style: Style) -> Self {
        Markdown { style, fence: None, pending: String::new() }
    }

    /// Adds streamed text; returns the lines it finished, rendered.
    pub fn push(&mut self, text: &str) -> Vec<String> {
        self.pending.push_str(text);
        let mut done = Vec::new();
        while let Some(end) = self.pending.find('\n') {
            let line: String = self.pending.drain(..=end).collect();
            done.push(self.line(line.trim_end_matches(['\n', '\r'])));
        }
        done
    }

    /// The unfinished line as it shows while it streams: printable, not rendered yet.
    pub fn partial(&self) -> String {
        printable(&self.pending)
    }

    /// Ends the text: its unfinished line rendered (if any); an open fence is closed.
    pub fn finish(&mut self) -> Vec<String> {
        let mut done = Vec::new();
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            done.push(self.line(&line));
        }
        if self.fence.take().is_some() {
            done.push(self.style.dim("  └─"));
        }
        done
    }

    /// One finished line, rendered.
    fn line(&mut self, line: &str) -> String {
        let trimmed = line.trim_start();
        if let Some(marker) = &self.fence {
            if trimmed.starts_with(marker.as_str()) && trimmed.trim_start_matches(marker.as_str()).trim().is_empty() {
                self.fence = None;
                return self.style.dim("  └─");
            }
            return format!("{} {}", self.style.dim("  │"), self.style.cyan(&printable(line)));
        }
        if let Some(marker) = fence_marker(trimmed) {
            let language = printable(trimmed[marker.len()..].trim());
            self.fence = Some(marker);
            return self.style.dim(format!("  ┌─ {language}").trim_end());
        }
        let indent = &line[..line.len() - trimmed.len()];
        let indent = " ".repeat(indent.chars().map(|c| if c == '\t' { 4 } else { 1 }).sum());
        if let Some(rest) = heading(trimmed) {
            return format!("{indent}{}", self.style.bold(&inline(self.style, rest)));
        }
        if is_rule(trimmed) {
            return self.style.dim(&format!("{indent}{}", "─".repeat(40)));
        }
        if let Some(rest) = ["- ", "* ", "+ "].iter().find_map(|b| trimmed.strip_prefix(b)) {
            return format!("{indent}• {}", inline(self.style, rest));
        }
        if let Some(rest) = trimmed.strip_prefix('>') {
            return format!("{indent}{} {}", self.style.dim("│"), inline(self.style, rest.trim_start()));
        }
        if let Some((number, rest)) = ordered_item(trimmed) {
            return format!("{indent}{number}. {}", inline(self.style, rest));
        }
        format!("{indent}{}", inline(self.style, trimmed))
    }
}

/// A whole text rendered (an answer that was not streamed).
pub fn render(style: Style, text: &str) -> String {
    let mut markdown = Markdown::new(style);
    let mut lines = markdown.push(text);
    lines.extend(markdown.finish());
    lines.join("\n")
}

/// The fence a line opens: three or more backticks or tildes at its start.
fn fence_marker(line: &str) -> Option<String> {
    let first = line.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let marker: String = line.chars().take_while(|c| *c == first).collect();
    (marker.len() >= 3 && !(first == '`' && line[marker.len()..].contains('`'))).then_some(marker)
}

/// A heading's text (`# Title` up to `###### Title`).
fn heading(line: &str) -> Option<&str> {
    let hashes = line.chars().take_while(|c| *c == '#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &line[hashes..];
    (rest.is_empty() || rest.starts_with(' ')).then(|| rest.trim().trim_end_matches('#').trim_end())
}

/// A thematic break: three or more `-`, `*` or `_` alone on the line (spaces allowed).
fn is_rule(line: &str) -> bool {
    let marks: Vec<char> = line.chars().filter(|c| !c.is_whitespace()).collect();
    marks.len() >= 3 && ['-', '*', '_'].iter().any(|m| marks.iter().all(|c| c == m))
}

/// An ordered list item's number and text (`1. text`, `2) text`).
fn ordered_item(line: &str) -> Option<(&str, &str)> {
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 || digits > 9 {
        return None;
    }
    let rest = &line[digits..];
    let rest = rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") "))?;
    Some((&line[..digits], rest))
}

/// Inline markdown (emphasis, strong, strikethrough, code spans, links) of one line, styled; every text
/// through [`printable`].
fn inline(style: Style, text: &str) -> String {
    let mut out = String::new();
    // Open emphasis, strong and strikethrough spans: the SGR codes text inside them gets.
    let mut open: Vec<&'static str> = Vec::new();
    let mut links: Vec<String> = Vec::new();
    let mut link_text = String::new();
    let paint = |open: &[&str], text: &str| {
        if open.is_empty() || !style.colour { text.to_owned() } else { style.paint(&open.join(";"), text) }
    };
    for event in Parser::new_ext(text, Options::ENABLE_STRIKETHROUGH) {
        let piece = match event {
            Event::Text(t) | Event::Html(t) | Event::InlineHtml(t) => paint(&open, &printable(&t)),
            Event::Code(code) if style.colour => style.cyan(&printable(&code)),
            Event::Code(code) => format!("`{}`", printable(&code)),
            Event::SoftBreak | Event::HardBreak => " ".to_owned(),
            Event::TaskListMarker(done) => (if done { "[x] " } else { "[ ] " }).to_owned(),
            Event::Start(Tag::Emphasis) => {
                open.push("3");
                continue;
            }
            Event::Start(Tag::Strong) => {
                open.push("1");
                continue;
            }
            Event::Start(Tag::Strikethrough) => {
                open.push("9");
                continue;
            }
            Event::End(TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough) => {
                open.pop();
                continue;
            }
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                links.push(dest_url.to_string());
                link_text = out.clone();
                continue;
            }
            Event::End(TagEnd::Link | TagEnd::Image) => {
                let Some(url) = links.pop() else { continue };
                // The address is shown when it is not the text itself (a bare link).
                let shown = out.strip_prefix(link_text.as_str()).unwrap_or("");
                if !url.is_empty() && shown != printable(&url) {
                    style.dim(&format!(" ({})", printable(&url)))
                } else {
                    continue;
                }
            }
            _ => continue,
        };
        out.push_str(&piece);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    const PLAIN: Style = Style { colour: false };
    const COLOUR: Style = Style { colour: true };

    #[test]
    fn a_code_fence_is_framed_and_its_lines_are_kept_as_written() {
        let text = "Run this:\n```rust\nfn main() {\n    println!(\"*hi*\");\n}\n```\nDone.";
        assert_eq!(
            render(PLAIN, text),
            "Run this:\n  ┌─ rust\n  │ fn main() {\n  │     println!(\"*hi*\");\n  │ }\n  └─\nDone."
        );
    }

    #[test]
    fn lists_headings_emphasis_code_spans_and_links_are_rendered() {
        let text = "## Plan\n- read **the** file\n  * then *edit* it\n2. run `cargo test`\n> quoted\n---\nsee \
                    [the docs](https://docs.rs/x) or https://example.com";
        assert_eq!(
            render(PLAIN, text),
            "Plan\n• read the file\n  • then edit it\n2. run `cargo test`\n│ quoted\n────────────────────────────────────────\n\
             see the docs (https://docs.rs/x) or https://example.com"
        );
        assert_eq!(render(COLOUR, "**bold** and *it*"), "\u{1b}[1mbold\u{1b}[0m and \u{1b}[3mit\u{1b}[0m");
    }

    #[test]
    fn streamed_text_is_rendered_as_each_line_ends_and_a_fence_across_chunks_holds() {
        let mut markdown = Markdown::new(PLAIN);
        assert!(markdown.push("Some **bo").is_empty());
        assert_eq!(markdown.partial(), "Some **bo");
        assert_eq!(markdown.push("ld** text\n``").as_slice(), ["Some bold text"]);
        assert_eq!(markdown.push("`sh\nls -la\n").as_slice(), ["  ┌─ sh", "  │ ls -la"]);
        assert_eq!(markdown.push("# not a heading in code").as_slice(), [] as [&str; 0]);
        assert_eq!(markdown.finish().as_slice(), ["  │ # not a heading in code", "  └─"]);
    }

    /// Every escape sequence in `rendered` is one of the renderer's own colours (`ESC [ digits;… m`).
    fn only_own_colours(rendered: &str) -> bool {
        let mut rest = rendered;
        while let Some(at) = rest.find('\u{1b}') {
            let after = &rest[at + 1..];
            let Some(body) = after.strip_prefix('[') else { return false };
            let end = body.find('m').unwrap_or(body.len());
            if end == body.len() || !body[..end].chars().all(|c| c.is_ascii_digit() || c == ';') {
                return false;
            }
            rest = &body[end + 1..];
        }
        !rendered.contains(['\u{7}', '\u{9b}', '\r', '\u{202e}'])
    }

    #[test]
    fn escape_sequences_smuggled_through_markdown_never_reach_the_terminal() {
        let attacks = [
            "# title\u{1b}]0;pwned\u{7}",
            "- item \u{1b}[2J\u{1b}[H",
            "**bold\u{1b}[8m hidden**",
            "`code \u{1b}]8;;https://evil.example\u{1b}\\link\u{1b}]8;;\u{1b}\\`",
            "[click](https://a.example/\u{1b}]8;;evil\u{7}) and ![img](x\u{9b}31m)",
            "entity &#27;[31m red &#x1b;]0;t&#7; &#155;2J",
            "> quote \r overwritten \u{202e}reversed",
            "```\u{1b}[31m\nin code \u{1b}[2K\r\n```",
            "<span>\u{1b}[5m</span> <b>html</b>",
        ];
        for attack in attacks {
            for style in [PLAIN, COLOUR] {
                let shown = render(style, attack);
                assert!(only_own_colours(&shown), "{attack:?} rendered as {shown:?}");
            }
            assert!(!render(PLAIN, attack).contains('\u{1b}'), "{attack:?}");
        }
        assert_eq!(render(PLAIN, "entity &#27;[31m"), "entity \\u001b[31m");
    }
}
