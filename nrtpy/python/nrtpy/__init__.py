"""nrtpy: load, run and benchmark compiled NEFF models from Python (docs/python.md).

The API of AWS's nrtpy — ``configure``, ``reset``, ``NrtpyTensor``, ``NrtpyModel``,
``BenchmarkResult``, ``NrtpyError``, ``NrtError`` — over the neuron-vfio runtime: a Neuron
device bound to vfio-pci, or the embedded simulator (``NEURON_VFIO_DEVICE`` selects, as for
libnrt.so). One process holds one runtime, opened on first use; ``reset()`` closes it.
"""

import numbers
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import _nrtpy
from ._errors import NrtError, NrtpyError
from ._nrtpy import NrtModel, NrtTensor

__all__ = [
    "BenchmarkResult",
    "NrtError",
    "NrtModel",
    "NrtTensor",
    "NrtpyError",
    "NrtpyModel",
    "NrtpyTensor",
    "TensorMetadata",
    "configure",
    "get_nrtpy_singleton",
    "reset",
]

_VISIBLE = "NEURON_RT_VISIBLE_CORES"
# NEURON_RT_VISIBLE_CORES as it was before configure() first set it (restored by reset()).
_saved_env = None
_configured = False


def configure(visible_cores=None):
    """Set the NeuronCores the runtime will see (``NEURON_RT_VISIBLE_CORES``) before it opens.

    ``visible_cores`` is an iterable of core ids (``[0, 1]``, ``range(4)``); None leaves the
    current setting. Raises NrtpyError (a RuntimeError) if the runtime is already active,
    TypeError for an int or a non-integer id, ValueError for a negative id or an empty list.
    """
    global _saved_env, _configured
    _nrtpy.check_inactive()
    if visible_cores is None:
        return
    if isinstance(visible_cores, (numbers.Integral, str, bytes)):
        raise TypeError(f"visible_cores must be an iterable of core ids, not {type(visible_cores).__name__}")
    try:
        cores = list(visible_cores)
    except TypeError:
        raise TypeError(f"visible_cores must be an iterable of core ids, not {type(visible_cores).__name__}") from None
    for c in cores:
        if isinstance(c, bool) or not isinstance(c, numbers.Integral):
            raise TypeError(f"core id {c!r} is not an integer")
        if c < 0:
            raise ValueError(f"core id {c} is negative")
    if not cores:
        raise ValueError("visible_cores is empty")
    if not _configured:
        _saved_env = os.environ.get(_VISIBLE)
        _configured = True
    os.environ[_VISIBLE] = ",".join(str(int(c)) for c in cores)


def reset():
    """Close the runtime (every model unloaded, every tensor freed) and clear what
    ``configure()`` set. Objects made before raise NrtpyError when used. A no-op before
    the runtime opened."""
    global _saved_env, _configured
    _nrtpy.reset()
    if _configured:
        if _saved_env is None:
            os.environ.pop(_VISIBLE, None)
        else:
            os.environ[_VISIBLE] = _saved_env
        _saved_env = None
        _configured = False


class _Singleton:
    """The process's runtime (nrtpy's singleton): opened lazily, closed by ``reset()``."""

    def free_tensor(self, tensor):
        """Give a tensor's device memory back now (later use raises NrtpyError)."""
        ref = tensor._ref if isinstance(tensor, NrtpyTensor) else tensor
        if not isinstance(ref, NrtTensor):
            raise TypeError(f"expected an NrtpyTensor, not {type(tensor).__name__}")
        ref.free()

    def init(self):
        """Open the runtime now; returns the number of visible NeuronCores."""
        return _nrtpy.init()

    @property
    def active(self):
        return _nrtpy.is_active()

    def reset(self):
        reset()


_SINGLETON = _Singleton()


def get_nrtpy_singleton():
    """The process's runtime object (``free_tensor``, ``init``, ``active``, ``reset``)."""
    return _SINGLETON


# ------------------------------------------------------------------ dtypes


def _dtype_of(name, size, shape):
    """The NumPy dtype of a NEFF tensor's dtype name (bfloat16 and fp8 through ml_dtypes); a
    name NumPy does not know becomes raw bytes (``V<itemsize>``)."""
    try:
        return np.dtype(name)
    except TypeError:
        pass
    try:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    except (ImportError, AttributeError, TypeError):
        pass
    count = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    item = size // count if count and size % count == 0 else 1
    return np.dtype(f"V{max(item, 1)}")


def _as_contiguous(array):
    """``array`` as a C-contiguous ndarray: the same array when it already is one."""
    a = np.asarray(array)
    if a.dtype.hasobject:
        raise TypeError("arrays of Python objects cannot be device tensors")
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a).reshape(a.shape)
    return a


def _bytes_of(a):
    """A uint8 view of a C-contiguous array's memory (no copy)."""
    return a.reshape(-1).view(np.uint8)


# ------------------------------------------------------------------ tensors


class NrtpyTensor:
    """A tensor in device memory (HBM) of one NeuronCore, freed when garbage collected
    (or at once by ``get_nrtpy_singleton().free_tensor(t)``)."""

    def __init__(self, tensor_ref, shape, dtype, name=None):
        if not isinstance(tensor_ref, NrtTensor):
            raise TypeError(f"tensor_ref must be an nrtpy.NrtTensor, not {type(tensor_ref).__name__}")
        if isinstance(shape, numbers.Integral):
            shape = (shape,)
        self._ref = tensor_ref
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.name = tensor_ref.name if name is None else str(name)
        nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        if nbytes != tensor_ref.size:
            raise ValueError(
                f"shape {self.shape} of {self.dtype} is {nbytes} bytes; the tensor holds {tensor_ref.size}"
            )

    @classmethod
    def from_numpy(cls, array, name=None, core_id=0):
        """Allocate a device tensor on NeuronCore ``core_id`` holding ``array`` (made
        C-contiguous first; copied once, straight from the array's memory to the device)."""
        a = _as_contiguous(array)
        ref = NrtTensor.allocate("" if name is None else str(name), a.nbytes, int(core_id))
        ref.write(_bytes_of(a))
        return cls(ref, a.shape, a.dtype, name)

    def write_from_numpy(self, array):
        """Overwrite the tensor with ``array`` (same byte size; made C-contiguous first)."""
        a = _as_contiguous(array)
        if a.nbytes != self._ref.size:
            raise ValueError(f"array of {a.nbytes} bytes does not match tensor `{self.name}` of {self._ref.size} bytes")
        self._ref.write(_bytes_of(a))

    def numpy(self):
        """The tensor's data as a new NumPy array of its shape and dtype (read from the device
        straight into the array)."""
        out = np.empty(self.shape, dtype=self.dtype)
        self._ref.read_into(_bytes_of(out))
        return out

    @property
    def size(self):
        """Size in bytes."""
        return self._ref.size

    @property
    def core_id(self):
        return self._ref.core_id

    @property
    def tensor_ref(self):
        return self._ref

    def __repr__(self):
        return f"NrtpyTensor(name={self.name!r}, shape={self.shape}, dtype={self.dtype}, core_id={self.core_id})"


# ------------------------------------------------------------------ models


@dataclass(frozen=True)
class TensorMetadata:
    """A model input's or output's name, shape, size in bytes and dtype."""

    name: str
    shape: list
    size: int
    dtype: np.dtype


@dataclass(frozen=True)
class BenchmarkResult:
    """Timing statistics of ``NrtpyModel.benchmark`` (milliseconds)."""

    mean_ms: float
    min_ms: float
    max_ms: float
    std_dev_ms: float
    iterations: int
    warmup_iterations: int
    durations_ms: list = field(default_factory=list)


def _tensor_items(what, tensors):
    if not hasattr(tensors, "items"):
        raise TypeError(f"{what} must be a dict of name -> NrtpyTensor, not {type(tensors).__name__}")
    items = []
    for name, t in tensors.items():
        if not isinstance(t, NrtpyTensor):
            raise TypeError(f"{what}[{name!r}] must be an NrtpyTensor, not {type(t).__name__}")
        items.append((str(name), t._ref))
    return items


class NrtpyModel:
    """A compiled NEFF loaded on a NeuronCore: call it to execute, ``benchmark`` to time it."""

    def __init__(self, model_ref, name=None, neff_path=None):
        if not isinstance(model_ref, NrtModel):
            raise TypeError(f"model_ref must be an nrtpy.NrtModel, not {type(model_ref).__name__}")
        self._ref = model_ref
        self.name = model_ref.neff_name if name is None else str(name)
        self.neff_path = None if neff_path is None else Path(neff_path)
        self.input_tensors_info = self._infos(model_ref.inputs())
        self.output_tensors_info = self._infos(model_ref.outputs())

    @staticmethod
    def _infos(rows):
        return {
            n: TensorMetadata(n, list(shape), size, _dtype_of(dtype, size, shape)) for n, dtype, shape, size in rows
        }

    @classmethod
    def load_from_neff(cls, neff_path, name=None, core_id=0, cc_enabled=False, rank_id=0, world_size=1):
        """Load the NEFF at ``neff_path`` on NeuronCore ``core_id``; ``name`` defaults to the
        file's stem. Raises NrtError (with the runtime's status) when the load fails."""
        if world_size < 1 or not 0 <= rank_id < world_size:
            raise ValueError(f"rank_id {rank_id} is not a rank of world_size {world_size}")
        path = Path(neff_path)
        ref = NrtModel.load(str(path), int(core_id), bool(cc_enabled), int(rank_id), int(world_size))
        return cls(ref, path.stem if name is None else name, path)

    @property
    def core_id(self):
        return self._ref.core_id

    def _outputs(self):
        return {
            n: NrtpyTensor(NrtTensor.allocate(n, i.size, self._ref.core_id), i.shape, i.dtype, n)
            for n, i in self.output_tensors_info.items()
        }

    def __call__(self, inputs, outputs=None, save_trace=False, ntff_name=None):
        """Execute: ``inputs`` (and ``outputs``) map the NEFF's tensor names to NrtpyTensors.
        With ``outputs`` None they are allocated and returned; otherwise returns None.
        ``save_trace`` writes the execution's trace to ``ntff_name`` (default: the NEFF's
        path with an ``.ntff`` suffix)."""
        ins = _tensor_items("inputs", inputs)
        made = self._outputs() if outputs is None else None
        outs = _tensor_items("outputs", made if made is not None else outputs)
        trace = None
        if save_trace:
            if ntff_name is not None:
                trace = str(ntff_name)
            elif self.neff_path is not None:
                trace = str(self.neff_path.with_suffix(".ntff"))
            else:
                trace = f"{self.name}.ntff"
        self._ref.execute(ins, outs, trace)
        return made

    def benchmark(self, inputs, outputs=None, warmup_iter=5, benchmark_iter=5, mode="device"):
        """``warmup_iter`` untimed executions, then ``benchmark_iter`` timed ones.

        ``mode="device"``: the NeuronCore time of each ``nc_exec_running`` start/stop pair the
        system trace recorded for the timed executions (one per NeuronCore of the model and
        execution; ``iterations`` counts them); ``mode="host"``: each execute call's wall-clock
        time, with no tracing.
        """
        if mode not in ("device", "host"):
            raise ValueError(f'mode must be "device" or "host", not {mode!r}')
        if isinstance(benchmark_iter, bool) or not isinstance(benchmark_iter, numbers.Integral) or benchmark_iter < 1:
            raise ValueError(f"benchmark_iter must be at least 1, not {benchmark_iter!r}")
        if isinstance(warmup_iter, bool) or not isinstance(warmup_iter, numbers.Integral) or warmup_iter < 0:
            raise ValueError(f"warmup_iter must be a non-negative integer, not {warmup_iter!r}")
        ins = _tensor_items("inputs", inputs)
        outs = _tensor_items("outputs", self._outputs() if outputs is None else outputs)
        device = mode == "device"
        host_ns, _, spans_ns = self._ref.execute_timed(ins, outs, int(warmup_iter), int(benchmark_iter), device)
        if device:
            # One nc_exec_running span per NeuronCore of the model and execution.
            ns = [d for d in spans_ns if d > 0]
            if not ns:
                raise RuntimeError("no device execution events (nc_exec_running) were captured")
        else:
            ns = host_ns
        ms = [n / 1e6 for n in ns]
        return BenchmarkResult(
            mean_ms=statistics.fmean(ms),
            min_ms=min(ms),
            max_ms=max(ms),
            std_dev_ms=statistics.pstdev(ms),
            iterations=len(ms),
            warmup_iterations=int(warmup_iter),
            durations_ms=ms,
        )

    def __repr__(self):
        return f"NrtpyModel(name={self.name!r}, core_id={self.core_id})"
