//! The limits, what was spent, and the record of a limit reached.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::Usage;

/// One kind of limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// Prompt tokens sent to the model.
    TokensIn,
    /// Tokens the model wrote.
    TokensOut,
    /// Cost in US dollars, as the provider reported it (calls that report none count nothing).
    Cost,
    /// Tool calls started.
    ToolCalls,
    /// Model calls made.
    ModelCalls,
    /// Time spent in turns.
    WallTime,
}

impl Limit {
    /// Every limit, in the order they are checked and shown.
    pub const ALL: [Limit; 6] =
        [Limit::TokensIn, Limit::TokensOut, Limit::Cost, Limit::ToolCalls, Limit::ModelCalls, Limit::WallTime];

    /// Its name in configuration, the API and the log: `tokens_in`, `tokens_out`, `cost`, `tool_calls`,
    /// `model_calls`, `wall_time`.
    pub fn name(self) -> &'static str {
        match self {
            Limit::TokensIn => "tokens_in",
            Limit::TokensOut => "tokens_out",
            Limit::Cost => "cost",
            Limit::ToolCalls => "tool_calls",
            Limit::ModelCalls => "model_calls",
            Limit::WallTime => "wall_time",
        }
    }

    /// The limit named `name`, if there is one.
    pub fn named(name: &str) -> Option<Limit> {
        Limit::ALL.into_iter().find(|l| l.name() == name)
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An amount of one limit: a count (tokens, calls), US dollars, or a duration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Amount {
    /// Tokens or calls.
    Count(u64),
    /// US dollars.
    Dollars(f64),
    /// Wall time, in milliseconds.
    Millis {
        /// Milliseconds.
        ms: u64,
    },
}

impl Amount {
    fn of_duration(d: Duration) -> Amount {
        Amount::Millis { ms: u64::try_from(d.as_millis()).unwrap_or(u64::MAX) }
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Amount::Count(n) => write!(f, "{n}"),
            Amount::Dollars(d) => write!(f, "${d:.4}"),
            Amount::Millis { ms } => f.write_str(&super::parse::duration_text(Duration::from_millis(*ms))),
        }
    }
}

/// Limits on what may be spent; `None` is no limit. Build with the setters and check with [`Limits::validate`]
/// (a zero or negative limit is refused), or read them from names and values with [`Budget::parse_limits`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    /// Prompt tokens.
    pub tokens_in: Option<u64>,
    /// Completion tokens.
    pub tokens_out: Option<u64>,
    /// US dollars.
    pub cost: Option<f64>,
    /// Tool calls.
    pub tool_calls: Option<u64>,
    /// Model calls.
    pub model_calls: Option<u64>,
    /// Wall time.
    pub wall_time: Option<Duration>,
}

impl Limits {
    /// At most `n` prompt tokens.
    pub fn tokens_in(mut self, n: u64) -> Self {
        self.tokens_in = Some(n);
        self
    }

    /// At most `n` completion tokens.
    pub fn tokens_out(mut self, n: u64) -> Self {
        self.tokens_out = Some(n);
        self
    }

    /// At most `dollars` of reported cost.
    pub fn cost(mut self, dollars: f64) -> Self {
        self.cost = Some(dollars);
        self
    }

    /// At most `n` tool calls.
    pub fn tool_calls(mut self, n: u64) -> Self {
        self.tool_calls = Some(n);
        self
    }

    /// At most `n` model calls.
    pub fn model_calls(mut self, n: u64) -> Self {
        self.model_calls = Some(n);
        self
    }

    /// At most `time` in turns.
    pub fn wall_time(mut self, time: Duration) -> Self {
        self.wall_time = Some(time);
        self
    }

    /// True when no limit is set.
    pub fn is_empty(&self) -> bool {
        self.amounts().next().is_none()
    }

    /// The limits set, as amounts.
    pub fn amounts(&self) -> impl Iterator<Item = (Limit, Amount)> + '_ {
        Limit::ALL.into_iter().filter_map(|limit| self.get(limit).map(|a| (limit, a)))
    }

    /// The amount allowed for `limit`, if it is set.
    pub fn get(&self, limit: Limit) -> Option<Amount> {
        match limit {
            Limit::TokensIn => self.tokens_in.map(Amount::Count),
            Limit::TokensOut => self.tokens_out.map(Amount::Count),
            Limit::Cost => self.cost.map(Amount::Dollars),
            Limit::ToolCalls => self.tool_calls.map(Amount::Count),
            Limit::ModelCalls => self.model_calls.map(Amount::Count),
            Limit::WallTime => self.wall_time.map(Amount::of_duration),
        }
    }

    /// Refuses a limit of zero (or, for cost, one that is not a positive number).
    pub fn validate(&self) -> Result<(), super::BudgetError> {
        for (limit, amount) in self.amounts() {
            let positive = match amount {
                Amount::Count(n) | Amount::Millis { ms: n } => n > 0,
                Amount::Dollars(d) => d.is_finite() && d > 0.0,
            };
            if !positive {
                return Err(super::BudgetError::NotPositive {
                    limit: limit.name().to_owned(),
                    value: amount.to_string(),
                });
            }
        }
        Ok(())
    }

    /// The limits of `self`, with those `other` sets in their place.
    pub fn merged(&self, other: &Limits) -> Limits {
        Limits {
            tokens_in: other.tokens_in.or(self.tokens_in),
            tokens_out: other.tokens_out.or(self.tokens_out),
            cost: other.cost.or(self.cost),
            tool_calls: other.tool_calls.or(self.tool_calls),
            model_calls: other.model_calls.or(self.model_calls),
            wall_time: other.wall_time.or(self.wall_time),
        }
    }
}

/// The form limits take in JSON (the log, the API): `{"tokens_in": 1000, "cost": 0.5, "wall_time": "10m"}`.
impl Serialize for Limits {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for (limit, amount) in self.amounts() {
            match amount {
                Amount::Count(n) => map.serialize_entry(limit.name(), &n)?,
                Amount::Dollars(d) => map.serialize_entry(limit.name(), &d)?,
                Amount::Millis { ms } => {
                    map.serialize_entry(limit.name(), &super::parse::duration_text(Duration::from_millis(ms)))?;
                }
            }
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Limits {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
        super::parse::limits_from_json(map.iter()).map_err(serde::de::Error::custom)
    }
}

/// A session's budget: limits on the whole session and on each of its turns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// Limits on everything the session spends.
    #[serde(default, skip_serializing_if = "Limits::is_empty")]
    pub session: Limits,
    /// Limits on what each turn spends.
    #[serde(default, skip_serializing_if = "Limits::is_empty")]
    pub turn: Limits,
}

impl Budget {
    /// The budget with these session limits.
    pub fn session(mut self, limits: Limits) -> Self {
        self.session = limits;
        self
    }

    /// The budget with these per-turn limits.
    pub fn turn(mut self, limits: Limits) -> Self {
        self.turn = limits;
        self
    }

    /// True when nothing is limited.
    pub fn is_unlimited(&self) -> bool {
        self.session.is_empty() && self.turn.is_empty()
    }

    /// Refuses a limit of zero or a negative one (see [`Limits::validate`]).
    pub fn validate(&self) -> Result<(), super::BudgetError> {
        self.session.validate().map_err(|e| e.scoped(Scope::Session))?;
        self.turn.validate().map_err(|e| e.scoped(Scope::Turn))
    }

    /// A budget read from JSON, `{"session": {"cost": 2.5}, "turn": {"wall_time": "10m"}}` (what the API
    /// takes): an unknown part or limit, a value that is not a positive number, or a bad duration is a
    /// [`BudgetError`](super::BudgetError) naming it.
    pub fn from_json(value: &serde_json::Value) -> Result<Budget, super::BudgetError> {
        super::parse::budget_from_json(value)
    }

    /// Limits read from names and text values, as configuration gives them (`tokens_in = 1000`, `wall_time =
    /// "10m"`): an unknown name, a value that is not a positive number, or a bad duration is a [`BudgetError`](super::BudgetError).
    pub fn parse_limits<'a>(pairs: impl IntoIterator<Item = (&'a str, String)>) -> Result<Limits, super::BudgetError> {
        super::parse::limits_from_text(pairs)
    }
}

/// Whose limit: the session's or the turn's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The whole session's.
    Session,
    /// Each turn's.
    Turn,
}

impl Scope {
    /// `session` or `turn`.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Session => "session",
            Scope::Turn => "turn",
        }
    }
}

/// What was spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spent {
    /// Prompt tokens.
    #[serde(default)]
    pub tokens_in: u64,
    /// Completion tokens.
    #[serde(default)]
    pub tokens_out: u64,
    /// US dollars reported.
    #[serde(default)]
    pub cost: f64,
    /// Tool calls started.
    #[serde(default)]
    pub tool_calls: u64,
    /// Model calls made.
    #[serde(default)]
    pub model_calls: u64,
    /// Time in turns.
    #[serde(default)]
    pub wall_time: Duration,
}

impl Spent {
    /// A model call counted.
    pub fn add_model_call(&mut self, usage: &Usage) {
        self.model_calls += 1;
        self.tokens_in += usage.input_tokens;
        self.tokens_out += usage.output_tokens;
        self.cost += usage.cost.unwrap_or(0.0);
    }

    /// `other` added.
    pub fn add(&mut self, other: &Spent) {
        self.tokens_in += other.tokens_in;
        self.tokens_out += other.tokens_out;
        self.cost += other.cost;
        self.tool_calls += other.tool_calls;
        self.model_calls += other.model_calls;
        self.wall_time += other.wall_time;
    }

    /// What is left of `self` after `other` is taken away (never below zero).
    pub fn minus(&self, other: &Spent) -> Spent {
        Spent {
            tokens_in: self.tokens_in.saturating_sub(other.tokens_in),
            tokens_out: self.tokens_out.saturating_sub(other.tokens_out),
            cost: (self.cost - other.cost).max(0.0),
            tool_calls: self.tool_calls.saturating_sub(other.tool_calls),
            model_calls: self.model_calls.saturating_sub(other.model_calls),
            wall_time: self.wall_time.saturating_sub(other.wall_time),
        }
    }

    /// True when nothing was spent.
    pub fn is_zero(&self) -> bool {
        *self == Spent::default()
    }

    /// The amount spent of `limit`.
    pub fn get(&self, limit: Limit) -> Amount {
        match limit {
            Limit::TokensIn => Amount::Count(self.tokens_in),
            Limit::TokensOut => Amount::Count(self.tokens_out),
            Limit::Cost => Amount::Dollars(self.cost),
            Limit::ToolCalls => Amount::Count(self.tool_calls),
            Limit::ModelCalls => Amount::Count(self.model_calls),
            Limit::WallTime => Amount::of_duration(self.wall_time),
        }
    }
}

/// A limit reached: whose, which, how much it allowed and how much was spent when the turn ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetReached {
    /// The session's limit or the turn's.
    pub scope: Scope,
    /// Which limit.
    pub limit: Limit,
    /// What it allows.
    pub allowed: Amount,
    /// What was spent when the turn ended (for calls: those made; the next would have gone past the limit).
    pub used: Amount,
}

impl fmt::Display for BudgetReached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the {} budget's {} limit of {} was reached ({} used)",
            self.scope.name(),
            self.limit,
            self.allowed,
            self.used
        )
    }
}

impl From<BudgetReached> for crate::error::NoeticError {
    fn from(reached: BudgetReached) -> Self {
        crate::error::NoeticError::BudgetReached {
            scope: reached.scope.name().to_owned(),
            limit: reached.limit.name().to_owned(),
            allowed: reached.allowed.to_string(),
            used: reached.used.to_string(),
        }
    }
}
