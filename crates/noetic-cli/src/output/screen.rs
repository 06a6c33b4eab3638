//! A terminal whose bottom row is an input line that stays usable while output scrolls above it.
//!
//! Output is line-based: a finished line is written once and scrolls away like any terminal output, so the
//! terminal's own scrollback, selection and copying keep working (a full-screen UI would take them). Only the
//! bottom is redrawn: the streamed line still being written (kept shorter than the terminal is wide, so it is
//! always one row) and the prompt with what the user is typing. Keys are read in raw mode on a thread of their
//! own and handed to the async side as [`Input`].
//!
//! Raw mode is left when the [`Screen`] is dropped, also when the program ends through an error.

use std::sync::{Arc, Mutex, MutexGuard};

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use tokio::sync::mpsc;
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use crate::output::out;

/// What the keys typed at the input line mean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Enter: the line typed (the input line is empty again).
    Line(String),
    /// Esc.
    Escape,
    /// Ctrl-C.
    Interrupt,
    /// Ctrl-D on an empty input line (end of input).
    Eof,
}

/// The bottom of the terminal: the unfinished streamed line, the prompt and the input line.
struct Bottom {
    /// Streamed text of a line not finished yet (already made printable).
    partial: String,
    /// Rows drawn above the input line (the partial line, the status row).
    rows_above: usize,
    /// What runs now (a spinner and its time), drawn on the row above the input line while set.
    status: Option<String>,
    prompt: String,
    input: Vec<char>,
    /// Cursor position in `input`.
    cursor: usize,
    columns: usize,
    /// Raw mode is on (and must be left).
    raw: bool,
}

/// A shared handle on the terminal (the chat loop and the demo's printer print through clones of it).
#[derive(Clone)]
pub struct Screen {
    bottom: Arc<Mutex<Bottom>>,
}

/// The terminal cells a character takes (0 for marks that combine with the one before).
fn cells(c: char) -> usize {
    UnicodeWidthChar::width(c).unwrap_or(0)
}

/// The byte where `text` stops fitting in `columns` cells (its length when it fits).
fn fitting(text: &str, columns: usize) -> usize {
    let mut used = 0;
    for (i, c) in text.char_indices() {
        used += cells(c);
        if used > columns {
            return i;
        }
    }
    text.len()
}

/// `\n` as a raw-mode terminal needs it (raw mode turns off the translation to `\r\n`).
fn raw_lines(text: &str) -> String {
    text.replace("\r\n", "\n").replace('\n', "\r\n")
}

impl Screen {
    /// Enters raw mode and starts reading keys; `None` (after saying why) when raw mode cannot be had, so the
    /// caller falls back to plain lines.
    pub fn open(prompt: &str) -> Option<(Screen, mpsc::UnboundedReceiver<Input>)> {
        if let Err(e) = crossterm::terminal::enable_raw_mode() {
            crate::output::errln!("the terminal cannot be put in raw mode ({e}); lines are read as typed");
            return None;
        }
        let columns = crossterm::terminal::size().map(|(c, _)| usize::from(c)).unwrap_or(80);
        let screen = Screen {
            bottom: Arc::new(Mutex::new(Bottom {
                partial: String::new(),
                rows_above: 0,
                status: None,
                prompt: prompt.to_owned(),
                input: Vec::new(),
                cursor: 0,
                columns: columns.max(20),
                raw: true,
            })),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        // Weak: the screen (and raw mode) ends when its last user drops it, not when this thread does.
        let keys = Arc::downgrade(&screen.bottom);
        std::thread::spawn(move || {
            while let Ok(event) = crossterm::event::read() {
                let Some(bottom) = keys.upgrade() else { break };
                let input = Screen { bottom }.on_terminal_event(event);
                if let Some(input) = input
                    && tx.send(input).is_err()
                {
                    break;
                }
            }
        });
        screen.with(|b| b.draw());
        Some((screen, rx))
    }

    /// A screen that writes nowhere-special and reads no keys: for tests of what is drawn.
    #[cfg(test)]
    pub fn detached(columns: usize) -> Screen {
        Screen {
            bottom: Arc::new(Mutex::new(Bottom {
                partial: String::new(),
                rows_above: 0,
                status: None,
                prompt: "> ".into(),
                input: Vec::new(),
                cursor: 0,
                columns,
                raw: false,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Bottom> {
        // A panic while printing leaves the state usable: it is only what is drawn.
        self.bottom.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn with<T>(&self, f: impl FnOnce(&mut Bottom) -> T) -> T {
        f(&mut self.lock())
    }

    /// Prints a finished line (it may hold several) above the input line. A streamed line being written stays
    /// below it, whole, and goes on when more text comes (so a line the user sends mid-answer does not cut it).
    pub fn line(&self, text: &str) {
        self.with(|b| {
            let mut text = raw_lines(text);
            text.push_str("\r\n");
            b.print_above(&text);
        });
    }

    /// Prints rendered lines that replace the streamed text written so far, and makes `partial` (printable) the
    /// unfinished streamed line; a partial line wider than the terminal shows its end.
    pub fn stream_rendered(&self, lines: &[String], partial: &str) {
        self.with(|b| {
            b.erase();
            b.partial.clear();
            let mut text = String::new();
            for line in lines {
                text.push_str(&raw_lines(line));
                text.push_str("\r\n");
            }
            let width = b.columns.saturating_sub(2).max(1);
            let cells = UnicodeWidthStr::width(partial);
            b.partial = if cells <= width {
                partial.replace(['\r', '\n'], "")
            } else {
                let mut start = partial.len();
                let mut used = 0;
                for (i, c) in partial.char_indices().rev() {
                    if used + self::cells(c) > width.saturating_sub(1) {
                        break;
                    }
                    used += self::cells(c);
                    start = i;
                }
                format!("…{}", &partial[start..])
            };
            out!("{}", if b.raw { text } else { text.replace("\r\n", "\n") });
            b.draw();
        });
    }

    /// Sets (or with `None` removes) the status row above the input line: what runs and for how long.
    pub fn set_status(&self, status: Option<String>) {
        self.with(|b| {
            if b.status != status {
                b.status = status;
                b.redraw();
            }
        });
    }

    /// Sets the prompt before the input line (for example when a question waits for an answer).
    pub fn set_prompt(&self, prompt: &str) {
        self.with(|b| {
            if b.prompt != prompt {
                prompt.clone_into(&mut b.prompt);
                b.redraw();
            }
        });
    }

    /// Whether the input line holds typed text.
    pub fn has_input(&self) -> bool {
        self.with(|b| !b.input.is_empty())
    }

    /// Empties the input line.
    pub fn clear_input(&self) {
        self.with(|b| {
            b.input.clear();
            b.cursor = 0;
            b.redraw();
        });
    }

    /// Erases the bottom rows and leaves raw mode; later output is plain.
    pub fn close(&self) {
        self.with(|b| b.close());
    }

    fn on_terminal_event(&self, event: Event) -> Option<Input> {
        self.with(|b| match event {
            Event::Key(key) if key.kind != KeyEventKind::Release => {
                let input = b.key(key);
                b.redraw();
                input
            }
            Event::Resize(columns, _) => {
                b.columns = usize::from(columns).max(20);
                b.redraw();
                None
            }
            _ => None,
        })
    }

    /// What the input line shows now (prompt and text), for tests.
    #[cfg(test)]
    fn input_text(&self) -> String {
        self.with(|b| format!("{}{}", b.prompt, b.input.iter().collect::<String>()))
    }

    /// Types a key, as the key thread does.
    #[cfg(test)]
    fn press(&self, code: KeyCode, modifiers: KeyModifiers) -> Option<Input> {
        self.on_terminal_event(Event::Key(KeyEvent::new(code, modifiers)))
    }
}

impl Drop for Bottom {
    fn drop(&mut self) {
        self.close();
    }
}

impl Bottom {
    fn close(&mut self) {
        if self.raw {
            self.erase();
            if !self.partial.is_empty() {
                out!("{}\r\n", self.partial);
                self.partial.clear();
            }
            self.raw = false;
            let _ = crossterm::terminal::disable_raw_mode();
        }
    }

    /// Moves to the top of the bottom rows and erases them.
    fn erase(&mut self) {
        if !self.raw {
            return;
        }
        let up = if self.rows_above > 0 { format!("\x1b[{}A", self.rows_above) } else { String::new() };
        out!("\r{up}\x1b[J");
        self.rows_above = 0;
    }

    /// Draws the partial line (if any) and the input line, the cursor where the user types.
    fn draw(&mut self) {
        if !self.raw {
            return;
        }
        let mut text = String::new();
        if !self.partial.is_empty() {
            text.push_str(&self.partial);
            text.push_str("\r\n");
            self.rows_above += 1;
        }
        if let Some(status) = &self.status {
            let fits = fitting(status, self.columns.saturating_sub(1));
            text.push_str(&status[..fits]);
            text.push_str("\r\n");
            self.rows_above += 1;
        }
        // A line longer than the terminal scrolls sideways so the cursor stays visible.
        let prompt = UnicodeWidthStr::width(self.prompt.as_str());
        let room = self.columns.saturating_sub(prompt + 1).max(1);
        let mut start = self.cursor;
        let mut before = 0;
        while start > 0 && before + cells(self.input[start - 1]) < room {
            start -= 1;
            before += cells(self.input[start]);
        }
        let mut end = self.cursor;
        let mut used = before;
        while end < self.input.len() && used + cells(self.input[end]) <= room {
            used += cells(self.input[end]);
            end += 1;
        }
        let shown: String = self.input[start..end].iter().collect();
        text.push_str(&self.prompt);
        text.push_str(&shown);
        let column = prompt + before;
        text.push('\r');
        if column > 0 {
            text.push_str(&format!("\x1b[{column}C"));
        }
        out!("{text}");
    }

    fn redraw(&mut self) {
        self.erase();
        self.draw();
    }

    /// Writes finished text above the bottom rows (the partial line stays below it).
    fn print_above(&mut self, text: &str) {
        if !self.raw {
            out!("{}", text.replace("\r\n", "\n"));
            return;
        }
        self.erase();
        out!("{text}");
        self.draw();
    }

    /// Edits the input line; returns what a key means beyond editing.
    fn key(&mut self, key: KeyEvent) -> Option<Input> {
        let control = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Char('c') if control => return Some(Input::Interrupt),
            KeyCode::Char('d') if control => {
                if self.input.is_empty() {
                    return Some(Input::Eof);
                }
                if self.cursor < self.input.len() {
                    self.input.remove(self.cursor);
                }
            }
            KeyCode::Char('a') if control => self.cursor = 0,
            KeyCode::Char('e') if control => self.cursor = self.input.len(),
            KeyCode::Char('u') if control => {
                self.input.drain(..self.cursor);
                self.cursor = 0;
            }
            KeyCode::Char('w') if control => {
                let mut start = self.cursor;
                while start > 0 && self.input[start - 1] == ' ' {
                    start -= 1;
                }
                while start > 0 && self.input[start - 1] != ' ' {
                    start -= 1;
                }
                self.input.drain(start..self.cursor);
                self.cursor = start;
            }
            KeyCode::Char(c) if !control && !key.modifiers.contains(KeyModifiers::ALT) && !c.is_control() => {
                self.input.insert(self.cursor, c);
                self.cursor += 1;
            }
            KeyCode::Tab => {
                self.input.insert(self.cursor, ' ');
                self.cursor += 1;
            }
            KeyCode::Backspace if self.cursor > 0 => {
                self.cursor -= 1;
                self.input.remove(self.cursor);
            }
            KeyCode::Delete if self.cursor < self.input.len() => {
                self.input.remove(self.cursor);
            }
            KeyCode::Left => self.cursor = self.cursor.saturating_sub(1),
            KeyCode::Right => self.cursor = (self.cursor + 1).min(self.input.len()),
            KeyCode::Home => self.cursor = 0,
            KeyCode::End => self.cursor = self.input.len(),
            KeyCode::Enter => {
                let line: String = self.input.drain(..).collect();
                self.cursor = 0;
                return Some(Input::Line(line));
            }
            KeyCode::Esc => return Some(Input::Escape),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn typed(screen: &Screen, text: &str) {
        for c in text.chars() {
            assert_eq!(screen.press(KeyCode::Char(c), KeyModifiers::NONE), None);
        }
    }

    #[test]
    fn enter_hands_over_the_typed_line_and_empties_the_input_line() {
        let screen = Screen::detached(40);
        typed(&screen, "helo");
        screen.press(KeyCode::Left, KeyModifiers::NONE);
        typed(&screen, "l");
        assert_eq!(screen.input_text(), "> hello");
        assert_eq!(screen.press(KeyCode::Enter, KeyModifiers::NONE), Some(Input::Line("hello".into())));
        assert_eq!(screen.input_text(), "> ");
    }

    #[test]
    fn editing_keys_change_the_line_and_control_keys_are_not_typed() {
        let screen = Screen::detached(40);
        typed(&screen, "one two three");
        screen.press(KeyCode::Char('w'), KeyModifiers::CONTROL);
        assert_eq!(screen.input_text(), "> one two ");
        screen.press(KeyCode::Backspace, KeyModifiers::NONE);
        screen.press(KeyCode::Home, KeyModifiers::NONE);
        screen.press(KeyCode::Delete, KeyModifiers::NONE);
        assert_eq!(screen.input_text(), "> ne two");
        screen.press(KeyCode::Char('x'), KeyModifiers::ALT);
        screen.press(KeyCode::End, KeyModifiers::NONE);
        screen.press(KeyCode::Char('u'), KeyModifiers::CONTROL);
        assert_eq!(screen.input_text(), "> ");
    }

    #[test]
    fn esc_ctrl_c_and_ctrl_d_on_an_empty_line_are_commands_not_text() {
        let screen = Screen::detached(40);
        assert_eq!(screen.press(KeyCode::Esc, KeyModifiers::NONE), Some(Input::Escape));
        assert_eq!(screen.press(KeyCode::Char('c'), KeyModifiers::CONTROL), Some(Input::Interrupt));
        assert_eq!(screen.press(KeyCode::Char('d'), KeyModifiers::CONTROL), Some(Input::Eof));
        typed(&screen, "ab");
        screen.press(KeyCode::Home, KeyModifiers::NONE);
        assert_eq!(screen.press(KeyCode::Char('d'), KeyModifiers::CONTROL), None, "Ctrl-D deletes in a line");
        assert_eq!(screen.input_text(), "> b");
    }

    #[test]
    fn a_line_printed_mid_stream_goes_above_the_streamed_line_which_stays_whole_until_the_stream_ends() {
        let screen = Screen::detached(40);
        screen.with(|b| b.raw = true);
        screen.stream_rendered(&[], "To write hello");
        screen.line("you   actually, call it greeting.txt");
        screen.stream_rendered(&[], "To write hello world");
        let partial = screen.with(|b| b.partial.clone());
        assert_eq!(partial, "To write hello world");
        screen.stream_rendered(&["To write hello world.".to_owned()], "");
        let partial = screen.with(|b| {
            b.raw = false;
            b.partial.clone()
        });
        assert_eq!(partial, "");
    }

    #[test]
    fn a_streamed_line_wider_than_the_terminal_shows_its_end_counting_wide_characters_as_two_cells() {
        let screen = Screen::detached(10);
        screen.with(|b| b.raw = true);
        screen.stream_rendered(&[], "日本語のテキスト");
        let partial = screen.with(|b| b.partial.clone());
        assert_eq!(partial, "…キスト", "three wide characters (6 cells) and the ellipsis fit in 8 cells");
        screen.stream_rendered(&[], "abcdefghijklmnop");
        let partial = screen.with(|b| {
            b.raw = false;
            b.partial.clone()
        });
        assert_eq!(partial, "…jklmnop");
    }

    #[test]
    fn the_status_row_is_drawn_above_the_input_line_and_removed_with_none() {
        let screen = Screen::detached(40);
        screen.with(|b| b.raw = true);
        screen.set_status(Some("⠋ run_command [c1] 1.2 s".to_owned()));
        screen.stream_rendered(&[], "partial");
        assert_eq!(screen.with(|b| b.rows_above), 2, "the partial line and the status row");
        screen.set_status(None);
        let rows = screen.with(|b| {
            b.raw = false;
            b.rows_above
        });
        assert_eq!(rows, 1);
    }
}
