"""RLX: compile a model once, run it fast on any device.

``rlx.InferenceSession`` is ONNX Runtime's session API (``run``, ``get_inputs``,
``get_outputs``, and ``io_binding`` / ``run_with_iobinding`` to keep inputs and outputs
on the device as ``rlx.DeviceArray``); ``rlx.embed`` and ``rlx.generate`` run Hugging Face folders and GGUF
files; ``rlx.load`` keeps a model loaded; ``rlx.devices`` says which devices can run here
and why not. Every error is an ``rlx.RlxError``.
"""

from ._rlx import (
    DeviceArray,
    DeviceError,
    EmbeddingModel,
    InferenceSession,
    IOBinding,
    InvalidArgument,
    LanguageModel,
    ModelError,
    NodeArg,
    RlxError,
    RunError,
    Tensor,
    TextIterator,
    __version__,
    devices,
    embed,
    generate,
    load,
)

__all__ = [
    "DeviceArray",
    "DeviceError",
    "EmbeddingModel",
    "InferenceSession",
    "IOBinding",
    "InvalidArgument",
    "LanguageModel",
    "ModelError",
    "NodeArg",
    "RlxError",
    "RunError",
    "Tensor",
    "TextIterator",
    "__version__",
    "devices",
    "embed",
    "generate",
    "load",
]
