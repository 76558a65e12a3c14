"""An array that claims, through DLPack, to live on a CUDA device: no memory behind it.

blockscale._cuda checks every argument (device, dtype, shape, strides, sizes) before it touches
the GPU, so those checks can run on a machine without a GPU or torch: the pointer is never
dereferenced, and a call whose arguments all pass stops at the device check with RuntimeError.
"""
import ctypes

_DTYPES = {"uint8": (1, 8), "int32": (0, 32), "int64": (0, 64), "float32": (2, 32), "float16": (2, 16),
           "bfloat16": (4, 16)}
_ITEM = {"uint8": 1, "int32": 4, "int64": 8, "float32": 4, "float16": 2, "bfloat16": 2}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

_CUDA, _CPU = 2, 1


class FakeCudaArray:
    """shape, dtype name, strides in elements (default: C order), device id; address 256-aligned."""

    def __init__(self, shape, dtype="float32", strides=None, device=0, cpu=False):
        self.shape = tuple(shape)
        if strides is None:
            strides, step = [], 1
            for d in reversed(self.shape):
                strides.insert(0, step)
                step *= max(d, 1)
        self._shape = (ctypes.c_int64 * len(self.shape))(*self.shape)
        self._strides = (ctypes.c_int64 * len(self.shape))(*strides)
        self._dtype = dtype
        self._device = (_CPU, 0) if cpu else (_CUDA, device)
        self._keep = []

    def __dlpack_device__(self):
        return self._device

    def __dlpack__(self, **kwargs):
        code, bits = _DTYPES[self._dtype]
        t = _DLManagedTensor()
        t.dl_tensor.data = 0x7F0000000000  # never dereferenced
        t.dl_tensor.device = _DLDevice(*self._device)
        t.dl_tensor.ndim = len(self.shape)
        t.dl_tensor.dtype = _DLDataType(code, bits, 1)
        t.dl_tensor.shape = self._shape
        t.dl_tensor.strides = self._strides
        t.deleter = None
        self._keep.append(t)  # the capsule's consumer holds a pointer into it
        return _capsule_new(ctypes.addressof(t), b"dltensor", None)
