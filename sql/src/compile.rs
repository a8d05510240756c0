//! One SQL expression string compiled against a schema: parsed by DataFusion's SQL
//! parser, planned into a logical expression, type-coerced (DataFusion's analyzer rules,
//! so `price_cents / 100.0` divides as float64), type-checked, and turned into a physical
//! expression that evaluates a whole batch at once.
//!
//! Identifiers are case-sensitive and not folded to lower case, as in Flink SQL
//! (`userId` is the field `userId`); write `"..."` around names with spaces or dots.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, SchemaRef};
use datafusion_common::tree_node::TreeNode;
use datafusion_common::{DFSchema, DataFusionError, SchemaError};
use datafusion_expr::execution_props::ExecutionProps;
use datafusion_expr::{Expr, ExprSchemable};
use datafusion_optimizer::analyzer::type_coercion::TypeCoercionRewriter;
use datafusion_physical_expr::PhysicalExpr;
use datafusion_sql::parser::DFParserBuilder;
use datafusion_sql::planner::{ParserOptions, PlannerContext, SqlToRel};
use datafusion_sql::sqlparser::parser::ParserError;

use crate::error::{EvalError, PlanError};
use crate::functions::Functions;

/// A compiled expression and its result type.
#[derive(Debug, Clone)]
pub(crate) struct Compiled {
    /// Where it is (`filter`, `map.dollars`), for errors.
    pub(crate) at: String,
    /// The expression as written.
    pub(crate) source: String,
    /// The type of its values.
    pub(crate) data_type: DataType,
    physical: Arc<dyn PhysicalExpr>,
}

/// The input schema as DataFusion plans against it (no table qualifier), with the
/// functions an expression may call.
#[derive(Debug)]
pub(crate) struct Compiler {
    schema: SchemaRef,
    df_schema: DFSchema,
    functions: Functions,
}

impl Compiler {
    /// A compiler for expressions over `schema`.
    pub(crate) fn new(schema: &SchemaRef) -> Result<Self, PlanError> {
        let df_schema =
            DFSchema::try_from(schema.as_ref().clone()).map_err(|e| PlanError::Fields {
                at: "schema".to_string(),
                reason: message(&e),
            })?;
        Ok(Compiler {
            schema: schema.clone(),
            df_schema,
            functions: Functions::new(),
        })
    }

    /// The input schema.
    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Compiles `source`, found at `at`.
    ///
    /// # Errors
    /// [`PlanError::Syntax`], [`PlanError::UnknownColumn`], [`PlanError::TypeMismatch`],
    /// [`PlanError::Invalid`], each naming `at` and the expression.
    pub(crate) fn compile(&self, at: &str, source: &str) -> Result<Compiled, PlanError> {
        let fail = |kind: fn(String, String, String) -> PlanError, reason: String| {
            kind(at.to_string(), source.to_string(), reason)
        };
        let parsed = DFParserBuilder::new(source)
            .build()
            .and_then(|mut p| p.parse_into_expr())
            .map_err(|e| fail(syntax, parse_message(&e)))?;
        if parsed.alias.is_some() {
            return Err(fail(
                syntax,
                "an alias (`AS`) has no place here: the field name is the map's key".to_string(),
            ));
        }
        let options = ParserOptions::new()
            .with_enable_ident_normalization(false)
            .with_map_string_types_to_utf8view(false);
        let planner = SqlToRel::new_with_options(&self.functions, options);
        let logical = planner
            .sql_to_expr(parsed.expr, &self.df_schema, &mut PlannerContext::new())
            .map_err(|e| self.planning_error(at, source, &e))?;
        let coerced = logical
            .rewrite(&mut TypeCoercionRewriter::new(&self.df_schema))
            .map_err(|e| fail(mismatch, message(&e)))?
            .data;
        let data_type = coerced
            .get_type(&self.df_schema)
            .map_err(|e| fail(mismatch, message(&e)))?;
        if let Some(reason) = not_scalar(&coerced) {
            return Err(fail(invalid, reason));
        }
        let physical = datafusion_physical_expr::create_physical_expr(
            &coerced,
            &self.df_schema,
            &ExecutionProps::new(),
        )
        .map_err(|e| fail(invalid, message(&e)))?;
        Ok(Compiled {
            at: at.to_string(),
            source: source.to_string(),
            data_type,
            physical,
        })
    }

    /// A planner error as a [`PlanError`]: an unknown column typed as such.
    fn planning_error(&self, at: &str, source: &str, e: &DataFusionError) -> PlanError {
        if let DataFusionError::SchemaError(err, _) = e.find_root() {
            if let SchemaError::FieldNotFound { field, .. } = err.as_ref() {
                return PlanError::UnknownColumn {
                    at: at.to_string(),
                    expr: source.to_string(),
                    column: field.name.clone(),
                    columns: self
                        .schema
                        .fields()
                        .iter()
                        .map(|f| f.name().as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                };
            }
        }
        PlanError::Invalid {
            at: at.to_string(),
            expr: source.to_string(),
            reason: message(e),
        }
    }
}

impl Compiled {
    /// The expression's values on every row of `batch` (whose schema is the compiler's).
    ///
    /// # Errors
    /// [`EvalError`] naming the expression (integer division by zero, a failed cast).
    pub(crate) fn evaluate(&self, batch: &RecordBatch) -> Result<ArrayRef, EvalError> {
        self.physical
            .evaluate(batch)
            .and_then(|v| v.into_array(batch.num_rows()))
            .map_err(|e| self.eval_error(message(&e)))
    }

    /// An [`EvalError`] naming this expression.
    pub(crate) fn eval_error(&self, reason: String) -> EvalError {
        EvalError::Expr {
            at: self.at.clone(),
            expr: self.source.clone(),
            reason,
        }
    }
}

/// Why a planned expression cannot be evaluated row by row, if it cannot: DataFusion
/// plans aggregates, window functions and subqueries as expressions too.
fn not_scalar(expr: &Expr) -> Option<String> {
    let mut found = None;
    // The closure never fails; `apply` only returns its errors.
    let _ = expr.apply(|e| {
        let what = match e {
            Expr::AggregateFunction(_) => Some("an aggregate function"),
            Expr::WindowFunction(_) => Some("a window function"),
            Expr::ScalarSubquery(_) | Expr::InSubquery(_) | Expr::Exists(_) => Some("a subquery"),
            Expr::Placeholder(_) => Some("a placeholder"),
            _ => None,
        };
        if let Some(what) = what {
            found = Some(format!("{what} has no place in a row expression"));
            return Ok(datafusion_common::tree_node::TreeNodeRecursion::Stop);
        }
        Ok(datafusion_common::tree_node::TreeNodeRecursion::Continue)
    });
    found
}

fn syntax(at: String, expr: String, reason: String) -> PlanError {
    PlanError::Syntax { at, expr, reason }
}

fn mismatch(at: String, expr: String, reason: String) -> PlanError {
    PlanError::TypeMismatch { at, expr, reason }
}

fn invalid(at: String, expr: String, reason: String) -> PlanError {
    PlanError::Invalid { at, expr, reason }
}

/// The parser's own words, without DataFusion's `SQL error: ParserError("...")` wrapping.
fn parse_message(e: &DataFusionError) -> String {
    match e.find_root() {
        DataFusionError::SQL(pe, _) => match pe.as_ref() {
            ParserError::ParserError(s) | ParserError::TokenizerError(s) => s.clone(),
            ParserError::RecursionLimitExceeded => "nested too deeply".to_string(),
        },
        other => message(other),
    }
}

/// DataFusion's message without its category prefix (`Error during planning: `) or
/// backtrace.
fn message(e: &DataFusionError) -> String {
    e.find_root().message().trim().to_string()
}
