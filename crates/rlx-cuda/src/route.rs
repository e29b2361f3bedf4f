//! How each planned step runs once the plan's [`Choice`]s are decided: as planned, as one
//! tiling of a choice's fused kernel (at the choice's first step), or not at all (its work
//! done by a fused kernel). Choices are decided in order; one holding an earlier decided
//! choice's steps replaces that choice's kernel when it is taken.

use crate::plan::Choice;

/// How a step runs once fused alternatives are decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// as planned
    Step,
    /// as tiling `.1` of choice `.0`
    Fused(usize, usize),
    /// not at all (done by the fused kernel at the choice's first step)
    Skip,
}

/// True when every choice already taken in `route` lies wholly inside choice `ci`'s steps
/// or wholly outside them (the plan offers no other kind; a partial overlap leaves `ci`
/// undecided).
pub(crate) fn nests(route: &[Route], choices: &[Choice], ci: usize) -> bool {
    let c = &choices[ci];
    route.iter().all(|r| match *r {
        Route::Fused(cj, _) => {
            let o = &choices[cj];
            let inside = c.first <= o.first && o.last <= c.last;
            let apart = o.last < c.first || c.last < o.first;
            inside || apart
        }
        _ => true,
    })
}

/// Routes choice `ci`'s steps to its tiling `t`: whatever ran there before (the steps, or an
/// inner choice's kernel) gives way. Returns the change in launches per run and in fused
/// kernels run.
pub(crate) fn take(route: &mut [Route], choices: &[Choice], ci: usize, t: usize) -> (isize, isize) {
    let c = &choices[ci];
    let (mut launches, mut fused) = (1, 1);
    for r in &mut route[c.first..=c.last] {
        match *r {
            Route::Step => launches -= 1,
            Route::Fused(..) => {
                launches -= 1;
                fused -= 1;
            }
            Route::Skip => {}
        }
        *r = Route::Skip;
    }
    route[c.first] = Route::Fused(ci, t);
    (launches, fused)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(first: usize, last: usize) -> Choice {
        Choice {
            first,
            last,
            fused: Vec::new(),
        }
    }

    #[test]
    fn an_outer_choice_replaces_the_inner_one_it_holds() {
        // a GEMM + norm choice over steps 6..=7, then one that also takes in step 5
        let choices = [choice(6, 7), choice(5, 7), choice(4, 5), choice(8, 9)];
        let mut route = vec![Route::Step; 10];
        assert!(nests(&route, &choices, 0));
        assert_eq!(take(&mut route, &choices, 0, 2), (-1, 1));
        assert_eq!(route[6], Route::Fused(0, 2));
        assert_eq!(route[7], Route::Skip);
        assert!(nests(&route, &choices, 1));
        // three launches became one: the step, and the inner fused kernel, give way
        assert_eq!(take(&mut route, &choices, 1, 0), (-1, 0));
        assert_eq!(
            route[4..9],
            [
                Route::Step,
                Route::Fused(1, 0),
                Route::Skip,
                Route::Skip,
                Route::Step
            ]
        );
        // a choice that overlaps a taken one in part stays undecided; one apart does not
        assert!(!nests(&route, &choices, 2));
        assert!(nests(&route, &choices, 3));
        assert_eq!(take(&mut route, &choices, 3, 1), (-1, 1));
    }
}
