//! The JSON Schemas of the API's bodies, each a type the handlers' annotations name, read by name from
//! `assets/api-schemas.json`.

use std::collections::HashMap;
use std::sync::OnceLock;

use utoipa::openapi::{ObjectBuilder, RefOr, Schema};

/// The schemas by name, parsed once.
fn schemas() -> &'static HashMap<String, RefOr<Schema>> {
    static SCHEMAS: OnceLock<HashMap<String, RefOr<Schema>>> = OnceLock::new();
    SCHEMAS.get_or_init(|| serde_json::from_str(include_str!("../../assets/api-schemas.json")).unwrap_or_default())
}

/// The schema named `name`; an empty object schema if the file lacks it (a unit test checks none is missing).
fn named(name: &str) -> RefOr<Schema> {
    schemas().get(name).cloned().unwrap_or_else(|| ObjectBuilder::new().into())
}

macro_rules! bodies {
    ($($name:ident)*) => {
        $(
            #[doc = concat!("The schema `", stringify!($name), "` of `assets/api-schemas.json`.")]
            pub(crate) struct $name;

            impl utoipa::PartialSchema for $name {
                fn schema() -> RefOr<Schema> {
                    named(stringify!($name))
                }
            }

            impl utoipa::ToSchema for $name {}
        )*

        /// Every schema's name, for the test that each is in the file.
        #[cfg(test)]
        pub(crate) const NAMES: &[&str] = &[$(stringify!($name)),*];
    };
}

bodies! {
    Error ListSessionsOk GetSessionOk DeleteSessionOk RenameRequest RenameOk PostMessage202 EventsStream StopOk
    ContinueSessionOk ResumeOk CompactOk SetModeRequest SetModeOk GetBudgetOk PutBudgetRequest PutBudgetOk
    GetLedgerOk ListApprovalsOk DecideOk HealthOk ReadyOk RunRequest RunStream AgentCardOk RpcRequest RpcJson
    RpcStream
}
