/*
 * Kafka's Utils.murmur2 in C: the same function as partitioner._speedups.murmur2_py's murmur2 (the reference),
 * much faster per key. Java's wrapping 32-bit int arithmetic is uint32_t arithmetic here; the
 * result is returned as a signed 32-bit int, as Java returns it. Tests pin both implementations to Kafka's
 * golden vectors and to each other (tests/unit/partitioner/test_hashing.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static int32_t
kafka_murmur2(const unsigned char *data, Py_ssize_t length)
{
    const uint32_t seed = 0x9747b28cU, m = 0x5bd1e995U;
    const int r = 24;
    uint32_t h = seed ^ (uint32_t)length;
    Py_ssize_t words = length / 4;
    for (Py_ssize_t i = 0; i < words; i++) {
        const unsigned char *p = data + 4 * i;
        uint32_t k = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    const unsigned char *tail = data + (length & ~(Py_ssize_t)3);
    switch (length % 4) {
    case 3:
        h ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)tail[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

static PyObject *
murmur2(PyObject *module, PyObject *arg)
{
    if (PyBytes_CheckExact(arg)) {
        return PyLong_FromLong(kafka_murmur2((const unsigned char *)PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg)));
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    int32_t h = kafka_murmur2((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromLong(h);
}

/* A partition count from a Python int: positive, or -1 with an exception set. */
static long
partition_count(PyObject *arg)
{
    long partitions = PyLong_AsLong(arg);
    if (partitions == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (partitions < 1) {
        PyErr_Format(PyExc_ValueError, "partitions must be positive, got %ld", partitions);
        return -1;
    }
    return partitions;
}

/* to_positive(murmur2(key)) % partitions */
static PyObject *
place(PyObject *key, long partitions)
{
    int32_t h = kafka_murmur2((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
    return PyLong_FromLong((long)((uint32_t)h & 0x7fffffffU) % partitions);
}

static PyObject *
partition_of(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "partition_of(key: bytes, partitions: int)");
        return NULL;
    }
    long partitions = partition_count(args[1]);
    return partitions < 0 ? NULL : place(args[0], partitions);
}

static PyObject *
partitions_of(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "partitions_of(keys: list[bytes | None], partitions: int, keyless: int)");
        return NULL;
    }
    long partitions = partition_count(args[1]);
    if (partitions < 0) {
        return NULL;
    }
    PyObject *keys = args[0], *keyless = args[2];
    if (!PyLong_Check(keyless)) {
        PyErr_SetString(PyExc_TypeError, "keyless must be an int");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(keys);
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyList_GET_ITEM(keys, i), *partition;
        if (key == Py_None) {
            Py_INCREF(keyless);
            partition = keyless;
        }
        else if (PyBytes_CheckExact(key)) {
            partition = place(key, partitions);
            if (partition == NULL) {
                Py_DECREF(out);
                return NULL;
            }
        }
        else {
            Py_DECREF(out);
            PyErr_Format(PyExc_TypeError, "keys[%zd] must be bytes or None", i);
            return NULL;
        }
        PyList_SET_ITEM(out, i, partition);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"murmur2", murmur2, METH_O, "Kafka's Utils.murmur2 of a bytes-like object, as a signed 32-bit int."},
    {"partition_of", (PyCFunction)(void (*)(void))partition_of, METH_FASTCALL,
     "to_positive(murmur2(key)) % partitions: Kafka's default partitioner for a keyed record."},
    {"partitions_of", (PyCFunction)(void (*)(void))partitions_of, METH_FASTCALL,
     "partition_of(key, partitions) of each key of a list, keyless for a None key."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "partitioner._speedups._murmur2", "Kafka's murmur2 partitioner hash in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__murmur2(void)
{
    return PyModule_Create(&module);
}
