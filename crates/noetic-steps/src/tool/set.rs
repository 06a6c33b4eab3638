//! Tools indexed by name ([`ToolSet`]) and where they come from ([`ToolSource`]): a fixed list, or a source whose
//! tools change while the runtime runs ([`DynamicTools`]; an MCP server's tools are another).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock, RwLock};

use super::Tool;
use crate::error::{ConfigCode, ConfigError};
use crate::model::ToolSpec;

/// Tools indexed by name: lookups are O(1) and no two tools share a name. Cheap to clone (shared).
#[derive(Clone, Default)]
pub struct ToolSet {
    tools: Arc<[Arc<dyn Tool>]>,
    index: Arc<Index>,
}

/// What a set derives from its tools once: positions by name, and the specs offered to the model (made at the
/// first request, then shared by every request and clone of the set).
#[derive(Default)]
struct Index {
    by_name: HashMap<String, usize>,
    specs: OnceLock<Arc<[ToolSpec]>>,
}

impl Index {
    fn new(by_name: HashMap<String, usize>) -> Arc<Index> {
        Arc::new(Index { by_name, specs: OnceLock::new() })
    }
}

impl fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.tools.iter().map(|t| t.name())).finish()
    }
}

fn duplicate(name: &str, scope: &str) -> ConfigError {
    ConfigError::new(
        ConfigCode::DuplicateToolName,
        format!("{scope} has two tools named '{name}'"),
        "give every tool a distinct name (prefix tools from different sources, e.g. 'server__tool')",
    )
}

impl ToolSet {
    /// A set of `tools`; two tools with one name are a `DUPLICATE_TOOL_NAME` error (the model would be offered
    /// both while only one could run).
    pub fn new(tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Result<Self, ConfigError> {
        Self::named(tools, "a tool set")
    }

    /// [`ToolSet::new`], naming where the tools were given in the error.
    pub(crate) fn named(tools: impl IntoIterator<Item = Arc<dyn Tool>>, scope: &str) -> Result<Self, ConfigError> {
        let tools: Vec<Arc<dyn Tool>> = tools.into_iter().collect();
        let mut by_name = HashMap::with_capacity(tools.len());
        for (i, tool) in tools.iter().enumerate() {
            if by_name.insert(tool.name().to_owned(), i).is_some() {
                return Err(duplicate(tool.name(), scope));
            }
        }
        Ok(ToolSet { tools: tools.into(), index: Index::new(by_name) })
    }

    /// The tools with the first of each name kept (for scopes that report duplicates elsewhere).
    pub(crate) fn first_wins(tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> ToolSet {
        let mut kept: Vec<Arc<dyn Tool>> = Vec::new();
        let mut by_name = HashMap::new();
        for tool in tools {
            if !by_name.contains_key(tool.name()) {
                by_name.insert(tool.name().to_owned(), kept.len());
                kept.push(tool);
            }
        }
        ToolSet { tools: kept.into(), index: Index::new(by_name) }
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        // A few names compare faster than they hash.
        if self.tools.len() <= 8 {
            return self.tools.iter().find(|t| t.name() == name);
        }
        self.index.by_name.get(name).and_then(|&i| self.tools.get(i))
    }

    /// The tools' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(|t| t.name())
    }

    /// The tools' specs, in order, as a model request offers them: made once per set.
    pub(crate) fn specs(&self) -> Arc<[ToolSpec]> {
        self.index.specs.get_or_init(|| self.tools.iter().map(|tool| spec(tool.as_ref())).collect()).clone()
    }

    /// The same tools in a set with reference counts of its own (the set, its index and its specs are copied; the
    /// tools are shared): a runtime's per-thread copy, whose clones and specs other threads do not write.
    pub fn replica(&self) -> ToolSet {
        let specs = OnceLock::new();
        let _ = specs.set(self.specs().iter().cloned().collect::<Vec<_>>().into());
        ToolSet {
            tools: self.tools.iter().cloned().collect::<Vec<_>>().into(),
            index: Arc::new(Index { by_name: self.index.by_name.clone(), specs }),
        }
    }

    /// True when `other` is the very same set (not only equal): a cheap "did it change?".
    pub fn same_as(&self, other: &ToolSet) -> bool {
        Arc::ptr_eq(&self.tools, &other.tools)
    }

    /// These tools followed by `more`, leaving out (with a warning) any of `more` whose name is already taken.
    pub(crate) fn merged(&self, more: &ToolSet) -> ToolSet {
        if more.is_empty() {
            return self.clone();
        }
        let mut tools: Vec<Arc<dyn Tool>> = self.tools.to_vec();
        for tool in more.iter() {
            if self.index.by_name.contains_key(tool.name()) {
                tracing::warn!(tool = tool.name(), "a tool source offers a tool whose name is taken; it is left out");
            } else {
                tools.push(tool.clone());
            }
        }
        let by_name = tools.iter().enumerate().map(|(i, t)| (t.name().to_owned(), i)).collect();
        ToolSet { tools: tools.into(), index: Index::new(by_name) }
    }
}

fn spec(tool: &dyn Tool) -> ToolSpec {
    ToolSpec {
        name: tool.name().to_owned(),
        description: tool.description().to_owned(),
        parameters: tool.input_schema().shared_json(),
    }
}

impl Deref for ToolSet {
    type Target = [Arc<dyn Tool>];

    fn deref(&self) -> &Self::Target {
        &self.tools
    }
}

/// Where tools come from. Each model request uses the source's tools as they are at that moment, and the calls
/// of its response run against the same set: a tool removed meanwhile is an unknown tool to them.
pub trait ToolSource: Send + Sync + 'static {
    /// The tools now. Called for every model request: return a kept set (an `Arc` clone), do not build one.
    fn snapshot(&self) -> ToolSet;
}

impl ToolSource for ToolSet {
    fn snapshot(&self) -> ToolSet {
        self.clone()
    }
}

/// Tools that can be added and removed while the runtime runs (a plugin host, a server's tool list).
#[derive(Default)]
pub struct DynamicTools {
    current: RwLock<ToolSet>,
}

impl fmt::Debug for DynamicTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("DynamicTools").field(&self.snapshot()).finish()
    }
}

impl DynamicTools {
    /// An empty source.
    pub fn new() -> Self {
        DynamicTools::default()
    }

    /// Adds a tool; a name already offered is a `DUPLICATE_TOOL_NAME` error and changes nothing.
    pub fn add(&self, tool: Arc<dyn Tool>) -> Result<(), ConfigError> {
        let mut current = self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.get(tool.name()).is_some() {
            return Err(duplicate(tool.name(), "this tool source"));
        }
        *current = ToolSet::named(current.iter().cloned().chain([tool]), "this tool source")?;
        Ok(())
    }

    /// Removes the tool named `name`; false when there was none.
    pub fn remove(&self, name: &str) -> bool {
        let mut current = self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.get(name).is_none() {
            return false;
        }
        let kept: Vec<Arc<dyn Tool>> = current.iter().filter(|t| t.name() != name).cloned().collect();
        // Names were unique and stay unique.
        *current = ToolSet::named(kept, "this tool source").unwrap_or_default();
        true
    }

    /// Replaces all the tools at once (a server's new tool list).
    pub fn replace(&self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Result<(), ConfigError> {
        let set = ToolSet::named(tools, "this tool source")?;
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = set;
        Ok(())
    }
}

impl ToolSource for DynamicTools {
    fn snapshot(&self) -> ToolSet {
        self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// The tools in scope of an execution tree: a fixed set and any number of sources, merged per request.
#[derive(Clone, Default)]
pub struct Tools {
    pub(crate) fixed: ToolSet,
    pub(crate) sources: Vec<Arc<dyn ToolSource>>,
    /// Two fixed tools were given one name (the first is kept).
    pub(crate) duplicate: Option<ConfigError>,
}

impl Tools {
    /// Adds tools to the fixed ones. A name given twice keeps the first tool; a runtime refuses to build then
    /// (`DUPLICATE_TOOL_NAME`), see [`Tools::duplicate`].
    pub fn add(&mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) {
        let all: Vec<Arc<dyn Tool>> = self.fixed.iter().cloned().chain(tools).collect();
        self.fixed = match ToolSet::named(all.clone(), "the runtime") {
            Ok(set) => set,
            Err(e) => {
                self.duplicate.get_or_insert(e);
                ToolSet::first_wins(all)
            }
        };
    }

    /// Adds a source of tools that may change while the runtime runs; each model request sees its tools as they
    /// are then.
    pub fn add_source(&mut self, source: Arc<dyn ToolSource>) {
        self.sources.push(source);
    }

    /// True when there are neither fixed tools nor sources.
    pub fn is_empty(&self) -> bool {
        self.fixed.is_empty() && self.sources.is_empty() && self.duplicate.is_none()
    }

    /// The error of two fixed tools given with one name, if that happened.
    pub fn duplicate(&self) -> Option<ConfigError> {
        self.duplicate.clone()
    }

    /// The fixed tools (their declared memory becomes layers).
    pub fn fixed(&self) -> &ToolSet {
        &self.fixed
    }

    /// The tools now: the fixed ones, then each source's (a name already taken is left out).
    pub fn snapshot(&self) -> ToolSet {
        self.sources.iter().fold(self.fixed.clone(), |set, source| set.merged(&source.snapshot()))
    }

    /// The tools now, borrowed when there are no sources (the fixed set is all there is).
    pub(crate) fn now(&self) -> Cow<'_, ToolSet> {
        if self.sources.is_empty() { Cow::Borrowed(&self.fixed) } else { Cow::Owned(self.snapshot()) }
    }

    /// A copy whose fixed set has reference counts of its own ([`ToolSet::replica`]).
    pub fn replica(&self) -> Tools {
        Tools { fixed: self.fixed.replica(), ..self.clone() }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]
    use super::*;
    use crate::tool::FnTool;

    fn tool(name: &str) -> Arc<dyn Tool> {
        let tool =
            FnTool::builder(name, format!("The {name} tool.")).handler(|_, _| async { Ok(serde_json::Value::Null) });
        Arc::new(tool.build().expect("a valid tool"))
    }

    #[test]
    fn specs_are_made_once_per_set_and_shared_by_its_clones() {
        let set = ToolSet::new([tool("a"), tool("b")]).expect("distinct names");
        let specs = set.specs();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(specs[1].description, "The b tool.");
        assert!(Arc::ptr_eq(&specs, &set.specs()));
        assert!(Arc::ptr_eq(&specs, &set.clone().specs()));
    }

    #[test]
    fn a_spec_shares_its_tools_schema_in_every_set_and_every_replica() {
        let search = tool("search");
        let schema = search.input_schema().shared_json();
        let set = ToolSet::new([search.clone()]).expect("one name");
        let other = ToolSet::new([tool("a"), search]).expect("distinct names");
        for specs in [set.specs(), set.replica().specs(), other.specs()] {
            let spec = specs.iter().find(|s| s.name == "search").expect("offered");
            assert!(Arc::ptr_eq(&spec.parameters, &schema), "the schema is shared, not copied");
            assert_eq!(*spec.parameters, serde_json::json!({"type": "object"}));
        }
    }

    #[test]
    fn a_source_that_changed_offers_specs_of_its_new_tools() {
        let source = DynamicTools::new();
        source.add(tool("a")).expect("new name");
        let before = source.snapshot().specs();
        source.add(tool("b")).expect("new name");
        let after = source.snapshot().specs();
        assert_eq!(before.len(), 1);
        assert_eq!(after.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    }
}
