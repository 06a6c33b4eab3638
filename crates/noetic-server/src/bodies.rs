//! The JSON bodies the API's handlers send, each a type the handler builds and returns: the OpenAPI document's
//! schemas are derived from these types (`utoipa::ToSchema`), so the document says what the handler serialises.
//! Every body is strict (`deny_unknown_fields`, which utoipa writes as `additionalProperties: false`): the
//! conformance test (`tests/openapi_conformance.rs`) fails on a field a handler sends that its type does not name.
//!
//! Library types a body embeds (a conversation item, a ledger entry, a budget) keep their own serialisation: their
//! schema is `value_type = Object` with a description, or, for the budget's limits, [`BudgetLimits`], a schema that
//! states the library's wire form field by field (the conformance test holds the two together).

use serde::Serialize;
use utoipa::ToSchema;

use std::time::SystemTime;

/// Every error: `{"error": {"code", "message"}}`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Error {
    pub(crate) error: ErrorDetail,
}

/// What went wrong.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ErrorDetail {
    /// A stable code a program can match (`invalid_json`, `queue_full`, …).
    pub(crate) code: &'static str,
    /// What went wrong and what to do.
    pub(crate) message: String,
}

/// A message waiting in the session's queue.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct QueuedMessage {
    id: String,
    text: String,
    /// ms since the Unix epoch.
    #[serde(serialize_with = "crate::millis::unix_millis")]
    #[schema(value_type = u64)]
    accepted_at: SystemTime,
}

impl From<noetic::agent::SteerMessage> for QueuedMessage {
    fn from(m: noetic::agent::SteerMessage) -> Self {
        QueuedMessage { id: m.id.to_string(), text: m.text, accepted_at: m.accepted_at }
    }
}

/// `GET /api/sessions/{key}`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetSessionOk {
    pub(crate) key: String,
    /// The session's title, if it was given one (untrusted text: show it as text).
    #[schema(required = true)]
    pub(crate) title: Option<String>,
    /// A turn runs now (here or, with a shared store, on `running_on`).
    pub(crate) busy: bool,
    /// With a store several workers share: the worker running the session's turn, when it is not this one.
    #[schema(required = true)]
    pub(crate) running_on: Option<String>,
    pub(crate) turns: u64,
    /// `one-at-a-time` or `all`.
    #[schema(value_type = SteeringModeName)]
    pub(crate) steering_mode: &'static str,
    pub(crate) steering_capacity: usize,
    /// Messages waiting for the turn's next checkpoint (or the next turn), oldest first.
    pub(crate) queued: Vec<QueuedMessage>,
    /// The step a stopped process left unfinished (POST .../resume finishes it); null while a turn runs.
    #[schema(required = true)]
    pub(crate) unfinished_turn: Option<String>,
    pub(crate) last_event_seq: u64,
    /// Calls of this session waiting for approval, as GET /api/approvals lists them.
    pub(crate) pending_approvals: Vec<ListedApproval>,
    pub(crate) budget: BudgetView,
    /// The conversation: the library's items (`role`, `content`, tool calls and results), oldest first.
    #[schema(value_type = Vec<Object>)]
    pub(crate) history: Vec<noetic::model::Item>,
}

/// A steering mode's name.
#[derive(ToSchema)]
#[schema(rename_all = "kebab-case")]
#[allow(dead_code)]
pub(crate) enum SteeringModeName {
    /// The head message only.
    OneAtATime,
    /// Every queued message.
    All,
}

/// `GET /api/sessions/{key}/ledger`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetLedgerOk {
    pub(crate) key: String,
    /// The steering decisions, oldest first: the library's ledger entries (`kind`, the call, the verdict, the
    /// evaluator, the chain hash).
    #[schema(value_type = Vec<Object>)]
    pub(crate) entries: Vec<noetic::steering::LedgerEntry>,
}

/// `GET /api/approvals`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListApprovalsOk {
    pub(crate) approvals: Vec<ListedApproval>,
}

/// A call waiting for a decision, as the API lists it.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListedApproval {
    pub(crate) call_id: String,
    #[schema(required = true)]
    pub(crate) session: Option<String>,
    pub(crate) tool: String,
    /// As the model wrote them: untrusted, escape them wherever they are shown.
    #[schema(value_type = Object)]
    pub(crate) arguments: serde_json::Value,
    /// SHA-256 (hex) of the arguments' canonical JSON (keys sorted, no whitespace); send it back with the
    /// decision so it cannot reach a call with other arguments.
    pub(crate) arguments_sha256: String,
    /// ms since the Unix epoch.
    pub(crate) requested_at: u64,
    /// ms since the Unix epoch: the call is rejected then unless someone decides.
    pub(crate) expires_at: u64,
    /// Time left to decide, by the server's clock when it answered (count down from this rather than from
    /// expires_at, which needs the two clocks to agree).
    pub(crate) expires_in_ms: u64,
    /// What the call would change, when the server can tell: for write_file, a unified diff of the new content
    /// against the file as it is now (made from untrusted arguments: escape it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) preview: Option<String>,
}

/// `POST /api/approvals/{call_id}`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecideOk {
    pub(crate) call_id: String,
    /// The session whose call was decided.
    #[schema(required = true)]
    pub(crate) session: Option<String>,
    pub(crate) approved: bool,
}

/// A session's budget, what it spent and the limit it is paused over (`GET` and `PUT .../budget`, and the
/// session's `budget`).
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BudgetView {
    /// The limits that hold.
    #[schema(value_type = BudgetLimits)]
    pub(crate) budget: noetic::budget::Budget,
    pub(crate) spent: SpentView,
    /// The limit the session is paused over; null when it is not paused.
    #[schema(required = true)]
    pub(crate) paused: Option<PausedView>,
    /// (PUT) the paused session continued with its queued messages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) continued: Option<bool>,
    /// (PUT) the turn the session continued with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) turn: Option<u64>,
}

/// What a session spent.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpentView {
    pub(crate) tokens_in: u64,
    pub(crate) tokens_out: u64,
    /// US dollars, as the provider reported them.
    pub(crate) cost: f64,
    pub(crate) tool_calls: u64,
    pub(crate) model_calls: u64,
    pub(crate) wall_time_ms: u64,
}

/// The limit a session is paused over.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PausedView {
    /// `session` or `turn`.
    #[schema(value_type = String)]
    pub(crate) scope: noetic::budget::Scope,
    /// Which limit (`tokens_in`, `tokens_out`, `cost`, `tool_calls`, `model_calls`, `wall_time`).
    #[schema(value_type = String)]
    pub(crate) limit: noetic::budget::Limit,
    /// What it allows, as text.
    pub(crate) allowed: String,
    /// What was spent when the turn ended, as text.
    pub(crate) used: String,
    /// The pause as one sentence.
    pub(crate) message: String,
}

/// A budget as JSON (what `PUT .../budget` takes and the API shows): a part left out has no limits.
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(crate) struct BudgetLimits {
    session: Option<Limits>,
    turn: Option<Limits>,
}

/// Limits; each a positive number (wall_time: seconds, or a string with a unit: "500ms", "90s", "10m", "2h").
#[derive(ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(crate) struct Limits {
    #[schema(minimum = 1)]
    tokens_in: Option<u64>,
    #[schema(minimum = 1)]
    tokens_out: Option<u64>,
    /// US dollars, as the provider reported them.
    #[schema(exclusive_minimum = 0)]
    cost: Option<f64>,
    #[schema(minimum = 1)]
    tool_calls: Option<u64>,
    #[schema(minimum = 1)]
    model_calls: Option<u64>,
    #[schema(schema_with = wall_time)]
    wall_time: Option<String>,
}

/// Seconds, or a duration with a unit.
fn wall_time() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Number, Type::String]))
        .description(Some("seconds, or a duration with a unit: \"500ms\", \"90s\", \"10m\", \"2h\""))
        .build()
}

/// `POST /api/sessions/{key}/stop`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StopOk {
    /// Queued messages dropped.
    pub(crate) cleared: usize,
    /// A running turn was cancelled.
    pub(crate) cancelled: bool,
}

/// `POST /api/sessions/{key}/continue`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ContinueSessionOk {
    /// A turn started with the queued messages.
    pub(crate) started: bool,
    /// The turn started (absent when none did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) turn: Option<u64>,
}

/// `POST /api/sessions/{key}/resume`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResumeOk {
    /// The unfinished turn is running again.
    pub(crate) resumed: bool,
    /// The turn resumed (absent when none was).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) turn: Option<u64>,
}

/// `PUT /api/sessions/{key}/mode`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SetModeOk {
    #[schema(value_type = SteeringModeName)]
    pub(crate) mode: &'static str,
}

/// `GET /healthz`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct HealthOk {
    pub(crate) status: Health,
}

/// The process answers.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Health {
    Ok,
}

/// `GET /readyz`.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadyOk {
    pub(crate) status: Readiness,
}

/// The server takes work.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Readiness {
    Ready,
}
