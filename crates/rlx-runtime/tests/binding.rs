//! Device buffers and bound runs, one body per device: the CPU here, CUDA and Vulkan where
//! present (`SKIPPED: <reason>` otherwise). A bound run must equal a host run; one binding
//! runs in a loop; outputs left on the device feed the next run; bad buffers are errors
//! naming the input or output and both types.

use rlx_driver::testing::skip;
use rlx_driver::Device;
use rlx_ir::{DType, Dim, Graph, Shape, Tensor, UnaryOp};
use rlx_runtime::{Binding, CompileOptions, CompiledGraph, RawHandle, Session};
use std::collections::HashMap;

const DEVICES: [Device; 3] = [Device::Cpu, Device::Cuda, Device::Vulkan];

/// y = tanh(x @ w + b) and h = x * 2 + 1, x: f32[batch, 4], w: f32[4, 4], b: f32[4].
fn model() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, Shape(vec![Dim::sym("batch"), 4.into()]));
    let w = g.param("w", DType::F32, [4, 4]);
    let b = g.param("b", DType::F32, [4]);
    let m = g.matmul(x, w).unwrap();
    let a = g.add(m, b).unwrap();
    let y = g.unary(UnaryOp::Tanh, a).unwrap();
    let two = g.constant(Tensor::scalar(DType::F32, 2.0));
    let one = g.constant(Tensor::scalar(DType::F32, 1.0));
    let h = g.mul(x, two).unwrap();
    let h = g.add(h, one).unwrap();
    g.output("y", y);
    g.output("h", h);
    g
}

/// Tests share each device's pool, whose statistics one of them checks: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The session and compiled model on `device`, or None after printing why not.
fn open(device: Device, test: &str) -> Option<(Session, CompiledGraph)> {
    let s = match Session::new(device) {
        Ok(s) => s,
        Err(e) => {
            skip(test, &format!("{device}: {e}"));
            return None;
        }
    };
    s.set_param("w", Tensor::random(DType::F32, &[4, 4], 11));
    s.set_param("b", Tensor::random(DType::F32, &[4], 12));
    let c = s.compile(&model(), CompileOptions::default()).unwrap();
    Some((s, c))
}

fn host_run(c: &CompiledGraph, x: &Tensor) -> HashMap<String, Tensor> {
    let inputs = HashMap::from([("x".to_string(), x.clone())]);
    c.run(&inputs).unwrap().into_iter().collect()
}

fn close(device: Device, what: &str, a: &Tensor, b: &Tensor) {
    assert_eq!(a.shape(), b.shape(), "{device} {what}");
    for (i, (x, y)) in a.to_f64_vec().iter().zip(b.to_f64_vec()).enumerate() {
        assert!(
            (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
            "{device} {what}[{i}]: bound {x}, host {y}"
        );
    }
}

#[test]
fn buffers_upload_download_fill_copy_and_views() {
    let _serial = serial();
    for device in DEVICES {
        let Some((s, _)) = open(device, "buffers_upload_download_fill_copy_and_views") else {
            continue;
        };
        let before = s.backend().memory().map(|m| m.bytes_in_use);
        let t = Tensor::random(DType::F32, &[6, 4], 3);
        let b = s.to_device(&t).unwrap();
        assert_eq!(
            (b.device(), b.dtype(), b.shape()),
            (device, DType::F32, &[6, 4][..])
        );
        assert_eq!(b.byte_size(), 96);
        if let (Some(before), Some(now)) = (before, s.backend().memory()) {
            assert!(
                now.bytes_in_use >= before + 96,
                "{device}: pool stats count the buffer"
            );
        }
        assert_eq!(s.download(&b).unwrap(), t, "{device} round trip");
        match (device, b.handle()) {
            (Device::Cpu, RawHandle::Host(p)) => assert_ne!(p, 0),
            (Device::Cuda, RawHandle::Cuda(p)) => assert_ne!(p, 0),
            (Device::Vulkan, RawHandle::Wgpu { .. }) => {}
            (d, h) => panic!("{d}: handle {h:?}"),
        }
        // rows 2..4 read in place
        let rows = b.slice(2, 2).unwrap();
        let want: Vec<f64> = t.to_f64_vec()[8..16].to_vec();
        assert_eq!(
            s.download(&rows).unwrap().to_f64_vec(),
            want,
            "{device} slice"
        );
        let flat = b.view(DType::F32, &[24]).unwrap();
        assert_eq!(s.download(&flat).unwrap().to_f64_vec(), t.to_f64_vec());
        // fill, then copy back over part of it
        let c = s.alloc(DType::F32, &[6, 4]).unwrap();
        s.fill(&c, 1.5).unwrap();
        assert!(s
            .download(&c)
            .unwrap()
            .to_f64_vec()
            .iter()
            .all(|&v| v == 1.5));
        s.copy(&b, &c).unwrap();
        assert_eq!(s.download(&c).unwrap(), t, "{device} copy");
        // mistakes are errors
        let e = s
            .upload(&c, &Tensor::random(DType::F32, &[4, 6], 1))
            .unwrap_err();
        assert!(
            e.to_string().contains("[6, 4]") && e.to_string().contains("[4, 6]"),
            "{e}"
        );
        let small = s.alloc(DType::F32, &[2]).unwrap();
        let e = s.copy(&b, &small).unwrap_err().to_string();
        assert!(e.contains("96 bytes") && e.contains("8 bytes"), "{e}");
        assert!(b.slice(5, 2).is_err());
        // mapping: in place on the CPU, an error naming the device elsewhere
        let mut seen = Vec::new();
        let mapped = s.backend().map_read(&b, &mut |bytes| seen = bytes.to_vec());
        match device {
            Device::Cpu => {
                mapped.unwrap();
                assert_eq!(seen, t.data().as_bytes());
                s.backend()
                    .map_write(&c, &mut |bytes| {
                        bytes[..4].copy_from_slice(&7f32.to_le_bytes())
                    })
                    .unwrap();
                assert_eq!(s.download(&c).unwrap().to_f64_vec()[0], 7.0);
            }
            _ => {
                let e = mapped.unwrap_err().to_string();
                assert!(e.contains("not supported on"), "{e}");
            }
        }
        drop((b, c, rows, flat, small));
        if let (Some(before), Some(now)) = (before, s.backend().memory()) {
            assert_eq!(
                now.bytes_in_use, before,
                "{device}: dropping returns the bytes"
            );
        }
    }
}

#[test]
fn bound_run_equals_host_run() {
    let _serial = serial();
    for device in DEVICES {
        let Some((s, c)) = open(device, "bound_run_equals_host_run") else {
            continue;
        };
        let x = Tensor::random(DType::F32, &[3, 4], 5);
        let want = host_run(&c, &x);
        // device input, every output returned on the device
        let mut binding = Binding::new();
        binding.bind_input_buffer("x", s.to_device(&x).unwrap());
        c.run_with(&mut binding).unwrap();
        let outs = binding.outputs();
        assert_eq!(outs.len(), 2, "{device}: every output when none is bound");
        for (name, buf) in outs {
            assert_eq!(buf.device(), device);
            close(device, &name, &s.download(&buf).unwrap(), &want[&name]);
        }
        // host input, one output into a buffer of the caller's
        let mut binding = Binding::new();
        binding.bind_input("x", x.clone());
        let y = s.alloc(DType::F32, &[3, 4]).unwrap();
        binding.bind_output("y", y.clone());
        c.run_with(&mut binding).unwrap();
        assert_eq!(binding.outputs().len(), 1);
        close(device, "y", &s.download(&y).unwrap(), &want["y"]);
    }
}

#[test]
fn one_binding_in_a_loop() {
    let _serial = serial();
    for device in DEVICES {
        let Some((s, c)) = open(device, "one_binding_in_a_loop") else {
            continue;
        };
        let x_dev = s.alloc(DType::F32, &[8, 4]).unwrap();
        let mut binding = Binding::new();
        binding.bind_input_buffer("x", x_dev.clone());
        binding.bind_output("y", s.alloc(DType::F32, &[8, 4]).unwrap());
        binding.bind_output_to_device("h");
        let mut h_first = None;
        for i in 0..20 {
            let x = Tensor::random(DType::F32, &[8, 4], 100 + i);
            s.upload(&x_dev, &x).unwrap();
            c.run_with(&mut binding).unwrap();
            let want = host_run(&c, &x);
            let y = binding.output("y").unwrap();
            close(device, "y", &s.download(y).unwrap(), &want["y"]);
            let h = binding.output("h").unwrap();
            close(device, "h", &s.download(h).unwrap(), &want["h"]);
            // nobody else holds the allocated output: the next run reuses it
            let handle = h.handle();
            match &h_first {
                None => h_first = Some(handle),
                Some(first) => assert_eq!(*first, handle, "{device}: output reused"),
            }
        }
    }
}

#[test]
fn outputs_feed_the_next_run_on_the_device() {
    let _serial = serial();
    for device in DEVICES {
        let Some((s, c)) = open(device, "outputs_feed_the_next_run_on_the_device") else {
            continue;
        };
        let mut x = Tensor::random(DType::F32, &[2, 4], 7);
        let mut binding = Binding::new();
        binding.bind_input_buffer("x", s.to_device(&x).unwrap());
        binding.bind_output_to_device("y");
        let mut kept = Vec::new();
        for _ in 0..5 {
            c.run_with(&mut binding).unwrap();
            let y = binding.output("y").unwrap().clone();
            x = host_run(&c, &x).remove("y").unwrap();
            close(device, "y", &s.download(&y).unwrap(), &x);
            // y is now an input too: the next run must write a new buffer, not y
            binding.bind_input_buffer("x", y.clone());
            kept.push(y);
        }
        for (a, b) in kept.iter().zip(kept.iter().skip(1)) {
            assert!(
                !a.same_storage(b),
                "{device}: a held output is never overwritten"
            );
        }
    }
}

#[test]
fn bad_buffers_are_errors_naming_both_types() {
    let _serial = serial();
    for device in DEVICES {
        let Some((s, c)) = open(device, "bad_buffers_are_errors_naming_both_types") else {
            continue;
        };
        let x = s
            .to_device(&Tensor::random(DType::F32, &[3, 5], 1))
            .unwrap();
        let mut binding = Binding::new();
        binding.bind_input_buffer("x", x);
        let e = c.run_with(&mut binding).unwrap_err().to_string();
        assert!(
            e.contains("input `x`") && e.contains("f32[3, 5]"),
            "{device}: {e}"
        );
        assert!(e.contains("f32[batch,4]"), "{device}: {e}");

        let x = s
            .to_device(&Tensor::random(DType::F16, &[3, 4], 1))
            .unwrap();
        binding.bind_input_buffer("x", x);
        let e = c.run_with(&mut binding).unwrap_err().to_string();
        assert!(
            e.contains("input `x`") && e.contains("dtype differs"),
            "{device}: {e}"
        );

        binding.bind_input_buffer(
            "x",
            s.to_device(&Tensor::random(DType::F32, &[3, 4], 1))
                .unwrap(),
        );
        binding.bind_output("y", s.alloc(DType::F32, &[4, 4]).unwrap());
        let e = c.run_with(&mut binding).unwrap_err().to_string();
        assert!(
            e.contains("output `y`") && e.contains("f32[3,4]") && e.contains("[4, 4]"),
            "{device}: {e}"
        );

        binding.clear_outputs();
        binding.bind_output_to_device("nope");
        let e = c.run_with(&mut binding).unwrap_err().to_string();
        assert!(
            e.contains("output `nope`") && e.contains("y"),
            "{device}: {e}"
        );

        binding.clear_outputs();
        binding.clear_inputs();
        let e = c.run_with(&mut binding).unwrap_err().to_string();
        assert!(
            e.contains("input `x`") && e.contains("missing"),
            "{device}: {e}"
        );

        // a buffer of another device
        if device != Device::Cpu {
            let cpu = Session::new(Device::Cpu).unwrap();
            let on_cpu = cpu
                .to_device(&Tensor::random(DType::F32, &[3, 4], 1))
                .unwrap();
            binding.bind_input_buffer("x", on_cpu.clone());
            let e = c.run_with(&mut binding).unwrap_err().to_string();
            assert!(
                e.contains("input `x`") && e.contains("cpu buffer"),
                "{device}: {e}"
            );
            assert!(s.download(&on_cpu).is_err(), "{device} reads a CPU buffer");
        }
        // after all that, a good run still works
        let x = Tensor::random(DType::F32, &[3, 4], 9);
        let mut binding = Binding::new();
        binding.bind_input_buffer("x", s.to_device(&x).unwrap());
        c.run_with(&mut binding).unwrap();
        let y = s.download(binding.output("y").unwrap()).unwrap();
        close(device, "y", &y, &host_run(&c, &x)["y"]);
    }
}

#[test]
fn seams_refuse_buffers_naming_the_device() {
    let _serial = serial();
    let backend = rlx_runtime::backend_for(Device::Tpu).unwrap();
    let e = backend.alloc(DType::F32, &[4]).unwrap_err().to_string();
    assert!(e.contains("not supported on tpu"), "{e}");
}
