/*
 * The read hot path's entry decoding in C: a raw stream reply's items ([id, [field, value, ...]], nil items
 * skipped) into StoredEntry objects, filled through the class's slot descriptors as the reference
 * (storage/_speedups/entries_py.py) does. None whenever an item is not what the gateway writes and Redis answers (an id
 * that is not bytes, fields that are not a list, a timestamp that is not 1-19 ASCII digits...): the Python
 * reference then decodes the whole reply, so every odd case keeps its one behaviour.
 * tests/unit/storage/test_entry_decoding.py pins it to the reference.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

enum { SET_PARTITION, SET_OFFSET, SET_VALUE, SET_FORMAT, SET_KEY, SET_HEADERS, SET_TIMESTAMP, SETTERS };
enum { L_CLASS, L_SETTERS, L_FORMATS, L_JSON, L_BINARY, L_DECODE_HEADERS, L_EMPTY, LAYOUT };

/* The ms part of an ID (digits before '-') when it is 1-19 ASCII digits; -1 otherwise (unsure). */
static int
timestamp_of(const char *id, Py_ssize_t size, unsigned long long *out)
{
    unsigned long long ms = 0;
    Py_ssize_t i = 0;
    for (; i < size && id[i] != '-'; i++) {
        if (id[i] < '0' || id[i] > '9' || i >= 19)
            return -1;
        ms = ms * 10 + (unsigned long long)(id[i] - '0');
    }
    if (i == 0 || i == size)
        return -1;
    *out = ms;
    return 0;
}

static int
set_slot(PyObject *setter, PyObject *entry, PyObject *value)
{
    descrsetfunc set = Py_TYPE(setter)->tp_descr_set;
    return set == NULL ? -1 : set(setter, entry, value);
}

/* One entry's value, format, key and headers from its flat field list; -1 on error (exception set), -2 when a
 * field name is neither bytes nor something that never equals bytes (the reference decides). Borrowed
 * value/format and key (unless *owned_key, a new reference the caller releases, holds it: a key taken from a
 * ``K<key>`` field name); a new reference for headers. */
static int
read_fields(PyObject *fields, PyObject *const *layout, PyObject **value, PyObject **format, PyObject **key,
            PyObject **headers, PyObject **owned_key)
{
    Py_ssize_t count = PyList_GET_SIZE(fields);
    *value = layout[L_EMPTY];
    *format = layout[L_JSON];
    *key = Py_None;
    *headers = NULL;
    *owned_key = NULL;
    for (Py_ssize_t i = 0; i + 1 < count; i += 2) {
        PyObject *name = PyList_GET_ITEM(fields, i), *data = PyList_GET_ITEM(fields, i + 1);
        if (!PyBytes_Check(name)) {
            if (name == Py_None || PyUnicode_Check(name) || PyLong_Check(name))
                continue;  /* never == b"v" */
            Py_CLEAR(*headers);
            Py_CLEAR(*owned_key);
            return -2;  /* a bytearray or memoryview could be */
        }
        Py_ssize_t size = PyBytes_GET_SIZE(name);
        if (size >= 1 && PyBytes_AS_STRING(name)[0] == 'K') {  /* the value under K + the key */
            PyObject *taken = PyBytes_FromStringAndSize(PyBytes_AS_STRING(name) + 1, size - 1);
            if (taken == NULL)
                goto failed;
            Py_XSETREF(*owned_key, taken);
            *key = taken;
            *value = data;
            continue;
        }
        if (size != 1)
            continue;
        switch (PyBytes_AS_STRING(name)[0]) {
        case 'v':
            *value = data;
            break;
        case 'f': {
            PyObject *known = PyDict_GetItemWithError(layout[L_FORMATS], data);
            if (known == NULL && PyErr_Occurred())
                goto failed;
            *format = known == NULL ? layout[L_BINARY] : known;
            break;
        }
        case 'k':
            *key = data;
            break;
        case 'h': {
            int present = PyObject_IsTrue(data);
            if (present < 0)
                goto failed;
            if (present) {
                PyObject *decoded = PyObject_CallOneArg(layout[L_DECODE_HEADERS], data);
                if (decoded == NULL)
                    goto failed;
                Py_XSETREF(*headers, decoded);
            }
            break;
        }
        default:
            break;
        }
    }
    if (*headers == NULL && (*headers = PyDict_New()) == NULL) {
        Py_CLEAR(*owned_key);
        return -1;
    }
    return 0;
failed:
    Py_CLEAR(*headers);
    Py_CLEAR(*owned_key);
    return -1;
}

/* A filled entry (new reference), NULL on error; *unsure set when the Python reference must decide. */
static PyObject *
read_entry(PyObject *partition, PyObject *raw_id, PyObject *fields, PyObject *const *layout, int *unsure)
{
    unsigned long long ms;
    if (!PyBytes_Check(raw_id) || !PyList_Check(fields)
        || timestamp_of(PyBytes_AS_STRING(raw_id), PyBytes_GET_SIZE(raw_id), &ms) < 0) {
        *unsure = 1;
        return NULL;
    }
    PyObject *value, *format, *key, *headers, *owned_key, *entry = NULL, *timestamp = NULL;
    PyObject *offset = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(raw_id), PyBytes_GET_SIZE(raw_id), NULL);
    if (offset == NULL)
        return NULL;
    int read = read_fields(fields, layout, &value, &format, &key, &headers, &owned_key);
    if (read < 0) {
        Py_DECREF(offset);
        *unsure = read == -2;
        return NULL;
    }
    timestamp = PyLong_FromUnsignedLongLong(ms);
    PyObject *no_args = timestamp == NULL ? NULL : PyTuple_New(0);
    if (no_args != NULL) {
        entry = PyBaseObject_Type.tp_new((PyTypeObject *)layout[L_CLASS], no_args, NULL);
        Py_DECREF(no_args);
    }
    PyObject *const *setters = &PyTuple_GET_ITEM(layout[L_SETTERS], 0);
    if (entry != NULL
        && (set_slot(setters[SET_PARTITION], entry, partition) < 0 || set_slot(setters[SET_OFFSET], entry, offset) < 0
            || set_slot(setters[SET_VALUE], entry, value) < 0 || set_slot(setters[SET_FORMAT], entry, format) < 0
            || set_slot(setters[SET_KEY], entry, key) < 0 || set_slot(setters[SET_HEADERS], entry, headers) < 0
            || set_slot(setters[SET_TIMESTAMP], entry, timestamp) < 0))
        Py_CLEAR(entry);
    Py_DECREF(offset);
    Py_XDECREF(timestamp);
    Py_DECREF(headers);
    Py_XDECREF(owned_key);
    return entry;
}

static int
layout_is_valid(PyObject *layout)
{
    if (!PyTuple_CheckExact(layout) || PyTuple_GET_SIZE(layout) != LAYOUT)
        return 0;
    PyObject *setters = PyTuple_GET_ITEM(layout, L_SETTERS);
    if (!PyType_Check(PyTuple_GET_ITEM(layout, L_CLASS)) || !PyTuple_CheckExact(setters)
        || PyTuple_GET_SIZE(setters) != SETTERS || !PyDict_CheckExact(PyTuple_GET_ITEM(layout, L_FORMATS))
        || !PyCallable_Check(PyTuple_GET_ITEM(layout, L_DECODE_HEADERS)))
        return 0;
    for (Py_ssize_t i = 0; i < SETTERS; i++)
        if (Py_TYPE(PyTuple_GET_ITEM(setters, i))->tp_descr_set == NULL)
            return 0;
    return 1;
}

static PyObject *
decode_raw_entries(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyLong_Check(args[0]) || !PyList_Check(args[1]) || !layout_is_valid(args[2])) {
        PyErr_SetString(PyExc_TypeError, "decode_raw_entries(partition: int, items: list, layout: tuple)");
        return NULL;
    }
    PyObject *partition = args[0], *items = args[1];
    PyObject *const *layout = &PyTuple_GET_ITEM(args[2], 0);
    PyObject *entries = PyList_New(0);
    if (entries == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (item == Py_None)
            continue;
        if (!PyList_Check(item) || PyList_GET_SIZE(item) != 2) {
            Py_DECREF(entries);
            Py_RETURN_NONE;
        }
        PyObject *raw_id = PyList_GET_ITEM(item, 0), *fields = PyList_GET_ITEM(item, 1);
        if (raw_id == Py_None || fields == Py_None)
            continue;  /* a deleted entry still pending in a group */
        int unsure = 0;
        PyObject *entry = read_entry(partition, raw_id, fields, layout, &unsure);
        if (entry == NULL || PyList_Append(entries, entry) < 0) {
            Py_XDECREF(entry);
            Py_DECREF(entries);
            if (unsure)
                Py_RETURN_NONE;
            return NULL;
        }
        Py_DECREF(entry);
    }
    return entries;
}

static PyMethodDef methods[] = {
    {"decode_raw_entries", (PyCFunction)(void (*)(void))decode_raw_entries, METH_FASTCALL,
     "StoredEntry objects of a raw stream reply's items, or None (the Python reference decides)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "storage._speedups._entries", "Stream entries decoded in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__entries(void)
{
    return PyModule_Create(&module);
}
