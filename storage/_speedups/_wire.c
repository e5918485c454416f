/*
 * The append in C: its grouping by partition (split_by_partition) and its RESP (xadd_transaction: MULTI,
 * one XADD per value (under ``K`` + the key, or ``v``), EXEC, written in two passes, the size then the bytes
 * object in place, instead of a %-format and a chunk per record), the same results as its Python
 * references in storage/_speedups/wire_py.py.
 * The reply side too: a transaction's replies folded into the script's flat reply (fold_transaction), its offsets
 * (reply_offsets), the batch's offsets back in input order (in_input_order), and clean transactions' replies
 * read straight from the received bytes (read_transactions).
 * tests/unit/storage/append/test_append_wire.py and test_transaction_replies.py pin each to its reference.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_decimal.h"

static const char MULTI[] = "*1\r\n$5\r\nMULTI\r\n";
static const char EXEC[] = "*1\r\n$4\r\nEXEC\r\n";
static const char V_FIELD[] = "$1\r\nv\r\n";

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
    *out++ = '$';
    out = put_decimal(out, n);
    *out++ = '\r';
    *out++ = '\n';
    out = put(out, data, n);
    *out++ = '\r';
    *out++ = '\n';
    return out;
}

/* A keyed value's field name, ``K`` + the key, as a bulk string: ``$<len + 1>\r\nK<key>\r\n`` */
static char *
put_keyed_name(char *out, const char *key, Py_ssize_t n)
{
    *out++ = '$';
    out = put_decimal(out, n + 1);
    *out++ = '\r';
    *out++ = '\n';
    *out++ = 'K';
    out = put(out, key, n);
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
        size += 5 + digits(length) + length + PyBytes_GET_SIZE(format);
        if (key == Py_None) {
            size += PyBytes_GET_SIZE(keyless) + LITERAL_SIZE(V_FIELD);
        }
        else if (PyBytes_CheckExact(key)) {
            Py_ssize_t key_length = PyBytes_GET_SIZE(key);
            size += PyBytes_GET_SIZE(keyed) + 5 + digits(key_length + 1) + key_length + 1;
        }
        else {
            PyErr_Format(PyExc_TypeError, "keys[%zd] must be bytes or None", i);
            return NULL;
        }
    }
    /* Written in place: the sizes above are exact. */
    PyObject *result = PyBytes_FromStringAndSize(NULL, size);
    if (result == NULL) {
        return NULL;
    }
    char *p = PyBytes_AS_STRING(result);
    p = put(p, MULTI, LITERAL_SIZE(MULTI));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = PyList_GET_ITEM(values, i), *key = PyList_GET_ITEM(keys, i);
        if (key == Py_None) {
            p = put(p, PyBytes_AS_STRING(keyless), PyBytes_GET_SIZE(keyless));
            p = put(p, V_FIELD, LITERAL_SIZE(V_FIELD));
        }
        else {
            p = put(p, PyBytes_AS_STRING(keyed), PyBytes_GET_SIZE(keyed));
            p = put_keyed_name(p, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
        }
        p = put_bulk(p, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value));
        p = put(p, PyBytes_AS_STRING(format), PyBytes_GET_SIZE(format));
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

/* A flat reply of ``n`` offsets, ``[?, 0, ?, 0, ...]``: the zeros set, the offsets (even places, NULL until then)
 * for the caller to set. Dropping it unfilled is safe (a list releases its items with Py_XDECREF). */
static PyObject *
new_flat_reply(Py_ssize_t n)
{
    PyObject *flat = PyList_New(2 * n), *zero = PyLong_FromLong(0);
    if (flat == NULL || zero == NULL) {
        Py_XDECREF(flat);
        Py_XDECREF(zero);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyList_SET_ITEM(flat, 2 * i + 1, Py_NewRef(zero));
    }
    Py_DECREF(zero);
    return flat;
}

/* The script's flat reply ``[offset, 0, ...]`` (offsets as str) of a transaction's replies (MULTI's,
 * QUEUED..., EXEC's list of IDs); None when any reply is an error or EXEC's reply is not a list of bytes, for
 * the Python fold (storage._speedups.wire_py.fold_transaction) to explain. */
static PyObject *
fold_transaction(PyObject *module, PyObject *replies)
{
    if (!PyList_CheckExact(replies) || PyList_GET_SIZE(replies) == 0) {
        Py_RETURN_NONE;
    }
    Py_ssize_t n = PyList_GET_SIZE(replies);
    for (Py_ssize_t i = 0; i < n - 1; i++) {
        if (PyExceptionInstance_Check(PyList_GET_ITEM(replies, i))) {
            Py_RETURN_NONE;
        }
    }
    PyObject *executed = PyList_GET_ITEM(replies, n - 1);
    if (!PyList_CheckExact(executed)) {
        Py_RETURN_NONE;
    }
    Py_ssize_t count = PyList_GET_SIZE(executed);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!PyBytes_CheckExact(PyList_GET_ITEM(executed, i))) {
            Py_RETURN_NONE;
        }
    }
    PyObject *flat = new_flat_reply(count);
    if (flat == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *id = PyList_GET_ITEM(executed, i);
        PyObject *offset = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(id), PyBytes_GET_SIZE(id), NULL);
        if (offset == NULL) {
            Py_DECREF(flat);
            return NULL;
        }
        PyList_SET_ITEM(flat, 2 * i, offset);
    }
    return flat;
}

/* Every other item of a flat reply from the first (the offsets), bytes decoded to str. */
static PyObject *
reply_offsets(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "reply_offsets(partition: int, reply: list)");
        return NULL;
    }
    PyObject *reply = args[1];
    Py_ssize_t count = (PyList_GET_SIZE(reply) + 1) / 2;
    PyObject *offsets = PyList_New(count);
    if (offsets == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyList_GET_ITEM(reply, 2 * i), *offset;
        if (PyBytes_Check(item)) {
            offset = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(item), PyBytes_GET_SIZE(item), NULL);
            if (offset == NULL) {
                Py_DECREF(offsets);
                return NULL;
            }
        }
        else {
            offset = Py_NewRef(item);
        }
        PyList_SET_ITEM(offsets, i, offset);
    }
    return offsets;
}

/* The offsets of a batch in input order: ``groups`` ({partition: (indexes, ...)}, as split_by_partition
 * returns) says where each partition's records were, ``written`` ({partition: offsets}) what they got. */
static PyObject *
in_input_order(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyLong_Check(args[0]) || !PyDict_CheckExact(args[1]) || !PyDict_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "in_input_order(count: int, groups: dict, written: dict)");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[0]);
    if (n < 0) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "count must be >= 0");
        }
        return NULL;
    }
    PyObject *ordered = PyList_New(n), *empty = PyUnicode_New(0, 0);
    if (ordered == NULL || empty == NULL) {
        Py_XDECREF(ordered);
        Py_XDECREF(empty);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyList_SET_ITEM(ordered, i, Py_NewRef(empty));
    }
    Py_DECREF(empty);
    Py_ssize_t pos = 0;
    PyObject *partition, *group;
    while (PyDict_Next(args[1], &pos, &partition, &group)) {
        PyObject *offsets = PyDict_GetItemWithError(args[2], partition);
        if (offsets == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_SetObject(PyExc_KeyError, partition);
            }
            goto fail;
        }
        if (!PyTuple_Check(group) || PyTuple_GET_SIZE(group) < 1 || !PyList_CheckExact(PyTuple_GET_ITEM(group, 0))
            || !PyList_CheckExact(offsets)) {
            PyErr_SetString(PyExc_TypeError, "groups hold (indexes: list, ...) and written lists of offsets");
            goto fail;
        }
        PyObject *indexes = PyTuple_GET_ITEM(group, 0);
        if (PyList_GET_SIZE(indexes) != PyList_GET_SIZE(offsets)) {
            PyErr_SetString(PyExc_ValueError, "a partition's offsets and record indexes differ in length");
            goto fail;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(indexes); i++) {
            Py_ssize_t index = PyLong_AsSsize_t(PyList_GET_ITEM(indexes, i));
            if (index == -1 && PyErr_Occurred()) {
                goto fail;
            }
            if (index < 0 || index >= n) {
                PyErr_SetString(PyExc_IndexError, "record index out of range");
                goto fail;
            }
            PyObject *old = PyList_GET_ITEM(ordered, index);
            PyList_SET_ITEM(ordered, index, Py_NewRef(PyList_GET_ITEM(offsets, i)));
            Py_DECREF(old);
        }
    }
    return ordered;
fail:
    Py_DECREF(ordered);
    return NULL;
}

/* ---- read_transactions: clean transactions' replies straight from the received bytes ----
 *
 * For a request of transactions only (no ASKING, no WAIT), what Redis answers when all goes well is, per
 * transaction of n XADDs: "+OK\r\n", n x "+QUEUED\r\n", "*n\r\n" and n bulk strings (the IDs). Reading that
 * through hiredis made a Python object of every reply (~2n + 2 per transaction) before fold_transaction read
 * them again; here the IDs become the fold's str offsets directly. Anything else (an error reply, a nil EXEC,
 * a count that differs) gives None: the caller feeds the same bytes to hiredis, which explains them. Bytes that
 * are clean so far but end before the last transaction does give False: the rest comes in a later read (Redis
 * answers a long pipeline in pieces, one per 16 KiB it reads), and the caller keeps them until it does. */

/* What a step found: its piece (TAKEN), something else (OTHER), or bytes that end inside a piece they begin
 * correctly (SHORT: the reply continues in a later read). */
enum { TAKEN = 1, OTHER = 0, SHORT = -1 };

/* ``text`` at ``*p``: TAKEN (moved past it), OTHER or SHORT (nothing moved). */
static int
take_literal(const char **p, const char *end, const char *text, Py_ssize_t n)
{
    Py_ssize_t left = end - *p;
    if (left < n) {
        return memcmp(*p, text, (size_t)left) == 0 ? SHORT : OTHER;
    }
    if (memcmp(*p, text, (size_t)n) != 0) {
        return OTHER;
    }
    *p += n;
    return TAKEN;
}

/* ``<kind><digits>\r\n`` at ``*p`` (at most 9 digits): TAKEN with ``*value`` set (moved past it), OTHER or
 * SHORT (nothing moved). */
static int
take_header(const char **p, const char *end, char kind, Py_ssize_t *value)
{
    const char *q = *p;
    if (q >= end) {
        return SHORT;
    }
    if (*q != kind) {
        return OTHER;
    }
    q++;
    Py_ssize_t number = 0, count = 0;
    while (q < end && *q >= '0' && *q <= '9' && count < 9) {
        number = number * 10 + (*q - '0');
        q++;
        count++;
    }
    if (q == end) {
        return SHORT;
    }
    if (count == 0 || q[0] != '\r') {
        return OTHER;
    }
    if (end - q < 2) {
        return SHORT;
    }
    if (q[1] != '\n') {
        return OTHER;
    }
    *p = q + 2;
    *value = number;
    return TAKEN;
}

/* A stream ID's bulk string, "<ms>-<seq>" (digits and one inner dash): TAKEN with ``*id`` a new str (moved past
 * it), OTHER or SHORT (nothing moved), or TAKEN with ``*id`` NULL and an exception set. */
static int
take_id(const char **p, const char *end, PyObject **id)
{
    const char *q = *p;
    Py_ssize_t n = 0;
    int header = take_header(&q, end, '$', &n);
    if (header != TAKEN) {
        return header;
    }
    if (n < 3 || n > 41) {
        return OTHER;
    }
    Py_ssize_t left = end - q, seen = left < n ? left : n;
    int dashes = 0;
    for (Py_ssize_t i = 0; i < seen; i++) {
        if (q[i] == '-' && i > 0 && i < n - 1) {
            dashes++;
        }
        else if (q[i] < '0' || q[i] > '9') {
            return OTHER;
        }
    }
    if (dashes > 1 || (left > n && q[n] != '\r') || (left > n + 1 && q[n + 1] != '\n')) {
        return OTHER;
    }
    if (left < n + 2) {
        return SHORT;
    }
    if (dashes != 1) {
        return OTHER;
    }
    *id = PyUnicode_New(n, 127);
    if (*id != NULL) {
        memcpy(PyUnicode_1BYTE_DATA(*id), q, (size_t)n);
        *p = q + n + 2;
    }
    return TAKEN;
}

/* One transaction of ``n`` XADDs: TAKEN with ``*flat`` its flat reply [offset, 0, ...] (NULL with an exception
 * on failure), or OTHER / SHORT (``*flat`` NULL). */
static int
take_transaction(const char **p, const char *end, Py_ssize_t n, PyObject **flat)
{
    *flat = NULL;
    int step = take_literal(p, end, "+OK\r\n", 5);
    for (Py_ssize_t i = 0; i < n && step == TAKEN; i++) {
        step = take_literal(p, end, "+QUEUED\r\n", 9);
    }
    Py_ssize_t count = -1;
    if (step != TAKEN || (step = take_header(p, end, '*', &count)) != TAKEN) {
        return step;
    }
    if (count != n) {
        return OTHER;
    }
    PyObject *reply = new_flat_reply(n);
    if (reply == NULL) {
        return TAKEN;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *id = NULL;
        step = take_id(p, end, &id);
        if (step != TAKEN || id == NULL) {
            Py_DECREF(reply);
            return step;
        }
        PyList_SET_ITEM(reply, 2 * i, id);
    }
    *flat = reply;
    return TAKEN;
}

static PyObject *
read_transactions(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyBytes_CheckExact(args[0]) || !PyList_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "read_transactions(data: bytes, offset: int, sizes: list[int])");
        return NULL;
    }
    Py_ssize_t offset = PyLong_AsSsize_t(args[1]), size = PyBytes_GET_SIZE(args[0]);
    if (offset == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (offset < 0 || offset > size) {
        PyErr_SetString(PyExc_ValueError, "offset outside data");
        return NULL;
    }
    PyObject *sizes = args[2];
    Py_ssize_t count = PyList_GET_SIZE(sizes);
    const char *p = PyBytes_AS_STRING(args[0]) + offset, *end = PyBytes_AS_STRING(args[0]) + size;
    PyObject *folded = PyList_New(count);
    if (folded == NULL) {
        return NULL;
    }
    for (Py_ssize_t t = 0; t < count; t++) {
        Py_ssize_t n = PyLong_AsSsize_t(PyList_GET_ITEM(sizes, t));
        if (n < 0) {
            Py_DECREF(folded);
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_ValueError, "a transaction has at least 0 commands");
            }
            return NULL;
        }
        PyObject *flat = NULL;
        int step = take_transaction(&p, end, n, &flat);
        if (step != TAKEN || flat == NULL) {
            Py_DECREF(folded);
            if (step == TAKEN) {
                return NULL;  /* the exception set while building the reply */
            }
            return Py_NewRef(step == SHORT ? Py_False : Py_None);
        }
        PyList_SET_ITEM(folded, t, flat);
    }
    PyObject *at = PyLong_FromSsize_t(p - PyBytes_AS_STRING(args[0]));
    PyObject *result = at == NULL ? NULL : PyTuple_Pack(2, folded, at);
    Py_XDECREF(at);
    Py_DECREF(folded);
    return result;
}

static PyMethodDef methods[] = {
    {"xadd_transaction", (PyCFunction)(void (*)(void))xadd_transaction, METH_FASTCALL,
     "MULTI, one XADD per value (with its key where there is one), EXEC, as RESP bytes."},
    {"split_by_partition", (PyCFunction)(void (*)(void))split_by_partition, METH_FASTCALL,
     "Plain records' columns grouped by partition: {partition: (indexes, values, keys)}, first seen first."},
    {"fold_transaction", (PyCFunction)fold_transaction, METH_O,
     "A transaction's replies as the script's flat reply [offset, 0, ...], or None (the Python fold)."},
    {"reply_offsets", (PyCFunction)(void (*)(void))reply_offsets, METH_FASTCALL,
     "The offsets of a flat [offset, flag, ...] reply, as str."},
    {"in_input_order", (PyCFunction)(void (*)(void))in_input_order, METH_FASTCALL,
     "A batch's offsets in input order from its partitions' record indexes and offsets."},
    {"read_transactions", (PyCFunction)(void (*)(void))read_transactions, METH_FASTCALL,
     "Clean transactions' replies from data at offset: ([flat reply per transaction], end) or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "storage._speedups._wire", "The append's RESP in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__wire(void)
{
    return PyModule_Create(&module);
}
