//! SQL extensions: `SKYLINE OF` (see [`skyline`]), the options of the `read_*`
//! table functions ([`create_logical_plan`], see [`crate::files`]) and the
//! statement planner that applies them, [`plan_sql`].
//!
//! DataFusion 55 has no hook for a new query-level clause, so a statement that
//! contains `SKYLINE OF` is rewritten at the token level before DataFusion parses
//! it: each clause becomes a leading run of `ORDER BY __ridgeline_skyline(k, j,
//! expr)` keys at the same query level (so dimension expressions resolve exactly
//! as ORDER BY expressions do: select-list aliases, columns that are not selected,
//! aggregates), and after planning every such Sort is replaced by a
//! [`crate::logical::SkylineNode`] (with the user's own ORDER BY, if any, above
//! it). Error positions from DataFusion's parser and planner are mapped back into
//! the user's original text.
pub mod skyline;

use crate::logical::skyline::replace_skyline_markers;
use datafusion::error::Result;
use datafusion::execution::context::SQLOptions;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{DataFrame, SessionContext};

/// DataFusion's `SessionState::create_logical_plan` with the options of `read_*`
/// calls rewritten first ([`crate::files::rewrite_read_options`]).
pub async fn create_logical_plan(state: &SessionState, sql: &str) -> Result<LogicalPlan> {
    let dialect = state.config().options().sql_parser.dialect;
    let mut statement = state.sql_to_statement(sql, &dialect)?;
    // Only statements that can call one are walked.
    if sql.to_ascii_lowercase().contains("read_") {
        crate::files::rewrite_read_options(&mut statement);
    }
    state.statement_to_plan(statement).await
}

/// Plans and runs one SQL statement with Ridgeline's extensions (as
/// `SessionContext::sql` does for plain SQL: DDL runs at once, queries return a
/// lazy DataFrame).
pub async fn plan_sql(ctx: &SessionContext, sql: &str) -> Result<DataFrame> {
    plan_sql_with(ctx, sql, &SQLOptions::new()).await
}

/// [`plan_sql`] restricted by `options` (the server uses it to refuse DDL, DML and
/// `SET` statements: every client shares one catalog).
pub async fn plan_sql_with(ctx: &SessionContext, sql: &str, options: &SQLOptions) -> Result<DataFrame> {
    let Some(rw) = skyline::rewrite(sql)? else {
        let plan = create_logical_plan(&ctx.state(), sql).await?;
        options.verify_plan(&plan)?;
        return ctx.execute_logical_plan(plan).await;
    };
    // DataFusion drops ORDER BY without LIMIT in subqueries while planning; the
    // skyline keys travel as ORDER BY keys, so keep them (a statement with a
    // skyline keeps its other subquery sorts too).
    let mut state = ctx.state();
    state.config_mut().options_mut().sql_parser.enable_subquery_sort_elimination = false;
    let plan = create_logical_plan(&state, &rw.sql).await.map_err(|e| rw.map_error(e))?;
    let plan = replace_skyline_markers(plan, &rw).map_err(|e| rw.map_error(e))?;
    options.verify_plan(&plan)?;
    ctx.execute_logical_plan(plan).await
}
