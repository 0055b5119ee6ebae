/* client/_columns.c — a partition's Fetch records decoded into Arrow column buffers, compiled:
 * the twin of the pure-Python lockgate.client._purecolumns, with the same class, methods,
 * results and error messages (client/columns.py chooses one; tests/unit/client/test_columns.py
 * checks that both give the same bytes). See _purecolumns.py for what it owns and its rules.
 *
 * Why C: a Spark task reading a partition turned every record into a Python Message and then
 * into Arrow again, several Python objects and a few microseconds per record. Here the batches
 * are walked and the records parsed into growable C buffers; Python is called per batch only
 * (CRC-32C, decompression, and the ABORT marker test of a control batch, through the same
 * functions decode_fetched uses), and per record only for a header name that is not ASCII.
 *
 * Every function holds the GIL and never releases it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HEADER_SIZE 61
#define PREFIX_SIZE 17
#define LOG_OVERHEAD 12
#define CRC_START 21
#define COMPRESSION_MASK 0x07
#define TIMESTAMP_TYPE_BIT 0x08
#define TRANSACTIONAL_BIT 0x10
#define CONTROL_BIT 0x20
#define MAX_VARINT_BYTES 10

/* ------------------------------------------------------------------------------------------ */
/* Growable buffers and binary columns */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (extra <= b->cap - b->len) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < extra) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *grown = PyMem_Realloc(b->data, (size_t)cap);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = grown;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    if (n) memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static inline int put_int64(Buf *b, int64_t v) { return buf_put(b, &v, sizeof v); }
static inline int put_int32(Buf *b, int32_t v) { return buf_put(b, &v, sizeof v); }

typedef struct {
    Buf validity, offsets, data;
    Py_ssize_t length, nulls;
} Binary;

typedef struct {
    Py_ssize_t length, nulls, data;
} BinaryMark;

static int binary_reset(Binary *c) {
    c->validity.len = c->offsets.len = c->data.len = 0;
    c->length = c->nulls = 0;
    return put_int32(&c->offsets, 0);
}

static void binary_free(Binary *c) {
    PyMem_Free(c->validity.data);
    PyMem_Free(c->offsets.data);
    PyMem_Free(c->data.data);
    memset(c, 0, sizeof *c);
}

/* `size` < 0 appends a null. */
static int binary_append(Binary *c, const char *item, int64_t size) {
    int bit = (int)(c->length % 8);
    if (bit == 0) {
        char zero = 0;
        if (buf_put(&c->validity, &zero, 1) < 0) return -1;
    }
    if (size < 0) {
        c->nulls++;
    } else {
        if (size > INT32_MAX - c->data.len) {
            PyErr_SetString(PyExc_OverflowError, "an Arrow binary column holds at most 2 GiB");
            return -1;
        }
        c->validity.data[c->validity.len - 1] |= (char)(1 << bit);
        if (buf_put(&c->data, item, (Py_ssize_t)size) < 0) return -1;
    }
    if (put_int32(&c->offsets, (int32_t)c->data.len) < 0) return -1;
    c->length++;
    return 0;
}

static BinaryMark binary_mark(Binary *c) {
    BinaryMark m = {c->length, c->nulls, c->data.len};
    return m;
}

static void binary_rollback(Binary *c, BinaryMark m) {
    c->length = m.length;
    c->nulls = m.nulls;
    c->data.len = m.data;
    c->offsets.len = (m.length + 1) * (Py_ssize_t)sizeof(int32_t);
    c->validity.len = (m.length + 7) / 8;
    if (m.length % 8) c->validity.data[c->validity.len - 1] &= (char)((1 << (m.length % 8)) - 1);
}

static PyObject *buf_bytes(Buf *b) { return PyBytes_FromStringAndSize(b->data, b->len); }

/* ------------------------------------------------------------------------------------------ */
/* Reading records */

static inline int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return (int64_t)v;
}

static inline int32_t be32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

static inline int16_t be16(const unsigned char *p) {
    return (int16_t)((uint16_t)p[0] << 8 | p[1]);
}

typedef struct {
    const unsigned char *p;
    Py_ssize_t n, pos;
    const char *error; /* set when a read fails */
} Reader;

static int read_varint(Reader *r, int64_t *out) {
    uint64_t raw = 0;
    for (int i = 0; i < MAX_VARINT_BYTES; i++) {
        if (r->pos >= r->n) {
            r->error = "records end before the batch's record count";
            return -1;
        }
        unsigned char byte = r->p[r->pos++];
        raw |= (uint64_t)(byte & 0x7F) << (7 * i); /* bits past 64 are dropped */
        if (!(byte & 0x80)) {
            *out = (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
            return 0;
        }
    }
    r->error = "a varint runs over 10 bytes";
    return -1;
}

/* A nullable field: *size < 0 for null. */
static int read_field(Reader *r, const char **item, int64_t *size) {
    if (read_varint(r, size) < 0) return -1;
    if (*size < 0) {
        *item = NULL;
        return 0;
    }
    if (*size > (int64_t)(r->n - r->pos)) {
        r->error = "a record field runs past the end of the batch";
        return -1;
    }
    *item = (const char *)r->p + r->pos;
    r->pos += (Py_ssize_t)*size;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* ColumnBuilder */

typedef struct {
    PyObject_HEAD
    PyObject *decompress, *crc, *is_abort_marker;
    int busy; /* inside add(): the callbacks must not add or take */
    Py_ssize_t rows, headers;
    Buf offsets, timestamps, types, header_offsets;
    Binary keys, values, header_keys, header_values;
} ColumnBuilder;

typedef struct {
    Py_ssize_t rows, headers;
    BinaryMark keys, values, header_keys, header_values;
} Mark;

static int builder_reset(ColumnBuilder *self) {
    self->rows = self->headers = 0;
    self->offsets.len = self->timestamps.len = self->types.len = self->header_offsets.len = 0;
    if (put_int32(&self->header_offsets, 0) < 0 || binary_reset(&self->keys) < 0 ||
        binary_reset(&self->values) < 0 || binary_reset(&self->header_keys) < 0 ||
        binary_reset(&self->header_values) < 0)
        return -1;
    return 0;
}

static Mark builder_mark(ColumnBuilder *self) {
    Mark m = {self->rows,
              self->headers,
              binary_mark(&self->keys),
              binary_mark(&self->values),
              binary_mark(&self->header_keys),
              binary_mark(&self->header_values)};
    return m;
}

static void builder_rollback(ColumnBuilder *self, Mark m) {
    self->rows = m.rows;
    self->headers = m.headers;
    self->offsets.len = self->timestamps.len = m.rows * (Py_ssize_t)sizeof(int64_t);
    self->types.len = m.rows * (Py_ssize_t)sizeof(int32_t);
    self->header_offsets.len = (m.rows + 1) * (Py_ssize_t)sizeof(int32_t);
    binary_rollback(&self->keys, m.keys);
    binary_rollback(&self->values, m.values);
    binary_rollback(&self->header_keys, m.header_keys);
    binary_rollback(&self->header_values, m.header_values);
}

static int builder_init(ColumnBuilder *self, PyObject *args, PyObject *kwds) {
    PyObject *decompress, *crc, *is_abort_marker;
    static char *names[] = {"decompress", "crc", "is_abort_marker", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO", names, &decompress, &crc,
                                     &is_abort_marker))
        return -1;
    Py_XSETREF(self->decompress, Py_NewRef(decompress));
    Py_XSETREF(self->crc, Py_NewRef(crc));
    Py_XSETREF(self->is_abort_marker, Py_NewRef(is_abort_marker));
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "ColumnBuilder is in add()");
        return -1;
    }
    return builder_reset(self);
}

static int builder_traverse(ColumnBuilder *self, visitproc visit, void *arg) {
    Py_VISIT(self->decompress);
    Py_VISIT(self->crc);
    Py_VISIT(self->is_abort_marker);
    return 0;
}

static int builder_clear(ColumnBuilder *self) {
    Py_CLEAR(self->decompress);
    Py_CLEAR(self->crc);
    Py_CLEAR(self->is_abort_marker);
    return 0;
}

static void builder_dealloc(ColumnBuilder *self) {
    PyObject_GC_UnTrack(self);
    builder_clear(self);
    PyMem_Free(self->offsets.data);
    PyMem_Free(self->timestamps.data);
    PyMem_Free(self->types.data);
    PyMem_Free(self->header_offsets.data);
    binary_free(&self->keys);
    binary_free(&self->values);
    binary_free(&self->header_keys);
    binary_free(&self->header_values);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A header name as Arrow's string: UTF-8, invalid bytes replaced as bytes.decode("utf-8",
 * "replace") does (Python decodes the rare name that is not ASCII). */
static int append_name(Binary *c, const char *name, int64_t size) {
    if (size < 0) return binary_append(c, "", 0);
    int ascii = 1;
    for (int64_t i = 0; i < size; i++)
        if ((unsigned char)name[i] & 0x80) {
            ascii = 0;
            break;
        }
    if (ascii) return binary_append(c, name, size);
    PyObject *text = PyUnicode_DecodeUTF8(name, (Py_ssize_t)size, "replace");
    if (text == NULL) return -1;
    Py_ssize_t length;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &length);
    int result = utf8 == NULL ? -1 : binary_append(c, utf8, length);
    Py_DECREF(text);
    return result;
}

typedef struct {
    int64_t base, base_timestamp, max_timestamp, position, end;
    int32_t count, timestamp_type;
} BatchInfo;

/* The records of one (decompressed) batch body. Returns 0, -1 with r->error set (corrupt), or
 * -2 with a Python exception set. */
static int add_records(ColumnBuilder *self, Reader *r, const BatchInfo *b) {
    for (int32_t i = 0; i < b->count; i++) {
        int64_t length, timestamp_delta, offset_delta, key_size, value_size, header_count;
        const char *key, *value;
        if (read_varint(r, &length) < 0) return -1;
        /* record_end = r->pos + length, unless that is past the body (or would overflow) */
        int past_body = length > (int64_t)(r->n - r->pos);
        Py_ssize_t record_end = past_body ? r->n : r->pos + (Py_ssize_t)length;
        r->pos += 1; /* record attributes: unused in v2 */
        if (read_varint(r, &timestamp_delta) < 0 || read_varint(r, &offset_delta) < 0 ||
            read_field(r, &key, &key_size) < 0 || read_field(r, &value, &value_size) < 0 ||
            read_varint(r, &header_count) < 0)
            return -1;
        Py_ssize_t headers_at = r->pos;
        for (int64_t h = 0; h < header_count; h++) {
            const char *item;
            int64_t size;
            if (read_field(r, &item, &size) < 0 || read_field(r, &item, &size) < 0) return -1;
        }
        if (past_body || r->pos > record_end) {
            PyErr_Format(PyExc_ValueError,
                         "undecodable batch at offset %lld: record at offset delta %lld overruns "
                         "its length",
                         (long long)b->base, (long long)offset_delta);
            return -2;
        }
        r->pos = record_end;
        int64_t offset, timestamp, micros;
        if (__builtin_add_overflow(b->base, offset_delta, &offset)) {
            r->error = "offset out of range";
            return -1;
        }
        if (offset < b->position || offset >= b->end) continue;
        if (b->timestamp_type) {
            timestamp = b->max_timestamp;
        } else if (__builtin_add_overflow(b->base_timestamp, timestamp_delta, &timestamp)) {
            r->error = "timestamp out of range";
            return -1;
        }
        if (__builtin_mul_overflow(timestamp, (int64_t)1000, &micros)) {
            r->error = "timestamp out of range";
            return -1;
        }
        int64_t headers = header_count > 0 ? header_count : 0;
        if (headers > (int64_t)INT32_MAX - self->headers) {
            PyErr_SetString(PyExc_OverflowError,
                            "an Arrow list column holds at most 2**31 - 1 items");
            return -2;
        }
        if (put_int64(&self->offsets, offset) < 0 || put_int64(&self->timestamps, micros) < 0 ||
            put_int32(&self->types, b->timestamp_type) < 0 ||
            binary_append(&self->keys, key, key_size) < 0 ||
            binary_append(&self->values, value, value_size) < 0)
            return -2;
        Reader again = {r->p, r->n, headers_at, NULL}; /* read above: cannot fail */
        for (int64_t h = 0; h < headers; h++) {
            const char *name, *item;
            int64_t name_size, item_size;
            read_field(&again, &name, &name_size);
            read_field(&again, &item, &item_size);
            if (append_name(&self->header_keys, name, name_size) < 0 ||
                binary_append(&self->header_values, item, item_size) < 0)
                return -2;
        }
        self->headers += (Py_ssize_t)headers;
        if (put_int32(&self->header_offsets, (int32_t)self->headers) < 0) return -2;
        self->rows++;
    }
    return 0;
}

typedef struct {
    int64_t first_offset, producer_id;
} Aborted;

static int compare_aborted(const void *a, const void *b) {
    const Aborted *x = a, *y = b;
    if (x->first_offset != y->first_offset) return x->first_offset < y->first_offset ? -1 : 1;
    if (x->producer_id != y->producer_id) return x->producer_id < y->producer_id ? -1 : 1;
    return 0;
}

/* Producers whose records are being dropped: a small set, searched linearly. */
typedef struct {
    int64_t *ids;
    Py_ssize_t count, cap;
} IdSet;

static Py_ssize_t idset_find(IdSet *s, int64_t id) {
    for (Py_ssize_t i = 0; i < s->count; i++)
        if (s->ids[i] == id) return i;
    return -1;
}

static int idset_add(IdSet *s, int64_t id) {
    if (idset_find(s, id) >= 0) return 0;
    if (s->count == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 8;
        int64_t *grown = PyMem_Realloc(s->ids, (size_t)cap * sizeof(int64_t));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        s->ids = grown;
        s->cap = cap;
    }
    s->ids[s->count++] = id;
    return 0;
}

static void idset_discard(IdSet *s, int64_t id) {
    Py_ssize_t i = idset_find(s, id);
    if (i >= 0) s->ids[i] = s->ids[--s->count];
}

static Aborted *parse_aborted(PyObject *aborted, Py_ssize_t *count) {
    PyObject *items = PySequence_Fast(aborted, "aborted must be a sequence of pairs");
    if (items == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
    Aborted *list = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Aborted));
    if (list == NULL) {
        Py_DECREF(items);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(items, i);
        long long first, producer;
        if (!PyArg_ParseTuple(pair, "LL", &first, &producer)) {
            PyMem_Free(list);
            Py_DECREF(items);
            return NULL;
        }
        list[i].first_offset = first;
        list[i].producer_id = producer;
    }
    Py_DECREF(items);
    qsort(list, (size_t)n, sizeof(Aborted), compare_aborted);
    *count = n;
    return list;
}

/* crc(memoryview of p[0:n]) as an unsigned 32-bit value; -1 with an exception set. */
static int call_crc(PyObject *fn, const unsigned char *p, Py_ssize_t n, uint32_t *out) {
    PyObject *view = PyMemoryView_FromMemory((char *)p, n, PyBUF_READ);
    if (view == NULL) return -1;
    PyObject *result = PyObject_CallOneArg(fn, view);
    Py_DECREF(view);
    if (result == NULL) return -1;
    unsigned long value = PyLong_AsUnsignedLong(result);
    Py_DECREF(result);
    if (value == (unsigned long)-1 && PyErr_Occurred()) return -1;
    *out = (uint32_t)value;
    return 0;
}

/* is_abort_marker(bytes of the batch): 1, 0, or -1 with an exception set. */
static int call_is_abort_marker(PyObject *fn, const unsigned char *p, Py_ssize_t n) {
    PyObject *chunk = PyBytes_FromStringAndSize((const char *)p, n);
    if (chunk == NULL) return -1;
    PyObject *result = PyObject_CallOneArg(fn, chunk);
    Py_DECREF(chunk);
    if (result == NULL) return -1;
    int truth = PyObject_IsTrue(result);
    Py_DECREF(result);
    return truth;
}

/* ValueError("undecodable batch at offset N: <reason>"): the reason is the message of the
 * exception being raised (a decompressor's), which becomes the cause, or `reason`. */
static void undecodable(int64_t base, const char *reason) {
    PyObject *type = NULL, *cause = NULL, *traceback = NULL;
    if (PyErr_Occurred()) {
        PyErr_Fetch(&type, &cause, &traceback);
        PyErr_NormalizeException(&type, &cause, &traceback);
        if (traceback != NULL && cause != NULL) PyException_SetTraceback(cause, traceback);
    }
    PyObject *text = cause == NULL ? NULL : PyObject_Str(cause);
    if (cause != NULL && text == NULL) PyErr_Clear();
    if (text != NULL)
        PyErr_Format(PyExc_ValueError, "undecodable batch at offset %lld: %U", (long long)base,
                     text);
    else
        PyErr_Format(PyExc_ValueError, "undecodable batch at offset %lld: %s", (long long)base,
                     reason);
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    if (cause != NULL) {
        PyObject *error_type, *error, *error_traceback;
        PyErr_Fetch(&error_type, &error, &error_traceback);
        PyErr_NormalizeException(&error_type, &error, &error_traceback);
        PyException_SetContext(error, Py_NewRef(cause)); /* steals */
        PyException_SetCause(error, cause);              /* steals */
        PyErr_Restore(error_type, error, error_traceback);
    }
}

static PyObject *walk(ColumnBuilder *self, const unsigned char *data, Py_ssize_t total,
                      int64_t position, int64_t end, Aborted *aborted, Py_ssize_t aborted_count,
                      int read_committed, int check_crcs, IdSet *aborting) {
    Py_ssize_t next_aborted = 0, pos = 0;
    int64_t next_position = 0;
    int have_next = 0;
    while (total - pos >= PREFIX_SIZE) {
        const unsigned char *p = data + pos;
        int64_t size = LOG_OVERHEAD + (int64_t)be32(p + 8);
        int magic = (signed char)p[16];
        if (size > (int64_t)(total - pos)) break; /* cut by the fetch size: fetched again */
        if (magic != 2) {
            PyErr_Format(PyExc_ValueError, "batch with magic %d at byte %zd", magic, pos);
            return NULL;
        }
        if (size < HEADER_SIZE) {
            if (check_crcs)
                PyErr_SetString(PyExc_ValueError, "batch failed its CRC-32C check");
            else
                PyErr_Format(PyExc_ValueError, "batch of %lld bytes is shorter than its header",
                             (long long)size);
            return NULL;
        }
        int64_t base = be64(p);
        int16_t attributes = be16(p + 21);
        int32_t last_delta = be32(p + 23);
        int64_t producer_id = be64(p + 43);
        if (check_crcs) {
            uint32_t crc;
            if (call_crc(self->crc, p + CRC_START, (Py_ssize_t)size - CRC_START, &crc) < 0)
                return NULL;
            if (crc != (uint32_t)be32(p + 17)) {
                PyErr_SetString(PyExc_ValueError, "batch failed its CRC-32C check");
                return NULL;
            }
        }
        Py_ssize_t start = pos;
        pos += (Py_ssize_t)size;
        int64_t last_offset;
        if (__builtin_add_overflow(base, (int64_t)last_delta, &last_offset)) {
            PyErr_Format(PyExc_ValueError, "batch at byte %zd runs past the largest offset",
                         start);
            return NULL;
        }
        if (last_offset < position) continue;
        /* Batches come in offset order: whatever this one holds, it is behind us afterwards. */
        next_position = last_offset + 1;
        have_next = 1;
        if (read_committed)
            while (next_aborted < aborted_count &&
                   aborted[next_aborted].first_offset <= last_offset)
                if (idset_add(aborting, aborted[next_aborted++].producer_id) < 0) return NULL;
        if (attributes & CONTROL_BIT) {
            if (idset_find(aborting, producer_id) >= 0) {
                int abort = call_is_abort_marker(self->is_abort_marker, p, (Py_ssize_t)size);
                if (abort < 0) return NULL;
                if (abort) idset_discard(aborting, producer_id);
            }
            continue;
        }
        if (read_committed && (attributes & TRANSACTIONAL_BIT) &&
            idset_find(aborting, producer_id) >= 0)
            continue;
        BatchInfo info = {base,     be64(p + 27), be64(p + 35), position,
                          end,      be32(p + 57), (attributes & TIMESTAMP_TYPE_BIT) ? 1 : 0};
        PyObject *inflated = NULL;
        Reader r = {p + HEADER_SIZE, (Py_ssize_t)size - HEADER_SIZE, 0, NULL};
        if (attributes & COMPRESSION_MASK) {
            PyObject *body = PyBytes_FromStringAndSize((const char *)r.p, r.n);
            if (body == NULL) return NULL;
            inflated = PyObject_CallFunction(self->decompress, "iO",
                                             attributes & COMPRESSION_MASK, body);
            Py_DECREF(body);
            if (inflated == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_Exception)) return NULL;
                undecodable(base, "");
                return NULL;
            }
            if (!PyBytes_Check(inflated)) {
                Py_DECREF(inflated);
                PyErr_SetString(PyExc_TypeError, "decompress must return bytes");
                return NULL;
            }
            r.p = (const unsigned char *)PyBytes_AS_STRING(inflated);
            r.n = PyBytes_GET_SIZE(inflated);
        }
        int result = add_records(self, &r, &info);
        Py_XDECREF(inflated);
        if (result == -2) return NULL;
        if (result == -1) {
            undecodable(base, r.error);
            return NULL;
        }
    }
    if (!have_next) Py_RETURN_NONE;
    return PyLong_FromLongLong(next_position);
}

/* A builder made without __init__ (or cleared by the collector) has no callbacks, and one
 * inside add() must not be changed by them. */
static int builder_unusable(ColumnBuilder *self) {
    if (self->decompress == NULL || self->crc == NULL || self->is_abort_marker == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ColumnBuilder.__init__ was not called");
        return 1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "ColumnBuilder is in add()");
        return 1;
    }
    return 0;
}

/* add(records, position, end, aborted, check_crcs) -> next position or None */
static PyObject *builder_add(ColumnBuilder *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "add(records, position, end, aborted, check_crcs)");
        return NULL;
    }
    if (builder_unusable(self)) return NULL;
    long long position = PyLong_AsLongLong(args[1]);
    if (position == -1 && PyErr_Occurred()) return NULL;
    long long end = PyLong_AsLongLong(args[2]);
    if (end == -1 && PyErr_Occurred()) return NULL;
    int check_crcs = PyObject_IsTrue(args[4]);
    if (check_crcs < 0) return NULL;
    int read_committed = args[3] != Py_None;
    Aborted *aborted = NULL;
    Py_ssize_t aborted_count = 0;
    if (read_committed && (aborted = parse_aborted(args[3], &aborted_count)) == NULL) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        PyMem_Free(aborted);
        return NULL;
    }
    IdSet aborting = {NULL, 0, 0};
    Mark mark = builder_mark(self);
    self->busy = 1;
    PyObject *result = walk(self, (const unsigned char *)view.buf, view.len, position, end,
                            aborted, aborted_count, read_committed, check_crcs, &aborting);
    self->busy = 0;
    if (result == NULL) builder_rollback(self, mark);
    PyMem_Free(aborting.ids);
    PyBuffer_Release(&view);
    PyMem_Free(aborted);
    return result;
}

static PyObject *binary_tuple_items(Binary *c, PyObject *out, Py_ssize_t at, int with_nulls) {
    if (with_nulls) {
        PyTuple_SET_ITEM(out, at++, PyLong_FromSsize_t(c->nulls));
        PyTuple_SET_ITEM(out, at++, buf_bytes(&c->validity));
    }
    PyTuple_SET_ITEM(out, at++, buf_bytes(&c->offsets));
    PyTuple_SET_ITEM(out, at++, buf_bytes(&c->data));
    return out;
}

/* take() -> the 20 columns (see _purecolumns.Columns); the builder is emptied. */
static PyObject *builder_take(ColumnBuilder *self, PyObject *unused) {
    if (builder_unusable(self)) return NULL;
    PyObject *out = PyTuple_New(20);
    if (out == NULL) return NULL;
    PyTuple_SET_ITEM(out, 0, PyLong_FromSsize_t(self->rows));
    PyTuple_SET_ITEM(out, 1, buf_bytes(&self->offsets));
    PyTuple_SET_ITEM(out, 2, buf_bytes(&self->timestamps));
    PyTuple_SET_ITEM(out, 3, buf_bytes(&self->types));
    binary_tuple_items(&self->keys, out, 4, 1);
    binary_tuple_items(&self->values, out, 8, 1);
    PyTuple_SET_ITEM(out, 12, buf_bytes(&self->header_offsets));
    PyTuple_SET_ITEM(out, 13, PyLong_FromSsize_t(self->headers));
    binary_tuple_items(&self->header_keys, out, 14, 0);
    binary_tuple_items(&self->header_values, out, 16, 1);
    for (Py_ssize_t i = 0; i < 20; i++)
        if (PyTuple_GET_ITEM(out, i) == NULL) {
            Py_DECREF(out);
            return NULL;
        }
    if (builder_reset(self) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *builder_get_rows(ColumnBuilder *self, void *closure) {
    return PyLong_FromSsize_t(self->rows);
}

static PyObject *builder_get_headers(ColumnBuilder *self, void *closure) {
    return PyLong_FromSsize_t(self->headers);
}

static PyObject *builder_get_size(ColumnBuilder *self, void *closure) {
    return PyLong_FromSsize_t(self->keys.data.len + self->values.data.len +
                              self->header_keys.data.len + self->header_values.data.len);
}

static PyMethodDef builder_methods[] = {
    {"add", (PyCFunction)(void (*)(void))builder_add, METH_FASTCALL,
     "add(records, position, end, aborted, check_crcs) -> the position after, or None"},
    {"take", (PyCFunction)builder_take, METH_NOARGS,
     "the columns of the records added since the last take(); empties the builder"},
    {NULL}};

static PyGetSetDef builder_getset[] = {
    {"rows", (getter)builder_get_rows, NULL, NULL, NULL},
    {"headers", (getter)builder_get_headers, NULL, NULL, NULL},
    {"size", (getter)builder_get_size, NULL, NULL, NULL},
    {NULL}};

static PyTypeObject ColumnBuilderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "lockgate.client._columns.ColumnBuilder",
    .tp_basicsize = sizeof(ColumnBuilder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A partition's Fetch records as Arrow column buffers.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)builder_init,
    .tp_traverse = (traverseproc)builder_traverse,
    .tp_clear = (inquiry)builder_clear,
    .tp_dealloc = (destructor)builder_dealloc,
    .tp_methods = builder_methods,
    .tp_getset = builder_getset,
};

/* ------------------------------------------------------------------------------------------ */

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "lockgate.client._columns",
    "Fetch records decoded into Arrow column buffers, compiled (see lockgate.client.columns).",
    -1, NULL};

PyMODINIT_FUNC PyInit__columns(void) {
    if (PyType_Ready(&ColumnBuilderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddStringConstant(m, "IMPLEMENTATION", "compiled") < 0 ||
        PyModule_AddObjectRef(m, "ColumnBuilder", (PyObject *)&ColumnBuilderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
