/* jitmeta._launch: a kernel launch through the CUDA driver API, called from C.
 *
 * The launch path of jitmeta.jit.runtime, without the per-call conversions of
 * cuda.bindings: the arguments are read from Python ints straight into a C array, and
 * cuLaunchKernel / cuLaunchKernelEx are called through the function pointers that
 * init() receives (jitmeta resolves them with cuGetProcAddress through cuda.bindings,
 * so this module links against nothing and needs no CUDA header to build). The GIL is
 * released for the driver call.
 *
 * Optional: when it was not built (no C compiler at install time), or init() was never
 * called, jitmeta launches through cuda.bindings.
 *
 * The two driver structures used are declared below as the CUDA 12 and 13 headers
 * define them; tests/test_launch.py checks them against cuda.bindings' own.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef int CUresult;

typedef struct {
    int id;                 /* CUlaunchAttributeID (an enum: 4 bytes) */
    char pad[4];            /* 8 - sizeof(CUlaunchAttributeID) */
    union {
        char pad[64];
        int flag;           /* cooperative, programmaticStreamSerializationAllowed */
    } value;
} LaunchAttribute;          /* CUlaunchAttribute */

typedef struct {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    void* hStream;
    LaunchAttribute* attrs;
    unsigned int numAttrs;
} LaunchConfig;             /* CUlaunchConfig */

typedef CUresult (*LaunchKernel)(void* f, unsigned int gx, unsigned int gy, unsigned int gz,
                                 unsigned int bx, unsigned int by, unsigned int bz,
                                 unsigned int smem, void* stream, void** params,
                                 void** extra);
typedef CUresult (*LaunchKernelEx)(const LaunchConfig* config, void* f, void** params,
                                   void** extra);

#define MAX_ARGS 32
#define FLAG_PDL 1
#define FLAG_COOPERATIVE 2

static LaunchKernel launch_kernel;
static LaunchKernelEx launch_kernel_ex;
static int attr_pdl, attr_cooperative;

/* An address (an int, or an object int() accepts, such as a cuda.bindings handle). */
static int as_pointer(PyObject* obj, void** out) {
    if (PyLong_Check(obj)) {
        *out = PyLong_AsVoidPtr(obj);
    } else {
        PyObject* num = PyNumber_Long(obj);
        if (num == NULL) return -1;
        *out = PyLong_AsVoidPtr(num);
        Py_DECREF(num);
    }
    return PyErr_Occurred() ? -1 : 0;
}

static int as_u32(PyObject* obj, const char* what, unsigned int* out) {
    const unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (PyErr_Occurred()) return -1;
    if (v > 0xffffffffULL) {
        PyErr_Format(PyExc_OverflowError, "%s %llu does not fit 32 bits", what, v);
        return -1;
    }
    *out = (unsigned int)v;
    return 0;
}

PyDoc_STRVAR(init_doc,
"init(launch_kernel, launch_kernel_ex, attr_pdl, attr_cooperative)\n\n"
"The addresses of cuLaunchKernel and cuLaunchKernelEx, and the CUlaunchAttributeID\n"
"values of programmatic stream serialization and of a cooperative launch.");

static PyObject* init(PyObject* self, PyObject* args) {
    PyObject *f1, *f2;
    int pdl, cooperative;
    void *p1, *p2;
    if (!PyArg_ParseTuple(args, "OOii:init", &f1, &f2, &pdl, &cooperative)) return NULL;
    if (as_pointer(f1, &p1) < 0 || as_pointer(f2, &p2) < 0) return NULL;
    if (p1 == NULL || p2 == NULL) {
        PyErr_SetString(PyExc_ValueError, "init: a driver function address is 0");
        return NULL;
    }
    launch_kernel = (LaunchKernel)p1;
    launch_kernel_ex = (LaunchKernelEx)p2;
    attr_pdl = pdl;
    attr_cooperative = cooperative;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(launch_doc,
"launch(function, grid, threads, smem, stream, flags, kinds, *args) -> CUresult\n\n"
"Launches `function` (a CUfunction, or its address) on `stream` (a raw handle) with\n"
"`grid` blocks of `threads` threads and `smem` bytes of dynamic shared memory.\n"
"`kinds` (bytes) gives each argument's kind: b'P' a 64-bit value (a device address),\n"
"b'I' a 32-bit unsigned value. `flags`: 1 programmatic stream serialization (PDL),\n"
"2 cooperative; with either, cuLaunchKernelEx, else cuLaunchKernel. Returns the\n"
"driver's result code (0: success); the caller raises on others.");

static PyObject* launch(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (launch_kernel == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "jitmeta._launch.init() was not called");
        return NULL;
    }
    if (nargs < 7) {
        PyErr_SetString(PyExc_TypeError, "launch() takes at least 7 arguments");
        return NULL;
    }
    void *fn, *stream;
    unsigned int grid, threads, smem, flags;
    if (as_pointer(args[0], &fn) < 0 || as_u32(args[1], "grid", &grid) < 0 ||
        as_u32(args[2], "threads", &threads) < 0 || as_u32(args[3], "smem", &smem) < 0 ||
        as_pointer(args[4], &stream) < 0 || as_u32(args[5], "flags", &flags) < 0)
        return NULL;
    if (!PyBytes_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError, "launch(): kinds must be bytes");
        return NULL;
    }
    const char* kinds = PyBytes_AS_STRING(args[6]);
    const Py_ssize_t count = PyBytes_GET_SIZE(args[6]);
    if (count != nargs - 7 || count > MAX_ARGS) {
        PyErr_Format(PyExc_TypeError, "launch(): %zd kinds for %zd kernel arguments (at most %d)",
                     count, nargs - 7, MAX_ARGS);
        return NULL;
    }
    uint64_t slots[MAX_ARGS];
    void* params[MAX_ARGS];
    for (Py_ssize_t i = 0; i < count; ++i) {
        PyObject* a = args[7 + i];
        if (kinds[i] == 'P') {
            const unsigned long long v = PyLong_AsUnsignedLongLong(a);
            if (PyErr_Occurred()) return NULL;
            slots[i] = v;
        } else if (kinds[i] == 'I') {
            unsigned int v;
            if (as_u32(a, "a 32-bit kernel argument", &v) < 0) return NULL;
            memcpy(&slots[i], &v, sizeof v);  /* the kernel reads 4 bytes at the address */
        } else {
            PyErr_Format(PyExc_ValueError, "launch(): unknown argument kind %c", kinds[i]);
            return NULL;
        }
        params[i] = &slots[i];
    }
    CUresult err;
    if (flags & (FLAG_PDL | FLAG_COOPERATIVE)) {
        LaunchAttribute attrs[2];
        LaunchConfig cfg;
        memset(attrs, 0, sizeof attrs);
        memset(&cfg, 0, sizeof cfg);
        unsigned int n = 0;
        if (flags & FLAG_PDL) {
            attrs[n].id = attr_pdl;
            attrs[n++].value.flag = 1;
        }
        if (flags & FLAG_COOPERATIVE) {
            attrs[n].id = attr_cooperative;
            attrs[n++].value.flag = 1;
        }
        cfg.gridDimX = grid;
        cfg.gridDimY = cfg.gridDimZ = 1;
        cfg.blockDimX = threads;
        cfg.blockDimY = cfg.blockDimZ = 1;
        cfg.sharedMemBytes = smem;
        cfg.hStream = stream;
        cfg.attrs = attrs;
        cfg.numAttrs = n;
        Py_BEGIN_ALLOW_THREADS
        err = launch_kernel_ex(&cfg, fn, params, NULL);
        Py_END_ALLOW_THREADS
    } else {
        Py_BEGIN_ALLOW_THREADS
        err = launch_kernel(fn, grid, 1, 1, threads, 1, 1, smem, stream, params, NULL);
        Py_END_ALLOW_THREADS
    }
    return PyLong_FromLong(err);
}

static PyMethodDef methods[] = {
    {"init", init, METH_VARARGS, init_doc},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, launch_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "jitmeta._launch",
    "Kernel launches through the CUDA driver API from C (see jitmeta.jit.runtime).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__launch(void) {
    PyObject* m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "MAX_ARGS", MAX_ARGS) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_PDL", FLAG_PDL) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_COOPERATIVE", FLAG_COOPERATIVE) < 0 ||
        PyModule_AddIntConstant(m, "LAUNCH_CONFIG_BYTES", sizeof(LaunchConfig)) < 0 ||
        PyModule_AddIntConstant(m, "LAUNCH_ATTRIBUTE_BYTES", sizeof(LaunchAttribute)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
