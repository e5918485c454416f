/*
 * An XRANGE reply's raw RESP bytes straight into Arrow column buffers, without a Python object per entry:
 * storage._speedups.pages_py's page_columns is the reference (hiredis items, then the same buffers), and
 * tests/unit/storage/test_page_columns.py pins this one to it. Fields follow storage.codec: the value under
 * ``K`` + the key or ``v`` (earlier versions: ``v`` and ``k``), headers' JSON under ``h``, the value's
 * format under ``f``; in an entry's order, the last one wins. Also the text of IDs kept as two numbers
 * (archived entries), for the same string column.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum { READ_OK, READ_INCOMPLETE, READ_BAD };

typedef struct {
    const char *at;
    const char *end;
} Cursor;

typedef struct {
    const char *id, *key, *value, *headers, *format;
    Py_ssize_t id_size, key_size, value_size, headers_size, format_size;  /* -1 when absent */
} Entry;

/* "<digits>\r\n" after a type byte (a leading '-' allowed, no leading zeros), as a length. */
static int
read_number(Cursor *cursor, long long *out)
{
    const char *p = cursor->at;
    int negative = 0, digits = 0;
    long long number = 0;
    if (p < cursor->end && *p == '-') {
        negative = 1;
        p++;
    }
    for (; p < cursor->end && *p >= '0' && *p <= '9'; p++) {
        if (++digits > 18)
            return READ_BAD;
        number = number * 10 + (*p - '0');
    }
    if (p >= cursor->end)
        return READ_INCOMPLETE;
    if (digits == 0 || *p != '\r' || (digits > 1 && p[-digits] == '0'))  /* no leading zeros */
        return READ_BAD;
    if (p + 1 >= cursor->end)
        return READ_INCOMPLETE;
    if (p[1] != '\n')
        return READ_BAD;
    cursor->at = p + 2;
    *out = negative ? -number : number;
    return READ_OK;
}

static int
read_header(Cursor *cursor, char type, long long *out)
{
    if (cursor->at >= cursor->end)
        return READ_INCOMPLETE;
    if (*cursor->at != type)
        return READ_BAD;
    cursor->at++;
    return read_number(cursor, out);
}

/* A bulk string; *data NULL for a nil one. */
static int
read_bulk(Cursor *cursor, const char **data, Py_ssize_t *size)
{
    long long length;
    int status = read_header(cursor, '$', &length);
    if (status != READ_OK)
        return status;
    if (length < 0) {
        *data = NULL;
        *size = 0;
        return READ_OK;
    }
    if (cursor->end - cursor->at < length + 2)
        return READ_INCOMPLETE;
    if (cursor->at[length] != '\r' || cursor->at[length + 1] != '\n')
        return READ_BAD;
    *data = cursor->at;
    *size = (Py_ssize_t)length;
    cursor->at += length + 2;
    return READ_OK;
}

/* One [id, [field, value, ...]] item, choosing its key, value and headers as storage.codec does. */
static int
read_entry(Cursor *cursor, Entry *entry)
{
    long long count, fields;
    int status = read_header(cursor, '*', &count);
    if (status != READ_OK)
        return status;
    if (count != 2)
        return READ_BAD;
    if ((status = read_bulk(cursor, &entry->id, &entry->id_size)) != READ_OK)
        return status;
    if (entry->id == NULL)
        return READ_BAD;
    if ((status = read_header(cursor, '*', &fields)) != READ_OK)
        return status;
    if (fields > 0 && fields % 2 != 0)
        return READ_BAD;
    entry->value = "";
    entry->value_size = 0;
    entry->key = entry->headers = entry->format = NULL;
    entry->key_size = entry->headers_size = entry->format_size = -1;
    for (long long i = 0; i + 1 < fields; i += 2) {
        const char *name, *data;
        Py_ssize_t name_size, data_size;
        if ((status = read_bulk(cursor, &name, &name_size)) != READ_OK)
            return status;
        if ((status = read_bulk(cursor, &data, &data_size)) != READ_OK)
            return status;
        if (name == NULL || data == NULL)
            return READ_BAD;
        if (name_size >= 1 && name[0] == 'K') {
            entry->key = name + 1;
            entry->key_size = name_size - 1;
            entry->value = data;
            entry->value_size = data_size;
        } else if (name_size == 1 && name[0] == 'v') {
            entry->value = data;
            entry->value_size = data_size;
        } else if (name_size == 1 && name[0] == 'k') {
            entry->key = data;
            entry->key_size = data_size;
        } else if (name_size == 1 && name[0] == 'h') {
            entry->headers = data_size > 0 ? data : NULL;
            entry->headers_size = data_size > 0 ? data_size : -1;
        } else if (name_size == 1 && name[0] == 'f') {
            entry->format = data;
            entry->format_size = data_size;
        }
    }
    return READ_OK;
}

static int
valid_utf8(const unsigned char *s, Py_ssize_t size)
{
    Py_ssize_t i = 0;
    while (i < size) {
        if (i + 8 <= size) {
            uint64_t word;
            memcpy(&word, s + i, 8);
            if ((word & 0x8080808080808080ULL) == 0) {
                i += 8;
                continue;
            }
        }
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= size || (s[i + 1] & 0xC0) != 0x80)
                return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= size || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80)
                return 0;
            if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F))
                return 0;  /* overlong, surrogate */
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= size || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80
                || (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] > 0x8F))
                return 0;  /* overlong, beyond U+10FFFF */
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

/* An ID's ms part in microseconds and its sequence; -1 unless it is 1-15 digits, '-', 1-20 digits. */
static int
split_id(const char *id, Py_ssize_t size, int64_t *us, uint64_t *sequence)
{
    uint64_t ms = 0, seq = 0;
    Py_ssize_t i = 0;
    for (; i < size && id[i] != '-'; i++) {
        if (id[i] < '0' || id[i] > '9' || i >= 15)
            return -1;  /* beyond 15 digits the microseconds overflow int64 */
        ms = ms * 10 + (uint64_t)(id[i] - '0');
    }
    if (i == 0 || i + 1 >= size)
        return -1;
    for (++i; i < size; i++) {
        uint64_t digit = (uint64_t)(id[i] - '0');
        if (id[i] < '0' || id[i] > '9' || seq > (UINT64_MAX - digit) / 10)
            return -1;
        seq = seq * 10 + digit;
    }
    *us = (int64_t)(ms * 1000);
    *sequence = seq;
    return 0;
}

typedef struct {
    PyObject *bytes;
    char *at;
} Out;

static int
out_new(Out *out, Py_ssize_t size)
{
    out->bytes = PyBytes_FromStringAndSize(NULL, size);
    if (out->bytes == NULL)
        return -1;
    out->at = PyBytes_AS_STRING(out->bytes);
    memset(out->at, 0, (size_t)size);
    return 0;
}

/* Offsets (int32, n + 1) and data of one variable-width column (``pointer`` and ``field``: the Entry members
holding its start and size); absent (size -1) rows are empty. */
static int
fill_column(Entry *entries, Py_ssize_t n, size_t pointer, size_t field, Out *offsets, Out *data)
{
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t size = *(Py_ssize_t *)((char *)&entries[i] + field);
        total += size > 0 ? size : 0;
    }
    if (total > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "an XRANGE page beyond 2 GiB of one column: lower pageSize");
        return -1;
    }
    if (out_new(offsets, (n + 1) * (Py_ssize_t)sizeof(int32_t)) < 0 || out_new(data, total) < 0)
        return -1;
    int32_t position = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t size = *(Py_ssize_t *)((char *)&entries[i] + field);
        memcpy(offsets->at + i * sizeof(int32_t), &position, sizeof(int32_t));
        if (size > 0) {
            memcpy(data->at + position, *(const char **)((char *)&entries[i] + pointer), (size_t)size);
            position += (int32_t)size;
        }
    }
    memcpy(offsets->at + n * sizeof(int32_t), &position, sizeof(int32_t));
    return 0;
}

/* A validity bitmap of the rows where ``field``'s size is not -1 (or None when none is missing). */
static PyObject *
validity(Entry *entries, Py_ssize_t n, size_t field, Py_ssize_t *nulls)
{
    *nulls = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        *nulls += *(Py_ssize_t *)((char *)&entries[i] + field) < 0;
    if (*nulls == 0)
        Py_RETURN_NONE;
    Out bitmap;
    if (out_new(&bitmap, (n + 7) / 8) < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        if (*(Py_ssize_t *)((char *)&entries[i] + field) >= 0)
            bitmap.at[i / 8] |= (char)(1 << (i % 8));
    return bitmap.bytes;
}

static PyObject *
text_validity(Entry *entries, Py_ssize_t n, Py_ssize_t *nulls)
{
    Out bitmap;
    if (out_new(&bitmap, (n + 7) / 8) < 0)
        return NULL;
    *nulls = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (valid_utf8((const unsigned char *)entries[i].value, entries[i].value_size))
            bitmap.at[i / 8] |= (char)(1 << (i % 8));
        else
            (*nulls)++;
    }
    if (*nulls == 0) {
        Py_DECREF(bitmap.bytes);
        Py_RETURN_NONE;
    }
    return bitmap.bytes;
}

/* The IDs' ms parts (int64 microseconds) and sequences (uint64). */
static int
split_ids(Entry *entries, Py_ssize_t n, Out *stamps, Out *sequences)
{
    if (out_new(stamps, n * (Py_ssize_t)sizeof(int64_t)) < 0
        || out_new(sequences, n * (Py_ssize_t)sizeof(uint64_t)) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t us;
        uint64_t seq;
        if (split_id(entries[i].id, entries[i].id_size, &us, &seq) < 0) {
            PyErr_SetString(PyExc_ValueError, "not a stream ID in an XRANGE reply");
            return -1;
        }
        memcpy(stamps->at + i * sizeof(int64_t), &us, sizeof(int64_t));
        memcpy(sequences->at + i * sizeof(uint64_t), &seq, sizeof(uint64_t));
    }
    return 0;
}

#define COLUMN(name, offsets, data) \
    fill_column(entries, n, offsetof(Entry, name), offsetof(Entry, name##_size), offsets, data)

static PyObject *
columns(Entry *entries, Py_ssize_t n, Py_ssize_t end)
{
    Out id_offsets = {0}, id_data = {0}, key_offsets = {0}, key_data = {0}, value_offsets = {0},
        value_data = {0}, header_offsets = {0}, header_data = {0}, format_offsets = {0}, format_data = {0},
        stamps = {0}, sequences = {0};
    PyObject *keys_valid = NULL, *text_valid = NULL, *headers_valid = NULL, *formats_valid = NULL,
        *result = NULL;
    Py_ssize_t key_nulls, text_nulls, header_nulls, format_nulls;
    if (COLUMN(id, &id_offsets, &id_data) < 0
        || COLUMN(key, &key_offsets, &key_data) < 0
        || COLUMN(value, &value_offsets, &value_data) < 0
        || COLUMN(headers, &header_offsets, &header_data) < 0
        || COLUMN(format, &format_offsets, &format_data) < 0
        || split_ids(entries, n, &stamps, &sequences) < 0
        || (keys_valid = validity(entries, n, offsetof(Entry, key_size), &key_nulls)) == NULL
        || (text_valid = text_validity(entries, n, &text_nulls)) == NULL
        || (headers_valid = validity(entries, n, offsetof(Entry, headers_size), &header_nulls)) == NULL
        || (formats_valid = validity(entries, n, offsetof(Entry, format_size), &format_nulls)) == NULL)
        goto done;
    result = Py_BuildValue("(nnOOOOOOnOOOnOOOnOOOOn)", end, n, id_offsets.bytes, id_data.bytes,
                           stamps.bytes, keys_valid, key_offsets.bytes, key_data.bytes, key_nulls,
                           value_offsets.bytes, value_data.bytes, text_valid, text_nulls, headers_valid,
                           header_offsets.bytes, header_data.bytes, header_nulls, sequences.bytes,
                           formats_valid, format_offsets.bytes, format_data.bytes, format_nulls);
done:
    Py_XDECREF(format_offsets.bytes);
    Py_XDECREF(format_data.bytes);
    Py_XDECREF(sequences.bytes);
    Py_XDECREF(formats_valid);
    Py_XDECREF(id_offsets.bytes);
    Py_XDECREF(id_data.bytes);
    Py_XDECREF(key_offsets.bytes);
    Py_XDECREF(key_data.bytes);
    Py_XDECREF(value_offsets.bytes);
    Py_XDECREF(value_data.bytes);
    Py_XDECREF(header_offsets.bytes);
    Py_XDECREF(header_data.bytes);
    Py_XDECREF(stamps.bytes);
    Py_XDECREF(keys_valid);
    Py_XDECREF(text_valid);
    Py_XDECREF(headers_valid);
    return result;
}

static PyObject *
bad_reply(void)
{
    PyErr_SetString(PyExc_ValueError, "not an XRANGE reply");
    return NULL;
}

static PyObject *
page_columns(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Py_ssize_t start = 0;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "page_columns(data, offset=0)");
        return NULL;
    }
    if (nargs == 2 && (start = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (start < 0 || start > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "offset outside the data");
        return NULL;
    }
    Cursor cursor = {(const char *)view.buf + start, (const char *)view.buf + view.len};
    Py_ssize_t left = view.len - start;
    PyObject *result = NULL;
    Entry *entries = NULL;
    long long count;
    int status;
    if (left > 0 && cursor.at[0] == '-') {  /* an error reply: its text */
        const char *line = memchr(cursor.at, '\r', (size_t)left);
        if (line == NULL || line + 1 >= cursor.end)
            result = Py_NewRef(Py_None);
        else if (line[1] != '\n')
            result = bad_reply();
        else
            result = PyUnicode_DecodeUTF8(cursor.at + 1, line - cursor.at - 1, "replace");
        goto done;
    }
    status = read_header(&cursor, '*', &count);
    if (status == READ_OK && count < 0)
        status = READ_BAD;
    if (status == READ_OK && count > (long long)(PY_SSIZE_T_MAX / sizeof(Entry)))
        status = READ_BAD;
    if (status == READ_OK && count > (long long)(left / 8)) {
        /* more entries than these bytes can hold (each takes at least 8): incomplete, unless what is
         * here is bad already; read through it without allocating for the count */
        Entry scratch;
        for (long long i = 0; i < count && status == READ_OK; i++)
            status = read_entry(&cursor, &scratch);
        if (status == READ_OK)
            status = READ_BAD;
    }
    if (status == READ_OK) {
        entries = PyMem_Malloc((count > 0 ? (size_t)count : 1) * sizeof(Entry));
        if (entries == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (long long i = 0; i < count && status == READ_OK; i++)
            status = read_entry(&cursor, &entries[i]);
    }
    if (status == READ_INCOMPLETE)
        result = Py_NewRef(Py_None);
    else if (status == READ_BAD)
        result = bad_reply();
    else
        result = columns(entries, (Py_ssize_t)count, cursor.at - (const char *)view.buf);
done:
    PyMem_Free(entries);
    PyBuffer_Release(&view);
    return result;
}

static const char DIGIT_PAIRS[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* Digits of value at out (no NUL), two at a time; returns the end. */
static char *
put_unsigned(char *out, uint64_t value)
{
    char digits[20];
    char *at = digits + sizeof digits;
    while (value >= 100) {
        at -= 2;
        memcpy(at, DIGIT_PAIRS + (value % 100) * 2, 2);
        value /= 100;
    }
    if (value >= 10) {
        at -= 2;
        memcpy(at, DIGIT_PAIRS + value * 2, 2);
    } else {
        *--at = (char)('0' + value);
    }
    size_t width = (size_t)(digits + sizeof digits - at);
    memcpy(out, at, width);
    return out + width;
}

/* Stream IDs' text "<ms>-<seq>" from their two uint64 columns (each a buffer and the index of its first value):
 * a string column's int32 offsets and data, as (offsets, data). */
static PyObject *
id_texts(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer ms, seq;
    Py_ssize_t ms_first, seq_first, n;
    PyObject *result = NULL;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "id_texts(ms, ms_first, seq, seq_first, count)");
        return NULL;
    }
    ms_first = PyLong_AsSsize_t(args[1]);
    seq_first = PyLong_AsSsize_t(args[3]);
    n = PyLong_AsSsize_t(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(args[0], &ms, PyBUF_SIMPLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &seq, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&ms);
        return NULL;
    }
    if (ms_first < 0 || seq_first < 0 || n < 0 || n > INT32_MAX / 41
        || ms.len / (Py_ssize_t)sizeof(uint64_t) - ms_first < n
        || seq.len / (Py_ssize_t)sizeof(uint64_t) - seq_first < n) {
        PyErr_SetString(PyExc_ValueError, "the buffers hold fewer IDs than asked for");
        goto done;
    }
    Out offsets, data;
    if (out_new(&offsets, (n + 1) * (Py_ssize_t)sizeof(int32_t)) < 0)
        goto done;
    /* 20 digits, '-', 20 digits at most; not zeroed: every byte kept is written */
    data.bytes = PyBytes_FromStringAndSize(NULL, n * 41);
    if (data.bytes == NULL) {
        Py_DECREF(offsets.bytes);
        goto done;
    }
    data.at = PyBytes_AS_STRING(data.bytes);
    const char *ms_at = (const char *)ms.buf + ms_first * (Py_ssize_t)sizeof(uint64_t);
    const char *seq_at = (const char *)seq.buf + seq_first * (Py_ssize_t)sizeof(uint64_t);
    char *start = data.at, *at = data.at;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t first, second;
        memcpy(&first, ms_at + i * (Py_ssize_t)sizeof(uint64_t), sizeof first);
        memcpy(&second, seq_at + i * (Py_ssize_t)sizeof(uint64_t), sizeof second);
        at = put_unsigned(at, first);
        *at++ = '-';
        at = put_unsigned(at, second);
        int32_t end = (int32_t)(at - start);
        memcpy(offsets.at + (i + 1) * (Py_ssize_t)sizeof(int32_t), &end, sizeof end);
    }
    if (_PyBytes_Resize(&data.bytes, at - start) < 0) {
        Py_DECREF(offsets.bytes);
        goto done;
    }
    result = Py_BuildValue("(NN)", offsets.bytes, data.bytes);
done:
    PyBuffer_Release(&ms);
    PyBuffer_Release(&seq);
    return result;
}

static PyMethodDef methods[] = {
    {"page_columns", (PyCFunction)(void (*)(void))page_columns, METH_FASTCALL,
     "The XRANGE reply at offset as (end, column buffers...); None while incomplete, an error's text."},
    {"id_texts", (PyCFunction)(void (*)(void))id_texts, METH_FASTCALL,
     "Stream IDs' text from their ms and sequence uint64 buffers: (int32 offsets, data)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "storage._speedups._pages", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__pages(void)
{
    return PyModule_Create(&module);
}
