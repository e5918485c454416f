/*
 * The plain publish's codec in C: the same functions as gateway._speedups.plain_py's scan_plain_body,
 * parse_plain and plain_results_json (the references), without a Python object per message beyond
 * the key and value bytes.
 *
 * scan_plain_body reads a whole publish body in one pass over its bytes (no orjson, no dicts or strs): it checks
 * the JSON grammar (RFC 8259) and strict UTF-8 in every string, takes the envelope {"acks", "messages"} and each
 * message {"key", "value"} in any order, and copies a value's own bytes wherever orjson.dumps(orjson.loads(...))
 * would give them back unchanged ("raw"): strings without escapes, true/false/null, integers of up to 15 digits
 * but -0, floats in orjson's own form (see float_is_raw: no exponent, at most 15 significant digits, no trailing
 * zeros but x.0, 1e-5 <= |x| < 1e16 or 0), and objects and arrays written as orjson writes them: no whitespace
 * anywhere inside, member names without escapes, no name twice in one object (loads keeps the first place and the
 * last value), at most MAX_RAW_MEMBERS members each, every value inside raw. Other values (longer or other
 * numbers, strings with escapes, containers with whitespace...) go through dumps(loads(span)). Anything it cannot
 * prove plain and valid gives None (the general path then decides, errors included): escapes in keys, field names
 * or acks, duplicate fields, acks other than 0, 1 or all, other fields or types, a limit exceeded, values nested
 * past what dumps writes, bad JSON or UTF-8. Strings are skipped 16 bytes at a time with SSE2 (8 with a portable
 * word trick).
 *
 * parse_plain turns already-parsed messages into columns: a JSON string value is written as orjson writes it
 * (``"``, ``\`` and control characters escaped, ``\b \t \n \f \r`` short, the rest ``\u00XX``; everything else
 * as its UTF-8); any other value goes through ``dumps``. test_plain_codec.py and
 * test_plain_scan.py pin the functions to their references and to the general path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_decimal.h"
#if defined(__SSE2__) && !defined(PLAIN_NO_SSE2)
#include <emmintrin.h>
#endif

static PyObject *KEY, *VALUE;  /* interned "key" and "value" */
static PyObject *ACKS_ZERO, *ACKS_ONE, *ACKS_ALL;  /* interned "0", "1" and "all" */

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
        p = put_decimal(p, partition);
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

/* ---- scan_plain_body: a plain publish body's bytes straight to columns, in one pass. ----
 *
 * Each function returns one of these; UNSURE means "the general path decides" (the caller returns None), so
 * anything this scanner does not prove plain and valid is UNSURE, never an error of its own.
 */
enum { FAILED = -1, UNSURE = 0, OK = 1, END = 2 };

/* orjson.dumps refuses a value of more than 254 nested containers (the general path fails), so a container with
 * this many around it is never plain, and one within the limit may be copied raw. */
#define MAX_VALUE_DEPTH 254

/* Members an object may have and still be copied raw: their names are kept (on the stack, per nesting level) to
 * find a duplicate, which loads would fold into the first one's place. A bigger object is reencoded. */
#define MAX_RAW_MEMBERS 32

typedef struct {
    const unsigned char *p, *end;
} Scan;

typedef struct {
    Py_ssize_t max_messages, max_key, max_value;
    PyObject *loads, *dumps;
} Limits;

/* A member name's bytes inside its quotes (escapes undecoded). */
typedef struct {
    const unsigned char *p;
    Py_ssize_t length;
} Name;

#define ONES UINT64_C(0x0101010101010101)
#define HIGHS UINT64_C(0x8080808080808080)
#define IS_DIGIT(c) ((c) >= '0' && (c) <= '9')
#define IS_CONTINUATION(c) (((c) & 0xC0) == 0x80)
#define NAME_IS(name, text) ((name).length == sizeof(text) - 1 && memcmp((name).p, (text), sizeof(text) - 1) == 0)

/* Whether any of 8 bytes is ``"``, ``\``, a control character or not ASCII (exact as a yes/no). */
static inline int
has_special_byte(uint64_t w)
{
    uint64_t quote = w ^ (ONES * '"'), backslash = w ^ (ONES * '\\');
    return ((w & HIGHS) | ((quote - ONES) & ~quote & HIGHS) | ((backslash - ONES) & ~backslash & HIGHS) |
            ((w - ONES * 0x20) & ~w & HIGHS)) != 0;
}

/* Past the run of bytes from ``p`` that need no look (ASCII, not ``"``, ``\``, a control): 16 (SSE2) or 8 bytes
 * at a time; the caller looks at what is left. */
static inline const unsigned char *
skip_plain_run(const unsigned char *p, const unsigned char *end)
{
#if defined(__SSE2__) && !defined(PLAIN_NO_SSE2)
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
        /* signed: bytes >= 0x80 are negative, so "< 0x20" also finds what is not ASCII */
        __m128i special = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                       _mm_cmplt_epi8(v, space));
        int mask = _mm_movemask_epi8(special);
        if (mask != 0) {
            return p + __builtin_ctz((unsigned)mask);
        }
        p += 16;
    }
#endif
    uint64_t word;
    while (end - p >= 8 && (memcpy(&word, p, 8), !has_special_byte(word))) {
        p += 8;
    }
    return p;
}

/* Past any whitespace; nonzero if there was some (orjson writes none, so a container with some is not raw). */
static inline int
skip_ws(Scan *s)
{
    const unsigned char *start = s->p;
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t')) {
        s->p++;
    }
    return s->p != start;
}

/* Bytes of the strict UTF-8 sequence at ``p`` (a byte >= 0x80): no overlongs, surrogates or > U+10FFFF; 0 if
 * invalid or cut off. */
static int
utf8_length(const unsigned char *p, const unsigned char *end)
{
    unsigned char c = p[0];
    Py_ssize_t left = end - p;
    if (c >= 0xC2 && c <= 0xDF) {
        return left >= 2 && IS_CONTINUATION(p[1]) ? 2 : 0;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        unsigned char low = c == 0xE0 ? 0xA0 : 0x80, high = c == 0xED ? 0x9F : 0xBF;
        return left >= 3 && p[1] >= low && p[1] <= high && IS_CONTINUATION(p[2]) ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        unsigned char low = c == 0xF0 ? 0x90 : 0x80, high = c == 0xF4 ? 0x8F : 0xBF;
        return left >= 4 && p[1] >= low && p[1] <= high && IS_CONTINUATION(p[2]) && IS_CONTINUATION(p[3]) ? 4
                                                                                                         : 0;
    }
    return 0;
}

static int
is_hex(unsigned char c)
{
    return IS_DIGIT(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Bytes of the escape at ``p`` (a backslash); 0 if it is not one JSON allows or is cut off. */
static int
escape_length(const unsigned char *p, const unsigned char *end)
{
    if (end - p < 2) {
        return 0;
    }
    switch (p[1]) {
    case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
        return 2;
    case 'u':
        return end - p >= 6 && is_hex(p[2]) && is_hex(p[3]) && is_hex(p[4]) && is_hex(p[5]) ? 6 : 0;
    default:
        return 0;
    }
}

/* A string at ``s->p`` (its opening quote): OK past its closing quote, ``*escaped`` if it has an escape. */
static int
scan_string(Scan *s, int *escaped)
{
    const unsigned char *p = s->p + 1, *end = s->end;
    *escaped = 0;
    for (;;) {
        p = skip_plain_run(p, end);
        if (p >= end) {
            return UNSURE;
        }
        unsigned char c = *p;
        int length = c == '"' ? 1 : c == '\\' ? escape_length(p, end) : c < 0x20 ? 0 : c < 0x80 ? 1
                                                                                          : utf8_length(p, end);
        if (length == 0) {
            return UNSURE;
        }
        if (c == '"') {
            s->p = p + 1;
            return OK;
        }
        *escaped |= c == '\\';
        p += length;
    }
}

static const unsigned char *
skip_digits(const unsigned char *p, const unsigned char *end)
{
    while (p < end && IS_DIGIT(*p)) {
        p++;
    }
    return p;
}

/* Whether orjson writes the float ``I.F`` (``integer``, ``fraction``: JSON digits, no exponent, either sign) back
 * byte for byte. It writes a double's shortest round-trip digits, in plain decimal when 1e-5 <= |x| < 1e16 (``x.0``
 * when integral), else with an exponent. A decimal of at most 15 significant digits (DBL_DIG) reads to a double
 * whose shortest digits are its own, so such a text comes back unchanged when it is in that form: F is "0" or ends
 * in a non-zero digit, and x is 0 or in that range (I has at most 16 digits, or I is 0 and F starts with at most 4
 * zeros). Checked against orjson over millions of decimals of every shape; any other float is reencoded. */
static int
float_is_raw(const unsigned char *integer, Py_ssize_t integer_digits, const unsigned char *fraction,
             Py_ssize_t fraction_digits)
{
    int whole = integer[0] != '0';  /* JSON has no leading zeros: I is 0 or starts with 1-9 */
    Py_ssize_t zeros = 0;
    if (fraction_digits == 1 && fraction[0] == '0') {  /* x.0: its significant digits end before I's zeros */
        while (zeros < integer_digits && integer[integer_digits - 1 - zeros] == '0') {
            zeros++;
        }
        return !whole || (integer_digits <= 16 && integer_digits - zeros <= 15);
    }
    if (fraction[fraction_digits - 1] == '0') {
        return 0;  /* written without the trailing zeros */
    }
    if (whole) {
        return integer_digits + fraction_digits <= 15;
    }
    while (fraction[zeros] == '0') {  /* stops: F ends in a non-zero digit */
        zeros++;
    }
    return zeros <= 4 && fraction_digits - zeros <= 15;
}

/* A number at ``s->p``; ``*raw`` if orjson writes it back byte for byte: an integer of at most 15 digits, not
 * ``-0`` (read as 0), or a float as float_is_raw tells. */
static int
scan_number(Scan *s, int *raw)
{
    const unsigned char *p = s->p, *end = s->end, *fraction = NULL;
    int negative = p < end && *p == '-';
    p += negative;
    const unsigned char *digits = p;
    if (p >= end || !IS_DIGIT(*p)) {
        return UNSURE;
    }
    p = *p == '0' ? p + 1 : skip_digits(p, end);
    Py_ssize_t integer_digits = p - digits, fraction_digits = 0;
    if (p < end && *p == '.') {
        fraction = ++p;
        if (p >= end || !IS_DIGIT(*p)) {
            return UNSURE;
        }
        p = skip_digits(p, end);
        fraction_digits = p - fraction;
    }
    int exponent = p < end && (*p == 'e' || *p == 'E');
    if (exponent) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) {
            p++;
        }
        if (p >= end || !IS_DIGIT(*p)) {
            return UNSURE;
        }
        p = skip_digits(p, end);
    }
    *raw = exponent ? 0
           : fraction == NULL ? integer_digits <= 15 && !(negative && *digits == '0')
                              : float_is_raw(digits, integer_digits, fraction, fraction_digits);
    s->p = p;
    return OK;
}

static int
scan_literal(Scan *s, const char *text, Py_ssize_t length)
{
    if (s->end - s->p < length || memcmp(s->p, text, (size_t)length) != 0) {
        return UNSURE;
    }
    s->p += length;
    return OK;
}

/* Where a container goes on after its opening (``first``) or an item: OK at the next item, END past ``close``;
 * ``*rewritten`` is set if there was whitespace (orjson writes none), left as it is otherwise. */
static int
next_item(Scan *s, int first, unsigned char close, int *rewritten)
{
    *rewritten |= skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return END;
    }
    if (!first) {
        if (s->p >= s->end || *s->p != ',') {
            return UNSURE;
        }
        s->p++;
        *rewritten |= skip_ws(s);
    }
    return OK;
}

/* Where an object goes on after its ``{`` (``first``) or a member's value: OK at the next member's value, with
 * the name's raw bytes (escapes undecoded) in ``name``; END past the ``}``. ``*rewritten`` is set if orjson would
 * write what was passed differently (whitespace, an escape in the name), left as it is otherwise. */
static int
next_member(Scan *s, int first, Name *name, int *rewritten)
{
    int status = next_item(s, first, '}', rewritten);
    if (status != OK) {
        return status;
    }
    const unsigned char *start = s->p;
    int escaped;
    if (s->p >= s->end || *s->p != '"' || scan_string(s, &escaped) != OK) {
        return UNSURE;
    }
    name->p = start + 1;
    name->length = s->p - start - 2;
    *rewritten |= escaped | skip_ws(s);
    if (s->p >= s->end || *s->p != ':') {
        return UNSURE;
    }
    s->p++;
    *rewritten |= skip_ws(s);
    return OK;
}

/* Where an array goes on after its ``[`` (``first``) or an element: OK at the next element, END past the ``]``. */
static int
next_element(Scan *s, int first, int *rewritten)
{
    return next_item(s, first, ']', rewritten);
}

/* Whether ``name`` is one of the ``count`` names before it in its object. They have no escapes (else the object
 * is not raw and this is not asked), and UTF-8 is checked: equal names are equal bytes. */
static int
is_duplicate(const Name *names, int count, Name name)
{
    for (int i = 0; i < count; i++) {
        if (names[i].length == name.length && memcmp(names[i].p, name.p, (size_t)name.length) == 0) {
            return 1;
        }
    }
    return 0;
}

static int skip_value(Scan *s, int depth, int *raw);

/* An object: OK past it, ``*raw`` if orjson writes it back byte for byte. */
static int
skip_object(Scan *s, int depth, int *raw)
{
    Name names[MAX_RAW_MEMBERS], name;
    int count = 0, rewritten = 0, value_raw, status = OK;
    *raw = 1;
    s->p++;
    for (int first = 1; status == OK; first = 0) {
        status = next_member(s, first, &name, &rewritten);
        if (status != OK) {
            break;
        }
        /* once not raw, the names are no longer kept (nor looked through) */
        if (*raw && !rewritten && count < MAX_RAW_MEMBERS && !is_duplicate(names, count, name)) {
            names[count++] = name;
        }
        else {
            *raw = 0;
        }
        status = skip_value(s, depth + 1, &value_raw);
        *raw &= value_raw;
    }
    *raw &= !rewritten;  /* whitespace before the ``}`` */
    return status == END ? OK : status;
}

/* An array: OK past it, ``*raw`` if orjson writes it back byte for byte. */
static int
skip_array(Scan *s, int depth, int *raw)
{
    int rewritten = 0, value_raw, status = OK;
    *raw = 1;
    s->p++;
    for (int first = 1; status == OK; first = 0) {
        status = next_element(s, first, &rewritten);
        if (status == OK) {
            status = skip_value(s, depth + 1, &value_raw);
            *raw &= value_raw;
        }
    }
    *raw &= !rewritten;
    return status == END ? OK : status;
}

/* Any JSON value at ``s->p`` (``depth`` containers in): OK past it, ``*raw`` if orjson writes it back byte for
 * byte (a string without escapes, a literal, a short integer, a float in orjson's form, a compact container of
 * raw values: see the top of the file). */
static int
skip_value(Scan *s, int depth, int *raw)
{
    *raw = 0;
    if (s->p >= s->end) {
        return UNSURE;
    }
    switch (*s->p) {
    case '"': {
        int escaped, status = scan_string(s, &escaped);
        *raw = !escaped;
        return status;
    }
    case '{':
        return depth < MAX_VALUE_DEPTH ? skip_object(s, depth, raw) : UNSURE;
    case '[':
        return depth < MAX_VALUE_DEPTH ? skip_array(s, depth, raw) : UNSURE;
    case 't':
        *raw = 1;
        return scan_literal(s, "true", 4);
    case 'f':
        *raw = 1;
        return scan_literal(s, "false", 5);
    case 'n':
        *raw = 1;
        return scan_literal(s, "null", 4);
    default:
        return scan_number(s, raw);
    }
}

/* A failed ``loads``/``dumps`` means the general path fails too: UNSURE (it gives the error); only what is not
 * an ``Exception`` (KeyboardInterrupt...) propagates. */
static int
unsure_unless_fatal(void)
{
    if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        return UNSURE;
    }
    return FAILED;
}

/* ``dumps(loads(span))`` copied to its own size, as the general path stores the value. */
static int
reencode(const unsigned char *start, Py_ssize_t n, const Limits *limits, PyObject **out)
{
    PyObject *span = PyBytes_FromStringAndSize((const char *)start, n);
    if (span == NULL) {
        return FAILED;
    }
    PyObject *value = PyObject_CallOneArg(limits->loads, span);
    Py_DECREF(span);
    if (value == NULL) {
        return unsure_unless_fatal();
    }
    PyObject *dumped = PyObject_CallOneArg(limits->dumps, value);
    Py_DECREF(value);
    if (dumped == NULL) {
        return unsure_unless_fatal();
    }
    if (!PyBytes_Check(dumped) || PyBytes_GET_SIZE(dumped) > limits->max_value) {
        Py_DECREF(dumped);
        return UNSURE;
    }
    *out = PyBytes_FromStringAndSize(PyBytes_AS_STRING(dumped), PyBytes_GET_SIZE(dumped));
    Py_DECREF(dumped);
    return *out == NULL ? FAILED : OK;
}

/* A message's value as stored: its own bytes where orjson would write them back unchanged, else reencoded. */
static int
read_value(Scan *s, const Limits *limits, PyObject **out)
{
    const unsigned char *start = s->p;
    int raw, status = skip_value(s, 0, &raw);
    if (status != OK) {
        return status;
    }
    Py_ssize_t n = s->p - start;
    if (!raw) {
        return reencode(start, n, limits, out);
    }
    if (n > limits->max_value) {
        return UNSURE;
    }
    *out = PyBytes_FromStringAndSize((const char *)start, n);
    return *out == NULL ? FAILED : OK;
}

/* A message's key: a string without escapes as its UTF-8 bytes, or null as None. */
static int
read_key(Scan *s, const Limits *limits, PyObject **out)
{
    const unsigned char *start = s->p;
    if (s->p < s->end && *s->p == 'n') {
        int status = scan_literal(s, "null", 4);
        *out = status == OK ? Py_NewRef(Py_None) : NULL;
        return status;
    }
    int escaped;
    if (s->p >= s->end || *s->p != '"' || scan_string(s, &escaped) != OK || escaped ||
        s->p - start - 2 > limits->max_key) {
        return UNSURE;
    }
    *out = PyBytes_FromStringAndSize((const char *)start + 1, s->p - start - 2);
    return *out == NULL ? FAILED : OK;
}

/* One message at ``s->p``: ``{"value": ...}`` with an optional ``"key"``, each once, nothing else. */
static int
read_message(Scan *s, const Limits *limits, PyObject **key, PyObject **value)
{
    Name name;
    int rewritten = 0, status = OK;  /* how the envelope is written does not matter */
    *key = *value = NULL;
    if (s->p >= s->end || *s->p != '{') {
        return UNSURE;
    }
    s->p++;
    for (int first = 1; status == OK; first = 0) {
        status = next_member(s, first, &name, &rewritten);
        if (status != OK) {
            break;
        }
        if (NAME_IS(name, "value") && *value == NULL) {
            status = read_value(s, limits, value);
        }
        else if (NAME_IS(name, "key") && *key == NULL) {
            status = read_key(s, limits, key);
        }
        else {
            status = UNSURE;  /* another field, or one twice: the general path */
        }
    }
    if (status == END && *value != NULL) {
        if (*key == NULL) {
            *key = Py_NewRef(Py_None);
        }
        return OK;
    }
    Py_CLEAR(*key);
    Py_CLEAR(*value);
    return status == END ? UNSURE : status;
}

static int
append_message(PyObject *keys, PyObject *values, PyObject *key, PyObject *value)
{
    int failed = PyList_Append(keys, key) < 0 || PyList_Append(values, value) < 0;
    Py_DECREF(key);
    Py_DECREF(value);
    return failed ? FAILED : OK;
}

/* The ``messages`` array: 1 to ``max_messages`` plain messages into ``keys`` and ``values``. */
static int
read_messages(Scan *s, const Limits *limits, PyObject *keys, PyObject *values, Py_ssize_t *total)
{
    int rewritten = 0, status = OK;
    if (s->p >= s->end || *s->p != '[') {
        return UNSURE;
    }
    s->p++;
    for (int first = 1; status == OK; first = 0) {
        status = next_element(s, first, &rewritten);
        if (status != OK) {
            return status == END && !first ? OK : UNSURE;
        }
        if (PyList_GET_SIZE(keys) >= limits->max_messages) {
            return UNSURE;
        }
        PyObject *key, *value;
        status = read_message(s, limits, &key, &value);
        if (status == OK) {
            *total += PyBytes_GET_SIZE(value);
            status = append_message(keys, values, key, value);
        }
    }
    return status;
}

/* ``acks``: "0", 0, "1", 1 or "all" into ``*acks`` (borrowed, interned); anything else is UNSURE. */
static int
read_acks(Scan *s, PyObject **acks)
{
    const unsigned char *start = s->p;
    int escaped, raw;
    if (s->p < s->end && *s->p == '"') {
        if (scan_string(s, &escaped) != OK) {
            return UNSURE;
        }
        Py_ssize_t n = s->p - start;
        *acks = n == 5 && memcmp(start, "\"all\"", 5) == 0 ? ACKS_ALL
                : n == 3 && memcmp(start, "\"1\"", 3) == 0 ? ACKS_ONE
                : n == 3 && memcmp(start, "\"0\"", 3) == 0 ? ACKS_ZERO : NULL;
        return *acks != NULL ? OK : UNSURE;
    }
    if (s->p >= s->end || (*s->p != '0' && *s->p != '1') || scan_number(s, &raw) != OK || s->p - start != 1) {
        return UNSURE;
    }
    *acks = *start == '1' ? ACKS_ONE : ACKS_ZERO;
    return OK;
}

/* The whole body: ``{"messages": [...]}`` with an optional ``"acks"``, each once, then only whitespace. */
static int
read_body(Scan *s, const Limits *limits, PyObject **acks, PyObject *keys, PyObject *values, Py_ssize_t *total)
{
    Name name;
    int rewritten = 0, has_acks = 0, has_messages = 0, status = OK;
    *acks = ACKS_ONE;
    skip_ws(s);
    if (s->p >= s->end || *s->p != '{') {
        return UNSURE;
    }
    s->p++;
    for (int first = 1; status == OK; first = 0) {
        status = next_member(s, first, &name, &rewritten);
        if (status != OK) {
            break;
        }
        if (NAME_IS(name, "messages") && !has_messages) {
            has_messages = 1;
            status = read_messages(s, limits, keys, values, total);
        }
        else if (NAME_IS(name, "acks") && !has_acks) {
            has_acks = 1;
            status = read_acks(s, acks);
        }
        else {
            status = UNSURE;
        }
    }
    if (status != END) {
        return status;
    }
    skip_ws(s);
    return has_messages && s->p == s->end ? OK : UNSURE;
}

static PyObject *
scan_plain_body(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "scan_plain_body(body: bytes, max_batch_messages: int, max_key_bytes: "
                                         "int, max_value_bytes: int, loads, dumps)");
        return NULL;
    }
    Limits limits = {PyLong_AsSsize_t(args[1]), PyLong_AsSsize_t(args[2]), PyLong_AsSsize_t(args[3]), args[4],
                     args[5]};
    if ((limits.max_messages == -1 || limits.max_key == -1 || limits.max_value == -1) && PyErr_Occurred()) {
        return NULL;
    }
    const unsigned char *body = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Scan s = {body, body + PyBytes_GET_SIZE(args[0])};
    PyObject *keys = PyList_New(0), *values = PyList_New(0), *result = NULL, *size;
    Py_ssize_t total = 0;
    PyObject *acks = ACKS_ONE;
    int status = keys == NULL || values == NULL ? FAILED : read_body(&s, &limits, &acks, keys, values, &total);
    if (status == OK && (size = PyLong_FromSsize_t(total)) != NULL) {
        result = PyTuple_Pack(4, acks, keys, values, size);
        Py_DECREF(size);
    }
    else if (status == UNSURE) {
        result = Py_NewRef(Py_None);
    }
    Py_XDECREF(keys);
    Py_XDECREF(values);
    return result;
}

static PyMethodDef methods[] = {
    {"parse_plain", (PyCFunction)(void (*)(void))parse_plain, METH_FASTCALL,
     "Keys, values (as stored) and the values' total size of plain messages; None if any is not plain."},
    {"scan_plain_body", (PyCFunction)(void (*)(void))scan_plain_body, METH_FASTCALL,
     "(acks, keys, values, values' total size) of a plain publish body, read from its bytes; None if unsure."},
    {"plain_results_json", (PyCFunction)(void (*)(void))plain_results_json, METH_FASTCALL,
     "The publish response body of plain messages: their partitions and offsets as orjson writes them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gateway._speedups._plain", "The plain publish's codec in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__plain(void)
{
    KEY = PyUnicode_InternFromString("key");
    VALUE = PyUnicode_InternFromString("value");
    ACKS_ZERO = PyUnicode_InternFromString("0");
    ACKS_ONE = PyUnicode_InternFromString("1");
    ACKS_ALL = PyUnicode_InternFromString("all");
    if (KEY == NULL || VALUE == NULL || ACKS_ZERO == NULL || ACKS_ONE == NULL || ACKS_ALL == NULL) {
        return NULL;
    }
    return PyModule_Create(&module);
}
