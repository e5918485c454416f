/*
 * The Space-Saving sketch's counting in C: the same steps as gateway.hotspots.space_saving_add_python and
 * count_keys_python (the references) on the same dict of counts. A known key's count grows; a new key in a full
 * sketch replaces the counter with the smallest (count, key), Python's own comparison of the two, and starts from
 * its count. tests/unit/gateway/test_hotspots.py pins both functions to their references.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* -1, 0, 1 as a < b, a == b, a > b for two ints; -2 with an exception set. Machine integers compare directly
 * (every count short of 2**63); larger ones through Python's comparison. */
static int
compare_counts(PyObject *a, PyObject *b)
{
    int overflow_a, overflow_b;
    long long x = PyLong_AsLongLongAndOverflow(a, &overflow_a), y = PyLong_AsLongLongAndOverflow(b, &overflow_b);
    if ((x == -1 || y == -1) && PyErr_Occurred()) {
        return -2;
    }
    if (!overflow_a && !overflow_b) {
        return (x > y) - (x < y);
    }
    int less = PyObject_RichCompareBool(a, b, Py_LT);
    if (less) {
        return less < 0 ? -2 : -1;
    }
    int greater = PyObject_RichCompareBool(a, b, Py_GT);
    return greater < 0 ? -2 : greater;
}

/* The key with the smallest (count, key) of a non-empty sketch (borrowed) and its count (borrowed). */
static int
smallest(PyObject *counts, PyObject **victim, PyObject **victim_count)
{
    Py_ssize_t pos = 0;
    PyObject *key, *count, *best_key = NULL, *best_count = NULL;
    while (PyDict_Next(counts, &pos, &key, &count)) {
        if (best_key != NULL) {
            int order = compare_counts(count, best_count);
            if (order == -2) {
                return -1;
            }
            if (order == 0) {  /* a tie: the smaller key */
                order = PyObject_RichCompareBool(key, best_key, Py_LT);
                if (order < 0) {
                    return -1;
                }
                order = order ? -1 : 1;
            }
            if (order > 0) {
                continue;
            }
        }
        best_key = key;
        best_count = count;
    }
    if (best_key == NULL) {
        PyErr_SetString(PyExc_ValueError, "an empty sketch has no smallest counter");
        return -1;
    }
    *victim = best_key;
    *victim_count = best_count;
    return 0;
}

static int
add(PyObject *counts, Py_ssize_t size, PyObject *key, PyObject *weight)
{
    PyObject *count = PyDict_GetItemWithError(counts, key), *total;
    if (count != NULL) {
        total = PyNumber_Add(count, weight);
    }
    else if (PyErr_Occurred()) {
        return -1;
    }
    else if (PyDict_GET_SIZE(counts) >= size) {
        PyObject *victim, *floor;
        if (smallest(counts, &victim, &floor) < 0) {
            return -1;
        }
        total = PyNumber_Add(floor, weight);
        if (total == NULL || PyDict_DelItem(counts, victim) < 0) {  /* victim and floor are gone after this */
            Py_XDECREF(total);
            return -1;
        }
    }
    else {
        total = Py_NewRef(weight);
    }
    if (total == NULL) {
        return -1;
    }
    int failed = PyDict_SetItem(counts, key, total);
    Py_DECREF(total);
    return failed;
}

static PyObject *ONE;

static PyObject *
space_saving_add(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyDict_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "space_saving_add(counts: dict, size: int, key: bytes, weight: int)");
        return NULL;
    }
    Py_ssize_t size = PyLong_AsSsize_t(args[1]);
    if (size == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (add(args[0], size, args[2], args[3]) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
count_keys(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyDict_CheckExact(args[0]) || !PyList_CheckExact(args[2]) || !PyList_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "count_keys(sketches: dict[int, dict], size: int, partitions: list[int], "
                                         "keys: list[bytes | None])");
        return NULL;
    }
    PyObject *sketches = args[0], *partitions = args[2], *keys = args[3];
    Py_ssize_t size = PyLong_AsSsize_t(args[1]), n = PyList_GET_SIZE(keys);
    if (size == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (PyList_GET_SIZE(partitions) != n) {
        PyErr_SetString(PyExc_ValueError, "partitions and keys differ in length");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyList_GET_ITEM(keys, i);
        if (key == Py_None) {
            continue;
        }
        PyObject *counts = PyDict_GetItemWithError(sketches, PyList_GET_ITEM(partitions, i));
        if (counts == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_SetObject(PyExc_KeyError, PyList_GET_ITEM(partitions, i));
            }
            return NULL;
        }
        if (!PyDict_CheckExact(counts)) {
            PyErr_SetString(PyExc_TypeError, "a sketch's counts must be a dict");
            return NULL;
        }
        if (add(counts, size, key, ONE) < 0) {
            return NULL;
        }
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"space_saving_add", (PyCFunction)(void (*)(void))space_saving_add, METH_FASTCALL,
     "Count weight occurrences of key in a Space-Saving sketch of size counters."},
    {"count_keys", (PyCFunction)(void (*)(void))count_keys, METH_FASTCALL,
     "Count keys[i] in the sketch of partitions[i], for every key that is not None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gateway._sketch", "The Space-Saving sketch's counting in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__sketch(void)
{
    ONE = PyLong_FromLong(1);
    if (ONE == NULL) {
        return NULL;
    }
    return PyModule_Create(&module);
}
