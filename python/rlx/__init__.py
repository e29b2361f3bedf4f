"""RLX: compile a model once, run it fast on any device.

``rlx.InferenceSession`` is ONNX Runtime's session API (``run``, ``get_inputs``,
``get_outputs``); ``rlx.embed`` and ``rlx.generate`` run Hugging Face folders and GGUF
files; ``rlx.load`` keeps a model loaded; ``rlx.devices`` says which devices can run here
and why not. Every error is an ``rlx.RlxError``.
"""

from ._rlx import (
    DeviceError,
    EmbeddingModel,
    InferenceSession,
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
    "DeviceError",
    "EmbeddingModel",
    "InferenceSession",
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
