//! The functions an expression can call: DataFusion's scalar functions (math, string,
//! unicode, regex, date/time, `coalesce`, ...) and its SQL syntax planners (`extract`,
//! `position`, `substring`, ...), offered to DataFusion's SQL planner. Expressions read
//! no tables and call no aggregates (those come with windows, in a later step).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion_common::config::ConfigOptions;
use datafusion_common::{plan_err, Result, TableReference};
use datafusion_expr::planner::{ContextProvider, ExprPlanner};
use datafusion_expr::{AggregateUDF, HigherOrderUDF, ScalarUDF, TableSource, WindowUDF};

/// The scalar functions by name (and alias), and the syntax planners.
#[derive(Debug)]
pub(crate) struct Functions {
    scalar: HashMap<String, Arc<ScalarUDF>>,
    planners: Vec<Arc<dyn ExprPlanner>>,
    options: ConfigOptions,
}

impl Functions {
    /// DataFusion's default scalar functions and planners.
    pub(crate) fn new() -> Self {
        let mut scalar = HashMap::new();
        for f in datafusion_functions::all_default_functions() {
            for alias in f.aliases() {
                scalar.insert(alias.clone(), f.clone());
            }
            scalar.insert(f.name().to_string(), f);
        }
        let planners: Vec<Arc<dyn ExprPlanner>> = vec![
            Arc::new(datafusion_functions::core::planner::CoreFunctionPlanner::default()),
            Arc::new(datafusion_functions::datetime::planner::DatetimeFunctionPlanner),
            Arc::new(datafusion_functions::unicode::planner::UnicodeFunctionPlanner),
        ];
        Functions {
            scalar,
            planners,
            options: ConfigOptions::default(),
        }
    }
}

impl ContextProvider for Functions {
    fn get_table_source(&self, name: TableReference) -> Result<Arc<dyn TableSource>> {
        plan_err!("an expression reads no tables (`{name}`)")
    }

    fn get_expr_planners(&self) -> &[Arc<dyn ExprPlanner>] {
        &self.planners
    }

    fn get_function_meta(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        self.scalar.get(name).cloned()
    }

    fn get_higher_order_meta(&self, _name: &str) -> Option<Arc<HigherOrderUDF>> {
        None
    }

    fn get_aggregate_meta(&self, _name: &str) -> Option<Arc<AggregateUDF>> {
        None
    }

    fn get_window_meta(&self, _name: &str) -> Option<Arc<WindowUDF>> {
        None
    }

    fn get_variable_type(&self, _variable_names: &[String]) -> Option<arrow_schema::DataType> {
        None
    }

    fn options(&self) -> &ConfigOptions {
        &self.options
    }

    fn udf_names(&self) -> Vec<String> {
        self.scalar.keys().cloned().collect()
    }

    fn higher_order_function_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn udaf_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn udwf_names(&self) -> Vec<String> {
        Vec::new()
    }
}
