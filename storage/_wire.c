/*
 * The plain append in C: its grouping by partition (split_by_partition) and its RESP (xadd_transaction: MULTI,
 * one XADD per value, EXEC, written in two passes, the size then the bytes object in place, instead of a
 * %-format and a chunk per record), the same results as storage.scripts' *_python references.
 * tests/unit/storage/test_plain_append_wire.py pins each to its reference.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdio.h>
#include <string.h>

static const char MULTI[] = "*1\r\n$5\r\nMULTI\r\n";
static const char EXEC[] = "*1\r\n$4\r\nEXEC\r\n";
static const char V_FIELD[] = "$1\r\nv\r\n";
static const char K_FIELD[] = "$1\r\nk\r\n";

#define LITERAL_SIZE(s) ((Py_ssize_t)sizeof(s) - 1)

static Py_ssize_t
digits(Py_ssize_t n)
{
    Py_ssize_t count = 1;
    while (n >= 10) {
        n /= 10;
        count++;
    }
    return count;
}

static char *
put(char *out, const char *data, Py_ssize_t n)
{
    memcpy(out, data, (size_t)n);
    return out + n;
}

/* ``$<len>\r\n<data>\r\n`` */
static char *
put_bulk(char *out, const char *data, Py_ssize_t n)
{
    out += sprintf(out, "$%zd\r\n", n);
    out = put(out, data, n);
    *out++ = '\r';
    *out++ = '\n';
    return out;
}

static PyObject *
xadd_transaction(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[1]) || !PyBytes_CheckExact(args[2])
        || !PyList_CheckExact(args[3]) || !PyList_CheckExact(args[4])) {
        PyErr_SetString(PyExc_TypeError, "xadd_transaction(keyed_head: bytes, keyless_head: bytes, "
                                         "value_format: bytes, values: list[bytes], keys: list[bytes | None])");
        return NULL;
    }
    PyObject *keyed = args[0], *keyless = args[1], *format = args[2], *values = args[3], *keys = args[4];
    Py_ssize_t n = PyList_GET_SIZE(values);
    if (PyList_GET_SIZE(keys) != n) {
        PyErr_SetString(PyExc_ValueError, "values and keys differ in length");
        return NULL;
    }
    Py_ssize_t size = LITERAL_SIZE(MULTI) + LITERAL_SIZE(EXEC);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = PyList_GET_ITEM(values, i), *key = PyList_GET_ITEM(keys, i);
        if (!PyBytes_CheckExact(value)) {
            PyErr_Format(PyExc_TypeError, "values[%zd] must be bytes", i);
            return NULL;
        }
        Py_ssize_t length = PyBytes_GET_SIZE(value);
        size += LITERAL_SIZE(V_FIELD) + 5 + digits(length) + length + PyBytes_GET_SIZE(format);
        if (key == Py_None) {
            size += PyBytes_GET_SIZE(keyless);
        }
        else if (PyBytes_CheckExact(key)) {
            Py_ssize_t key_length = PyBytes_GET_SIZE(key);
            size += PyBytes_GET_SIZE(keyed) + LITERAL_SIZE(K_FIELD) + 5 + digits(key_length) + key_length;
        }
        else {
            PyErr_Format(PyExc_TypeError, "keys[%zd] must be bytes or None", i);
            return NULL;
        }
    }
    /* Written in place (sprintf's NUL after a length prefix lands at most on the bytes object's own NUL). */
    PyObject *result = PyBytes_FromStringAndSize(NULL, size);
    if (result == NULL) {
        return NULL;
    }
    char *p = PyBytes_AS_STRING(result);
    p = put(p, MULTI, LITERAL_SIZE(MULTI));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = PyList_GET_ITEM(values, i), *key = PyList_GET_ITEM(keys, i);
        PyObject *head = key == Py_None ? keyless : keyed;
        p = put(p, PyBytes_AS_STRING(head), PyBytes_GET_SIZE(head));
        p = put(p, V_FIELD, LITERAL_SIZE(V_FIELD));
        p = put_bulk(p, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value));
        p = put(p, PyBytes_AS_STRING(format), PyBytes_GET_SIZE(format));
        if (key != Py_None) {
            p = put(p, K_FIELD, LITERAL_SIZE(K_FIELD));
            p = put_bulk(p, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
        }
    }
    p = put(p, EXEC, LITERAL_SIZE(EXEC));
    if (p - PyBytes_AS_STRING(result) != size) {  /* cannot happen: the two passes count the same bytes */
        Py_DECREF(result);
        PyErr_SetString(PyExc_SystemError, "xadd_transaction: size mismatch");
        return NULL;
    }
    return result;
}

static PyObject *
split_by_partition(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1]) || !PyList_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "split_by_partition(partitions: list[int], values: list[bytes], "
                                         "keys: list[bytes | None])");
        return NULL;
    }
    PyObject *partitions = args[0], *values = args[1], *keys = args[2];
    Py_ssize_t n = PyList_GET_SIZE(partitions);
    if (PyList_GET_SIZE(values) != n || PyList_GET_SIZE(keys) != n) {
        PyErr_SetString(PyExc_ValueError, "partitions, values and keys differ in length");
        return NULL;
    }
    PyObject *groups = PyDict_New();
    if (groups == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *partition = PyList_GET_ITEM(partitions, i);
        PyObject *group = PyDict_GetItemWithError(groups, partition);
        if (group == NULL) {
            if (PyErr_Occurred()) {
                goto fail;
            }
            group = PyTuple_New(3);
            if (group == NULL) {
                goto fail;
            }
            for (Py_ssize_t column = 0; column < 3; column++) {
                PyObject *list = PyList_New(0);
                if (list == NULL) {
                    Py_DECREF(group);
                    goto fail;
                }
                PyTuple_SET_ITEM(group, column, list);
            }
            int failed = PyDict_SetItem(groups, partition, group);
            Py_DECREF(group);  /* the dict holds it */
            if (failed < 0) {
                goto fail;
            }
        }
        PyObject *index = PyLong_FromSsize_t(i);
        if (index == NULL) {
            goto fail;
        }
        int failed = PyList_Append(PyTuple_GET_ITEM(group, 0), index) < 0 ||
                     PyList_Append(PyTuple_GET_ITEM(group, 1), PyList_GET_ITEM(values, i)) < 0 ||
                     PyList_Append(PyTuple_GET_ITEM(group, 2), PyList_GET_ITEM(keys, i)) < 0;
        Py_DECREF(index);
        if (failed) {
            goto fail;
        }
    }
    return groups;
fail:
    Py_DECREF(groups);
    return NULL;
}

static PyMethodDef methods[] = {
    {"xadd_transaction", (PyCFunction)(void (*)(void))xadd_transaction, METH_FASTCALL,
     "MULTI, one XADD per value (with its key where there is one), EXEC, as RESP bytes."},
    {"split_by_partition", (PyCFunction)(void (*)(void))split_by_partition, METH_FASTCALL,
     "Plain records' columns grouped by partition: {partition: (indexes, values, keys)}, first seen first."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "storage._wire", "The plain append's RESP in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__wire(void)
{
    return PyModule_Create(&module);
}
