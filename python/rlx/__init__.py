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



class SessionOptions:
    """ONNX Runtime's ``SessionOptions`` for code that builds one without onnxruntime.

    ``InferenceSession(path, sess_options=...)`` reads ``intra_op_num_threads`` (0: all
    cores) from this or from an ``onnxruntime.SessionOptions``; the other attributes are
    ONNX Runtime's knobs, kept so that code setting them runs unchanged.
    """

    def __init__(self) -> None:
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = None
        self.log_severity_level = 2
        self.enable_profiling = False


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
    "SessionOptions",
    "Tensor",
    "TextIterator",
    "__version__",
    "devices",
    "embed",
    "generate",
    "load",
]
