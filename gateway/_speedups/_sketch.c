/*
 * The Space-Saving sketch in C: ``SpaceSaving``, a sketch of ``size`` counters held in plain arrays, and
 * ``count_batch``, which counts a published batch into one sketch per partition and tallies the batch per
 * partition in the same pass. The same steps as gateway._speedups.sketch_py's SpaceSaving and count_batch (the
 * references): a known key's count grows; a new key in a full sketch takes the counter with the smallest
 * (count, key), keys compared as Python compares bytes, and starts from its count.
 *
 * Why arrays, not a dict: the bench's keys churn through the counters (a new key on nearly every add, so an
 * eviction each time), and a dict paid a delete, an insert and a scan of boxed counts per key; here a
 * lookup compares the key's cached hash against at most ``size`` machine words and an eviction overwrites a slot.
 * Counts are machine integers and stop at 2**63 - 1 (a process publishes fewer messages than that).
 * test_hotspots.py pins both to their references.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>

/* Linear lookups: the sketch is meant to be small (the gateway's has 16 counters). */
#define MAX_SIZE 4096

typedef struct {
    PyObject_HEAD
    Py_ssize_t size, used;
    PyObject **keys;     /* exact bytes, owned */
    Py_hash_t *hashes;
    long long *counts;
} Sketch;

static PyTypeObject SketchType;

static long long
saturating_add(long long a, long long b)
{
    return a > LLONG_MAX - b ? LLONG_MAX : a + b;
}

/* Python's bytes order: bytewise, then the shorter first. */
static int
bytes_less(PyObject *a, PyObject *b)
{
    Py_ssize_t la = PyBytes_GET_SIZE(a), lb = PyBytes_GET_SIZE(b);
    int order = memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), (size_t)(la < lb ? la : lb));
    return order < 0 || (order == 0 && la < lb);
}

static Py_ssize_t
find(const Sketch *sketch, PyObject *key, Py_hash_t hash)
{
    Py_ssize_t length = PyBytes_GET_SIZE(key);
    for (Py_ssize_t i = 0; i < sketch->used; i++) {
        PyObject *other = sketch->keys[i];
        if (sketch->hashes[i] == hash &&
            (other == key || (PyBytes_GET_SIZE(other) == length &&
                              memcmp(PyBytes_AS_STRING(other), PyBytes_AS_STRING(key), (size_t)length) == 0))) {
            return i;
        }
    }
    return -1;
}

/* The slot with the smallest (count, key) of a full sketch. */
static Py_ssize_t
smallest(const Sketch *sketch)
{
    Py_ssize_t best = 0;
    for (Py_ssize_t i = 1; i < sketch->used; i++) {
        long long count = sketch->counts[i], floor = sketch->counts[best];
        if (count < floor || (count == floor && bytes_less(sketch->keys[i], sketch->keys[best]))) {
            best = i;
        }
    }
    return best;
}

/* Count ``weight`` (>= 1) occurrences of ``key`` (exact bytes). */
static int
add(Sketch *sketch, PyObject *key, long long weight)
{
    Py_hash_t hash = PyObject_Hash(key);  /* cached by bytes after the first time */
    if (hash == -1) {
        return -1;
    }
    Py_ssize_t slot = find(sketch, key, hash);
    if (slot >= 0) {
        sketch->counts[slot] = saturating_add(sketch->counts[slot], weight);
        return 0;
    }
    if (sketch->used < sketch->size) {
        slot = sketch->used++;
        sketch->counts[slot] = weight;
        sketch->keys[slot] = Py_NewRef(key);
    }
    else {
        slot = smallest(sketch);
        sketch->counts[slot] = saturating_add(sketch->counts[slot], weight);
        Py_SETREF(sketch->keys[slot], Py_NewRef(key));
    }
    sketch->hashes[slot] = hash;
    return 0;
}

static PyObject *
sketch_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"size", NULL};
    Py_ssize_t size = 16;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|n:SpaceSaving", names, &size)) {
        return NULL;
    }
    if (size < 1 || size > MAX_SIZE) {
        PyErr_Format(PyExc_ValueError, "a sketch has 1 to %d counters", MAX_SIZE);
        return NULL;
    }
    Sketch *sketch = (Sketch *)type->tp_alloc(type, 0);
    if (sketch == NULL) {
        return NULL;
    }
    sketch->size = size;
    sketch->keys = PyMem_Calloc((size_t)size, sizeof(PyObject *));
    sketch->hashes = PyMem_Calloc((size_t)size, sizeof(Py_hash_t));
    sketch->counts = PyMem_Calloc((size_t)size, sizeof(long long));
    if (sketch->keys == NULL || sketch->hashes == NULL || sketch->counts == NULL) {
        Py_DECREF(sketch);
        return PyErr_NoMemory();
    }
    return (PyObject *)sketch;
}

static void
sketch_dealloc(Sketch *sketch)
{
    if (sketch->keys != NULL) {
        for (Py_ssize_t i = 0; i < sketch->used; i++) {
            Py_DECREF(sketch->keys[i]);
        }
    }
    PyMem_Free(sketch->keys);
    PyMem_Free(sketch->hashes);
    PyMem_Free(sketch->counts);
    Py_TYPE(sketch)->tp_free((PyObject *)sketch);
}

static PyObject *
sketch_add(Sketch *sketch, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "add(key: bytes, weight: int = 1)");
        return NULL;
    }
    long long weight = 1;
    if (nargs == 2) {
        weight = PyLong_AsLongLong(args[1]);
        if (weight == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (weight < 1) {
            PyErr_SetString(PyExc_ValueError, "a weight is at least 1");
            return NULL;
        }
    }
    if (add(sketch, args[0], weight) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
sketch_counts(Sketch *sketch, PyObject *unused)
{
    PyObject *counts = PyDict_New();
    for (Py_ssize_t i = 0; counts != NULL && i < sketch->used; i++) {
        PyObject *count = PyLong_FromLongLong(sketch->counts[i]);
        if (count == NULL || PyDict_SetItem(counts, sketch->keys[i], count) < 0) {
            Py_CLEAR(counts);
        }
        Py_XDECREF(count);
    }
    return counts;
}

static PyMethodDef sketch_methods[] = {
    {"add", (PyCFunction)(void (*)(void))sketch_add, METH_FASTCALL,
     "Count weight (default 1) occurrences of key."},
    {"counts", (PyCFunction)sketch_counts, METH_NOARGS, "The counted keys and their (over-)estimated counts."},
    {NULL, NULL, 0, NULL},
};

static PyObject *
sketch_size(Sketch *sketch, void *unused)
{
    return PyLong_FromSsize_t(sketch->size);
}

static PyGetSetDef sketch_getset[] = {
    {"size", (getter)sketch_size, NULL, "The number of counters.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SketchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "gateway._speedups._sketch.SpaceSaving",
    .tp_basicsize = sizeof(Sketch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A Space-Saving heavy-hitters sketch of size counters (keys are bytes).",
    .tp_new = sketch_new,
    .tp_dealloc = (destructor)sketch_dealloc,
    .tp_methods = sketch_methods,
    .tp_getset = sketch_getset,
};

/* Whether every row of a batch can be counted: each partition an int indexing ``sketches``, each key bytes or
 * None. Checked before anything is counted, so a refused batch changes no sketch. */
static int
check_batch(PyObject *sketches, PyObject *partitions, PyObject *keys)
{
    Py_ssize_t n = PyList_GET_SIZE(sketches);
    for (Py_ssize_t p = 0; p < n; p++) {
        if (Py_TYPE(PyList_GET_ITEM(sketches, p)) != &SketchType) {
            PyErr_SetString(PyExc_TypeError, "sketches must be SpaceSaving sketches");
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); i++) {
        PyObject *key = PyList_GET_ITEM(keys, i);
        if (key != Py_None && !PyBytes_CheckExact(key)) {
            PyErr_SetString(PyExc_TypeError, "keys must be bytes or None");
            return -1;
        }
        Py_ssize_t partition = PyLong_AsSsize_t(PyList_GET_ITEM(partitions, i));
        if (partition == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (partition < 0 || partition >= n) {
            PyErr_Format(PyExc_IndexError, "partition %zd has no sketch", partition);
            return -1;
        }
    }
    return 0;
}

static PyObject *
count_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1]) || !PyList_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "count_batch(sketches: list[SpaceSaving], partitions: list[int], "
                                         "keys: list[bytes | None])");
        return NULL;
    }
    PyObject *sketches = args[0], *partitions = args[1], *keys = args[2];
    Py_ssize_t n = PyList_GET_SIZE(sketches), rows = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(partitions) != rows) {
        PyErr_SetString(PyExc_ValueError, "partitions and keys differ in length");
        return NULL;
    }
    if (check_batch(sketches, partitions, keys) < 0) {
        return NULL;
    }
    Py_ssize_t *tallies = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof(Py_ssize_t));
    if (tallies == NULL) {
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < rows; i++) {
        Py_ssize_t partition = PyLong_AsSsize_t(PyList_GET_ITEM(partitions, i));  /* checked above */
        PyObject *key = PyList_GET_ITEM(keys, i);
        tallies[partition]++;
        if (key != Py_None && add((Sketch *)PyList_GET_ITEM(sketches, partition), key, 1) < 0) {
            PyMem_Free(tallies);  /* only PyObject_Hash can fail, and bytes hash */
            return NULL;
        }
    }
    PyObject *result = PyList_New(n);
    for (Py_ssize_t p = 0; result != NULL && p < n; p++) {
        PyObject *tally = PyLong_FromSsize_t(tallies[p]);
        if (tally == NULL) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, p, tally);
    }
    PyMem_Free(tallies);
    return result;
}

static PyMethodDef methods[] = {
    {"count_batch", (PyCFunction)(void (*)(void))count_batch, METH_FASTCALL,
     "Count keys[i] (unless None) in sketches[partitions[i]]; the batch's rows per partition."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gateway._speedups._sketch", "The Space-Saving sketch in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__sketch(void)
{
    if (PyType_Ready(&SketchType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "SpaceSaving", (PyObject *)&SketchType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
