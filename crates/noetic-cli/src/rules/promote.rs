//! `noetic rules promote RULE --file F`: a shadow rule made live in its rules file. Only the value of its
//! `mode` changes (`"shadow"` → `"live"`); comments, order and layout stay as written.

use std::path::Path;

use toml_edit::{DocumentMut, Value};

use super::ToolNames;
use crate::config::source::Source;

/// Makes the shadow rule `id` of the TOML rules file `path` live; what it did, for the user.
pub fn promote(path: &Path, id: &str) -> Result<String, Box<dyn std::error::Error>> {
    let shown = path.display();
    if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json")) {
        return Err(format!(
            "promote edits TOML rules files; in the JSON file '{shown}' change the rule's \"mode\": \"shadow\" to \
             \"live\" by hand"
        )
        .into());
    }
    let source = Source::read(path)?;
    // A file that does not load is not edited: its errors come with their lines.
    let set = super::load(&source, &ToolNames::any_server())?;
    let mut doc: DocumentMut = source.text.parse().map_err(|e| format!("cannot edit the rules file '{shown}': {e}"))?;
    let Some(tables) = doc.get_mut("rule").and_then(|r| r.as_array_of_tables_mut()) else {
        return Err(format!(
            "'{shown}' writes its rules as an inline array; promote edits [[rule]] tables, so change the rule's \
             mode = \"shadow\" to \"live\" by hand"
        )
        .into());
    };
    let Some(table) = tables.iter_mut().find(|t| t.get("id").and_then(|v| v.as_str()) == Some(id)) else {
        return Err(format!("'{shown}' has no rule '{id}'; its rules are {}", set.ids().join(", ")).into());
    };
    let Some(mode) = table.get_mut("mode").and_then(|m| m.as_value_mut()).filter(|m| m.as_str() == Some("shadow"))
    else {
        return Err(
            format!("rule '{id}' in '{shown}' is not a shadow rule (it has no mode = \"shadow\"); it is live").into()
        );
    };
    let decor = mode.decor().clone();
    *mode = Value::from("live");
    *mode.decor_mut() = decor;
    let promoted = doc.to_string();
    super::load(&Source { text: promoted.clone(), ..source }, &ToolNames::any_server())?;
    // Written beside the file and renamed over it, so an interrupted write leaves the old file whole.
    let temporary = path.with_extension("toml.promoting");
    std::fs::write(&temporary, &promoted)
        .and_then(|()| std::fs::rename(&temporary, path))
        .map_err(|e| format!("cannot write the rules file '{shown}': {e}; it is unchanged"))?;
    Ok(format!("{shown}: rule '{id}' is live now (mode = \"shadow\" → \"live\"); its decisions are enforced"))
}
