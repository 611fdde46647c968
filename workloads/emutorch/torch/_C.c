/* torch._C of the emulated torch: the ATen stand-in, a CPython extension as PyTorch's own is.
 *
 * Its tensor methods are C, so a wait inside them leaves no Python frame that names it: py-spy
 * sees the calling line of the job's code, as with real PyTorch. Each op calls the CUDA runtime
 * (the workspace's stub libcudart.so.12, over the stub libcuda.so.1) the way ATen does:
 *
 *   item(), bool(t), float(t), int(t)   _local_scalar_dense: cudaMemcpyAsync to the host, then
 *                                       cudaStreamSynchronize
 *   t.to("cuda") / t.cuda()             cudaMemcpyAsync host to device; unless non_blocking,
 *                                       cudaStreamSynchronize (ATen Copy.cu memcpy_and_sync)
 *   t.cpu(), t.tolist()                 a copy to the host, then the stream's sync
 *   t.nonzero(), t[mask]                a kernel, the count copied back, a sync
 *   isnan, isinf, any, sum, >, +, ...   one small kernel, a new tensor, no wait
 *   dist.all_reduce(t), ...             ncclAllReduce (stub libnccl.so.2) on the current stream:
 *                                       returns at once, the kernel spins until every rank's
 *                                       has started; DDP's buckets are all-reduced from the
 *                                       engine's thread during backward; FSDP's units
 *                                       all-gathered before their forward (main thread) and
 *                                       backward, reduce-scattered after it (engine's thread)
 *   dist.send/recv, batch_isend_irecv   ncclSend / ncclRecv on the current stream (a batch in
 *                                       ncclGroupStart/End: one kernel): return at once, the
 *                                       kernel spins until the peer's side has started
 *   loss.backward()                     torch/autograd/graph.py calls _run_backward: the
 *                                       engine's device thread pt_autograd_0 launches the
 *                                       backward kernels (running the hook the model gave, with
 *                                       the GIL, on that thread) while the calling thread sleeps
 *                                       on a condition variable with the GIL released
 *
 * Ground truth (a record per wait, workloads/truth.py): with EMUGPU_DIR set, every sync and
 * every backward is appended to EMUGPU_DIR/native-<pid>-<ppid>.bin as common.TRUTH_RECORD
 * (<QQBQ: start ns, end ns, what, CPU ns of the thread that did the work).
 *
 * Tensors hold no values: device memory is the stub driver's, reads come back as zeros.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The stub kernel's cost argument (crates/fake-cuda KernelCost). */
typedef struct {
    double seconds, sm, occupancy, tensor, dram;
    uint32_t flags;
    uint64_t until_ns;
} KernelCost;

typedef struct {
    unsigned x, y, z;
} Dim3;

enum { TO_DEVICE = 1, TO_HOST = 2 };
/* common.py's truth codes */
enum { TRUTH_SYNC = 2, TRUTH_BACKWARD = 7 };

static struct {
    int (*launch)(const void *, Dim3, Dim3, void **, size_t, void *);
    int (*memcpy_async)(void *, const void *, size_t, int, void *);
    int (*stream_synchronize)(void *);
    int (*device_synchronize)(void);
    int (*malloc_)(void **, size_t);
    int (*free_)(void *);
    int (*host_alloc)(void **, size_t, unsigned);
    int (*free_host)(void *);
    int (*set_device)(int);
    int (*set_device_flags)(unsigned);
    const char *(*error_string)(int);
    int (*queue_end)(int, uint64_t *);
} cuda;
static int device_index = 0;
/* The device current on this thread, as the runtime keeps it (per host thread). */
static __thread int thread_device = -1;

/* Every op runs on its tensors' device, as ATen's CUDAGuard makes sure: on a thread that has
 * not made it current yet (a training function on a thread of its own, as Ray Train runs it),
 * the first op sets it, as CUDAGuard's cudaSetDevice does. Without this a rank's kernels on a
 * new thread would go to device 0. */
static void device_guard(void) {
    if (thread_device != device_index && cuda.set_device && cuda.set_device(device_index) == 0)
        thread_device = device_index;
}

static uint64_t clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* -- ground truth --------------------------------------------------------------------------- */

static int truth_fd = -1;
static pid_t truth_pid = 0;
static pthread_mutex_t truth_lock = PTHREAD_MUTEX_INITIALIZER;

static void truth(uint64_t start, uint64_t end, uint8_t what, uint64_t cpu) {
    pthread_mutex_lock(&truth_lock);
    if (truth_pid != getpid()) {
        /* A forked child writes its own file. */
        const char *directory = getenv("EMUGPU_DIR");
        truth_pid = getpid();
        truth_fd = -1;
        if (directory) {
            char path[4096];
            snprintf(path, sizeof path, "%s/native-%d-%d.bin", directory, (int)getpid(), (int)getppid());
            truth_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        }
    }
    if (truth_fd >= 0) {
        unsigned char record[25];
        memcpy(record, &start, 8);
        memcpy(record + 8, &end, 8);
        record[16] = what;
        memcpy(record + 17, &cpu, 8);
        if (write(truth_fd, record, sizeof record) != (ssize_t)sizeof record) {
            /* A full disk loses truth, not the loop. */
        }
    }
    pthread_mutex_unlock(&truth_lock);
}

/* -- CUDA calls ----------------------------------------------------------------------------- */

static int check(int code, const char *call) {
    if (code == 0)
        return 0;
    if (code == 2)
        PyErr_Format(PyExc_MemoryError, "CUDA out of memory (%s)", call);
    else
        PyErr_Format(PyExc_RuntimeError, "CUDA error: %s (%s, code %d)", cuda.error_string(code), call, code);
    return -1;
}

static int launch_kernel(KernelCost cost) {
    void *args[1] = {&cost};
    device_guard();
    Dim3 grid = {132, 1, 1}, block = {256, 1, 1};
    return check(cuda.launch(NULL, grid, block, args, 0, NULL), "cudaLaunchKernel");
}

static KernelCost tiny_kernel(void) {
    KernelCost cost = {5e-6, 0.02, 0.01, 0.0, 0.02, 0, 0};
    return cost;
}

/* A copy (or none: src NULL) then, when `wait`, a sync of the current stream (or of the whole
 * device), all without the GIL (other Python threads run, as with real PyTorch); a wait is
 * recorded as ground truth, the copy's own wait included (a copy into pageable host memory
 * returns only once it is done). */
static int copy_and_sync(void *dst, const void *src, size_t nbytes, int kind, int wait, int whole_device) {
    uint64_t start = clock_ns(CLOCK_MONOTONIC), cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    int copied = 0, synced = 0;
    device_guard();
    Py_BEGIN_ALLOW_THREADS
    if (src)
        copied = cuda.memcpy_async(dst, src, nbytes, kind, NULL);
    if (!copied && wait)
        synced = whole_device ? cuda.device_synchronize() : cuda.stream_synchronize(NULL);
    Py_END_ALLOW_THREADS
    if (wait || kind == TO_HOST)
        truth(start, clock_ns(CLOCK_MONOTONIC), TRUTH_SYNC, clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu);
    return check(copied, "cudaMemcpyAsync") ||
           check(synced, whole_device ? "cudaDeviceSynchronize" : "cudaStreamSynchronize");
}

/* -- the tensor ----------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    int device;    /* -1: on the host */
    size_t nbytes; /* of its storage */
    void *data;    /* device pointer, or host memory (pinned or malloc'd) */
    int pinned;
    /* The backward pass a forward recorded on its output (0 kernels: no grad_fn). */
    int backward_kernels;
    KernelCost backward_cost;
    PyObject *backward_hook; /* called on the engine's thread before each backward kernel */
} Tensor;

static PyTypeObject TensorType;
/* The type of the tensors ops create: torch.Tensor, the Python subclass (set by the package). */
static PyTypeObject *tensor_class = &TensorType;

static Tensor *new_tensor(PyTypeObject *type, int device, size_t nbytes, int pinned) {
    Tensor *t = (Tensor *)type->tp_alloc(type, 0);
    if (!t)
        return NULL;
    t->device = device;
    t->nbytes = nbytes ? nbytes : 4;
    if (device >= 0) {
        device_guard();
        if (check(cuda.malloc_(&t->data, t->nbytes), "cudaMalloc")) {
            t->data = NULL;
            Py_DECREF(t);
            return NULL;
        }
    } else if (pinned) {
        /* The caching host allocator pins under a device that already has a primary context
         * (the rank's own), not device 0, whatever thread pins. */
        device_guard();
        if (check(cuda.host_alloc(&t->data, t->nbytes, 0), "cudaHostAlloc")) {
            t->data = NULL;
            Py_DECREF(t);
            return NULL;
        }
        t->pinned = 1;
    } else {
        t->data = calloc(1, t->nbytes);
        if (!t->data) {
            Py_DECREF(t);
            return (Tensor *)PyErr_NoMemory();
        }
    }
    return t;
}

static void tensor_dealloc(Tensor *t) {
    if (t->data) {
        if (t->device >= 0)
            cuda.free_(t->data);
        else if (t->pinned)
            cuda.free_host(t->data);
        else
            free(t->data);
    }
    Py_XDECREF(t->backward_hook);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

/* Tensor(nbytes=4, pin_memory=False): a host tensor. */
static PyObject *tensor_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"nbytes", "pin_memory", NULL};
    Py_ssize_t nbytes = 4;
    int pinned = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|np", names, &nbytes, &pinned))
        return NULL;
    return (PyObject *)new_tensor(type, -1, (size_t)nbytes, pinned);
}

/* A device spelled "cuda", "cuda:N", "cpu", an int, or an object whose str() is one. */
static int parse_device(PyObject *spec, int *device) {
    if (PyLong_Check(spec)) {
        *device = (int)PyLong_AsLong(spec);
        return 0;
    }
    PyObject *text = PyObject_Str(spec);
    if (!text)
        return -1;
    const char *s = PyUnicode_AsUTF8(text);
    int ok = 0;
    if (s && strcmp(s, "cpu") == 0)
        *device = -1;
    else if (s && strcmp(s, "cuda") == 0)
        *device = device_index;
    else if (s && strncmp(s, "cuda:", 5) == 0)
        *device = atoi(s + 5);
    else
        ok = -1;
    Py_DECREF(text);
    if (ok)
        PyErr_Format(PyExc_RuntimeError, "Expected one of cpu, cuda device type at start of device string");
    return ok;
}

/* Copies (at most 8 bytes of) the tensor to the host and waits: what every read of a CUDA
 * tensor's value does (a scalar, a count, the head of a list: the rest are zeros anyway). */
static int read_back(Tensor *t) {
    char host[8];
    return copy_and_sync(host, t->data, t->nbytes < sizeof host ? t->nbytes : sizeof host, TO_HOST, 1, 0);
}

static Tensor *copy_to(Tensor *t, int device, int non_blocking) {
    if (device == t->device)
        return (Tensor *)Py_NewRef(t);
    Tensor *out = new_tensor(Py_TYPE(t), device, t->nbytes, 0);
    if (!out)
        return NULL;
    int kind = device >= 0 ? TO_DEVICE : TO_HOST;
    if (copy_and_sync(out->data, t->data, t->nbytes, kind, !non_blocking || kind == TO_HOST, 0)) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *tensor_to(Tensor *t, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"device", "non_blocking", NULL};
    PyObject *spec = NULL;
    int non_blocking = 0, device;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|p", names, &spec, &non_blocking) || parse_device(spec, &device))
        return NULL;
    return (PyObject *)copy_to(t, device, non_blocking);
}

static PyObject *tensor_cuda(Tensor *t, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"non_blocking", NULL};
    int non_blocking = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p", names, &non_blocking))
        return NULL;
    return (PyObject *)copy_to(t, device_index, non_blocking);
}

static PyObject *tensor_cpu(Tensor *t, PyObject *unused) {
    return (PyObject *)copy_to(t, -1, 0);
}

static PyObject *tensor_pin_memory(Tensor *t, PyObject *unused) {
    if (t->device >= 0) {
        PyErr_SetString(PyExc_RuntimeError, "cannot pin 'torch.cuda.FloatTensor' only dense CPU tensors can be pinned");
        return NULL;
    }
    Tensor *out = new_tensor(Py_TYPE(t), -1, t->nbytes, 1);
    if (out)
        memcpy(out->data, t->data, t->nbytes);
    return (PyObject *)out;
}

/* The scalar of a one-element tensor: a read back on CUDA, a load on the host. */
static int scalar(Tensor *t) {
    return t->device >= 0 ? read_back(t) : 0;
}

static PyObject *tensor_item(Tensor *t, PyObject *unused) {
    return scalar(t) ? NULL : PyFloat_FromDouble(0.0);
}

static PyObject *tensor_tolist(Tensor *t, PyObject *unused) {
    if (t->device >= 0 && read_back(t))
        return NULL;
    return PyList_New(0);
}

static int tensor_bool(Tensor *t) {
    return scalar(t) ? -1 : 0;
}

static PyObject *tensor_float(Tensor *t) {
    return scalar(t) ? NULL : PyFloat_FromDouble(0.0);
}

static PyObject *tensor_int(Tensor *t) {
    return scalar(t) ? NULL : PyLong_FromLong(0);
}

/* An elementwise op or a reduction: a small kernel on CUDA, a new tensor. */
static PyObject *elementwise(Tensor *t, size_t nbytes) {
    if (t->device >= 0 && launch_kernel(tiny_kernel()))
        return NULL;
    return (PyObject *)new_tensor(Py_TYPE(t), t->device, nbytes ? nbytes : t->nbytes, 0);
}

static PyObject *tensor_same(PyObject *self, PyObject *unused) {
    return elementwise((Tensor *)self, 0);
}

static PyObject *tensor_reduce(PyObject *self, PyObject *unused) {
    return elementwise((Tensor *)self, 4);
}

static PyObject *tensor_binary(PyObject *a, PyObject *b) {
    PyObject *self = PyObject_TypeCheck(a, &TensorType) ? a : b;
    return elementwise((Tensor *)self, 0);
}

static PyObject *tensor_compare(PyObject *a, PyObject *b, int op) {
    return tensor_binary(a, b);
}

/* nonzero and boolean-mask indexing: the output's size is known only once the count is back
 * on the host, so both sync. */
static PyObject *tensor_nonzero(Tensor *t, PyObject *unused) {
    if (t->device >= 0 && (launch_kernel(tiny_kernel()) || read_back(t)))
        return NULL;
    return (PyObject *)new_tensor(Py_TYPE(t), t->device, t->nbytes, 0);
}

static PyObject *tensor_getitem(Tensor *t, PyObject *index) {
    if (PyObject_TypeCheck(index, &TensorType))
        return tensor_nonzero(t, NULL);
    return elementwise(t, 0);
}

static PyObject *get_device(Tensor *t, void *unused) {
    if (t->device < 0)
        return PyUnicode_FromString("cpu");
    return PyUnicode_FromFormat("cuda:%d", t->device);
}

static PyObject *get_is_cuda(Tensor *t, void *unused) {
    return PyBool_FromLong(t->device >= 0);
}

static PyObject *get_nbytes(Tensor *t, void *unused) {
    return PyLong_FromSize_t(t->nbytes);
}

static PyObject *get_requires_grad(Tensor *t, void *unused) {
    return PyBool_FromLong(t->backward_kernels > 0);
}

static PyMethodDef tensor_methods[] = {
    {"to", (PyCFunction)(void (*)(void))tensor_to, METH_VARARGS | METH_KEYWORDS, NULL},
    {"cuda", (PyCFunction)(void (*)(void))tensor_cuda, METH_VARARGS | METH_KEYWORDS, NULL},
    {"cpu", (PyCFunction)tensor_cpu, METH_NOARGS, NULL},
    {"pin_memory", (PyCFunction)tensor_pin_memory, METH_NOARGS, NULL},
    {"item", (PyCFunction)tensor_item, METH_NOARGS, NULL},
    {"tolist", (PyCFunction)tensor_tolist, METH_NOARGS, NULL},
    {"nonzero", (PyCFunction)tensor_nonzero, METH_NOARGS, NULL},
    {"isnan", tensor_same, METH_NOARGS, NULL},
    {"isinf", tensor_same, METH_NOARGS, NULL},
    {"detach", tensor_same, METH_NOARGS, NULL},
    {"clone", tensor_same, METH_NOARGS, NULL},
    {"float", tensor_same, METH_NOARGS, NULL},
    {"any", tensor_reduce, METH_NOARGS, NULL},
    {"all", tensor_reduce, METH_NOARGS, NULL},
    {"sum", tensor_reduce, METH_NOARGS, NULL},
    {"mean", tensor_reduce, METH_NOARGS, NULL},
    {NULL},
};

static PyGetSetDef tensor_getset[] = {
    {"device", (getter)get_device, NULL, NULL, NULL},
    {"is_cuda", (getter)get_is_cuda, NULL, NULL, NULL},
    {"nbytes", (getter)get_nbytes, NULL, NULL, NULL},
    {"requires_grad", (getter)get_requires_grad, NULL, NULL, NULL},
    {NULL},
};

static PyNumberMethods tensor_number = {
    .nb_add = tensor_binary,
    .nb_subtract = tensor_binary,
    .nb_multiply = tensor_binary,
    .nb_true_divide = tensor_binary,
    .nb_bool = (inquiry)tensor_bool,
    .nb_float = (unaryfunc)tensor_float,
    .nb_int = (unaryfunc)tensor_int,
};

static PyMappingMethods tensor_mapping = {
    .mp_subscript = (binaryfunc)tensor_getitem,
};

static PyTypeObject TensorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "torch._C.TensorBase",
    .tp_basicsize = sizeof(Tensor),
    .tp_dealloc = (destructor)tensor_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = tensor_new,
    .tp_methods = tensor_methods,
    .tp_getset = tensor_getset,
    .tp_as_number = &tensor_number,
    .tp_as_mapping = &tensor_mapping,
    .tp_richcompare = tensor_compare,
};

/* -- NCCL: ProcessGroupNCCL's calls ------------------------------------------------------------
 * The workspace's stub libnccl.so.2 (loaded under its SONAME, as libtorch_cuda.so links it). A
 * collective enqueues a kernel on the current stream and returns: the host never waits in it;
 * its kernel spins on the GPU until every rank's has started. DistributedDataParallel's
 * bucketed all-reduces are issued from the engine's thread during backward (the reducer's
 * autograd hooks are C++): `_ddp(buckets, bucket_bytes)`. */

typedef struct {
    char internal[128];
} NcclId;

enum { NCCL_FLOAT = 7, NCCL_SUM = 0 };
enum { ALL_REDUCE = 1, REDUCE_SCATTER = 2, ALL_GATHER = 3, BROADCAST = 4 };

static struct {
    int (*get_unique_id)(NcclId *);
    int (*init_rank)(void **, int, NcclId, int);
    int (*all_reduce)(const void *, void *, size_t, int, int, void *, void *);
    int (*reduce_scatter)(const void *, void *, size_t, int, int, void *, void *);
    int (*all_gather)(const void *, void *, size_t, int, void *, void *);
    int (*broadcast)(const void *, void *, size_t, int, int, void *, void *);
    int (*send)(const void *, size_t, int, int, void *, void *);
    int (*recv)(void *, size_t, int, int, void *, void *);
    int (*group_start)(void);
    int (*group_end)(void);
    int (*abort)(void *);
    const char *(*error_string)(int);
    void *comm;
    int world;
    void *buffer; /* the device buffer every collective names (tensors hold no values) */
    int ddp_buckets;
    size_t ddp_bucket_bytes;
    /* FSDP: units, and the bytes each all-gathers (its parameters) and reduce-scatters (its
     * gradients). */
    int fsdp_units;
    size_t fsdp_bytes;
    /* Held while a collective is issued or the communicator aborted (the watchdog's thread
     * may abort it while the engine's issues one). */
    pthread_mutex_t lock;
} nccl = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int resolve(void *library, void **slot, const char *name);

static int nccl_bind(void) {
    if (nccl.get_unique_id)
        return 0;
    void *library = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
    if (!library) {
        PyErr_SetString(PyExc_RuntimeError, "Distributed package doesn't have NCCL built in (libnccl.so.2 not loaded)");
        return -1;
    }
    return resolve(library, (void **)&nccl.init_rank, "ncclCommInitRank") ||
           resolve(library, (void **)&nccl.all_reduce, "ncclAllReduce") ||
           resolve(library, (void **)&nccl.reduce_scatter, "ncclReduceScatter") ||
           resolve(library, (void **)&nccl.all_gather, "ncclAllGather") ||
           resolve(library, (void **)&nccl.broadcast, "ncclBroadcast") ||
           resolve(library, (void **)&nccl.send, "ncclSend") ||
           resolve(library, (void **)&nccl.recv, "ncclRecv") ||
           resolve(library, (void **)&nccl.group_start, "ncclGroupStart") ||
           resolve(library, (void **)&nccl.group_end, "ncclGroupEnd") ||
           resolve(library, (void **)&nccl.abort, "ncclCommAbort") ||
           resolve(library, (void **)&nccl.error_string, "ncclGetErrorString") ||
           resolve(library, (void **)&nccl.get_unique_id, "ncclGetUniqueId");
}

/* One collective over `nbytes` of float32 on the current stream; called without the GIL.
 * Returns -1 once the communicator is gone (aborted). */
static int nccl_collective(int op, size_t nbytes) {
    size_t count = nbytes / 4;
    void *b = nccl.buffer;
    int code = -1;
    pthread_mutex_lock(&nccl.lock);
    if (nccl.comm) {
        switch (op) {
        case ALL_REDUCE:
            code = nccl.all_reduce(b, b, count, NCCL_FLOAT, NCCL_SUM, nccl.comm, NULL);
            break;
        case REDUCE_SCATTER:
            code = nccl.reduce_scatter(b, b, count / (size_t)nccl.world, NCCL_FLOAT, NCCL_SUM, nccl.comm, NULL);
            break;
        case ALL_GATHER:
            code = nccl.all_gather(b, b, count / (size_t)nccl.world, NCCL_FLOAT, nccl.comm, NULL);
            break;
        default:
            code = nccl.broadcast(b, b, count, NCCL_FLOAT, 0, nccl.comm, NULL);
        }
    }
    pthread_mutex_unlock(&nccl.lock);
    return code;
}

static int nccl_check(int code, const char *call) {
    if (code == 0)
        return 0;
    if (code < 0) {
        PyErr_Format(PyExc_RuntimeError, "NCCL communicator was aborted (%s)", call);
        return -1;
    }
    PyErr_Format(PyExc_RuntimeError, "NCCL error in: %s, %s (code %d)", call, nccl.error_string(code), code);
    return -1;
}

/* The communicator's store and place until it is created: ProcessGroupNCCL creates it at the
 * first collective (getNCCLComm), in C++ under the collective's own Python frame. */
static struct {
    char path[4096];
    int world, rank, pending;
} store;

/* _nccl_setup(store_path, world, rank): where the unique id will travel, for _nccl_connect. */
static PyObject *nccl_setup(PyObject *module, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "sii", &path, &store.world, &store.rank) || nccl_bind())
        return NULL;
    if (strlen(path) >= sizeof store.path - 32)
        return PyErr_Format(PyExc_ValueError, "store path too long");
    strcpy(store.path, path);
    store.pending = 1;
    Py_RETURN_NONE;
}

/* Rank 0 writes a new unique id to the store (a file, as torch's FileStore: written beside it,
 * then renamed), every rank reads it (waiting for it as TCPStore's get does), then calls
 * ncclCommInitRank, which returns once every rank has. Without the GIL; 0, or an NCCL code. */
static int nccl_create(void) {
    NcclId id;
    int code;
    if (store.rank == 0) {
        char partial[sizeof store.path + 32];
        snprintf(partial, sizeof partial, "%s.%d", store.path, (int)getpid());
        if ((code = nccl.get_unique_id(&id)) != 0)
            return code;
        int fd = open(partial, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || write(fd, id.internal, sizeof id.internal) != (ssize_t)sizeof id.internal ||
            close(fd) != 0 || rename(partial, store.path) != 0)
            return 2; /* ncclSystemError */
    }
    for (;;) {
        int fd = open(store.path, O_RDONLY);
        if (fd >= 0) {
            ssize_t got = read(fd, id.internal, sizeof id.internal);
            close(fd);
            if (got == (ssize_t)sizeof id.internal)
                break;
        }
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    if (!nccl.buffer && cuda.malloc_(&nccl.buffer, 4) != 0)
        return 1; /* ncclUnhandledCudaError */
    return nccl.init_rank(&nccl.comm, store.world, id, store.rank);
}

/* _nccl_connect(): creates the communicator if it is not yet (the first collective's call, or
 * init_process_group's with a device_id); blocks until every rank has come. */
static PyObject *nccl_connect(PyObject *module, PyObject *unused) {
    int code;
    if (!store.pending)
        Py_RETURN_NONE;
    Py_BEGIN_ALLOW_THREADS
    code = nccl_create();
    Py_END_ALLOW_THREADS
    if (nccl_check(code, "ncclCommInitRank"))
        return NULL;
    store.pending = 0;
    nccl.world = store.world;
    Py_RETURN_NONE;
}

/* _nccl_collective(op, nbytes): ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER or BROADCAST; returns at
 * once (a full launch queue blocks in the driver, without the GIL). */
static PyObject *nccl_collective_py(PyObject *module, PyObject *args) {
    int op, code;
    Py_ssize_t nbytes;
    if (!PyArg_ParseTuple(args, "in", &op, &nbytes))
        return NULL;
    if (!nccl.world)
        return PyErr_Format(PyExc_RuntimeError, "Default process group has not been initialized");
    device_guard(); /* ProcessGroupNCCL guards its tensors' device too */
    Py_BEGIN_ALLOW_THREADS
    code = nccl_collective(op, (size_t)nbytes);
    Py_END_ALLOW_THREADS
    return nccl_check(code, "collective") ? NULL : Py_NewRef(Py_None);
}

/* _nccl_p2p(((is_send, peer, nbytes), ...)): point-to-point transfers of float32 on the
 * current stream, several in one group (torch.distributed.batch_isend_irecv coalesces them so);
 * returns at once. */
static PyObject *nccl_p2p_py(PyObject *module, PyObject *args) {
    PyObject *list;
    if (!PyArg_ParseTuple(args, "O", &list))
        return NULL;
    PyObject *ops = PySequence_Fast(list, "a sequence of (is_send, peer, nbytes)");
    if (!ops)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(ops);
    int sends[16], peers[16];
    Py_ssize_t sizes[16];
    if (n > 16) {
        Py_DECREF(ops);
        return PyErr_Format(PyExc_ValueError, "at most 16 transfers in a batch");
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(ops, i), "pin", &sends[i], &peers[i], &sizes[i])) {
            Py_DECREF(ops);
            return NULL;
        }
    }
    Py_DECREF(ops);
    if (!nccl.world)
        return PyErr_Format(PyExc_RuntimeError, "Default process group has not been initialized");
    int code = -1;
    device_guard();
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&nccl.lock);
    if (nccl.comm) {
        code = n > 1 ? nccl.group_start() : 0;
        for (Py_ssize_t i = 0; i < n && code == 0; i++) {
            size_t count = (size_t)sizes[i] / 4;
            code = sends[i] ? nccl.send(nccl.buffer, count, NCCL_FLOAT, peers[i], nccl.comm, NULL)
                            : nccl.recv(nccl.buffer, count, NCCL_FLOAT, peers[i], nccl.comm, NULL);
        }
        if (n > 1 && code == 0)
            code = nccl.group_end();
    }
    pthread_mutex_unlock(&nccl.lock);
    Py_END_ALLOW_THREADS
    return nccl_check(code, "point-to-point") ? NULL : Py_NewRef(Py_None);
}

/* _nccl_abort(): ends this rank's communicator and its kernels still waiting for peers
 * (destroy_process_group at the end of a run: the ranks' last steps need not match). */
static PyObject *nccl_abort(PyObject *module, PyObject *unused) {
    int code = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&nccl.lock);
    if (nccl.comm)
        code = nccl.abort(nccl.comm);
    nccl.comm = NULL;
    pthread_mutex_unlock(&nccl.lock);
    Py_END_ALLOW_THREADS
    return nccl_check(code, "ncclCommAbort") ? NULL : Py_NewRef(Py_None);
}

/* _ddp(buckets, bucket_bytes): the engine's thread all-reduces a bucket of gradients each time
 * a `buckets`-th of the backward kernels is done (0: no DDP). */
static PyObject *ddp(PyObject *module, PyObject *args) {
    Py_ssize_t bytes;
    if (!PyArg_ParseTuple(args, "in", &nccl.ddp_buckets, &bytes))
        return NULL;
    nccl.ddp_bucket_bytes = (size_t)bytes;
    Py_RETURN_NONE;
}

/* _fsdp(units, unit_bytes): FullyShardedDataParallel's units: before each unit's forward
 * kernels the main thread all-gathers its parameters; in backward the engine's thread
 * all-gathers them again before the unit's kernels and reduce-scatters its gradients after
 * (0 units: no FSDP). */
static PyObject *fsdp(PyObject *module, PyObject *args) {
    Py_ssize_t bytes;
    if (!PyArg_ParseTuple(args, "in", &nccl.fsdp_units, &bytes))
        return NULL;
    nccl.fsdp_bytes = (size_t)bytes;
    Py_RETURN_NONE;
}

/* Whether kernel k of n starts (or, `last`, ends) one of `units` equal units. */
static int unit_edge(int k, int n, int units, int last) {
    if (units <= 0 || n <= 0)
        return 0;
    int per_unit = (n + units - 1) / units;
    return last ? ((k + 1) % per_unit == 0 || k + 1 == n) : k % per_unit == 0;
}

/* -- the autograd engine's device thread ---------------------------------------------------- */

static struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int started, pending, done;
    Tensor *job;
    int failed;
    uint64_t cpu_ns;
} engine = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

static void *engine_thread(void *unused) {
    pthread_setname_np(pthread_self(), "pt_autograd_0");
    device_guard();
    for (;;) {
        pthread_mutex_lock(&engine.lock);
        while (!engine.pending)
            pthread_cond_wait(&engine.changed, &engine.lock);
        Tensor *job = engine.job;
        pthread_mutex_unlock(&engine.lock);

        uint64_t cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        int failed = 0;
        int units = nccl.world ? nccl.fsdp_units : 0;
        for (int k = 0; k < job->backward_kernels && !failed; k++) {
            /* FSDP: the unit's parameters gathered again before its gradients are computed. */
            if (unit_edge(k, job->backward_kernels, units, 0))
                failed = nccl_collective(ALL_GATHER, nccl.fsdp_bytes) > 0;
            if (job->backward_hook) {
                /* The model's Python for this node (a hook, a custom Function's backward),
                 * on this thread, as the engine runs it. */
                PyGILState_STATE gil = PyGILState_Ensure();
                PyObject *result = PyObject_CallNoArgs(job->backward_hook);
                if (!result) {
                    PyErr_Print();
                    failed = 1;
                }
                Py_XDECREF(result);
                PyGILState_Release(gil);
            }
            void *args[1] = {&job->backward_cost};
            Dim3 grid = {132, 1, 1}, block = {256, 1, 1};
            failed = failed || cuda.launch(NULL, grid, block, args, 0, NULL) != 0;
            /* DDP: a bucket's gradients are ready; the reducer's hook all-reduces it. */
            int buckets = nccl.world ? nccl.ddp_buckets : 0;
            int per_bucket = buckets > 0 ? (job->backward_kernels + buckets - 1) / buckets : 0;
            if (per_bucket && ((k + 1) % per_bucket == 0 || k + 1 == job->backward_kernels))
                failed = failed || nccl_collective(ALL_REDUCE, nccl.ddp_bucket_bytes) > 0;
            /* FSDP: the unit's gradients reduce-scattered to their shards. */
            if (unit_edge(k, job->backward_kernels, units, 1))
                failed = failed || nccl_collective(REDUCE_SCATTER, nccl.fsdp_bytes) > 0;
        }
        pthread_mutex_lock(&engine.lock);
        engine.cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu;
        engine.failed = failed;
        engine.pending = 0;
        engine.done = 1;
        pthread_cond_broadcast(&engine.changed);
        pthread_mutex_unlock(&engine.lock);
    }
    return NULL;
}

/* _run_backward(loss): the engine runs loss's backward pass; the caller sleeps until it is done. */
static PyObject *run_backward(PyObject *module, PyObject *arg) {
    if (!PyObject_TypeCheck(arg, &TensorType)) {
        PyErr_SetString(PyExc_TypeError, "backward of a non-tensor");
        return NULL;
    }
    Tensor *loss = (Tensor *)arg;
    if (loss->backward_kernels == 0) {
        PyErr_SetString(PyExc_RuntimeError, "element 0 of tensors does not require grad and does not have a grad_fn");
        return NULL;
    }
    uint64_t start = clock_ns(CLOCK_MONOTONIC);
    Py_INCREF(loss);
    pthread_mutex_lock(&engine.lock);
    if (!engine.started) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, engine_thread, NULL) != 0) {
            pthread_mutex_unlock(&engine.lock);
            Py_DECREF(loss);
            return PyErr_Format(PyExc_RuntimeError, "could not start the autograd engine's thread");
        }
        pthread_detach(thread);
        engine.started = 1;
    }
    engine.job = loss;
    engine.done = 0;
    engine.pending = 1;
    pthread_cond_broadcast(&engine.changed);
    Py_BEGIN_ALLOW_THREADS
    while (!engine.done)
        pthread_cond_wait(&engine.changed, &engine.lock);
    Py_END_ALLOW_THREADS
    int failed = engine.failed;
    uint64_t cpu = engine.cpu_ns;
    pthread_mutex_unlock(&engine.lock);
    Py_DECREF(loss);
    truth(start, clock_ns(CLOCK_MONOTONIC), TRUTH_BACKWARD, cpu);
    if (failed)
        return PyErr_Format(PyExc_RuntimeError, "the backward pass failed on the engine's thread");
    Py_RETURN_NONE;
}

/* -- module functions ----------------------------------------------------------------------- */

static int resolve(void *library, void **slot, const char *name) {
    *slot = dlsym(library, name);
    if (!*slot) {
        PyErr_Format(PyExc_ImportError, "%s not found in the CUDA libraries", name);
        return -1;
    }
    return 0;
}

/* _cuda_init(device, blocking_sync): binds the runtime (already loaded under its SONAME) and
 * makes `device` current, with cudaDeviceScheduleBlockingSync when asked. */
static PyObject *cuda_init(PyObject *module, PyObject *args) {
    int blocking = 0;
    if (!PyArg_ParseTuple(args, "i|p", &device_index, &blocking))
        return NULL;
    void *runtime = dlopen("libcudart.so.12", RTLD_NOW | RTLD_NOLOAD);
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!runtime || !driver)
        return PyErr_Format(PyExc_ImportError, "libcudart.so.12 and libcuda.so.1 must be loaded first");
    if (resolve(runtime, (void **)&cuda.launch, "cudaLaunchKernel") ||
        resolve(runtime, (void **)&cuda.memcpy_async, "cudaMemcpyAsync") ||
        resolve(runtime, (void **)&cuda.stream_synchronize, "cudaStreamSynchronize") ||
        resolve(runtime, (void **)&cuda.device_synchronize, "cudaDeviceSynchronize") ||
        resolve(runtime, (void **)&cuda.malloc_, "cudaMalloc") || resolve(runtime, (void **)&cuda.free_, "cudaFree") ||
        resolve(runtime, (void **)&cuda.host_alloc, "cudaHostAlloc") ||
        resolve(runtime, (void **)&cuda.free_host, "cudaFreeHost") ||
        resolve(runtime, (void **)&cuda.set_device, "cudaSetDevice") ||
        resolve(runtime, (void **)&cuda.set_device_flags, "cudaSetDeviceFlags") ||
        resolve(runtime, (void **)&cuda.error_string, "cudaGetErrorString") ||
        resolve(driver, (void **)&cuda.queue_end, "emuDeviceQueueEnd"))
        return NULL;
    if (check(cuda.set_device(device_index), "cudaSetDevice") ||
        (blocking && check(cuda.set_device_flags(4), "cudaSetDeviceFlags")))
        return NULL;
    thread_device = device_index;
    Py_RETURN_NONE;
}

static int parse_cost(PyObject *args, PyObject *kwargs, KernelCost *cost, Py_ssize_t *count) {
    static char *names[] = {"seconds", "sm", "occupancy", "tensor", "dram", "count", "flags", "until_ns", NULL};
    double occupancy = -1.0;
    unsigned long long until = 0;
    unsigned flags = 0;
    *count = 1;
    cost->sm = 1.0;
    cost->tensor = 0.0;
    cost->dram = 0.3;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "d|ddddnIK", names, &cost->seconds, &cost->sm, &occupancy,
                                     &cost->tensor, &cost->dram, count, &flags, &until))
        return -1;
    cost->occupancy = occupancy < 0 ? cost->sm * 0.5 : occupancy;
    cost->flags = flags;
    cost->until_ns = until;
    return 0;
}

/* _launch(seconds, sm=1, occupancy=sm/2, tensor=0, dram=0.3, count=1, flags=0, until_ns=0):
 * `count` kernels of `seconds` each, as a compiled model's ops launch them. */
static PyObject *launch(PyObject *module, PyObject *args, PyObject *kwargs) {
    KernelCost cost;
    Py_ssize_t count;
    if (parse_cost(args, kwargs, &cost, &count))
        return NULL;
    device_guard();
    for (Py_ssize_t k = 0; k < count; k++) {
        int code;
        /* A full launch queue blocks in the driver: without the GIL, as ATen launches. */
        void *kernel_args[1] = {&cost};
        Dim3 grid = {132, 1, 1}, block = {256, 1, 1};
        Py_BEGIN_ALLOW_THREADS
        code = cuda.launch(NULL, grid, block, kernel_args, 0, NULL);
        Py_END_ALLOW_THREADS
        if (check(code, "cudaLaunchKernel"))
            return NULL;
    }
    Py_RETURN_NONE;
}

/* The forward pass's `count` kernels, without the GIL; under FSDP each unit's parameters
 * all-gathered on this thread before its kernels. */
static int forward_kernels(KernelCost cost, Py_ssize_t count) {
    int units = nccl.world ? nccl.fsdp_units : 0, code = 0, gathered = 0;
    void *kernel_args[1] = {&cost};
    Dim3 grid = {132, 1, 1}, block = {256, 1, 1};
    device_guard();
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < count && !code && gathered <= 0; k++) {
        if (unit_edge((int)k, (int)count, units, 0))
            gathered = nccl_collective(ALL_GATHER, nccl.fsdp_bytes);
        if (gathered <= 0)
            code = cuda.launch(NULL, grid, block, kernel_args, 0, NULL);
    }
    Py_END_ALLOW_THREADS
    if (gathered > 0)
        return nccl_check(gathered, "ncclAllGather");
    return check(code, "cudaLaunchKernel");
}

/* _forward(x, seconds, sm=..., count=..., backward_seconds=..., backward_count=...,
 * backward_hook=None): the model's forward kernels on x's device, and the loss, which carries
 * the backward pass (kernels of backward_seconds each; the hook runs before each). */
static PyObject *forward(PyObject *module, PyObject *args, PyObject *kwargs) {
    PyObject *x = PyTuple_GetItem(args, 0);
    if (!x || !PyObject_TypeCheck(x, &TensorType)) {
        PyErr_SetString(PyExc_TypeError, "forward of a non-tensor");
        return NULL;
    }
    if (((Tensor *)x)->device < 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!");
        return NULL;
    }
    double backward_seconds = 0.0;
    Py_ssize_t backward_count = 0;
    PyObject *hook = Py_None;
    PyObject *rest = PyTuple_GetSlice(args, 1, PyTuple_GET_SIZE(args));
    PyObject *cost_kwargs = kwargs ? PyDict_Copy(kwargs) : PyDict_New();
    if (!rest || !cost_kwargs)
        goto fail;
    PyObject *item;
    if ((item = PyDict_GetItemString(cost_kwargs, "backward_seconds"))) {
        backward_seconds = PyFloat_AsDouble(item);
        PyDict_DelItemString(cost_kwargs, "backward_seconds");
    }
    if ((item = PyDict_GetItemString(cost_kwargs, "backward_count"))) {
        backward_count = PyLong_AsSsize_t(item);
        PyDict_DelItemString(cost_kwargs, "backward_count");
    }
    if ((item = PyDict_GetItemString(cost_kwargs, "backward_hook"))) {
        hook = item;
        Py_INCREF(hook);
        PyDict_DelItemString(cost_kwargs, "backward_hook");
    } else {
        Py_INCREF(hook);
    }
    if (PyErr_Occurred())
        goto fail_hook;
    KernelCost cost;
    Py_ssize_t count;
    if (parse_cost(rest, cost_kwargs, &cost, &count) || forward_kernels(cost, count))
        goto fail_hook;
    Tensor *loss = new_tensor(tensor_class, ((Tensor *)x)->device, 4, 0);
    if (!loss)
        goto fail_hook;
    loss->backward_kernels = (int)backward_count;
    loss->backward_cost = cost;
    loss->backward_cost.seconds = backward_seconds;
    loss->backward_hook = hook == Py_None ? NULL : hook;
    if (hook == Py_None)
        Py_DECREF(hook);
    Py_DECREF(rest);
    Py_DECREF(cost_kwargs);
    return (PyObject *)loss;
fail_hook:
    Py_DECREF(hook);
fail:
    Py_XDECREF(rest);
    Py_XDECREF(cost_kwargs);
    return NULL;
}

/* _set_tensor_class(cls): the subclass of TensorBase every op returns. */
static PyObject *set_tensor_class(PyObject *module, PyObject *cls) {
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &TensorType)) {
        PyErr_SetString(PyExc_TypeError, "not a subclass of TensorBase");
        return NULL;
    }
    Py_INCREF(cls);
    tensor_class = (PyTypeObject *)cls;
    Py_RETURN_NONE;
}

static PyObject *cuda_synchronize(PyObject *module, PyObject *unused) {
    return copy_and_sync(NULL, NULL, 0, 0, 1, 1) ? NULL : Py_NewRef(Py_None);
}

/* The test bed's own: when the device's queued work ends (emuDeviceQueueEnd). */
static PyObject *queue_end(PyObject *module, PyObject *unused) {
    uint64_t end = 0;
    if (check(cuda.queue_end(device_index, &end), "emuDeviceQueueEnd"))
        return NULL;
    return PyLong_FromUnsignedLongLong(end);
}

static PyMethodDef module_methods[] = {
    {"_cuda_init", cuda_init, METH_VARARGS, NULL},
    {"_launch", (PyCFunction)(void (*)(void))launch, METH_VARARGS | METH_KEYWORDS, NULL},
    {"_forward", (PyCFunction)(void (*)(void))forward, METH_VARARGS | METH_KEYWORDS, NULL},
    {"_run_backward", run_backward, METH_O, NULL},
    {"_cuda_synchronize", cuda_synchronize, METH_NOARGS, NULL},
    {"_set_tensor_class", set_tensor_class, METH_O, NULL},
    {"_queue_end", queue_end, METH_NOARGS, NULL},
    {"_nccl_setup", nccl_setup, METH_VARARGS, NULL},
    {"_nccl_connect", nccl_connect, METH_NOARGS, NULL},
    {"_nccl_collective", nccl_collective_py, METH_VARARGS, NULL},
    {"_nccl_p2p", nccl_p2p_py, METH_VARARGS, NULL},
    {"_nccl_abort", nccl_abort, METH_NOARGS, NULL},
    {"_ddp", ddp, METH_VARARGS, NULL},
    {"_fsdp", fsdp, METH_VARARGS, NULL},
    {NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "torch._C", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__C(void) {
    if (PyType_Ready(&TensorType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "TensorBase", (PyObject *)&TensorType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
