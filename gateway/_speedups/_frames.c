/*
 * A page of group deliveries as message frames in C, byte for byte gateway.delivery.wire.message_frame's
 * (test_wire_frames.py pins them): the frame's fixed parts, integers and offsets are written
 * here; a key that is not plain printable ASCII, non-empty headers and binary values go through the Python
 * helpers the layout names (orjson, base64), exactly as the reference does. None whenever a field is not of the
 * type the reference is written for (the reference then frames the page). And the converted deliveries of a page
 * pinned to a schema version, new objects with the other slots copied (gateway.delivery.pinning refills them else).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_decimal.h"

/* The slot getters in the order the dataclasses declare them: Delivery's, then StoredEntry's (storage.models). */
enum { G_ENTRY, G_COUNT, G_PARTITION, G_OFFSET, G_VALUE, G_FORMAT, G_KEY, G_HEADERS, G_TIMESTAMP, GETTERS };
enum { L_DELIVERY, L_ENTRY, L_GETTERS, L_JSON, L_KEY_JSON, L_DUMPS, L_B64, LAYOUT };

static const char OFFSET_FIELD[] = ",\"offset\":\"";
static const char KEY_FIELD[] = "\",\"key\":";
static const char HEADERS_FIELD[] = ",\"headers\":";
static const char TIMESTAMP_FIELD[] = ",\"timestamp_ms\":";
static const char VALUE_FIELD[] = ",\"value\":";
static const char VALUE_B64_FIELD[] = ",\"value_b64\":\"";
static const char COUNT_FIELD[] = ",\"delivery_count\":";

#define LITERAL_SIZE(s) ((Py_ssize_t)sizeof(s) - 1)

/* The parts of one frame that vary; every object a new reference. */
typedef struct {
    long long partition, timestamp, count;
    PyObject *offset;  /* ASCII str */
    PyObject *key;     /* bytes: the key's JSON */
    PyObject *headers; /* bytes: the headers' JSON */
    PyObject *value;   /* bytes: the value's JSON or base64 */
    int binary;
} Parts;

static void
clear_parts(Parts *parts)
{
    Py_CLEAR(parts->offset);
    Py_CLEAR(parts->key);
    Py_CLEAR(parts->headers);
    Py_CLEAR(parts->value);
}

static PyObject *
get(PyObject *getter, PyObject *owner)
{
    return Py_TYPE(getter)->tp_descr_get(getter, owner, (PyObject *)Py_TYPE(owner));
}

/* An exact int as a C long long; -1 (no exception) when it is not one or does not fit. */
static int
as_long_long(PyObject *number, long long *out)
{
    if (number == NULL || !PyLong_CheckExact(number))
        return -1;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(number, &overflow);
    return overflow ? -1 : 0;
}

/* Whether a key is written as is between quotes by orjson (printable ASCII but the quote and the backslash). */
static int
plain_key(PyObject *key)
{
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(key);
    for (Py_ssize_t i = 0; i < PyBytes_GET_SIZE(key); i++)
        if (p[i] < 0x20 || p[i] > 0x7E || p[i] == '"' || p[i] == '\\')
            return 0;
    return 1;
}

static PyObject *
key_json(PyObject *key, PyObject *const *layout)
{
    if (key == Py_None)
        return PyBytes_FromStringAndSize("null", 4);
    if (!PyBytes_CheckExact(key))
        return NULL;
    if (!plain_key(key))
        return PyObject_CallOneArg(layout[L_KEY_JSON], key);
    Py_ssize_t size = PyBytes_GET_SIZE(key);
    PyObject *quoted = PyBytes_FromStringAndSize(NULL, size + 2);
    if (quoted != NULL) {
        char *out = PyBytes_AS_STRING(quoted);
        out[0] = '"';
        memcpy(out + 1, PyBytes_AS_STRING(key), (size_t)size);
        out[size + 1] = '"';
    }
    return quoted;
}

/* Reads one delivery into parts: 0, -1 on error (exception set), -2 when the reference must frame the page. */
static int
read_parts(PyObject *delivery, PyObject *const *layout, Parts *parts)
{
    PyObject *const *getters = &PyTuple_GET_ITEM(layout[L_GETTERS], 0);
    if (Py_TYPE(delivery) != (PyTypeObject *)layout[L_DELIVERY])
        return -2;
    PyObject *entry = get(getters[G_ENTRY], delivery), *count = NULL, *field = NULL;
    int status = -2;
    if (entry == NULL || Py_TYPE(entry) != (PyTypeObject *)layout[L_ENTRY])
        goto done;
    count = get(getters[G_COUNT], delivery);
    if (as_long_long(count, &parts->count) < 0)
        goto done;
    Py_XSETREF(field, get(getters[G_PARTITION], entry));
    if (as_long_long(field, &parts->partition) < 0)
        goto done;
    Py_XSETREF(field, get(getters[G_TIMESTAMP], entry));
    if (as_long_long(field, &parts->timestamp) < 0)
        goto done;
    parts->offset = get(getters[G_OFFSET], entry);
    if (parts->offset == NULL || !PyUnicode_CheckExact(parts->offset) || !PyUnicode_IS_ASCII(parts->offset))
        goto done;
    Py_XSETREF(field, get(getters[G_KEY], entry));
    if (field == NULL)
        goto done;
    parts->key = key_json(field, layout);
    if (parts->key == NULL || !PyBytes_CheckExact(parts->key)) {
        status = PyErr_Occurred() ? -1 : -2;
        goto done;
    }
    Py_XSETREF(field, get(getters[G_HEADERS], entry));
    int any = field == NULL ? -1 : PyObject_IsTrue(field);
    if (any < 0) {
        status = -1;
        goto done;
    }
    parts->headers = any ? PyObject_CallOneArg(layout[L_DUMPS], field) : PyBytes_FromStringAndSize("{}", 2);
    if (parts->headers == NULL || !PyBytes_CheckExact(parts->headers)) {
        status = PyErr_Occurred() ? -1 : -2;
        goto done;
    }
    Py_XSETREF(field, get(getters[G_FORMAT], entry));
    if (field == NULL)
        goto done;
    parts->binary = field != layout[L_JSON];
    Py_XSETREF(field, get(getters[G_VALUE], entry));
    if (field == NULL || !PyBytes_CheckExact(field))
        goto done;
    parts->value = parts->binary ? PyObject_CallOneArg(layout[L_B64], field) : Py_NewRef(field);
    if (parts->value == NULL || !PyBytes_CheckExact(parts->value)) {
        status = PyErr_Occurred() ? -1 : -2;
        goto done;
    }
    status = 0;
done:
    if (status == -2)
        PyErr_Clear();  /* a getter's complaint: the reference raises its own */
    Py_XDECREF(field);
    Py_XDECREF(count);
    Py_XDECREF(entry);
    return status;
}

static PyObject *
write_frame(PyObject *prefix, const Parts *parts)
{
    char partition[24], timestamp[24], count[24];
    Py_ssize_t partition_size = put_decimal(partition, parts->partition) - partition;
    Py_ssize_t timestamp_size = put_decimal(timestamp, parts->timestamp) - timestamp;
    Py_ssize_t count_size = put_decimal(count, parts->count) - count;
    Py_ssize_t offset_size = PyUnicode_GET_LENGTH(parts->offset);
    Py_ssize_t size = PyBytes_GET_SIZE(prefix) + partition_size + LITERAL_SIZE(OFFSET_FIELD) + offset_size
        + LITERAL_SIZE(KEY_FIELD) + PyBytes_GET_SIZE(parts->key) + LITERAL_SIZE(HEADERS_FIELD)
        + PyBytes_GET_SIZE(parts->headers) + LITERAL_SIZE(TIMESTAMP_FIELD) + timestamp_size
        + (parts->binary ? LITERAL_SIZE(VALUE_B64_FIELD) + 1 : LITERAL_SIZE(VALUE_FIELD))
        + PyBytes_GET_SIZE(parts->value) + LITERAL_SIZE(COUNT_FIELD) + count_size + 1;
    PyObject *frame = PyBytes_FromStringAndSize(NULL, size);
    if (frame == NULL)
        return NULL;
    char *out = PyBytes_AS_STRING(frame);
#define PUT(data, n) (memcpy(out, (data), (size_t)(n)), out += (n))
    PUT(PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix));
    PUT(partition, partition_size);
    PUT(OFFSET_FIELD, LITERAL_SIZE(OFFSET_FIELD));
    PUT(PyUnicode_DATA(parts->offset), offset_size);
    PUT(KEY_FIELD, LITERAL_SIZE(KEY_FIELD));
    PUT(PyBytes_AS_STRING(parts->key), PyBytes_GET_SIZE(parts->key));
    PUT(HEADERS_FIELD, LITERAL_SIZE(HEADERS_FIELD));
    PUT(PyBytes_AS_STRING(parts->headers), PyBytes_GET_SIZE(parts->headers));
    PUT(TIMESTAMP_FIELD, LITERAL_SIZE(TIMESTAMP_FIELD));
    PUT(timestamp, timestamp_size);
    if (parts->binary)
        PUT(VALUE_B64_FIELD, LITERAL_SIZE(VALUE_B64_FIELD));
    else
        PUT(VALUE_FIELD, LITERAL_SIZE(VALUE_FIELD));
    PUT(PyBytes_AS_STRING(parts->value), PyBytes_GET_SIZE(parts->value));
    if (parts->binary)
        *out++ = '"';
    PUT(COUNT_FIELD, LITERAL_SIZE(COUNT_FIELD));
    PUT(count, count_size);
    *out++ = '}';
#undef PUT
    return frame;
}

/* Whether a layout starts with the two classes and their slots' descriptors (setters too when ``filled``). */
static int
classes_are_valid(PyObject *layout, Py_ssize_t size, int filled)
{
    if (!PyTuple_CheckExact(layout) || PyTuple_GET_SIZE(layout) != size)
        return 0;
    PyObject *getters = PyTuple_GET_ITEM(layout, L_GETTERS);
    if (!PyType_Check(PyTuple_GET_ITEM(layout, L_DELIVERY)) || !PyType_Check(PyTuple_GET_ITEM(layout, L_ENTRY))
        || !PyTuple_CheckExact(getters) || PyTuple_GET_SIZE(getters) != GETTERS)
        return 0;
    for (Py_ssize_t i = 0; i < GETTERS; i++) {
        PyTypeObject *descriptor = Py_TYPE(PyTuple_GET_ITEM(getters, i));
        if (descriptor->tp_descr_get == NULL || (filled && descriptor->tp_descr_set == NULL))
            return 0;
    }
    return 1;
}

static int
layout_is_valid(PyObject *layout)
{
    return classes_are_valid(layout, LAYOUT, 0) && PyCallable_Check(PyTuple_GET_ITEM(layout, L_KEY_JSON))
        && PyCallable_Check(PyTuple_GET_ITEM(layout, L_DUMPS)) && PyCallable_Check(PyTuple_GET_ITEM(layout, L_B64));
}

static PyObject *
message_frames(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyBytes_CheckExact(args[0]) || !PyList_Check(args[1]) || !layout_is_valid(args[2])) {
        PyErr_SetString(PyExc_TypeError, "message_frames(prefix: bytes, deliveries: list, layout: tuple)");
        return NULL;
    }
    PyObject *prefix = args[0], *deliveries = args[1];
    PyObject *const *layout = &PyTuple_GET_ITEM(args[2], 0);
    Py_ssize_t count = PyList_GET_SIZE(deliveries);
    PyObject *frames = PyList_New(count);
    if (frames == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        Parts parts = {0};
        int status = read_parts(PyList_GET_ITEM(deliveries, i), layout, &parts);
        PyObject *frame = status == 0 ? write_frame(prefix, &parts) : NULL;
        clear_parts(&parts);
        if (frame == NULL) {
            Py_DECREF(frames);
            if (status == -2)
                Py_RETURN_NONE;
            return NULL;
        }
        PyList_SET_ITEM(frames, i, frame);
    }
    return frames;
}

/* A new instance of a slotted class, as object.__new__ makes it (its slots unset). */
static PyObject *
blank(PyObject *type)
{
    return ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, 0);
}

static int
put(PyObject *setter, PyObject *owner, PyObject *value)
{
    return Py_TYPE(setter)->tp_descr_set(setter, owner, value);
}

/* A new delivery of the same entry but its value and headers (a new entry) and the same count: the new reference,
 * NULL with an exception set on error or without one when the reference must refill it. */
static PyObject *
refilled(PyObject *delivery, PyObject *value, PyObject *alone, Py_ssize_t only_version, PyObject *const *layout)
{
    PyObject *const *getters = &PyTuple_GET_ITEM(layout[L_GETTERS], 0);
    if (Py_TYPE(delivery) != (PyTypeObject *)layout[L_DELIVERY] || !PyBytes_CheckExact(value))
        return NULL;
    PyObject *entry = get(getters[G_ENTRY], delivery), *headers = NULL, *fresh_entry = NULL, *fresh = NULL;
    PyObject *field = NULL;
    if (entry == NULL || Py_TYPE(entry) != (PyTypeObject *)layout[L_ENTRY])
        goto done;
    headers = get(getters[G_HEADERS], entry);
    if (headers == NULL || !PyDict_CheckExact(headers))
        goto done;
    if (PyDict_GET_SIZE(headers) == only_version) {
        Py_SETREF(headers, Py_NewRef(alone));
    } else {
        Py_SETREF(headers, PyDict_Copy(headers));
        if (headers == NULL || PyDict_Update(headers, alone) < 0)
            goto done;
    }
    fresh_entry = blank(layout[L_ENTRY]);
    if (fresh_entry == NULL)
        goto done;
    for (int slot = G_PARTITION; slot < GETTERS; slot++) {
        PyObject *kept = slot == G_VALUE ? value : slot == G_HEADERS ? headers : NULL;
        Py_XSETREF(field, kept != NULL ? Py_NewRef(kept) : get(getters[slot], entry));
        if (field == NULL || put(getters[slot], fresh_entry, field) < 0)
            goto done;
    }
    fresh = blank(layout[L_DELIVERY]);
    Py_XSETREF(field, get(getters[G_COUNT], delivery));
    if (fresh == NULL || field == NULL || put(getters[G_ENTRY], fresh, fresh_entry) < 0
        || put(getters[G_COUNT], fresh, field) < 0)
        Py_CLEAR(fresh);
done:
    Py_XDECREF(field);
    Py_XDECREF(fresh_entry);
    Py_XDECREF(headers);
    Py_XDECREF(entry);
    return fresh;
}

/* refill(page, indexes, values, alone, only_version, layout): each delivery of page at indexes replaced by a new one
 * whose entry has the value at the same place in values and the headers alone (when it had only_version headers;
 * else its own updated by alone), every other slot the same; pinning.PinnedVersion._refill's, object for object.
 * False, the page untouched, when a value is not bytes (a failed conversion) or anything is not of the type the
 * reference is written for: the reference then refills them. */
static PyObject *
refill(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyList_Check(args[0]) || !PyList_Check(args[1]) || !PyDict_CheckExact(args[3])
        || !PyLong_CheckExact(args[4]) || !classes_are_valid(args[5], L_JSON, 1)) {
        PyErr_SetString(PyExc_TypeError,
                        "refill(page: list, indexes: list, values, alone: dict, only_version: int, layout: tuple)");
        return NULL;
    }
    PyObject *page = args[0], *indexes = args[1], *values = args[2], *alone = args[3];
    PyObject *const *layout = &PyTuple_GET_ITEM(args[5], 0);
    Py_ssize_t only_version = PyLong_AsSsize_t(args[4]), count = PyList_GET_SIZE(indexes);
    if (only_version == -1 && PyErr_Occurred())
        return NULL;
    if (!PyList_Check(values) || PyList_GET_SIZE(values) != count)
        Py_RETURN_FALSE;
    /* every new delivery made before the page changes: it changes whole or not at all */
    PyObject *fresh = PyList_New(count);
    if (fresh == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *index = PyList_GET_ITEM(indexes, i);
        Py_ssize_t at = PyLong_CheckExact(index) ? PyLong_AsSsize_t(index) : -1;
        PyObject *delivery = NULL;
        if (at >= 0 && at < PyList_GET_SIZE(page))
            delivery = refilled(PyList_GET_ITEM(page, at), PyList_GET_ITEM(values, i), alone, only_version, layout);
        if (delivery == NULL) {
            Py_DECREF(fresh);
            if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_AttributeError))
                return NULL;
            PyErr_Clear();  /* an unset slot: the reference raises its own */
            Py_RETURN_FALSE;
        }
        PyList_SET_ITEM(fresh, i, delivery);
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t at = PyLong_AsSsize_t(PyList_GET_ITEM(indexes, i));
        PyList_SetItem(page, at, Py_NewRef(PyList_GET_ITEM(fresh, i)));
    }
    Py_DECREF(fresh);
    Py_RETURN_TRUE;
}

/* The size of an unmasked frame header for a payload of n bytes (RFC 6455 5.2). */
static Py_ssize_t
header_size(Py_ssize_t n)
{
    return n <= 125 ? 2 : n <= 0xFFFF ? 4 : 10;
}

static char *
put_text_header(char *at, Py_ssize_t n)
{
    *at++ = (char)0x81; /* FIN, text */
    if (n <= 125) {
        *at++ = (char)n;
    } else if (n <= 0xFFFF) {
        *at++ = 126;
        *at++ = (char)(n >> 8);
        *at++ = (char)n;
    } else {
        *at++ = 127;
        for (int shift = 56; shift >= 0; shift -= 8)
            *at++ = (char)((unsigned long long)n >> shift);
    }
    return at;
}

/* text_frames(payloads: list[bytes]): the payloads as consecutive final text frames in one bytes object, or None
 * when payloads is not a list of bytes (the Python reference frames them). */
static PyObject *
text_frames(PyObject *module, PyObject *payloads)
{
    if (!PyList_Check(payloads))
        Py_RETURN_NONE;
    Py_ssize_t count = PyList_GET_SIZE(payloads), total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *payload = PyList_GET_ITEM(payloads, i);
        if (!PyBytes_CheckExact(payload))
            Py_RETURN_NONE;
        Py_ssize_t size = PyBytes_GET_SIZE(payload);
        if (size > PY_SSIZE_T_MAX - 10 - total) {
            PyErr_SetString(PyExc_OverflowError, "frames too large");
            return NULL;
        }
        total += header_size(size) + size;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    char *at = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *payload = PyList_GET_ITEM(payloads, i);
        Py_ssize_t size = PyBytes_GET_SIZE(payload);
        at = put_text_header(at, size);
        memcpy(at, PyBytes_AS_STRING(payload), (size_t)size);
        at += size;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"message_frames", (PyCFunction)(void (*)(void))message_frames, METH_FASTCALL,
     "The message frames of a page of deliveries, or None (the Python reference frames it)."},
    {"refill", (PyCFunction)(void (*)(void))refill, METH_FASTCALL,
     "Deliveries of a page replaced by their converted ones, or False (the Python reference refills them)."},
    {"text_frames", (PyCFunction)text_frames, METH_O,
     "Payloads as consecutive final text frames in one bytes object, or None (the Python reference frames them)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gateway._speedups._frames", "Message frames of group deliveries, text frames for the socket, and converted deliveries, in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__frames(void)
{
    return PyModule_Create(&module);
}
