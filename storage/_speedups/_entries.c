/*
 * The read hot path's entry decoding in C: a raw stream reply's items ([id, [field, value, ...]], nil items
 * skipped) into StoredEntry objects, filled through the class's slot descriptors as the reference
 * (storage/_speedups/entries_py.py) does. None whenever an item is not what the gateway writes and Redis answers (an id
 * that is not bytes, fields that are not a list, a timestamp that is not 1-19 ASCII digits...): the Python
 * reference then decodes the whole reply, so every odd case keeps its one behaviour.
 * tests/unit/storage/test_entry_decoding.py pins it to the reference. entries_of_columns builds the same entries
 * straight from an Arrow item table's column buffers (an archived segment's rows), with no Python object per cell
 * before it; tests/unit/storage/test_column_entries.py pins it to its reference.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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

/* A StoredEntry (new reference) whose slots hold ``slots`` (borrowed, in declaration order); NULL on error. */
static PyObject *
new_entry(PyObject *const *layout, PyObject *const *slots)
{
    PyObject *entry = NULL, *no_args = PyTuple_New(0);
    if (no_args != NULL) {
        entry = PyBaseObject_Type.tp_new((PyTypeObject *)layout[L_CLASS], no_args, NULL);
        Py_DECREF(no_args);
    }
    PyObject *const *setters = &PyTuple_GET_ITEM(layout[L_SETTERS], 0);
    for (int i = 0; entry != NULL && i < SETTERS; i++)
        if (set_slot(setters[i], entry, slots[i]) < 0)
            Py_CLEAR(entry);
    return entry;
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
    PyObject *value, *format, *key, *headers, *owned_key, *entry;
    PyObject *offset = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(raw_id), PyBytes_GET_SIZE(raw_id), NULL);
    if (offset == NULL)
        return NULL;
    int read = read_fields(fields, layout, &value, &format, &key, &headers, &owned_key);
    if (read < 0) {
        Py_DECREF(offset);
        *unsure = read == -2;
        return NULL;
    }
    PyObject *timestamp = PyLong_FromUnsignedLongLong(ms);
    PyObject *slots[SETTERS] = {partition, offset, value, format, key, headers, timestamp};
    entry = timestamp == NULL ? NULL : new_entry(layout, slots);
    Py_XDECREF(timestamp);
    Py_DECREF(offset);
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

/* An Arrow column as the caller passes it, (validity or None, offsets, data, array offset), or for the formats
 * (validity or None, int32 indices, the format of each dictionary entry, array offset); None: no row has one. */
enum { C_ID, C_NAME, C_VALUE, C_FORMAT, C_HEADERS, COLUMNS };
typedef struct {
    Py_buffer validity, offsets, data;  /* validity.obj NULL: every row valid */
    PyObject *known;                   /* the formats' dictionary, borrowed */
    Py_ssize_t offset;
    int present;
} Column;

/* The last row's timestamp, shared by the rows of the same millisecond (an int is immutable). */
typedef struct {
    PyObject *object;
    unsigned long long ms;
} Timestamp;

static PyObject *
timestamp_at(Timestamp *last, unsigned long long ms)
{
    if (last->object == NULL || last->ms != ms) {
        PyObject *timestamp = PyLong_FromUnsignedLongLong(ms);
        if (timestamp == NULL)
            return NULL;
        Py_XSETREF(last->object, timestamp);
        last->ms = ms;
    }
    return last->object;
}

static int
column_error(const char *message)
{
    PyErr_SetString(PyExc_ValueError, message);
    return -1;
}

static int
open_buffer(PyObject *source, Py_buffer *view)
{
    return source == Py_None ? 0 : PyObject_GetBuffer(source, view, PyBUF_SIMPLE);
}

static int
open_column(PyObject *spec, Py_ssize_t count, int indexed, Column *column)
{
    if (spec == Py_None)
        return 0;
    if (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != 4)
        return column_error("a column is (validity, offsets, data, offset)");
    PyObject *data = PyTuple_GET_ITEM(spec, 2);
    column->present = 1;
    column->offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 3));
    if (column->offset < 0 || column->offset > PY_SSIZE_T_MAX / 4 - count - 1)
        return PyErr_Occurred() ? -1 : column_error("a column offset outside its buffers");
    if (open_buffer(PyTuple_GET_ITEM(spec, 0), &column->validity) < 0
        || open_buffer(PyTuple_GET_ITEM(spec, 1), &column->offsets) < 0
        || (!indexed && open_buffer(data, &column->data) < 0))
        return -1;
    if (indexed && !PyTuple_CheckExact(data))
        return column_error("the formats' dictionary is a tuple");
    column->known = indexed ? data : NULL;
    Py_ssize_t end = column->offset + count;
    if (count > 0 && ((column->validity.obj != NULL && column->validity.len < (end + 7) / 8)
                      || column->offsets.len / 4 < end + !indexed))
        return column_error("a column buffer shorter than its rows");
    return 0;
}

static int
is_valid(const Column *column, Py_ssize_t row)
{
    if (column->validity.obj == NULL)
        return 1;
    Py_ssize_t bit = column->offset + row;
    return (((const unsigned char *)column->validity.buf)[bit >> 3] >> (bit & 7)) & 1;
}

static int32_t
int32_at(const Py_buffer *buffer, Py_ssize_t index)
{
    int32_t number;
    memcpy(&number, (const char *)buffer->buf + index * 4, sizeof number);
    return number;
}

/* A binary column's row as a span of its data; -1 (ValueError) when its offsets point outside the data. */
static int
cell(const Column *column, Py_ssize_t row, const char **at, Py_ssize_t *size)
{
    int32_t start = int32_at(&column->offsets, column->offset + row);
    int32_t end = int32_at(&column->offsets, column->offset + row + 1);
    if (start < 0 || end < start || end > column->data.len)
        return column_error("a column offset outside its data");
    *at = (const char *)column->data.buf + start;
    *size = end - start;
    return 0;
}

/* The row's format (borrowed), NULL on error. */
static PyObject *
row_format(const Column *formats, Py_ssize_t row, PyObject *const *layout)
{
    if (!formats->present || !is_valid(formats, row))
        return layout[L_JSON];
    int32_t index = int32_at(&formats->offsets, formats->offset + row);
    if (index < 0 || index >= PyTuple_GET_SIZE(formats->known)) {
        column_error("a format index outside its dictionary");
        return NULL;
    }
    return PyTuple_GET_ITEM(formats->known, index);
}

/* The row's headers (new reference): decoded when present and not empty, else a new empty dict. */
static PyObject *
row_headers(const Column *headers, Py_ssize_t row, PyObject *const *layout)
{
    const char *at;
    Py_ssize_t size;
    if (!headers->present || !is_valid(headers, row))
        return PyDict_New();
    if (cell(headers, row, &at, &size) < 0)
        return NULL;
    if (size == 0)
        return PyDict_New();
    PyObject *raw = PyBytes_FromStringAndSize(at, size);
    PyObject *decoded = raw == NULL ? NULL : PyObject_CallOneArg(layout[L_DECODE_HEADERS], raw);
    Py_XDECREF(raw);
    return decoded;
}

/* Row ``row``'s entry (new reference); NULL on error, or with *unsure set when the reference must decide (a null
 * ID, name or value, an odd ID, a name neither ``v`` nor ``K`` + a key). */
static PyObject *
column_entry(PyObject *partition, const Column *columns, Py_ssize_t row, PyObject *const *layout, Timestamp *last,
             int *unsure)
{
    const char *id, *name, *data;
    Py_ssize_t id_size, name_size, data_size;
    unsigned long long ms;
    if (!is_valid(&columns[C_ID], row) || !is_valid(&columns[C_NAME], row) || !is_valid(&columns[C_VALUE], row)) {
        *unsure = 1;
        return NULL;
    }
    if (cell(&columns[C_ID], row, &id, &id_size) < 0 || cell(&columns[C_NAME], row, &name, &name_size) < 0
        || cell(&columns[C_VALUE], row, &data, &data_size) < 0)
        return NULL;
    int keyed = name_size >= 1 && name[0] == 'K';
    if (timestamp_of(id, id_size, &ms) < 0 || !(keyed || (name_size == 1 && name[0] == 'v'))) {
        *unsure = 1;
        return NULL;
    }
    PyObject *format = row_format(&columns[C_FORMAT], row, layout);
    if (format == NULL)
        return NULL;
    /* made in the reference's order, up to the first failure: the same error is raised */
    PyObject *offset = NULL, *value = NULL, *key = NULL, *headers = NULL, *entry = NULL;
    if ((offset = PyUnicode_DecodeUTF8(id, id_size, NULL)) != NULL
        && (value = PyBytes_FromStringAndSize(data, data_size)) != NULL
        && (key = keyed ? PyBytes_FromStringAndSize(name + 1, name_size - 1) : Py_NewRef(Py_None)) != NULL
        && (headers = row_headers(&columns[C_HEADERS], row, layout)) != NULL) {
        PyObject *slots[SETTERS] = {partition, offset, value, format, key, headers, timestamp_at(last, ms)};
        if (slots[SET_TIMESTAMP] != NULL)
            entry = new_entry(layout, slots);
    }
    Py_XDECREF(offset);
    Py_XDECREF(value);
    Py_XDECREF(key);
    Py_XDECREF(headers);
    return entry;
}

/* The entries of ``count`` rows; None when the reference must decide; NULL on error. */
static PyObject *
column_entries(PyObject *partition, Py_ssize_t count, const Column *columns, PyObject *const *layout)
{
    if (!columns[C_ID].present || !columns[C_NAME].present || !columns[C_VALUE].present) {
        column_error("IDs, names and values are never absent");
        return NULL;
    }
    PyObject *entries = PyList_New(count);
    Timestamp last = {NULL, 0};
    for (Py_ssize_t row = 0; entries != NULL && row < count; row++) {
        int unsure = 0;
        PyObject *entry = column_entry(partition, columns, row, layout, &last, &unsure);
        if (entry == NULL) {
            Py_CLEAR(entries);
            if (unsure)
                entries = Py_NewRef(Py_None);
            break;
        }
        PyList_SET_ITEM(entries, row, entry);
    }
    Py_XDECREF(last.object);
    return entries;
}

static PyObject *
entries_of_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 + COLUMNS || !PyLong_Check(args[0]) || !PyLong_Check(args[1])
        || !layout_is_valid(args[nargs - 1])) {
        PyErr_SetString(PyExc_TypeError, "entries_of_columns(partition: int, count: int, ids, names, values, "
                                         "formats, headers, layout: tuple)");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    if (count < 0) {
        if (!PyErr_Occurred())
            column_error("a negative count");
        return NULL;
    }
    Column columns[COLUMNS];
    memset(columns, 0, sizeof columns);
    PyObject *entries = NULL;
    int opened = 0;
    while (opened < COLUMNS && open_column(args[2 + opened], count, opened == C_FORMAT, &columns[opened]) == 0)
        opened++;
    if (opened == COLUMNS)
        entries = column_entries(args[0], count, columns, &PyTuple_GET_ITEM(args[nargs - 1], 0));
    for (int i = 0; i < COLUMNS; i++) {
        PyBuffer_Release(&columns[i].validity);
        PyBuffer_Release(&columns[i].offsets);
        PyBuffer_Release(&columns[i].data);
    }
    return entries;
}

static PyMethodDef methods[] = {
    {"decode_raw_entries", (PyCFunction)(void (*)(void))decode_raw_entries, METH_FASTCALL,
     "StoredEntry objects of a raw stream reply's items, or None (the Python reference decides)."},
    {"entries_of_columns", (PyCFunction)(void (*)(void))entries_of_columns, METH_FASTCALL,
     "StoredEntry objects of an item table's column buffers, or None (the Python reference decides)."},
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
