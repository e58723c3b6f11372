/*
 * The eventlog source's record decoder, compiled: the records of a group of
 * v2 record batches straight into the buffers of the Arrow columns.
 *
 * Input: the batches' record bodies joined in one buffer (decompressed, the
 * 61-byte batch headers cut off), each batch's end in that buffer and its
 * record count. Output: the buffers of every column that comes from the
 * records themselves (see columns.py for the columns and their meaning), or,
 * when a record does not parse, the index of its batch, so that the caller
 * can have the reference decoder name the fault.
 *
 * A v2 record is: length (varint), attributes (int8), timestampDelta
 * (varlong), offsetDelta (varint), keyLength (varint, -1 for null), key,
 * valueLength (varint, -1 for null), value, header count (varint), and per
 * header keyLength (varint, >= 0), key, valueLength (varint, -1 for null),
 * value. Varints are zig-zag encoded, at most 10 bytes. Each record must end
 * exactly where its length says, and the last one exactly at its batch's end.
 * Every read is checked against the record's end, so no input can make this
 * code read outside the buffer.
 *
 * Pure: no state, no I/O; the GIL is released while records are walked.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define VARINT_BYTES_MAX 10
#define UUID_TEXT_LENGTH 36
#define VERSION_DIGITS_MAX 9
#define ID_PREFIX "{\"id\":\""
#define ID_PREFIX_LENGTH 7
#define ID_WINDOW_LENGTH (ID_PREFIX_LENGTH + UUID_TEXT_LENGTH + 1)
#define ARROW_OFFSET_MAX INT32_MAX

typedef struct {
    int64_t start;
    int64_t length; /* -1: null */
} Span;

typedef struct {
    Span key;
    Span value;
    int64_t first_header;
    int64_t header_count;
    int64_t offset_delta;
    int64_t timestamp_delta;
} RecordSpans;

typedef struct {
    Span key;
    Span value;
} HeaderSpans;

typedef struct {
    RecordSpans *records;
    HeaderSpans *headers;
    int64_t header_capacity;
    int64_t header_total;
} Parsed;

/* The zig-zag varint at *position, which must end before `end`. 0 on success. */
static int read_varint(const uint8_t *data, int64_t *position, int64_t end, int64_t *out) {
    uint64_t raw = 0;
    int shift = 0;
    for (int index = 0; index < VARINT_BYTES_MAX; index++) {
        if (*position >= end) return -1;
        uint8_t byte = data[(*position)++];
        raw |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
        shift += 7;
    }
    return -1;
}

/* A length-prefixed byte span; -1 is null when `nullable`. 0 on success. */
static int read_span(const uint8_t *data, int64_t *position, int64_t end, int nullable, Span *span) {
    int64_t length;
    if (read_varint(data, position, end, &length)) return -1;
    if (length < (nullable ? -1 : 0)) return -1;
    span->start = *position;
    span->length = length;
    if (length > 0) {
        if (length > end - *position) return -1;
        *position += length;
    }
    return 0;
}

static int grow_headers(Parsed *parsed, int64_t needed) {
    if (needed <= parsed->header_capacity) return 0;
    int64_t capacity = parsed->header_capacity ? parsed->header_capacity : 1024;
    while (capacity < needed) capacity *= 2;
    HeaderSpans *grown = realloc(parsed->headers, (size_t)capacity * sizeof(HeaderSpans));
    if (grown == NULL) return -1;
    parsed->headers = grown;
    parsed->header_capacity = capacity;
    return 0;
}

/* One record in [start, end); 0 on success, -1 if malformed, -2 out of memory. */
static int parse_record(const uint8_t *data, int64_t position, int64_t end, Parsed *parsed,
                        RecordSpans *record) {
    position += 1; /* attributes: unused by v2 records */
    if (position > end) return -1;
    if (read_varint(data, &position, end, &record->timestamp_delta)) return -1;
    if (read_varint(data, &position, end, &record->offset_delta)) return -1;
    if (read_span(data, &position, end, 1, &record->key)) return -1;
    if (read_span(data, &position, end, 1, &record->value)) return -1;
    int64_t count;
    if (read_varint(data, &position, end, &count)) return -1;
    if (count < 0 || count > end - position) return -1; /* a header takes 2 bytes at least */
    record->first_header = parsed->header_total;
    record->header_count = count;
    if (grow_headers(parsed, parsed->header_total + count)) return -2;
    for (int64_t index = 0; index < count; index++) {
        HeaderSpans *header = &parsed->headers[parsed->header_total++];
        if (read_span(data, &position, end, 0, &header->key)) return -1;
        if (read_span(data, &position, end, 1, &header->value)) return -1;
    }
    return position == end ? 0 : -1;
}

/* Walk every record. Returns -1 on success, the bad batch's index, or -2 out of memory. */
static int64_t parse_all(const uint8_t *data, int64_t size, const int64_t *body_ends,
                         const int64_t *counts, int64_t batches, Parsed *parsed) {
    int64_t position = 0;
    int64_t record_index = 0;
    for (int64_t batch = 0; batch < batches; batch++) {
        int64_t body_end = body_ends[batch];
        if (body_end < position || body_end > size) return batch;
        for (int64_t index = 0; index < counts[batch]; index++) {
            int64_t length;
            if (read_varint(data, &position, body_end, &length)) return batch;
            if (length < 0 || length > body_end - position) return batch;
            int outcome = parse_record(data, position, position + length, parsed,
                                       &parsed->records[record_index++]);
            if (outcome == -2) return -2;
            if (outcome) return batch;
            position += length;
        }
        if (position != body_end) return batch;
    }
    return -1;
}

/* ------------------------------------------------------------ Arrow buffers */

/* One output buffer: an object from the caller's allocator, written through its
 * buffer. Arrow's allocator keeps freed memory for the next batch; buffers from
 * the system allocator would fault in fresh pages for every batch. */
typedef struct {
    PyObject *object;
    Py_buffer view;
} Output;

static void *output_open(Output *output, PyObject *allocate, int64_t size) {
    output->object = PyObject_CallFunction(allocate, "L", (long long)size);
    if (output->object == NULL) return NULL;
    if (PyObject_GetBuffer(output->object, &output->view, PyBUF_WRITABLE) != 0) {
        Py_CLEAR(output->object);
        return NULL;
    }
    if (output->view.len < size) {
        PyBuffer_Release(&output->view);
        Py_CLEAR(output->object);
        PyErr_SetString(PyExc_ValueError, "the allocator returned a buffer too small");
        return NULL;
    }
    return output->view.buf;
}

static void output_close(Output *output) {
    if (output->object == NULL) return;
    PyBuffer_Release(&output->view);
    Py_CLEAR(output->object);
}

static uint8_t *bitmap_open(Output *output, PyObject *allocate, int64_t rows) {
    uint8_t *bits = output_open(output, allocate, (rows + 7) / 8);
    if (bits != NULL) memset(bits, 0, (size_t)((rows + 7) / 8));
    return bits;
}

typedef struct {
    Output offsets; /* int32, rows + 1 */
    Output data;
    Output validity; /* bitmap, LSB first */
    int32_t *offset_cursor;
    char *data_cursor;
    uint8_t *bits;
    int64_t row;
} Column;

static int column_open(Column *column, PyObject *allocate, int64_t rows, int64_t data_bytes) {
    if (data_bytes > ARROW_OFFSET_MAX || rows > ARROW_OFFSET_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a column exceeds Arrow's 32-bit offsets");
        return -1;
    }
    column->offset_cursor = output_open(&column->offsets, allocate, (rows + 1) * 4);
    if (column->offset_cursor == NULL) return -1;
    column->data_cursor = output_open(&column->data, allocate, data_bytes);
    if (column->data_cursor == NULL) return -1;
    column->bits = bitmap_open(&column->validity, allocate, rows);
    if (column->bits == NULL) return -1;
    column->offset_cursor[0] = 0;
    return 0;
}

static void column_close(Column *column) {
    output_close(&column->offsets);
    output_close(&column->data);
    output_close(&column->validity);
}

/* Append `length` bytes at `source`; a negative length appends a null. */
static void column_append(Column *column, const uint8_t *source, int64_t length) {
    int32_t at = column->offset_cursor[column->row];
    if (length >= 0) {
        memcpy(column->data_cursor + at, source, (size_t)length);
        column->bits[column->row >> 3] |= (uint8_t)(1u << (column->row & 7));
        at += (int32_t)length;
    }
    column->offset_cursor[++column->row] = at;
}

static int64_t span_bytes(Span span) { return span.length > 0 ? span.length : 0; }

/* The first header named `name` that has a value; NULL when there is none. */
static const HeaderSpans *first_header(const uint8_t *data, const HeaderSpans *headers,
                                       const RecordSpans *record, const char *name,
                                       int64_t name_length) {
    for (int64_t index = 0; index < record->header_count; index++) {
        const HeaderSpans *header = &headers[record->first_header + index];
        if (header->key.length == name_length && header->value.length >= 0 &&
            memcmp(data + header->key.start, name, (size_t)name_length) == 0)
            return header;
    }
    return NULL;
}

/* The envelope id cut from a value that starts {"id":"<36 characters>", else 0. */
static int fast_id(const uint8_t *data, Span value) {
    if (value.length < ID_WINDOW_LENGTH) return 0;
    const uint8_t *window = data + value.start;
    if (memcmp(window, ID_PREFIX, ID_PREFIX_LENGTH) != 0) return 0;
    if (window[ID_WINDOW_LENGTH - 1] != '"') return 0;
    return memchr(window + ID_PREFIX_LENGTH, '\\', UUID_TEXT_LENGTH) == NULL;
}

static int parse_version(const uint8_t *data, Span value, int32_t *out) {
    if (value.length < 1 || value.length > VERSION_DIGITS_MAX) return 0;
    int32_t number = 0;
    for (int64_t index = 0; index < value.length; index++) {
        uint8_t digit = data[value.start + index];
        if (digit < '0' || digit > '9') return 0;
        number = number * 10 + (digit - '0');
    }
    *out = number;
    return 1;
}

typedef struct {
    const char *name;
    Py_ssize_t length;
} Name;

/* Every column's buffers. */
typedef struct {
    Column key, value, header_key, header_value, event_type, event_id;
    Output offset_delta, timestamp_delta, header_offsets, version, version_validity;
} Columns;

static void columns_close(Columns *columns) {
    Column *each[] = {&columns->key,        &columns->value,      &columns->header_key,
                      &columns->header_value, &columns->event_type, &columns->event_id};
    for (size_t index = 0; index < sizeof(each) / sizeof(each[0]); index++)
        column_close(each[index]);
    output_close(&columns->offset_delta);
    output_close(&columns->timestamp_delta);
    output_close(&columns->header_offsets);
    output_close(&columns->version);
    output_close(&columns->version_validity);
}

static int columns_open(Columns *columns, PyObject *allocate, const Parsed *parsed, int64_t rows) {
    int64_t key_bytes = 0, value_bytes = 0, header_key_bytes = 0, header_value_bytes = 0;
    for (int64_t row = 0; row < rows; row++) {
        key_bytes += span_bytes(parsed->records[row].key);
        value_bytes += span_bytes(parsed->records[row].value);
    }
    for (int64_t index = 0; index < parsed->header_total; index++) {
        header_key_bytes += span_bytes(parsed->headers[index].key);
        header_value_bytes += span_bytes(parsed->headers[index].value);
    }
    if (column_open(&columns->key, allocate, rows, key_bytes) ||
        column_open(&columns->value, allocate, rows, value_bytes) ||
        column_open(&columns->header_key, allocate, parsed->header_total, header_key_bytes) ||
        column_open(&columns->header_value, allocate, parsed->header_total, header_value_bytes) ||
        column_open(&columns->event_type, allocate, rows, header_value_bytes) ||
        column_open(&columns->event_id, allocate, rows, rows * UUID_TEXT_LENGTH))
        return -1;
    if (!output_open(&columns->offset_delta, allocate, rows * 8) ||
        !output_open(&columns->timestamp_delta, allocate, rows * 8) ||
        !output_open(&columns->header_offsets, allocate, (rows + 1) * 4) ||
        !output_open(&columns->version, allocate, rows * 4) ||
        !bitmap_open(&columns->version_validity, allocate, rows))
        return -1;
    return 0;
}

/* Fill every column from the parsed records; the rows whose id needs a JSON parse
 * go to `slow`. 0 on success. */
static int fill_columns(Columns *columns, const uint8_t *data, const Parsed *parsed, int64_t rows,
                        Name type_name, Name version_name, PyObject *slow) {
    int64_t *offsets_out = columns->offset_delta.view.buf;
    int64_t *timestamps_out = columns->timestamp_delta.view.buf;
    int32_t *header_offsets_out = columns->header_offsets.view.buf;
    int32_t *versions_out = columns->version.view.buf;
    uint8_t *version_bits = columns->version_validity.view.buf;
    for (int64_t index = 0; index < parsed->header_total; index++) {
        const HeaderSpans *header = &parsed->headers[index];
        column_append(&columns->header_key, data + header->key.start, header->key.length);
        column_append(&columns->header_value, data + header->value.start, header->value.length);
    }
    header_offsets_out[0] = 0;
    for (int64_t row = 0; row < rows; row++) {
        const RecordSpans *record = &parsed->records[row];
        offsets_out[row] = record->offset_delta;
        timestamps_out[row] = record->timestamp_delta;
        header_offsets_out[row + 1] = (int32_t)(record->first_header + record->header_count);
        column_append(&columns->key, data + record->key.start, record->key.length);
        column_append(&columns->value, data + record->value.start, record->value.length);
        const HeaderSpans *typed =
            first_header(data, parsed->headers, record, type_name.name, type_name.length);
        column_append(&columns->event_type, typed ? data + typed->value.start : NULL,
                      typed ? typed->value.length : -1);
        const HeaderSpans *versioned =
            first_header(data, parsed->headers, record, version_name.name, version_name.length);
        versions_out[row] = 0;
        if (versioned && parse_version(data, versioned->value, &versions_out[row]))
            version_bits[row >> 3] |= (uint8_t)(1u << (row & 7));
        if (fast_id(data, record->value)) {
            column_append(&columns->event_id, data + record->value.start + ID_PREFIX_LENGTH,
                          UUID_TEXT_LENGTH);
            continue;
        }
        column_append(&columns->event_id, NULL, -1);
        if (record->value.length > 0 && data[record->value.start] == '{') {
            PyObject *number = PyLong_FromLongLong(row);
            int failed = number == NULL || PyList_Append(slow, number) != 0;
            Py_XDECREF(number);
            if (failed) return -1;
        }
    }
    return 0;
}

static PyObject *build_columns(const uint8_t *data, const Parsed *parsed, int64_t rows,
                               Name type_name, Name version_name, PyObject *allocate) {
    Columns columns;
    memset(&columns, 0, sizeof(columns));
    PyObject *result = NULL;
    PyObject *slow = PyList_New(0);
    if (slow == NULL) return NULL;
    if (parsed->header_total > ARROW_OFFSET_MAX) {
        PyErr_SetString(PyExc_OverflowError, "too many headers for one Arrow batch");
        goto done;
    }
    if (columns_open(&columns, allocate, parsed, rows)) goto done;
    if (fill_columns(&columns, data, parsed, rows, type_name, version_name, slow)) goto done;
    Columns *c = &columns;
    result = Py_BuildValue(
        "{s:O,s:O,s:(OOO),s:(OOO),s:O,s:(OO),s:(OOO),s:(OOO),s:(OO),s:(OOO),s:O}",
        "offset_delta", c->offset_delta.object, "timestamp_delta", c->timestamp_delta.object,
        "key", c->key.validity.object, c->key.offsets.object, c->key.data.object,
        "value", c->value.validity.object, c->value.offsets.object, c->value.data.object,
        "header_offsets", c->header_offsets.object,
        "header_key", c->header_key.offsets.object, c->header_key.data.object,
        "header_value", c->header_value.validity.object, c->header_value.offsets.object,
        c->header_value.data.object,
        "event_type", c->event_type.validity.object, c->event_type.offsets.object,
        c->event_type.data.object,
        "event_version", c->version_validity.object, c->version.object,
        "event_id", c->event_id.validity.object, c->event_id.offsets.object,
        c->event_id.data.object,
        "slow_ids", slow);
done:
    columns_close(&columns);
    Py_DECREF(slow);
    return result;
}

static int int64_view(PyObject *object, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(object, view, PyBUF_C_CONTIGUOUS) != 0) return -1;
    if (view->len % (Py_ssize_t)sizeof(int64_t) != 0) {
        PyErr_Format(PyExc_ValueError, "%s: not an array of int64", what);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(decode_doc,
             "decode(buffer, body_ends, counts, type_header, version_header, allocate)\n--\n\n"
             "The Arrow buffers of the records in `buffer` (a dict), or the index of the\n"
             "first batch whose records do not parse (an int). `body_ends` and `counts`\n"
             "are int64 arrays: each batch's end in `buffer` and its record count.\n"
             "`allocate(size)` returns a writable buffer of at least `size` bytes.");

static PyObject *decode(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *buffer_object, *ends_object, *counts_object, *allocate;
    Name type_name, version_name;
    if (!PyArg_ParseTuple(args, "OOOs#s#O", &buffer_object, &ends_object, &counts_object,
                          &type_name.name, &type_name.length, &version_name.name,
                          &version_name.length, &allocate))
        return NULL;
    Py_buffer buffer, ends, counts;
    if (PyObject_GetBuffer(buffer_object, &buffer, PyBUF_C_CONTIGUOUS) != 0) return NULL;
    if (int64_view(ends_object, &ends, "body_ends")) {
        PyBuffer_Release(&buffer);
        return NULL;
    }
    if (int64_view(counts_object, &counts, "counts")) {
        PyBuffer_Release(&buffer);
        PyBuffer_Release(&ends);
        return NULL;
    }
    PyObject *result = NULL;
    int64_t batches = ends.len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *count_of = counts.buf;
    int64_t rows = 0;
    if (counts.len != ends.len) {
        PyErr_SetString(PyExc_ValueError, "body_ends and counts differ in length");
        goto release;
    }
    for (int64_t batch = 0; batch < batches; batch++) {
        rows += count_of[batch];
        if (count_of[batch] < 0 || rows > buffer.len) { /* a record takes 6 bytes at least */
            result = PyLong_FromLongLong(batch);
            goto release;
        }
    }
    Parsed parsed = {0};
    parsed.records = malloc((size_t)(rows ? rows : 1) * sizeof(RecordSpans));
    if (parsed.records == NULL) {
        PyErr_NoMemory();
        goto release;
    }
    int64_t bad;
    Py_BEGIN_ALLOW_THREADS;
    bad = parse_all(buffer.buf, buffer.len, ends.buf, count_of, batches, &parsed);
    Py_END_ALLOW_THREADS;
    if (bad == -2)
        PyErr_NoMemory();
    else if (bad >= 0)
        result = PyLong_FromLongLong(bad);
    else
        result = build_columns(buffer.buf, &parsed, rows, type_name, version_name, allocate);
    free(parsed.records);
    free(parsed.headers);
release:
    PyBuffer_Release(&buffer);
    PyBuffer_Release(&ends);
    PyBuffer_Release(&counts);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, decode_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_columns",
    .m_doc = "The eventlog source's compiled record decoder (see columns.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__columns(void) { return PyModule_Create(&module_definition); }
