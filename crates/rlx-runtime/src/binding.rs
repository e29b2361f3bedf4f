//! `Binding`: a run's inputs and outputs bound ahead of time, as ONNX Runtime's IoBinding
//! does. Inputs are host tensors or device buffers; outputs are buffers the caller
//! allocated, or left for the run to allocate on the device. After
//! [`crate::CompiledGraph::run_with`] every requested output is a device buffer in the
//! binding, so a loop of runs (or a run whose outputs feed the next) never passes through
//! host memory.

use crate::{BoundValue, DeviceBuffer};
use rlx_ir::Tensor;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Where a bound output goes.
#[derive(Debug, Clone)]
enum OutputSlot {
    /// into this buffer (the caller's; written in place by every run)
    Into(DeviceBuffer),
    /// into a buffer the run allocates (kept here after the run; reused by the next run
    /// when nobody else holds it)
    Allocate(Option<DeviceBuffer>),
}

/// Inputs and outputs of runs, bound once and reused across runs.
#[derive(Debug, Clone, Default)]
pub struct Binding {
    inputs: BTreeMap<String, BoundValue>,
    outputs: BTreeMap<String, OutputSlot>,
}

impl Binding {
    /// An empty binding.
    pub fn new() -> Binding {
        Binding::default()
    }

    /// Binds input `name` to a host tensor (uploaded by each run).
    pub fn bind_input(&mut self, name: &str, value: Tensor) {
        self.inputs
            .insert(name.into(), BoundValue::Host(Arc::new(value)));
    }

    /// Binds input `name` to a shared host tensor (no copy when binding).
    pub fn bind_input_shared(&mut self, name: &str, value: Arc<Tensor>) {
        self.inputs.insert(name.into(), BoundValue::Host(value));
    }

    /// Binds input `name` to a device buffer (read on the device by each run).
    pub fn bind_input_buffer(&mut self, name: &str, buffer: DeviceBuffer) {
        self.inputs.insert(name.into(), BoundValue::Device(buffer));
    }

    /// Binds output `name` to a buffer every run writes in place.
    pub fn bind_output(&mut self, name: &str, buffer: DeviceBuffer) {
        self.outputs.insert(name.into(), OutputSlot::Into(buffer));
    }

    /// Asks for output `name` in a device buffer the run allocates. When no output is
    /// bound at all, a run returns every output this way.
    pub fn bind_output_to_device(&mut self, name: &str) {
        self.outputs.insert(name.into(), OutputSlot::Allocate(None));
    }

    /// Unbinds every input.
    pub fn clear_inputs(&mut self) {
        self.inputs.clear();
    }

    /// Unbinds every output (the next run returns all outputs in new buffers).
    pub fn clear_outputs(&mut self) {
        self.outputs.clear();
    }

    /// The bound inputs.
    pub fn inputs(&self) -> &BTreeMap<String, BoundValue> {
        &self.inputs
    }

    /// Output `name` after a run (or the caller's buffer bound to it).
    pub fn output(&self, name: &str) -> Option<&DeviceBuffer> {
        match self.outputs.get(name)? {
            OutputSlot::Into(b) => Some(b),
            OutputSlot::Allocate(b) => b.as_ref(),
        }
    }

    /// The outputs by name, those the last run wrote (or bound buffers), in name order.
    pub fn outputs(&self) -> Vec<(String, DeviceBuffer)> {
        self.outputs
            .keys()
            .filter_map(|n| self.output(n).map(|b| (n.clone(), b.clone())))
            .collect()
    }

    /// Names of the bound outputs, in name order.
    pub fn output_names(&self) -> Vec<String> {
        self.outputs.keys().cloned().collect()
    }

    /// True when output `name` is to be allocated by the run (not a caller's buffer).
    pub(crate) fn allocates(&self, name: &str) -> Option<Option<&DeviceBuffer>> {
        match self.outputs.get(name)? {
            OutputSlot::Into(_) => None,
            OutputSlot::Allocate(b) => Some(b.as_ref()),
        }
    }

    /// Records the buffer a run allocated for output `name`.
    pub(crate) fn set_allocated(&mut self, name: &str, buffer: DeviceBuffer) {
        self.outputs
            .insert(name.into(), OutputSlot::Allocate(Some(buffer)));
    }
}
