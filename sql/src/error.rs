//! The errors of planning and evaluating expressions. `at` names the expression's
//! place in its step (`filter`, `map.dollars`, `select.item`); the spec layer puts the
//! step in front (`steps[0] (milk).filter: ...`).

/// An expression that cannot be planned against its input's schema: found before
/// anything runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Not an SQL expression.
    #[error("{at}: cannot parse `{expr}`: {reason}")]
    Syntax {
        /// Where the expression is (`filter`, `map.dollars`).
        at: String,
        /// The expression.
        expr: String,
        /// The parser's words.
        reason: String,
    },
    /// The expression reads a column the input does not have.
    #[error("{at}: unknown column `{column}` in `{expr}` (columns: {columns})")]
    UnknownColumn {
        /// Where the expression is.
        at: String,
        /// The expression.
        expr: String,
        /// The column it reads.
        column: String,
        /// The input's columns, comma-separated.
        columns: String,
    },
    /// The operand types do not fit an operator or function (`item / 100` on a string).
    #[error("{at}: type mismatch in `{expr}`: {reason}")]
    TypeMismatch {
        /// Where the expression is.
        at: String,
        /// The expression.
        expr: String,
        /// DataFusion's words (names the types).
        reason: String,
    },
    /// A filter that is not a condition.
    #[error("{at}: `{expr}` is of type {found}, a filter must be a bool")]
    NotBool {
        /// Where the expression is.
        at: String,
        /// The expression.
        expr: String,
        /// Its type.
        found: String,
    },
    /// Anything else DataFusion's planner rejects: an unknown function, an aggregate, a
    /// subquery.
    #[error("{at}: `{expr}`: {reason}")]
    Invalid {
        /// Where the expression is.
        at: String,
        /// The expression.
        expr: String,
        /// DataFusion's words.
        reason: String,
    },
    /// A map or select names an output field twice, or a select names none.
    #[error("{at}: {reason}")]
    Fields {
        /// `map` or `select`.
        at: String,
        /// What is wrong.
        reason: String,
    },
}

/// An expression that failed on a batch (integer division by zero, a cast that does not
/// fit), or a batch of another schema than the plan's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// An expression failed.
    #[error("{at}: `{expr}`: {reason}")]
    Expr {
        /// Where the expression is.
        at: String,
        /// The expression.
        expr: String,
        /// DataFusion's or arrow's words.
        reason: String,
    },
    /// The batch is not of the planned schema (a bug of the caller: the plan reads
    /// columns by position).
    #[error("{at}: the batch's schema ({actual}) is not the planned one ({planned})")]
    Schema {
        /// The step (`filter`, `map`, `select`).
        at: String,
        /// The batch's fields and types.
        actual: String,
        /// The planned fields and types.
        planned: String,
    },
}

impl PlanError {
    /// Where the expression is (`filter`, `map.dollars`): the spec layer puts the step in
    /// front of it.
    pub fn at(&self) -> &str {
        match self {
            PlanError::Syntax { at, .. }
            | PlanError::UnknownColumn { at, .. }
            | PlanError::TypeMismatch { at, .. }
            | PlanError::NotBool { at, .. }
            | PlanError::Invalid { at, .. }
            | PlanError::Fields { at, .. } => at,
        }
    }

    /// The message without its place (what follows `at: `).
    pub fn reason(&self) -> String {
        let text = self.to_string();
        // Every message is `{at}: {reason}`.
        let prefix = format!("{}: ", self.at());
        match text.strip_prefix(&prefix) {
            Some(rest) => rest.to_string(),
            None => text.clone(),
        }
    }
}
