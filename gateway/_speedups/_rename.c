/*
 * Top-level renames of a JSON object by rewriting its bytes, without parsing it: the key token of each renamed
 * member is replaced by its new name's JSON, every other byte is copied. None whenever the result could differ from
 * parsing, migrating and encoding it (gateway.schemas.migrate.ValueStep then converts it that way).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_VALUE_SIZE (1 << 20) /* larger values go the parsed way: a scan must stay cheap */
#define MAX_DEPTH 256
#define MAX_MEMBERS 64           /* top-level members checked for duplicates pairwise */
#define MAX_NAMES 8              /* names a chain involves: the failing table holds one byte per subset */
#define MAX_INTEGER_DIGITS 300   /* a number stays finite as a double when digits plus exponent stay below */

typedef const unsigned char *cursor;

static cursor skip_value(cursor at, cursor end, int depth);

static cursor
skip_space(cursor at, cursor end)
{
    while (at < end && (*at == ' ' || *at == '\n' || *at == '\r' || *at == '\t'))
        at++;
    return at;
}

/* One UTF-8 sequence starting at a byte >= 0x80, as strict as orjson (no overlongs, no surrogates); NULL if not. */
static cursor
skip_utf8(cursor at, cursor end)
{
    unsigned char lead = *at;
    int more;
    unsigned char low = 0x80, high = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF)
        more = 1;
    else if (lead >= 0xE0 && lead <= 0xEF) {
        more = 2;
        if (lead == 0xE0)
            low = 0xA0;
        else if (lead == 0xED)
            high = 0x9F;
    }
    else if (lead >= 0xF0 && lead <= 0xF4) {
        more = 3;
        if (lead == 0xF0)
            low = 0x90;
        else if (lead == 0xF4)
            high = 0x8F;
    }
    else
        return NULL;
    if (end - at <= more)
        return NULL;
    if (at[1] < low || at[1] > high)
        return NULL;
    for (int i = 2; i <= more; i++)
        if (at[i] < 0x80 || at[i] > 0xBF)
            return NULL;
    return at + 1 + more;
}

/* The code unit of \uXXXX whose hex digits start at `at`; -1 if they are not four hex digits. */
static long
hex4(cursor at, cursor end)
{
    if (end - at < 4)
        return -1;
    long unit = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = at[i];
        int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (digit < 0)
            return -1;
        unit = unit * 16 + digit;
    }
    return unit;
}

/* Whether any of 8 bytes is one a string scan must look at: a quote, a backslash, a control or a non-ASCII byte. */
static int
has_special(uint64_t word)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t quotes = word ^ (ones * '"'), backslashes = word ^ (ones * '\\');
    uint64_t found = ((quotes - ones) & ~quotes) | ((backslashes - ones) & ~backslashes)
                     | ((word - ones * 0x20) & ~word) | word;
    return (found & highs) != 0;
}

/* Past a string whose opening quote is at `at`; NULL if malformed. `escaped` says whether it had a backslash. */
static cursor
skip_string(cursor at, cursor end, int *escaped)
{
    at++;
    while (1) {
        uint64_t word;
        /* plain ASCII eight bytes at a time: most of a value is inside its strings */
        while (end - at >= 8) {
            memcpy(&word, at, 8);
            if (has_special(word))
                break;
            at += 8;
        }
        if (at >= end)
            return NULL;
        unsigned char c = *at;
        if (c == '"')
            return at + 1;
        if (c < 0x20)
            return NULL;
        if (c >= 0x80) {
            at = skip_utf8(at, end);
            if (at == NULL)
                return NULL;
            continue;
        }
        if (c != '\\') {
            at++;
            continue;
        }
        *escaped = 1;
        if (end - at < 2)
            return NULL;
        c = at[1];
        if (c != 'u') {
            if (strchr("\"\\/bfnrt", c) == NULL || c == '\0')
                return NULL;
            at += 2;
            continue;
        }
        long unit = hex4(at + 2, end);
        if (unit < 0 || (unit >= 0xDC00 && unit <= 0xDFFF))
            return NULL;
        at += 6;
        if (unit >= 0xD800 && unit <= 0xDBFF) {  /* a high surrogate: its low one must follow */
            if (end - at < 2 || at[0] != '\\' || at[1] != 'u')
                return NULL;
            long next = hex4(at + 2, end);
            if (next < 0xDC00 || next > 0xDFFF)
                return NULL;
            at += 6;
        }
    }
}

static cursor
skip_digits(cursor at, cursor end, long *count)
{
    cursor start = at;
    while (at < end && *at >= '0' && *at <= '9')
        at++;
    *count = (long)(at - start);
    return at;
}

/* Past a number of JSON's grammar that orjson reads as a finite number; NULL otherwise. */
static cursor
skip_number(cursor at, cursor end)
{
    long integer_digits, digits, exponent = 0;
    if (*at == '-')
        at++;
    if (at < end && *at == '0')
        at++, integer_digits = 1;
    else {
        at = skip_digits(at, end, &integer_digits);
        if (integer_digits == 0)
            return NULL;
    }
    if (at < end && *at == '.') {
        at = skip_digits(at + 1, end, &digits);
        if (digits == 0)
            return NULL;
    }
    if (at < end && (*at == 'e' || *at == 'E')) {
        at++;
        int negative = at < end && *at == '-';
        if (at < end && (*at == '+' || *at == '-'))
            at++;
        cursor start = at;
        at = skip_digits(at, end, &digits);
        if (digits == 0 || digits > 3)
            return NULL;
        for (; start < at; start++)
            exponent = exponent * 10 + (*start - '0');
        if (negative)
            exponent = -exponent;
    }
    if (integer_digits > MAX_INTEGER_DIGITS || integer_digits + exponent > MAX_INTEGER_DIGITS)
        return NULL;
    return at;
}

static cursor
skip_literal(cursor at, cursor end, const char *literal, Py_ssize_t size)
{
    return end - at >= size && memcmp(at, literal, (size_t)size) == 0 ? at + size : NULL;
}

/* After a member or an element: past the container's `close` (`closed` set), or past the comma to the next one;
 * NULL when neither follows. */
static cursor
next_item(cursor at, cursor end, unsigned char close, int *closed)
{
    at = skip_space(at, end);
    if (at < end && *at == close) {
        *closed = 1;
        return at + 1;
    }
    return at < end && *at == ',' ? skip_space(at + 1, end) : NULL;
}

/* A top-level member's key: where its opening quote is, the name's bytes between the quotes, which name it is. */
typedef struct {
    cursor quote;
    Py_ssize_t size;
    int name;
} Key;

typedef struct {
    Py_ssize_t count;
    PyObject *const *names;  /* bytes: the names as UTF-8 */
    PyObject *const *keys;   /* bytes: a renamed name's final key as JSON; None: kept */
    const char *failing;     /* one byte per subset of the names present: nonzero when the chain fails */
} Renames;

static int
name_of(const Renames *renames, cursor name, Py_ssize_t size)
{
    for (Py_ssize_t i = 0; i < renames->count; i++) {
        PyObject *candidate = renames->names[i];
        if (PyBytes_GET_SIZE(candidate) == size && memcmp(PyBytes_AS_STRING(candidate), name, (size_t)size) == 0)
            return (int)i;
    }
    return -1;
}

/* The top-level object's members as far as scanned: their keys, and which of the names are present. */
typedef struct {
    const Renames *renames;
    Key *keys;
    Py_ssize_t count;
    unsigned present;
} Members;

/* A top-level key between `quote` and `after` noted; 0 when the value must be declined. */
static int
note_key(Members *top, cursor quote, cursor after, int escaped)
{
    if (escaped || top->count == MAX_MEMBERS)
        return 0;
    Py_ssize_t size = after - quote - 2;
    int name = name_of(top->renames, quote + 1, size);
    top->keys[top->count++] = (Key){quote, size, name};
    if (name >= 0)
        top->present |= 1u << name;
    return 1;
}

/* Past the members of an object whose '{' is at `at`, noting their keys in `top` when it is the top-level one. */
static cursor
scan_object(cursor at, cursor end, int depth, Members *top)
{
    at = skip_space(at + 1, end);
    if (at < end && *at == '}')
        return at + 1;
    while (at < end && *at == '"') {
        int escaped = 0;
        cursor quote = at;
        at = skip_string(at, end, &escaped);
        if (at == NULL || (top != NULL && !note_key(top, quote, at, escaped)))
            return NULL;
        at = skip_space(at, end);
        if (at >= end || *at != ':')
            return NULL;
        int closed = 0;
        at = skip_value(skip_space(at + 1, end), end, depth);
        if (at == NULL || (at = next_item(at, end, '}', &closed)) == NULL || closed)
            return at;
    }
    return NULL;
}

static cursor
skip_array(cursor at, cursor end, int depth)
{
    at = skip_space(at + 1, end);
    if (at < end && *at == ']')
        return at + 1;
    while (1) {
        int closed = 0;
        at = skip_value(at, end, depth);
        if (at == NULL || (at = next_item(at, end, ']', &closed)) == NULL || closed)
            return at;
    }
}

/* Past one value starting at `at` (no leading space), `depth` containers deep; NULL if malformed or too deep. */
static cursor
skip_value(cursor at, cursor end, int depth)
{
    int escaped = 0;
    if (at >= end)
        return NULL;
    switch (*at) {
    case '"':
        return skip_string(at, end, &escaped);
    case '{':
        return depth >= MAX_DEPTH ? NULL : scan_object(at, end, depth + 1, NULL);
    case '[':
        return depth >= MAX_DEPTH ? NULL : skip_array(at, end, depth + 1);
    case 't':
        return skip_literal(at, end, "true", 4);
    case 'f':
        return skip_literal(at, end, "false", 5);
    case 'n':
        return skip_literal(at, end, "null", 4);
    default:
        return *at == '-' || (*at >= '0' && *at <= '9') ? skip_number(at, end) : NULL;
    }
}

static int
has_duplicates(const Key *keys, Py_ssize_t count)
{
    for (Py_ssize_t i = 1; i < count; i++)
        for (Py_ssize_t j = 0; j < i; j++)
            if (keys[i].size == keys[j].size && memcmp(keys[i].quote, keys[j].quote, (size_t)keys[i].size + 1) == 0)
                return 1;
    return 0;
}

/* The top-level members' keys of an object that is the whole of [at, end); -1 when it is not one to rewrite. */
static Py_ssize_t
scan_keys(cursor at, cursor end, Members *top)
{
    at = skip_space(at, end);
    if (at >= end || *at != '{')
        return -1;
    at = scan_object(at, end, 1, top);
    if (at == NULL || skip_space(at, end) != end || has_duplicates(top->keys, top->count))
        return -1;
    return top->count;
}

/* The renames argument (names, keys, failing) checked; 0 with an exception if it is not of that shape. */
static int
unpack_renames(PyObject *given, Renames *renames)
{
    if (!PyTuple_Check(given) || PyTuple_GET_SIZE(given) != 3)
        goto malformed;
    PyObject *names = PyTuple_GET_ITEM(given, 0), *keys = PyTuple_GET_ITEM(given, 1);
    PyObject *failing = PyTuple_GET_ITEM(given, 2);
    if (!PyTuple_Check(names) || !PyTuple_Check(keys) || !PyBytes_Check(failing))
        goto malformed;
    Py_ssize_t count = PyTuple_GET_SIZE(names);
    if (count > MAX_NAMES || PyTuple_GET_SIZE(keys) != count || PyBytes_GET_SIZE(failing) != (1 << count))
        goto malformed;
    for (Py_ssize_t i = 0; i < count; i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(names, i))
            || (PyTuple_GET_ITEM(keys, i) != Py_None && !PyBytes_Check(PyTuple_GET_ITEM(keys, i))))
            goto malformed;
    *renames = (Renames){count, &PyTuple_GET_ITEM(names, 0), &PyTuple_GET_ITEM(keys, 0), PyBytes_AS_STRING(failing)};
    return 1;
malformed:
    PyErr_SetString(PyExc_TypeError, "renames must be (names: tuple[bytes, ...], keys: tuple[bytes | None, ...], "
                                      "failing: bytes of 2 ** len(names))");
    return 0;
}

/* renamed(value: bytes, renames, /): the value with its renamed members' keys replaced, or None. */
static PyObject *
renamed(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Renames renames;
    Key keys[MAX_MEMBERS];
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "renamed takes a value and its renames");
        return NULL;
    }
    if (!unpack_renames(args[1], &renames))
        return NULL;
    PyObject *value = args[0];
    if (!PyBytes_CheckExact(value) || PyBytes_GET_SIZE(value) > MAX_VALUE_SIZE)
        Py_RETURN_NONE;
    cursor start = (cursor)PyBytes_AS_STRING(value), end = start + PyBytes_GET_SIZE(value);
    Members top = {&renames, keys, 0, 0};
    Py_ssize_t count = scan_keys(start, end, &top);
    if (count < 0 || renames.failing[top.present])
        Py_RETURN_NONE;
    Py_ssize_t total = PyBytes_GET_SIZE(value);
    int changed = 0;
    for (Py_ssize_t i = 0; i < count; i++)
        if (keys[i].name >= 0 && renames.keys[keys[i].name] != Py_None) {
            total += PyBytes_GET_SIZE(renames.keys[keys[i].name]) - (keys[i].size + 2);
            changed = 1;
        }
    if (!changed)
        return Py_NewRef(value);
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    char *to = PyBytes_AS_STRING(out);
    cursor from = start;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (keys[i].name < 0 || renames.keys[keys[i].name] == Py_None)
            continue;
        PyObject *key = renames.keys[keys[i].name];
        memcpy(to, from, (size_t)(keys[i].quote - from));
        to += keys[i].quote - from;
        memcpy(to, PyBytes_AS_STRING(key), (size_t)PyBytes_GET_SIZE(key));
        to += PyBytes_GET_SIZE(key);
        from = keys[i].quote + keys[i].size + 2;
    }
    memcpy(to, from, (size_t)(end - from));
    return out;
}

static PyMethodDef methods[] = {
    {"renamed", (PyCFunction)(void (*)(void))renamed, METH_FASTCALL,
     "A JSON object with its top-level renames applied to its bytes, or None (the parsed way converts it)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gateway._speedups._rename", "Top-level renames of JSON objects on their bytes, in C.",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__rename(void)
{
    return PyModule_Create(&module);
}
