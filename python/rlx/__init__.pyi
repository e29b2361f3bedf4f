"""Type stubs of the rlx package (the extension module rlx._rlx)."""

from os import PathLike
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

class RlxError(Exception):
    """Base class of every error rlx raises."""

class InvalidArgument(RlxError):
    """A bad input or argument: missing, unknown or mistyped input, wrong rank, bad setting."""

class ModelError(RlxError):
    """The model cannot be read, imported or compiled."""

class DeviceError(RlxError):
    """The device has no backend in this build or is not available here."""

class RunError(RlxError):
    """The device failed while compiling or running the model."""

_Path = Union[str, "PathLike[str]"]

class NodeArg:
    """An input or output as ONNX Runtime describes it."""

    @property
    def name(self) -> str: ...
    @property
    def shape(self) -> Optional[List[Union[int, str]]]: ...
    @property
    def type(self) -> str: ...

class Tensor:
    """A run's output in host memory: numpy() or any DLPack consumer, without a copy."""

    @property
    def shape(self) -> List[int]: ...
    @property
    def type(self) -> str: ...
    def numpy(self) -> npt.NDArray[Any]: ...
    def __array__(self, dtype: Any = ..., copy: Optional[bool] = ...) -> npt.NDArray[Any]: ...
    def __dlpack__(
        self,
        *,
        stream: Any = ...,
        max_version: Optional[Tuple[int, int]] = ...,
        dl_device: Any = ...,
        copy: Optional[bool] = ...,
    ) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...

class DeviceArray:
    """A tensor in a session's device memory: numpy() copies it, DLPack shares it."""

    @property
    def shape(self) -> List[int]: ...
    @property
    def type(self) -> str: ...
    @property
    def device(self) -> str: ...
    def data_ptr(self) -> int: ...
    def numpy(self) -> npt.NDArray[Any]: ...
    def __array__(self, dtype: Any = ..., copy: Optional[bool] = ...) -> npt.NDArray[Any]: ...
    def __dlpack__(
        self,
        *,
        stream: Any = ...,
        max_version: Optional[Tuple[int, int]] = ...,
        dl_device: Any = ...,
        copy: Optional[bool] = ...,
    ) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...

class IOBinding:
    """ONNX Runtime's IOBinding: inputs and outputs bound once, outputs left on the device."""

    def bind_input(
        self,
        name: str,
        device_type: Any,
        device_id: int = 0,
        element_type: Any = None,
        shape: Optional[Sequence[int]] = None,
        buffer_ptr: Optional[int] = None,
    ) -> None: ...
    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None: ...
    def bind_output(
        self,
        name: str,
        device_type: Any = None,
        device_id: int = 0,
        element_type: Any = None,
        shape: Optional[Sequence[int]] = None,
        buffer_ptr: Optional[int] = None,
    ) -> None: ...
    def get_outputs(self) -> List[DeviceArray]: ...
    def copy_outputs_to_cpu(self) -> List[npt.NDArray[Any]]: ...
    def clear_binding_inputs(self) -> None: ...
    def clear_binding_outputs(self) -> None: ...
    def synchronize_inputs(self) -> None: ...
    def synchronize_outputs(self) -> None: ...

class SessionOptions:
    """ONNX Runtime's SessionOptions; InferenceSession reads intra_op_num_threads."""

    intra_op_num_threads: int
    inter_op_num_threads: int
    graph_optimization_level: Any
    log_severity_level: int
    enable_profiling: bool
    def __init__(self) -> None: ...

class InferenceSession:
    """An ONNX model compiled for a device, run like onnxruntime.InferenceSession."""

    def __init__(
        self,
        path_or_bytes: Union[_Path, bytes],
        device: str = "auto",
        precision: str = "f32",
        *,
        providers: Optional[Sequence[Any]] = ...,
        sess_options: Any = ...,
        provider_options: Any = ...,
        threads: Optional[int] = ...,
    ) -> None: ...
    def get_session_options(self) -> SessionOptions: ...
    def run(
        self,
        output_names: Optional[Sequence[str]],
        input_feed: Mapping[str, Any],
        run_options: Any = ...,
    ) -> List[npt.NDArray[Any]]: ...
    def run_tensors(
        self, output_names: Optional[Sequence[str]], input_feed: Mapping[str, Any]
    ) -> List[Tensor]: ...
    def io_binding(self) -> IOBinding: ...
    def run_with_iobinding(self, iobinding: IOBinding, run_options: Any = ...) -> None: ...
    def get_inputs(self) -> List[NodeArg]: ...
    def get_outputs(self) -> List[NodeArg]: ...
    def get_providers(self) -> List[str]: ...
    @property
    def device(self) -> str: ...

class EmbeddingModel:
    """A BERT-family model that embeds texts."""

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...
    @property
    def dim(self) -> int: ...
    @property
    def device(self) -> str: ...

class TextIterator(Iterator[str]):
    """Text pieces of one generation, as they are produced."""

    def __iter__(self) -> "TextIterator": ...
    def __next__(self) -> str: ...

class LanguageModel:
    """A Llama-family model (GGUF or Hugging Face folder) that generates text."""

    def generate(
        self,
        prompt: str,
        max_tokens: int = 64,
        *,
        stream: bool = True,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        min_p: float = 0.0,
        repeat_penalty: float = 1.0,
        seed: int = 0,
        chat: bool = False,
        stop: Optional[Sequence[str]] = None,
        ignore_eos: bool = False,
    ) -> Union[TextIterator, str]: ...
    @property
    def device(self) -> str: ...

def devices() -> List[Dict[str, Any]]: ...
def load(
    path: _Path,
    device: str = "auto",
    *,
    context: Optional[int] = None,
    exact_quant: bool = False,
) -> Union[InferenceSession, EmbeddingModel, LanguageModel]: ...
def embed(
    texts: Union[str, Sequence[str]],
    model: Union[_Path, EmbeddingModel],
    device: str = "auto",
) -> npt.NDArray[np.float32]: ...
def generate(
    prompt: str,
    model: Union[_Path, LanguageModel],
    max_tokens: int = 64,
    *,
    stream: bool = True,
    device: str = "auto",
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    repeat_penalty: float = 1.0,
    seed: int = 0,
    chat: bool = False,
    stop: Optional[Sequence[str]] = None,
    ignore_eos: bool = False,
    context: Optional[int] = None,
    exact_quant: bool = False,
) -> Union[TextIterator, str]: ...
