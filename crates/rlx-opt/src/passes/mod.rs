//! The graph passes, one per file, and the pipeline that runs them in a fixed, named order.

pub mod approximate;
pub mod autocast;
pub mod autocast_all;
pub mod cse;
pub mod dce;
pub mod fold;
pub mod simplify;

use crate::OptError;
use fold::Evaluator;
use rlx_ir::{Graph, IrError};

/// The passes [`optimize`] runs, in order. The same names appear in errors and dumps.
///
/// `cse` runs before `simplify` so idempotent rules see merged operands (`max(a+b, b+a)`);
/// `dce` runs last to drop what the others bypassed.
pub const PASSES: &[&str] = &["fold", "cse", "simplify", "dce"];

/// Runs every pass of [`PASSES`] in order.
///
/// The input graph is verified first; in debug builds and tests each pass's result is
/// verified too, and a failure names the pass.
///
/// # Errors
/// [`OptError::Pass`] naming `"input"` for an invalid input graph, or the failing pass.
pub fn optimize(graph: &Graph, eval: Evaluator<'_>) -> Result<Graph, OptError> {
    optimize_with(graph, eval, PASSES)
}

/// Runs the named passes in the given order (for `rlx dump --stage` and tests).
///
/// # Errors
/// [`OptError::UnknownPass`] for a name not in [`PASSES`]; otherwise as [`optimize`].
pub fn optimize_with(
    graph: &Graph,
    eval: Evaluator<'_>,
    passes: &[&str],
) -> Result<Graph, OptError> {
    if let Some(bad) = passes.iter().find(|p| !PASSES.contains(p)) {
        return Err(OptError::UnknownPass {
            name: bad.to_string(),
            known: PASSES.join(", "),
        });
    }
    graph.verify().map_err(|source| OptError::Pass {
        pass: "input",
        source,
    })?;
    let mut g = graph.clone();
    for asked in passes {
        let name = PASSES
            .iter()
            .find(|p| *p == asked)
            .expect("names are checked above");
        g = run_pass(name, &g, eval)?;
    }
    Ok(g)
}

/// Runs the passes of [`PASSES`] in order up to and including `last`, and stops there (for
/// `rlx dump --after`).
///
/// # Errors
/// [`OptError::UnknownPass`] for a name not in [`PASSES`]; otherwise as [`optimize`].
pub fn optimize_until(graph: &Graph, eval: Evaluator<'_>, last: &str) -> Result<Graph, OptError> {
    let Some(n) = PASSES.iter().position(|p| *p == last) else {
        return Err(OptError::UnknownPass {
            name: last.to_string(),
            known: PASSES.join(", "),
        });
    };
    optimize_with(graph, eval, &PASSES[..=n])
}

/// Runs one pass and, in debug builds, verifies its result.
fn run_pass(name: &'static str, g: &Graph, eval: Evaluator<'_>) -> Result<Graph, OptError> {
    let result: Result<Graph, IrError> = match name {
        "fold" => fold::fold(g, eval),
        "cse" => cse::cse(g),
        "simplify" => simplify::simplify(g),
        "dce" => dce::dce(g),
        _ => unreachable!("names are checked against PASSES"),
    };
    let out = result.map_err(|source| OptError::Pass { pass: name, source })?;
    if cfg!(debug_assertions) {
        out.verify()
            .map_err(|source| OptError::Pass { pass: name, source })?;
    }
    Ok(out)
}
