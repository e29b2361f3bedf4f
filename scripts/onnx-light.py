"""The onnx wheel's `light` models (AlexNet, DenseNet-121, Inception v1/v2, ResNet-50,
ShuffleNet, SqueezeNet, VGG-19, ZFNet-512: their weights made by ConstantOfShape inside the
model) as backend test directories for `rlx onnx-test`: OUT/light_NAME/model.onnx and
test_data_set_0/{input_0,output_0}.pb, the input made exactly as onnx's own test runner makes
it (`Runner.generate_dummy_data`, seed 0, not random) and the output the wheel's.

  python3 scripts/onnx-light.py OUT
"""
import os, shutil, sys
import onnx
from onnx.backend.test.runner import Runner

out = sys.argv[1]
src = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
for f in sorted(os.listdir(src)):
    if not f.endswith(".onnx"):
        continue
    name = f[:-5]
    data = os.path.join(out, name, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    shutil.copy(os.path.join(src, f), os.path.join(out, name, "model.onnx"))
    model = onnx.load(os.path.join(src, f))
    inits = {i.name for i in model.graph.initializer}
    k = 0
    for x in model.graph.input:
        if x.name in inits:
            continue
        v = Runner.generate_dummy_data(x, seed=0, name=name, random=False)
        with open(os.path.join(data, f"input_{k}.pb"), "wb") as fh:
            fh.write(onnx.numpy_helper.from_array(v).SerializeToString())
        k += 1
    for i in range(len(model.graph.output)):
        shutil.copy(os.path.join(src, f"{name}_output_{i}.pb"), os.path.join(data, f"output_{i}.pb"))
