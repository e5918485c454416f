/*
 * The plain publish's codec in C: the same functions as gateway.plain_codec's parse_plain_python and
 * plain_results_json_python (the references), without a Python object per message beyond the key and value
 * bytes. A JSON string value is written here as orjson writes it (``"``, ``\`` and control characters
 * escaped, ``\b \t \n \f \r`` short, the rest ``\u00XX``; everything else as its UTF-8); any other value goes
 * through ``dumps``. tests/unit/gateway/test_plain_codec.py pins both functions to their references.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static PyObject *KEY, *VALUE;  /* interned "key" and "value" */

static const char HEX[] = "0123456789abcdef";

/* Bytes of ``data`` written as the inside of a JSON string (without the quotes). */
static Py_ssize_t
escaped_size(const unsigned char *data, Py_ssize_t n)
{
    Py_ssize_t size = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = data[i];
        if (c < 0x20) {
            size += (c == '\b' || c == '\t' || c == '\n' || c == '\f' || c == '\r') ? 1 : 5;
        }
        else if (c == '"' || c == '\\') {
            size += 1;
        }
    }
    return size;
}

static char *
write_escaped(char *out, const unsigned char *data, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = data[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *out++ = (char)c;
            continue;
        }
        *out++ = '\\';
        switch (c) {
        case '"': *out++ = '"'; break;
        case '\\': *out++ = '\\'; break;
        case '\b': *out++ = 'b'; break;
        case '\t': *out++ = 't'; break;
        case '\n': *out++ = 'n'; break;
        case '\f': *out++ = 'f'; break;
        case '\r': *out++ = 'r'; break;
        default:
            *out++ = 'u'; *out++ = '0'; *out++ = '0';
            *out++ = HEX[c >> 4]; *out++ = HEX[c & 0xf];
        }
    }
    return out;
}

/* A str as a JSON string, as orjson.dumps writes it. */
static PyObject *
json_string(PyObject *text)
{
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &n);
    if (utf8 == NULL) {
        return NULL;
    }
    Py_ssize_t size = escaped_size((const unsigned char *)utf8, n) + 2;
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) {
        return NULL;
    }
    char *p = PyBytes_AS_STRING(out);
    *p++ = '"';
    p = write_escaped(p, (const unsigned char *)utf8, n);
    *p = '"';
    return out;
}

/* ``dumps(value)`` copied to a bytes object of its own size (orjson's result keeps a ~4 KiB buffer). */
static PyObject *
json_value(PyObject *value, PyObject *dumps)
{
    if (PyUnicode_CheckExact(value)) {
        return json_string(value);
    }
    PyObject *dumped = PyObject_CallOneArg(dumps, value);
    if (dumped == NULL) {
        return NULL;
    }
    if (!PyBytes_Check(dumped)) {
        Py_DECREF(dumped);
        PyErr_SetString(PyExc_TypeError, "dumps must return bytes");
        return NULL;
    }
    PyObject *copy = PyBytes_FromStringAndSize(PyBytes_AS_STRING(dumped), PyBytes_GET_SIZE(dumped));
    Py_DECREF(dumped);
    return copy;
}

/* 1: the message is plain and within limits (key and value set, new references); 0: not; -1: an error. */
static int
parse_one(PyObject *raw, Py_ssize_t max_key, Py_ssize_t max_value, PyObject *dumps, PyObject **key_out,
          PyObject **value_out)
{
    if (!PyDict_CheckExact(raw)) {
        return 0;
    }
    PyObject *value = PyDict_GetItemWithError(raw, VALUE);
    if (value == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    PyObject *key = PyDict_GetItemWithError(raw, KEY);
    if (key == NULL && PyErr_Occurred()) {
        return -1;
    }
    if (PyDict_GET_SIZE(raw) != (key == NULL ? 1 : 2)) {
        return 0;  /* another field: the general path */
    }
    PyObject *key_bytes;
    if (key == NULL || key == Py_None) {
        key_bytes = Py_NewRef(Py_None);
    }
    else {
        if (!PyUnicode_CheckExact(key)) {
            return 0;
        }
        Py_ssize_t n;
        const char *utf8 = PyUnicode_AsUTF8AndSize(key, &n);
        if (utf8 == NULL) {
            return -1;
        }
        if (n > max_key) {
            return 0;
        }
        key_bytes = PyBytes_FromStringAndSize(utf8, n);
        if (key_bytes == NULL) {
            return -1;
        }
    }
    PyObject *value_bytes = json_value(value, dumps);
    if (value_bytes == NULL) {
        Py_DECREF(key_bytes);
        return -1;
    }
    if (PyBytes_GET_SIZE(value_bytes) > max_value) {
        Py_DECREF(key_bytes);
        Py_DECREF(value_bytes);
        return 0;
    }
    *key_out = key_bytes;
    *value_out = value_bytes;
    return 1;
}

static PyObject *
parse_plain(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "parse_plain(raw_messages: list, max_key_bytes: int, max_value_bytes: int, dumps)");
        return NULL;
    }
    Py_ssize_t max_key = PyLong_AsSsize_t(args[1]), max_value = PyLong_AsSsize_t(args[2]);
    if ((max_key == -1 || max_value == -1) && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *raw_messages = args[0], *dumps = args[3];
    Py_ssize_t n = PyList_GET_SIZE(raw_messages), total = 0;
    PyObject *keys = PyList_New(n), *values = PyList_New(n);
    if (keys == NULL || values == NULL) {
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key, *value;
        int plain = parse_one(PyList_GET_ITEM(raw_messages, i), max_key, max_value, dumps, &key, &value);
        if (plain < 0) {
            goto fail;
        }
        if (plain == 0) {
            Py_DECREF(keys);
            Py_DECREF(values);
            Py_RETURN_NONE;
        }
        PyList_SET_ITEM(keys, i, key);
        PyList_SET_ITEM(values, i, value);
        total += PyBytes_GET_SIZE(value);
    }
    PyObject *size = PyLong_FromSsize_t(total);
    if (size == NULL) {
        goto fail;
    }
    PyObject *result = PyTuple_Pack(3, keys, values, size);
    Py_DECREF(keys);
    Py_DECREF(values);
    Py_DECREF(size);
    return result;
fail:
    Py_XDECREF(keys);
    Py_XDECREF(values);
    return NULL;
}

static const char RESULTS_HEAD[] = "{\"results\":[";
static const char PARTITION[] = "{\"partition\":";
static const char OFFSET[] = ",\"offset\":\"";
static const char DUPLICATE[] = "\",\"duplicate\":false}";

static PyObject *
plain_results_json(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "plain_results_json(partitions: list[int], offsets: list[str])");
        return NULL;
    }
    PyObject *partitions = args[0], *offsets = args[1];
    Py_ssize_t n = PyList_GET_SIZE(partitions);
    if (PyList_GET_SIZE(offsets) != n) {
        PyErr_SetString(PyExc_ValueError, "partitions and offsets differ in length");
        return NULL;
    }
    /* First pass: the size (a partition is at most 20 digits and a sign). */
    Py_ssize_t size = (Py_ssize_t)sizeof(RESULTS_HEAD) - 1 + 2;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *offset = PyList_GET_ITEM(offsets, i);
        if (!PyUnicode_Check(offset)) {
            PyErr_Format(PyExc_TypeError, "offsets[%zd] must be a str", i);
            return NULL;
        }
        Py_ssize_t length;
        const char *utf8 = PyUnicode_AsUTF8AndSize(offset, &length);
        if (utf8 == NULL) {
            return NULL;
        }
        size += (Py_ssize_t)(sizeof(PARTITION) + sizeof(OFFSET) + sizeof(DUPLICATE)) - 3 + 21 + 1 +
                escaped_size((const unsigned char *)utf8, length);
    }
    char *buffer = PyMem_Malloc((size_t)size), *p = buffer;
    if (buffer == NULL) {
        return PyErr_NoMemory();
    }
    memcpy(p, RESULTS_HEAD, sizeof(RESULTS_HEAD) - 1);
    p += sizeof(RESULTS_HEAD) - 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long partition = PyLong_AsLongLong(PyList_GET_ITEM(partitions, i));
        if (partition == -1 && PyErr_Occurred()) {
            PyMem_Free(buffer);
            return NULL;
        }
        if (i > 0) {
            *p++ = ',';
        }
        memcpy(p, PARTITION, sizeof(PARTITION) - 1);
        p += sizeof(PARTITION) - 1;
        p += sprintf(p, "%lld", partition);
        memcpy(p, OFFSET, sizeof(OFFSET) - 1);
        p += sizeof(OFFSET) - 1;
        Py_ssize_t length;
        const char *utf8 = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(offsets, i), &length);
        p = write_escaped(p, (const unsigned char *)utf8, length);
        memcpy(p, DUPLICATE, sizeof(DUPLICATE) - 1);
        p += sizeof(DUPLICATE) - 1;
    }
    *p++ = ']';
    *p++ = '}';
    PyObject *result = PyBytes_FromStringAndSize(buffer, p - buffer);
    PyMem_Free(buffer);
    return result;
}

static PyMethodDef methods[] = {
    {"parse_plain", (PyCFunction)(void (*)(void))parse_plain, METH_FASTCALL,
     "Keys, values (as stored) and the values' total size of plain messages; None if any is not plain."},
    {"plain_results_json", (PyCFunction)(void (*)(void))plain_results_json, METH_FASTCALL,
     "The publish response body of plain messages: their partitions and offsets as orjson writes them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gateway._plain", "The plain publish's codec in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__plain(void)
{
    KEY = PyUnicode_InternFromString("key");
    VALUE = PyUnicode_InternFromString("value");
    if (KEY == NULL || VALUE == NULL) {
        return NULL;
    }
    return PyModule_Create(&module);
}
