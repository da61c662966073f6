// The native CPU kernels' library is a Python module (setup.py builds linear.cc, attention.cc,
// zeros.cc and this file as one): `targets()` gives each kernel's FFI
// handler as a capsule, for jax.ffi.register_ffi_target (engine/device/native/__init__.py);
// `products_in_pairs()` says what the build's products run on, and `block_shape()` how
// they want their weights packed.

#include <Python.h>

#include <utility>

#include "xla/ffi/api/c_api.h"

extern "C" XLA_FFI_Error* FlintLinearInt8(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintLinearInt8Mins(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintLinearS4(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintLinearU4Mins(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintLinearS6(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintLinearU6Mins(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintLinearBf16(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintDotInt8(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintDotInt8Mins(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintDotS4(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintDotU4Mins(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintDotS6(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintDotU6Mins(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintLinearU4MinsFactored(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintLinearS6Factored(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintLinearU6MinsFactored(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintDotU4MinsFactored(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintDotS6Factored(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintDotU6MinsFactored(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintDecodeAttention(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* FlintZeros(XLA_FFI_CallFrame* call_frame);
extern "C" int FlintProductsInPairs();
extern "C" int FlintIntegerDots();
extern "C" int FlintBlockRows();
extern "C" int FlintBlockStep();

static PyObject* Targets(PyObject*, PyObject*) {
  PyObject* targets = PyDict_New();
  const std::pair<const char*, XLA_FFI_Handler*> handlers[] = {
      {"flint_linear_int8", FlintLinearInt8},
      {"flint_linear_int8_mins", FlintLinearInt8Mins},
      {"flint_linear_s4", FlintLinearS4},
      {"flint_linear_u4_mins", FlintLinearU4Mins},
      {"flint_linear_s6", FlintLinearS6},
      {"flint_linear_u6_mins", FlintLinearU6Mins},
      {"flint_linear_bf16", FlintLinearBf16},
      {"flint_dot_int8", FlintDotInt8},
      {"flint_dot_int8_mins", FlintDotInt8Mins},
      {"flint_dot_s4", FlintDotS4},
      {"flint_dot_u4_mins", FlintDotU4Mins},
      {"flint_dot_s6", FlintDotS6},
      {"flint_dot_u6_mins", FlintDotU6Mins},
      {"flint_linear_u4_mins_factored", FlintLinearU4MinsFactored},
      {"flint_linear_s6_factored", FlintLinearS6Factored},
      {"flint_linear_u6_mins_factored", FlintLinearU6MinsFactored},
      {"flint_dot_u4_mins_factored", FlintDotU4MinsFactored},
      {"flint_dot_s6_factored", FlintDotS6Factored},
      {"flint_dot_u6_mins_factored", FlintDotU6MinsFactored},
      {"flint_decode_attention", FlintDecodeAttention},
      {"flint_zeros", FlintZeros},
  };
  for (const auto& [name, handler] : handlers) {
    PyObject* capsule = PyCapsule_New(reinterpret_cast<void*>(handler), nullptr, nullptr);
    if (capsule == nullptr || PyDict_SetItemString(targets, name, capsule) != 0) {
      Py_XDECREF(capsule);
      Py_DECREF(targets);
      return nullptr;
    }
    Py_DECREF(capsule);
  }
  return targets;
}

static PyObject* ProductsInPairs(PyObject*, PyObject*) { return PyBool_FromLong(FlintProductsInPairs()); }

static PyObject* IntegerDots(PyObject*, PyObject*) { return PyBool_FromLong(FlintIntegerDots()); }

static PyObject* BlockShape(PyObject*, PyObject*) { return Py_BuildValue("(ii)", FlintBlockRows(), FlintBlockStep()); }

static PyMethodDef kMethods[] = {
    {"block_shape", BlockShape, METH_NOARGS,
     "The packed weights' blocks in this build: (rows a block, inputs a step) (ops.py packed)."},
    {"integer_dots", IntegerDots, METH_NOARGS,
     "Whether the build has the integer dot products of GGUF blocks (AVX512-VNNI, dot.cc)."},
    {"products_in_pairs", ProductsInPairs, METH_NOARGS,
     "Whether the products run in pairs of bfloat16 (AVX512_BF16) in this build."},
    {"targets", Targets, METH_NOARGS, "The kernels' FFI handlers by target name, as capsules."},
    {nullptr, nullptr, 0, nullptr},
};

static struct PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_cpu_kernels", nullptr, -1, kMethods};

PyMODINIT_FUNC PyInit__cpu_kernels(void) { return PyModule_Create(&kModule); }