//! A JSON Schema compiled once and reused for every validation.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::error::{ConfigCode, ConfigError};

/// A compiled JSON Schema. Cheap to clone.
#[derive(Clone)]
pub struct Schema {
    json: Arc<Value>,
    validator: Arc<jsonschema::Validator>,
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Schema({})", self.json)
    }
}

impl Schema {
    /// Compiles a schema; a schema that does not compile is a [`ConfigError`] with code `INVALID_SCHEMA`.
    pub fn new(json: Value) -> Result<Self, ConfigError> {
        let validator = jsonschema::validator_for(&json).map_err(|e| {
            ConfigError::new(
                ConfigCode::InvalidSchema,
                format!("the JSON Schema does not compile: {e}"),
                "fix the schema; it must be a valid JSON Schema document",
            )
        })?;
        Ok(Schema { json: Arc::new(json), validator: Arc::new(validator) })
    }

    /// The schema document.
    pub fn json(&self) -> &Value {
        &self.json
    }

    /// The schema as JSON, shared (no copy).
    pub fn shared_json(&self) -> Arc<Value> {
        self.json.clone()
    }

    /// Checks `instance`; on failure returns every violation, one per line, each with its JSON pointer.
    pub fn validate(&self, instance: &Value) -> Result<(), String> {
        if self.validator.is_valid(instance) {
            return Ok(());
        }
        let problems: Vec<String> = self
            .validator
            .iter_errors(instance)
            .map(|e| {
                let path = e.instance_path().to_string();
                if path.is_empty() { e.to_string() } else { format!("at {path}: {e}") }
            })
            .collect();
        Err(problems.join("\n"))
    }
}
