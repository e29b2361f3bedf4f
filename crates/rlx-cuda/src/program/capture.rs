//! CUDA graphs: the steps captured once and replayed, one graph per set of bound addresses.

use super::*;

impl CudaProgram {
    /// Runs the steps: replays the captured graph, capturing it first when allowed. With
    /// buffers rebound to bound memory, the graph captured for those addresses (the
    /// [`BOUND_GRAPHS`] most recent sets are kept).
    pub(super) fn launch_steps(
        &self,
        state: &mut RunState,
        rebind: Rebind<'_>,
    ) -> Result<(), CudaError> {
        if !rebind.is_empty() {
            return self.launch_rebound(state, rebind);
        }
        if state.graph.is_none() && state.graphs_ok {
            self.device.begin_capture()?;
            let enqueued = self.enqueue_steps(&[]);
            let captured = self.device.end_capture();
            match (enqueued, captured) {
                (Ok(()), Ok(g)) => state.graph = Some(g),
                _ => state.graphs_ok = false,
            }
        }
        match &state.graph {
            Some(g) => self.device.replay(g),
            None => self.enqueue_steps(&[]),
        }
    }

    /// [`CudaProgram::launch_steps`] for a non-empty rebinding.
    fn launch_rebound(&self, state: &mut RunState, rebind: Rebind<'_>) -> Result<(), CudaError> {
        if let Some(i) = state.bound.iter().position(|(k, _)| k.as_slice() == rebind) {
            let entry = state.bound.remove(i);
            state.bound.push(entry);
            return match state.bound.last() {
                Some((_, g)) => self.device.replay(g),
                None => self.enqueue_steps(rebind),
            };
        }
        if !state.graphs_ok {
            return self.enqueue_steps(rebind);
        }
        self.device.begin_capture()?;
        let enqueued = self.enqueue_steps(rebind);
        let captured = self.device.end_capture();
        match (enqueued, captured) {
            (Ok(()), Ok(g)) => {
                if state.bound.len() >= BOUND_GRAPHS {
                    state.bound.remove(0);
                }
                state.bound.push((rebind.to_vec(), g));
                match state.bound.last() {
                    Some((_, g)) => self.device.replay(g),
                    None => self.enqueue_steps(rebind),
                }
            }
            _ => {
                state.graphs_ok = false;
                self.enqueue_steps(rebind)
            }
        }
    }
}
