/* client/_fastpath.c — the producer's per-record work compiled: the twin of the pure-Python
 * lockgate.client._purepath, with the same classes, methods and results (client/fastpath.py
 * chooses one; tests/unit/client/test_fastpath.py checks that both agree byte for byte).
 *
 * What it owns, per record: queueing a send() or send_batch() record in its partition's
 * RecordQueue (partition choice by murmur2, size and buffer accounting, timestamp, future,
 * tracking for flush), cutting a batch's records off the front of a queue (a RecordRun),
 * framing them as v2 records, and completing their futures with RecordMetadata.
 *
 * Why C: each of these ran Python bytecode per record, and Python objects per record (tuples
 * the collector must scan). Here a queued record is a C struct holding references to its key,
 * value and waiter; the only per-record Python objects are the caller's future and the
 * RecordMetadata handed out at completion.
 *
 * Invariants: as in _purepath.py — queues keep queueing order and runs are prefixes; sizes are
 * sums of size bounds; Accumulator.append() either queues the record and returns its future or
 * returns None having changed nothing. Every function holds the GIL and never releases it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define RECORD_OVERHEAD_BOUND 36

typedef struct {
    PyObject *key;     /* bytes or None */
    PyObject *value;   /* bytes or None */
    PyObject *headers; /* tuple of (str, bytes | None); () when none */
    int64_t timestamp;
    Py_ssize_t size;
    PyObject *waiter; /* a future, or a RecordGroup */
    double enqueued;
    Py_ssize_t slot;
} Entry;

static PyObject *str_done, *str_set_result, *str_metadata, *str_future_type;
static PyObject *future_type; /* asyncio.Future */
/* asyncio.Future.done and .set_result, called on exact Futures without a look-up each time */
static PyObject *future_done_method, *future_set_result_method;
static PyObject *base_loop_time; /* asyncio.BaseEventLoop.time: time.monotonic() */
static PyObject *empty_tuple;

/* The slot of an entry whose waiter is not a RecordGroup: a future that the collector tracks
 * (-1: the general path's), one that accumulator_append untracked (SLOT_UNTRACKED), or one
 * of those that run_complete has given its RecordMetadata (SLOT_SETTLED). */
#define SLOT_SETTLED -2
#define SLOT_UNTRACKED -3
#define WAITER_UNTRACKED(e) ((e)->slot == SLOT_UNTRACKED || (e)->slot == SLOT_SETTLED)

/* The futures of send() are left out of the collector's scans while a queue or run holds them
 * (see accumulator_append), and tracked again when the entry lets go of them — unless the
 * run completed them with a result: a done future holds no callbacks any more, only its loop
 * and its RecordMetadata (a str and ints), so it can be in no reference cycle and dies by its
 * reference count; tracked, it would be scanned while the caller and flush() keep it. */
static void entry_clear(Entry *e) {
    if (e->waiter != NULL && e->slot == SLOT_UNTRACKED && !PyObject_GC_IsTracked(e->waiter))
        PyObject_GC_Track(e->waiter);
    Py_CLEAR(e->key);
    Py_CLEAR(e->value);
    Py_CLEAR(e->headers);
    Py_CLEAR(e->waiter);
}

/* ------------------------------------------------------------------------------------------ */
/* murmur2: Kafka's Utils.murmur2, as a signed 32-bit int */

static int32_t murmur2_raw(const unsigned char *data, Py_ssize_t length) {
    const uint32_t m = 0x5BD1E995u;
    uint32_t h = 0x9747B28Cu ^ (uint32_t)length;
    Py_ssize_t body_end = length & ~(Py_ssize_t)3;
    for (Py_ssize_t i = 0; i < body_end; i += 4) {
        uint32_t k = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8 | (uint32_t)data[i + 2] << 16 |
                     (uint32_t)data[i + 3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[body_end + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[body_end + 1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)data[body_end];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)h;
}

static PyObject *fp_murmur2(PyObject *module, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    int32_t h = murmur2_raw((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromLong(h);
}

/* ------------------------------------------------------------------------------------------ */
/* RecordGroup */

typedef struct {
    PyObject_HEAD
    PyObject *future;
    PyObject *results; /* list */
    Py_ssize_t remaining;
} RecordGroup;

static PyTypeObject RecordGroupType;

static int group_init(RecordGroup *self, PyObject *args, PyObject *kwds) {
    PyObject *future;
    Py_ssize_t count;
    static char *names[] = {"future", "count", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "On", names, &future, &count)) return -1;
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "count must not be negative");
        return -1;
    }
    PyObject *results = PyList_New(count);
    if (results == NULL) return -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_INCREF(Py_None);
        PyList_SET_ITEM(results, i, Py_None);
    }
    Py_INCREF(future);
    Py_XSETREF(self->future, future);
    Py_XSETREF(self->results, results);
    self->remaining = count;
    return 0;
}

static int future_done(PyObject *future) {
    PyObject *done = Py_IS_TYPE(future, (PyTypeObject *)future_type)
                         ? PyObject_Vectorcall(future_done_method, &future, 1, NULL)
                         : PyObject_CallMethodNoArgs(future, str_done);
    if (done == NULL) return -1;
    int result = PyObject_IsTrue(done);
    Py_DECREF(done);
    return result;
}

/* Steals nothing. */
static int group_deliver_raw(RecordGroup *self, Py_ssize_t index, PyObject *metadata) {
    if (index < 0 || index >= PyList_GET_SIZE(self->results)) {
        PyErr_SetString(PyExc_IndexError, "record group index out of range");
        return -1;
    }
    Py_INCREF(metadata);
    PyObject *old = PyList_GET_ITEM(self->results, index);
    PyList_SET_ITEM(self->results, index, metadata);
    Py_DECREF(old);
    self->remaining -= 1;
    if (self->remaining == 0) {
        int done = future_done(self->future);
        if (done < 0) return -1;
        if (!done) {
            PyObject *r = PyObject_CallMethodOneArg(self->future, str_set_result, self->results);
            if (r == NULL) return -1;
            Py_DECREF(r);
        }
    }
    return 0;
}

static PyObject *group_deliver(RecordGroup *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "deliver(index, metadata)");
        return NULL;
    }
    Py_ssize_t index = PyLong_AsSsize_t(args[0]);
    if (index == -1 && PyErr_Occurred()) return NULL;
    if (group_deliver_raw(self, index, args[1]) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *group_fail(RecordGroup *self, PyObject *error) {
    int done = future_done(self->future);
    if (done < 0) return NULL;
    if (!done) return PyObject_CallMethod(self->future, "set_exception", "O", error);
    Py_RETURN_NONE;
}

static int group_traverse(RecordGroup *self, visitproc visit, void *arg) {
    Py_VISIT(self->future);
    Py_VISIT(self->results);
    return 0;
}

static int group_clear(RecordGroup *self) {
    Py_CLEAR(self->future);
    Py_CLEAR(self->results);
    return 0;
}

static void group_dealloc(RecordGroup *self) {
    PyObject_GC_UnTrack(self);
    group_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef group_methods[] = {
    {"deliver", (PyCFunction)(void (*)(void))group_deliver, METH_FASTCALL, NULL},
    {"fail", (PyCFunction)group_fail, METH_O, NULL},
    {NULL}};

static PyMemberDef group_members[] = {
    {"future", T_OBJECT, offsetof(RecordGroup, future), READONLY, NULL},
    {"results", T_OBJECT, offsetof(RecordGroup, results), READONLY, NULL},
    {"remaining", T_PYSSIZET, offsetof(RecordGroup, remaining), READONLY, NULL},
    {NULL}};

static PyTypeObject RecordGroupType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "lockgate.client._fastpath.RecordGroup",
    .tp_basicsize = sizeof(RecordGroup),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The records of one send_batch() call, behind one future.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)group_init,
    .tp_traverse = (traverseproc)group_traverse,
    .tp_clear = (inquiry)group_clear,
    .tp_dealloc = (destructor)group_dealloc,
    .tp_methods = group_methods,
    .tp_members = group_members,
};

/* ------------------------------------------------------------------------------------------ */
/* RecordRun: records cut from a queue, owning their entries */

typedef struct {
    PyObject_HEAD
    Entry *entries;
    Py_ssize_t count;
    Py_ssize_t size;
} RecordRun;

static PyTypeObject RecordRunType;

/* Entries are visited without touching the objects the collector never tracks: the untracked
 * futures (visiting them would change nothing, and each visit is a cache miss: a traversal of
 * a run or queue was most of the collector's time) and the shared empty headers. */
static int entries_traverse(Entry *entries, Py_ssize_t count, visitproc visit, void *arg) {
    for (Py_ssize_t i = 0; i < count; i++) {
        Entry *e = &entries[i];
        if (!WAITER_UNTRACKED(e)) Py_VISIT(e->waiter);
        if (e->headers != empty_tuple) Py_VISIT(e->headers);
    }
    return 0;
}

static int run_traverse(RecordRun *self, visitproc visit, void *arg) {
    return entries_traverse(self->entries, self->count, visit, arg);
}

static int run_clear(RecordRun *self) {
    Entry *entries = self->entries;
    Py_ssize_t count = self->count;
    self->entries = NULL;
    self->count = 0;
    for (Py_ssize_t i = 0; i < count; i++) entry_clear(&entries[i]);
    PyMem_Free(entries);
    return 0;
}

static void run_dealloc(RecordRun *self) {
    PyObject_GC_UnTrack(self);
    run_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t run_length(RecordRun *self) { return self->count; }

static PyObject *run_first_enqueued(RecordRun *self, void *closure) {
    if (self->count == 0) {
        PyErr_SetString(PyExc_IndexError, "an empty run");
        return NULL;
    }
    return PyFloat_FromDouble(self->entries[0].enqueued);
}

static PyObject *run_records(RecordRun *self, PyObject *unused) {
    PyObject *list = PyList_New(self->count);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < self->count; i++) {
        Entry *e = &self->entries[i];
        PyObject *record = Py_BuildValue("(OOOL)", e->key, e->value, e->headers,
                                         (long long)e->timestamp);
        if (record == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, record);
    }
    return list;
}

static PyObject *run_futures(RecordRun *self, PyObject *unused) {
    PyObject *list = PyList_New(self->count);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < self->count; i++) {
        PyObject *waiter = self->entries[i].waiter;
        if (Py_IS_TYPE(waiter, &RecordGroupType)) waiter = ((RecordGroup *)waiter)->future;
        Py_INCREF(waiter);
        PyList_SET_ITEM(list, i, waiter);
    }
    return list;
}

/* Varints: zigzag-encoded signed values, as Kafka's record fields. */
static inline Py_ssize_t varint_size(int64_t value) {
    uint64_t z = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    Py_ssize_t n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

static inline char *write_varint(char *out, int64_t value) {
    uint64_t z = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (z >= 0x80) {
        *out++ = (char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    *out++ = (char)z;
    return out;
}

/* The bytes of a nullable field: its length (or -1) then the bytes. */
static inline Py_ssize_t field_size(PyObject *item) {
    if (item == Py_None) return 1;
    Py_ssize_t n = PyBytes_GET_SIZE(item);
    return varint_size(n) + n;
}

static inline char *write_field(char *out, PyObject *item) {
    if (item == Py_None) return write_varint(out, -1);
    Py_ssize_t n = PyBytes_GET_SIZE(item);
    out = write_varint(out, n);
    memcpy(out, PyBytes_AS_STRING(item), (size_t)n);
    return out + n;
}

/* A record's body size (after its length varint); -1 with an exception for bad headers. */
static Py_ssize_t body_size(Entry *e, int64_t timestamp_delta, Py_ssize_t offset_delta) {
    Py_ssize_t size = 1 + varint_size(timestamp_delta) + varint_size(offset_delta);
    size += field_size(e->key) + field_size(e->value);
    Py_ssize_t header_count = PyTuple_GET_SIZE(e->headers);
    size += varint_size(header_count);
    for (Py_ssize_t h = 0; h < header_count; h++) {
        PyObject *header = PyTuple_GET_ITEM(e->headers, h);
        Py_ssize_t name_length;
        if (!PyTuple_Check(header) || PyTuple_GET_SIZE(header) != 2 ||
            PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(header, 0), &name_length) == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a header is (str, bytes)");
            return -1;
        }
        PyObject *value = PyTuple_GET_ITEM(header, 1);
        if (value != Py_None && !PyBytes_Check(value)) {
            PyErr_SetString(PyExc_TypeError, "a header value is bytes or None");
            return -1;
        }
        size += varint_size(name_length) + name_length + field_size(value);
    }
    return size;
}

static PyObject *run_frame(RecordRun *self, PyObject *unused) {
    if (self->count == 0) {
        PyErr_SetString(PyExc_ValueError, "a record batch needs at least one record");
        return NULL;
    }
    int64_t base = self->entries[0].timestamp, max_timestamp = base;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < self->count; i++) {
        Entry *e = &self->entries[i];
        if (e->timestamp > max_timestamp) max_timestamp = e->timestamp;
        Py_ssize_t body = body_size(e, e->timestamp - base, i);
        if (body < 0) return NULL;
        total += varint_size(body) + body;
    }
    PyObject *encoded = PyBytes_FromStringAndSize(NULL, total);
    if (encoded == NULL) return NULL;
    char *out = PyBytes_AS_STRING(encoded);
    for (Py_ssize_t i = 0; i < self->count; i++) {
        Entry *e = &self->entries[i];
        int64_t delta = e->timestamp - base;
        out = write_varint(out, body_size(e, delta, i));
        *out++ = 0; /* attributes */
        out = write_varint(out, delta);
        out = write_varint(out, i);
        out = write_field(out, e->key);
        out = write_field(out, e->value);
        Py_ssize_t header_count = PyTuple_GET_SIZE(e->headers);
        out = write_varint(out, header_count);
        for (Py_ssize_t h = 0; h < header_count; h++) {
            PyObject *header = PyTuple_GET_ITEM(e->headers, h);
            Py_ssize_t name_length;
            const char *name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(header, 0), &name_length);
            out = write_varint(out, name_length);
            memcpy(out, name, (size_t)name_length);
            out += name_length;
            out = write_field(out, PyTuple_GET_ITEM(header, 1));
        }
    }
    return Py_BuildValue("(NLL)", encoded, (long long)base, (long long)max_timestamp);
}

static PyObject *run_complete(RecordRun *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "complete(metadata_type, topic, partition, base_offset, log_append_time)");
        return NULL;
    }
    PyTypeObject *metadata_type = (PyTypeObject *)args[0];
    PyObject *topic = args[1], *partition = args[2];
    if (!PyType_Check(args[0]) || !PyType_IsSubtype(metadata_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "metadata_type must be a tuple type");
        return NULL;
    }
    long long base_offset = PyLong_AsLongLong(args[3]);
    if (base_offset == -1 && PyErr_Occurred()) return NULL;
    long long append_time = PyLong_AsLongLong(args[4]);
    if (append_time == -1 && PyErr_Occurred()) return NULL;
    /* records queued in the same millisecond share one timestamp object */
    PyObject *timestamp = NULL;
    long long timestamp_value = 0;
    for (Py_ssize_t i = 0; i < self->count; i++) {
        Entry *e = &self->entries[i];
        long long wanted = append_time >= 0 ? append_time : e->timestamp;
        if (timestamp == NULL || wanted != timestamp_value) {
            Py_XDECREF(timestamp);
            timestamp = PyLong_FromLongLong(wanted);
            if (timestamp == NULL) return NULL;
            timestamp_value = wanted;
        }
        PyObject *metadata = metadata_type->tp_alloc(metadata_type, 4);
        PyObject *offset = PyLong_FromLongLong(base_offset < 0 ? -1 : base_offset + i);
        if (metadata == NULL || offset == NULL) {
            Py_XDECREF(offset);
            Py_XDECREF(metadata);
            Py_DECREF(timestamp);
            return NULL;
        }
        Py_INCREF(topic);
        PyTuple_SET_ITEM(metadata, 0, topic);
        Py_INCREF(partition);
        PyTuple_SET_ITEM(metadata, 1, partition);
        Py_INCREF(timestamp);
        PyTuple_SET_ITEM(metadata, 2, offset);
        PyTuple_SET_ITEM(metadata, 3, timestamp);
        /* Only a str and ints inside: it can be in no reference cycle, so the collector need
         * not scan it (CPython untracks such tuples too, but only once a collection has seen
         * them: these live until the caller drops them, often long enough to reach the oldest
         * generation, whose full scans were a large share of the producer's time). */
        if (PyUnicode_CheckExact(topic) && PyLong_CheckExact(partition))
            PyObject_GC_UnTrack(metadata);
        int failed;
        if (Py_IS_TYPE(e->waiter, &RecordGroupType)) {
            failed = group_deliver_raw((RecordGroup *)e->waiter, e->slot, metadata) < 0;
        } else {
            int done = future_done(e->waiter);
            failed = done < 0;
            if (done == 0) {
                PyObject *call[2] = {e->waiter, metadata};
                PyObject *r = Py_IS_TYPE(e->waiter, (PyTypeObject *)future_type)
                                  ? PyObject_Vectorcall(future_set_result_method, call, 2, NULL)
                                  : PyObject_CallMethodOneArg(e->waiter, str_set_result, metadata);
                failed = r == NULL;
                Py_XDECREF(r);
                if (!failed && e->slot == SLOT_UNTRACKED) e->slot = SLOT_SETTLED;
            }
        }
        Py_DECREF(metadata);
        if (failed) {
            Py_DECREF(timestamp);
            return NULL;
        }
    }
    Py_XDECREF(timestamp);
    Py_RETURN_NONE;
}

static PyObject *run_new(Entry *entries, Py_ssize_t count) {
    RecordRun *run = PyObject_GC_New(RecordRun, &RecordRunType);
    if (run == NULL) return NULL;
    run->entries = entries;
    run->count = count;
    run->size = 0;
    for (Py_ssize_t i = 0; i < count; i++) run->size += entries[i].size;
    PyObject_GC_Track(run);
    return (PyObject *)run;
}

static PyMethodDef run_methods[] = {
    {"records", (PyCFunction)run_records, METH_NOARGS, NULL},
    {"futures", (PyCFunction)run_futures, METH_NOARGS, NULL},
    {"frame", (PyCFunction)run_frame, METH_NOARGS, NULL},
    {"complete", (PyCFunction)(void (*)(void))run_complete, METH_FASTCALL, NULL},
    {NULL}};

static PyMemberDef run_members[] = {
    {"size", T_PYSSIZET, offsetof(RecordRun, size), READONLY, NULL}, {NULL}};

static PyGetSetDef run_getset[] = {
    {"first_enqueued", (getter)run_first_enqueued, NULL, NULL, NULL}, {NULL}};

static PySequenceMethods run_sequence = {.sq_length = (lenfunc)run_length};

static PyTypeObject RecordRunType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "lockgate.client._fastpath.RecordRun",
    .tp_basicsize = sizeof(RecordRun),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Records cut from a queue for one batch (or failed together), in order.",
    .tp_traverse = (traverseproc)run_traverse,
    .tp_clear = (inquiry)run_clear,
    .tp_dealloc = (destructor)run_dealloc,
    .tp_methods = run_methods,
    .tp_members = run_members,
    .tp_getset = run_getset,
    .tp_as_sequence = &run_sequence,
};

/* ------------------------------------------------------------------------------------------ */
/* RecordQueue: a partition's records waiting to be batched (entries[head, head + count)) */

typedef struct {
    PyObject_HEAD
    PyObject *topic;
    PyObject *partition;
    Entry *entries;
    Py_ssize_t head, count, capacity;
    Py_ssize_t size;
} RecordQueue;

static PyTypeObject RecordQueueType;

static int queue_init(RecordQueue *self, PyObject *args, PyObject *kwds) {
    PyObject *topic, *partition;
    static char *names[] = {"topic", "partition", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "UO!", names, &topic, &PyLong_Type, &partition))
        return -1;
    Py_INCREF(topic);
    Py_XSETREF(self->topic, topic);
    Py_INCREF(partition);
    Py_XSETREF(self->partition, partition);
    return 0;
}

static int queue_traverse(RecordQueue *self, visitproc visit, void *arg) {
    return entries_traverse(self->entries + self->head, self->count, visit, arg);
}

static int queue_clear(RecordQueue *self) {
    Entry *entries = self->entries;
    Py_ssize_t head = self->head, count = self->count;
    self->entries = NULL;
    self->head = self->count = self->capacity = self->size = 0;
    for (Py_ssize_t i = head; i < head + count; i++) entry_clear(&entries[i]);
    PyMem_Free(entries);
    Py_CLEAR(self->topic);
    Py_CLEAR(self->partition);
    return 0;
}

static void queue_dealloc(RecordQueue *self) {
    PyObject_GC_UnTrack(self);
    queue_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t queue_length(RecordQueue *self) { return self->count; }

/* Room for one more entry at the end. */
static int queue_reserve(RecordQueue *self) {
    if (self->head + self->count < self->capacity) return 0;
    if (self->head > 0 && self->head >= self->capacity / 2) {
        memmove(self->entries, self->entries + self->head, (size_t)self->count * sizeof(Entry));
        self->head = 0;
        return 0;
    }
    Py_ssize_t capacity = self->capacity ? self->capacity * 2 : 64;
    Entry *entries = PyMem_Realloc(self->entries, (size_t)capacity * sizeof(Entry));
    if (entries == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->entries = entries;
    self->capacity = capacity;
    return 0;
}

/* Takes new references to key, value, headers and waiter. */
static int queue_push(RecordQueue *self, PyObject *key, PyObject *value, PyObject *headers,
                      int64_t timestamp, Py_ssize_t size, PyObject *waiter, double enqueued,
                      Py_ssize_t slot) {
    if (queue_reserve(self) < 0) return -1;
    Entry *e = &self->entries[self->head + self->count];
    Py_INCREF(key);
    e->key = key;
    Py_INCREF(value);
    e->value = value;
    Py_INCREF(headers);
    e->headers = headers;
    e->timestamp = timestamp;
    e->size = size;
    Py_INCREF(waiter);
    e->waiter = waiter;
    e->enqueued = enqueued;
    e->slot = slot;
    self->count += 1;
    self->size += size;
    return 0;
}

static PyObject *queue_append(RecordQueue *self, PyObject *args) {
    PyObject *key, *value, *headers, *waiter;
    long long timestamp;
    Py_ssize_t size, slot = -1;
    double enqueued;
    if (!PyArg_ParseTuple(args, "OOO!LnOd|n", &key, &value, &PyTuple_Type, &headers, &timestamp,
                          &size, &waiter, &enqueued, &slot))
        return NULL;
    if (slot < -1) {
        PyErr_SetString(PyExc_ValueError, "a slot is -1 or a group's index");
        return NULL;
    }
    if ((key != Py_None && !PyBytes_CheckExact(key)) ||
        (value != Py_None && !PyBytes_CheckExact(value))) {
        PyErr_SetString(PyExc_TypeError, "a record's key and value are bytes or None");
        return NULL;
    }
    if (queue_push(self, key, value, headers, timestamp, size, waiter, enqueued, slot) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* Moves the first n entries into a new run. */
static PyObject *queue_cut(RecordQueue *self, Py_ssize_t n) {
    Entry *entries = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Entry));
    if (entries == NULL) return PyErr_NoMemory();
    memcpy(entries, self->entries + self->head, (size_t)n * sizeof(Entry));
    PyObject *run = run_new(entries, n);
    if (run == NULL) {
        PyMem_Free(entries); /* the queue still owns the references */
        return NULL;
    }
    self->head += n;
    self->count -= n;
    self->size -= ((RecordRun *)run)->size;
    if (self->count == 0) self->head = 0;
    return run;
}

static PyObject *queue_take(RecordQueue *self, PyObject *args) {
    Py_ssize_t max_bytes;
    PyObject *limit_object;
    if (!PyArg_ParseTuple(args, "nO", &max_bytes, &limit_object)) return NULL;
    Py_ssize_t limit = PY_SSIZE_T_MAX;
    if (limit_object != Py_None) {
        limit = PyLong_AsSsize_t(limit_object);
        if (limit == -1 && PyErr_Occurred()) return NULL;
    }
    if (self->count == 0) {
        PyErr_SetString(PyExc_IndexError, "take from an empty queue");
        return NULL;
    }
    Py_ssize_t n;
    if (self->size <= max_bytes && self->count <= limit) {
        n = self->count;
    } else {
        Entry *first = self->entries + self->head;
        Py_ssize_t total = first[0].size;
        n = 1;
        while (n < self->count && n < limit && total + first[n].size <= max_bytes) {
            total += first[n].size;
            n++;
        }
    }
    return queue_cut(self, n);
}

static PyObject *queue_take_expired(RecordQueue *self, PyObject *arg) {
    double cutoff = PyFloat_AsDouble(arg);
    if (cutoff == -1.0 && PyErr_Occurred()) return NULL;
    Entry *first = self->entries + self->head;
    Py_ssize_t n = 0;
    while (n < self->count && first[n].enqueued <= cutoff) n++;
    if (n == 0) Py_RETURN_NONE;
    return queue_cut(self, n);
}

static PyObject *queue_take_all(RecordQueue *self, PyObject *unused) {
    if (self->count == 0) Py_RETURN_NONE;
    return queue_cut(self, self->count);
}

static PyObject *queue_first_enqueued(RecordQueue *self, void *closure) {
    if (self->count == 0) {
        PyErr_SetString(PyExc_IndexError, "an empty queue");
        return NULL;
    }
    return PyFloat_FromDouble(self->entries[self->head].enqueued);
}

static PyMethodDef queue_methods[] = {
    {"append", (PyCFunction)queue_append, METH_VARARGS, NULL},
    {"take", (PyCFunction)queue_take, METH_VARARGS, NULL},
    {"take_expired", (PyCFunction)queue_take_expired, METH_O, NULL},
    {"take_all", (PyCFunction)queue_take_all, METH_NOARGS, NULL},
    {NULL}};

static PyMemberDef queue_members[] = {
    {"topic", T_OBJECT, offsetof(RecordQueue, topic), READONLY, NULL},
    {"partition", T_OBJECT, offsetof(RecordQueue, partition), READONLY, NULL},
    {"size", T_PYSSIZET, offsetof(RecordQueue, size), READONLY, NULL},
    {NULL}};

static PyGetSetDef queue_getset[] = {
    {"first_enqueued", (getter)queue_first_enqueued, NULL, NULL, NULL}, {NULL}};

static PySequenceMethods queue_sequence = {.sq_length = (lenfunc)queue_length};

static PyTypeObject RecordQueueType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "lockgate.client._fastpath.RecordQueue",
    .tp_basicsize = sizeof(RecordQueue),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A partition's records waiting to be batched.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)queue_init,
    .tp_traverse = (traverseproc)queue_traverse,
    .tp_clear = (inquiry)queue_clear,
    .tp_dealloc = (destructor)queue_dealloc,
    .tp_methods = queue_methods,
    .tp_members = queue_members,
    .tp_getset = queue_getset,
    .tp_as_sequence = &queue_sequence,
};

/* ------------------------------------------------------------------------------------------ */
/* Accumulator: send()'s and send_batch()'s per-record work */

typedef struct {
    PyObject_HEAD
    PyObject *cluster, *new_queue, *wakeup, *txn_check, *unfinished, *topics, *clock, *loop;
    PyObject *future_kwargs; /* {"loop": loop}, for Future(loop=loop) */
    char direct_futures;     /* see new_future */
    char monotonic; /* the loop's clock is time.monotonic(): read it here, not through a call */
    Py_ssize_t batch_size, max_request_size, buffer_memory, prune_at, prune_base;
    Py_ssize_t yield_every, since_yield; /* see queue_record */
    Py_ssize_t batch_records;            /* the most records a batch may take; 0: no limit */
    long long buffered_bytes;
    char filled, sendable;
} Accumulator;

static int accumulator_init(Accumulator *self, PyObject *args, PyObject *kwds) {
    PyObject *cluster, *new_queue, *wakeup, *txn_check;
    Py_ssize_t batch_size, max_request_size, buffer_memory, prune_at;
    static char *names[] = {"cluster",       "new_queue",        "wakeup",
                            "txn_check",     "batch_size",       "max_request_size",
                            "buffer_memory", "prune_at",         NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOnnnn", names, &cluster, &new_queue, &wakeup,
                                     &txn_check, &batch_size, &max_request_size, &buffer_memory,
                                     &prune_at))
        return -1;
    if (batch_size <= 0) {
        PyErr_SetString(PyExc_ValueError, "batch_size must be positive");
        return -1;
    }
    PyObject *unfinished = PyList_New(0), *topics = PyDict_New();
    if (unfinished == NULL || topics == NULL) {
        Py_XDECREF(unfinished);
        Py_XDECREF(topics);
        return -1;
    }
    Py_INCREF(cluster);
    Py_XSETREF(self->cluster, cluster);
    Py_INCREF(new_queue);
    Py_XSETREF(self->new_queue, new_queue);
    Py_INCREF(wakeup);
    Py_XSETREF(self->wakeup, wakeup);
    if (txn_check == Py_None) {
        Py_CLEAR(self->txn_check);
    } else {
        Py_INCREF(txn_check);
        Py_XSETREF(self->txn_check, txn_check);
    }
    Py_XSETREF(self->unfinished, unfinished);
    Py_XSETREF(self->topics, topics);
    self->batch_size = batch_size;
    self->max_request_size = max_request_size;
    self->buffer_memory = buffer_memory;
    self->prune_at = self->prune_base = prune_at;
    self->buffered_bytes = 0;
    self->filled = 0;
    self->sendable = 0;
    self->yield_every = self->since_yield = self->batch_records = 0;
    return 0;
}

static int accumulator_traverse(Accumulator *self, visitproc visit, void *arg) {
    Py_VISIT(self->cluster);
    Py_VISIT(self->new_queue);
    Py_VISIT(self->wakeup);
    Py_VISIT(self->txn_check);
    Py_VISIT(self->unfinished);
    Py_VISIT(self->topics);
    Py_VISIT(self->clock);
    Py_VISIT(self->loop);
    Py_VISIT(self->future_kwargs);
    return 0;
}

static int accumulator_clear(Accumulator *self) {
    Py_CLEAR(self->cluster);
    Py_CLEAR(self->new_queue);
    Py_CLEAR(self->wakeup);
    Py_CLEAR(self->txn_check);
    Py_CLEAR(self->unfinished);
    Py_CLEAR(self->topics);
    Py_CLEAR(self->clock);
    Py_CLEAR(self->loop);
    Py_CLEAR(self->future_kwargs);
    return 0;
}

static void accumulator_dealloc(Accumulator *self) {
    PyObject_GC_UnTrack(self);
    accumulator_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A pending future of `loop` built without asyncio.Future's constructor: the object
 * allocated, then its loop set — the first field of the C Future (_asyncio's FutureObj), all
 * the others zero. The constructor costs four times as much: it looks up the running loop
 * (Python 3.11 asks getpid() each time) or parses a keyword, and calls the loop's get_debug(),
 * a Python method, for every future. Only used once check_direct_futures has found it to
 * build the very bytes the constructor builds. */
static PyObject *direct_future(PyObject *loop) {
    PyTypeObject *type = (PyTypeObject *)future_type;
    PyObject *future = type->tp_alloc(type, 0);
    if (future == NULL) return NULL;
    Py_INCREF(loop);
    *(PyObject **)((char *)future + sizeof(PyObject)) = loop;
    return future;
}

/* Whether direct_future builds, byte for byte, what Future(loop=loop) builds on this Python:
 * the C Future, its loop where expected, nothing else set (in debug mode the constructor also
 * records a traceback: then the constructor it is). 1 yes, 0 no, -1 with an exception. */
static int check_direct_futures(PyObject *loop, PyObject *kwargs) {
    PyTypeObject *type = (PyTypeObject *)future_type;
    Py_ssize_t size = type->tp_basicsize;
    if ((type->tp_flags & Py_TPFLAGS_HEAPTYPE) || !(type->tp_flags & Py_TPFLAGS_HAVE_GC) ||
        type->tp_itemsize != 0 || size < (Py_ssize_t)(sizeof(PyObject) + sizeof(PyObject *)) ||
        strcmp(type->tp_name, "_asyncio.Future") != 0)
        return 0;
    PyObject *built = PyObject_Call(future_type, empty_tuple, kwargs);
    if (built == NULL) return -1;
    PyObject *direct = direct_future(loop);
    if (direct == NULL) {
        Py_DECREF(built);
        return -1;
    }
    int same = memcmp((char *)built + sizeof(PyObject), (char *)direct + sizeof(PyObject),
                      (size_t)(size - (Py_ssize_t)sizeof(PyObject))) == 0;
    if (same) { /* and it works as one */
        PyObject *got = PyObject_CallMethod(direct, "get_loop", NULL);
        same = got == loop;
        Py_XDECREF(got);
        if (got == NULL) {
            Py_DECREF(built);
            Py_DECREF(direct);
            return -1;
        }
    }
    Py_DECREF(built);
    Py_DECREF(direct);
    return same;
}

/* A new pending future of the accumulator's loop. */
static PyObject *new_future(Accumulator *self) {
    if (self->direct_futures) return direct_future(self->loop);
    return PyObject_Call(future_type, empty_tuple, self->future_kwargs);
}

static PyObject *accumulator_start(Accumulator *self, PyObject *loop) {
    PyObject *clock = PyObject_GetAttrString(loop, "time");
    if (clock == NULL) return NULL;
    Py_XSETREF(self->clock, clock);
    Py_INCREF(loop);
    Py_XSETREF(self->loop, loop);
    PyObject *method = PyObject_GetAttrString((PyObject *)Py_TYPE(loop), "time");
    if (method == NULL) return NULL;
    self->monotonic = method == base_loop_time;
    Py_DECREF(method);
    PyObject *kwargs = Py_BuildValue("{sO}", "loop", loop);
    if (kwargs == NULL) return NULL;
    Py_XSETREF(self->future_kwargs, kwargs);
    int direct = check_direct_futures(loop, kwargs);
    if (direct < 0) return NULL;
    self->direct_futures = (char)direct;
    self->sendable = 1;
    Py_RETURN_NONE;
}

static PyObject *accumulator_direct_futures(Accumulator *self, void *closure) {
    return PyBool_FromLong(self->direct_futures);
}

static PyObject *accumulator_register(Accumulator *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "register(topic, metadata, partition_count, counter, custom_partitioner)");
        return NULL;
    }
    PyObject *topic = args[0];
    Py_ssize_t partition_count = PyLong_AsSsize_t(args[2]);
    if (partition_count == -1 && PyErr_Occurred()) return NULL;
    if (partition_count <= 0) {
        PyErr_SetString(PyExc_ValueError, "a topic needs partitions");
        return NULL;
    }
    PyObject *queues = PyList_New(partition_count);
    if (queues == NULL) return NULL;
    PyObject *old = PyDict_GetItemWithError(self->topics, topic);
    for (Py_ssize_t i = 0; i < partition_count; i++) {
        PyObject *queue = Py_None;
        if (old != NULL) {
            PyObject *old_queues = PyList_GET_ITEM(old, 2);
            if (i < PyList_GET_SIZE(old_queues)) queue = PyList_GET_ITEM(old_queues, i);
        }
        Py_INCREF(queue);
        PyList_SET_ITEM(queues, i, queue);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(queues);
        return NULL;
    }
    PyObject *entry = Py_BuildValue("[OnNOO]", args[1], partition_count, queues, args[3], args[4]);
    if (entry == NULL) return NULL;
    int failed = PyDict_SetItem(self->topics, topic, entry);
    Py_DECREF(entry);
    if (failed) return NULL;
    Py_RETURN_NONE;
}

/* Drops the done futures from `unfinished`. In place: the list lives as long as the producer,
 * in the collector's oldest generation, while a new one would be young and scanned — all of
 * its futures, each a cache miss — by the next collections. */
static int prune(Accumulator *self) {
    PyObject *unfinished = self->unfinished;
    Py_ssize_t length = PyList_GET_SIZE(unfinished);
    PyObject *kept = PyList_New(0);
    if (kept == NULL) return -1;
    Py_INCREF(unfinished); /* done() may run Python code */
    int failed = 0;
    for (Py_ssize_t i = 0; !failed && i < length && i < PyList_GET_SIZE(unfinished); i++) {
        PyObject *item = PyList_GET_ITEM(unfinished, i);
        Py_INCREF(item);
        int done = future_done(item);
        failed = done < 0 || (!done && PyList_Append(kept, item) < 0);
        Py_DECREF(item);
    }
    if (!failed) failed = PyList_SetSlice(unfinished, 0, length, kept) < 0;
    Py_DECREF(unfinished);
    if (!failed) {
        Py_ssize_t twice = 2 * PyList_GET_SIZE(kept);
        self->prune_at = twice > self->prune_base ? twice : self->prune_base;
    }
    Py_DECREF(kept);
    return failed ? -1 : 0;
}

static int track(Accumulator *self, PyObject *future) {
    if (PyList_Append(self->unfinished, future) < 0) return -1;
    if (PyList_GET_SIZE(self->unfinished) < self->prune_at) return 0;
    return prune(self);
}

static PyObject *accumulator_prune(Accumulator *self, PyObject *unused) {
    if (prune(self) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *accumulator_track(Accumulator *self, PyObject *future) {
    if (track(self, future) < 0) return NULL;
    Py_RETURN_NONE;
}

/* Borrowed reference to the topic's entry; NULL without an exception when unknown. */
static PyObject *topic_entry(Accumulator *self, PyObject *topic) {
    return PyDict_GetItemWithError(self->topics, topic);
}

/* Borrowed reference to the partition's queue, created through new_queue the first time. */
static RecordQueue *queue_of(Accumulator *self, PyObject *topic, PyObject *entry, Py_ssize_t at) {
    PyObject *queues = PyList_GET_ITEM(entry, 2);
    PyObject *queue = PyList_GET_ITEM(queues, at);
    if (queue != Py_None) return (RecordQueue *)queue;
    PyObject *index = PyLong_FromSsize_t(at);
    if (index == NULL) return NULL;
    queue = PyObject_CallFunctionObjArgs(self->new_queue, topic, index, NULL);
    Py_DECREF(index);
    if (queue == NULL) return NULL;
    if (!Py_IS_TYPE(queue, &RecordQueueType)) {
        Py_DECREF(queue);
        PyErr_SetString(PyExc_TypeError, "new_queue must return a RecordQueue");
        return NULL;
    }
    PyList_SetItem(queues, at, queue); /* steals it; the list keeps it alive */
    return (RecordQueue *)queue;
}

static PyObject *accumulator_queue_for(Accumulator *self, PyObject *const *args,
                                       Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "queue_for(topic, partition)");
        return NULL;
    }
    PyObject *entry = topic_entry(self, args[0]);
    if (entry == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, args[0]);
        return NULL;
    }
    Py_ssize_t at = PyLong_AsSsize_t(args[1]);
    if (at == -1 && PyErr_Occurred()) return NULL;
    if (at < 0 || at >= PyList_GET_SIZE(PyList_GET_ITEM(entry, 2))) {
        PyErr_SetString(PyExc_IndexError, "no such partition");
        return NULL;
    }
    RecordQueue *queue = queue_of(self, args[0], entry, at);
    Py_XINCREF(queue);
    return (PyObject *)queue;
}

/* The partition for `key` (bytes or None); -1 with an exception. */
static Py_ssize_t partition_of(PyObject *topic, PyObject *entry, PyObject *key) {
    Py_ssize_t count = PyLong_AsSsize_t(PyList_GET_ITEM(entry, 1));
    PyObject *custom = PyList_GET_ITEM(entry, 4);
    if (custom != Py_None) {
        PyObject *chosen = PyObject_CallFunctionObjArgs(custom, topic, key,
                                                        PyList_GET_ITEM(entry, 1), NULL);
        if (chosen == NULL) return -1;
        Py_ssize_t at = PyLong_AsSsize_t(chosen);
        Py_DECREF(chosen);
        if (at == -1 && PyErr_Occurred()) return -1;
        if (at < 0 || at >= count) {
            PyErr_SetString(PyExc_ValueError, "the partitioner chose no partition of the topic");
            return -1;
        }
        return at;
    }
    if (key == Py_None) {
        PyObject *next = PyIter_Next(PyList_GET_ITEM(entry, 3));
        if (next == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "the counter stopped");
            return -1;
        }
        Py_ssize_t n = PyLong_AsSsize_t(next);
        Py_DECREF(next);
        if (n == -1 && PyErr_Occurred()) return -1;
        return n % count;
    }
    int32_t h = murmur2_raw((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
    return (Py_ssize_t)((uint32_t)h & 0x7FFFFFFFu) % count;
}

static PyObject *accumulator_partition_of(Accumulator *self, PyObject *const *args,
                                          Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "partition_of(topic, key)");
        return NULL;
    }
    PyObject *entry = topic_entry(self, args[0]);
    if (entry == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, args[0]);
        return NULL;
    }
    if (args[1] != Py_None && !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "a key is bytes or None");
        return NULL;
    }
    Py_ssize_t at = partition_of(args[0], entry, args[1]);
    return at < 0 ? NULL : PyLong_FromSsize_t(at);
}

static int64_t now_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    /* int(time.time() * 1000) with time.time()'s own arithmetic: nanoseconds as an integer,
     * then seconds as a double, then milliseconds truncated */
    double seconds = (double)((int64_t)now.tv_sec * 1000000000 + now.tv_nsec) / 1e9;
    return (int64_t)(seconds * 1000.0);
}

static int call_wakeup(Accumulator *self) {
    PyObject *r = PyObject_CallNoArgs(self->wakeup);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* The loop's time(); -1 with an exception. */
static double loop_time(Accumulator *self) {
    if (self->monotonic) {
        /* time.monotonic()'s own arithmetic: nanoseconds as an integer, then seconds */
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        return (double)((int64_t)now.tv_sec * 1000000000 + now.tv_nsec) / 1e9;
    }
    PyObject *clock = PyObject_CallNoArgs(self->clock);
    if (clock == NULL) return -1.0;
    double seconds = PyFloat_AsDouble(clock);
    Py_DECREF(clock);
    return seconds;
}

/* Appends to the partition's queue and does the accounting; -1 with an exception. */
static int queue_record(Accumulator *self, PyObject *topic, PyObject *entry, Py_ssize_t chosen,
                        PyObject *key, PyObject *value, int64_t timestamp, Py_ssize_t size,
                        PyObject *waiter, Py_ssize_t slot, double enqueued) {
    RecordQueue *queue = queue_of(self, topic, entry, chosen);
    if (queue == NULL) return -1;
    Py_ssize_t before = queue->size;
    if (queue_push(queue, key, value, empty_tuple, timestamp, size, waiter, enqueued, slot) < 0)
        return -1;
    self->buffered_bytes += size;
    /* a batch full in records, as below in bytes */
    int full = self->batch_records > 0 && queue->count % self->batch_records == 0;
    /* Every yield_every records the caller yields too: only then can the loop read answers
     * and write the batches they make room for, while a caller queueing in a loop of its own
     * never waits for anything. A count of all records, whatever else asked for a yield. */
    if (self->yield_every > 0 && ++self->since_yield >= self->yield_every) {
        self->since_yield = 0;
        self->filled = 1;
    }
    if (full || before / self->batch_size != queue->size / self->batch_size) {
        self->filled = 1; /* the sender should write the full batch now */
        return call_wakeup(self);
    }
    if (queue->count == 1) return call_wakeup(self);
    return 0;
}

static PyObject *accumulator_append(Accumulator *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "append(topic, value, key, partition, headers, timestamp_ms)");
        return NULL;
    }
    PyObject *topic = args[0], *value = args[1], *key = args[2], *partition = args[3];
    PyObject *headers = args[4], *timestamp_object = args[5];
    if (!self->sendable || self->loop == NULL) Py_RETURN_NONE;
    if (!(PyTuple_CheckExact(headers) && PyTuple_GET_SIZE(headers) == 0)) {
        int truth = PyObject_IsTrue(headers);
        if (truth < 0) return NULL;
        if (truth) Py_RETURN_NONE;
    }
    if (self->txn_check != NULL) { /* first, as on the general path */
        PyObject *r = PyObject_CallNoArgs(self->txn_check); /* raises outside a transaction */
        if (r == NULL) return NULL;
        Py_DECREF(r);
    }
    PyObject *entry = topic_entry(self, topic);
    if (entry == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *metadata = PyObject_GetAttr(self->cluster, str_metadata);
    if (metadata == NULL) return NULL;
    Py_DECREF(metadata); /* only its identity matters */
    if (metadata != PyList_GET_ITEM(entry, 0)) Py_RETURN_NONE;
    if ((key != Py_None && !PyBytes_CheckExact(key)) ||
        (value != Py_None && !PyBytes_CheckExact(value)))
        Py_RETURN_NONE;
    Py_ssize_t size = RECORD_OVERHEAD_BOUND;
    if (key != Py_None) size += PyBytes_GET_SIZE(key);
    if (value != Py_None) size += PyBytes_GET_SIZE(value);
    if (size > self->max_request_size) Py_RETURN_NONE;
    if (self->buffered_bytes && self->buffered_bytes + size > self->buffer_memory) Py_RETURN_NONE;
    Py_ssize_t count = PyLong_AsSsize_t(PyList_GET_ITEM(entry, 1));
    Py_ssize_t chosen;
    if (partition == Py_None) {
        chosen = -2; /* after the checks below: the round-robin counter must not move */
    } else {
        if (!PyLong_CheckExact(partition)) Py_RETURN_NONE;
        int overflow;
        long long at = PyLong_AsLongLongAndOverflow(partition, &overflow);
        if (overflow || at < 0 || at >= count) Py_RETURN_NONE;
        chosen = (Py_ssize_t)at;
    }
    int64_t timestamp;
    if (timestamp_object == Py_None) {
        timestamp = now_ms();
    } else {
        if (!PyLong_CheckExact(timestamp_object)) Py_RETURN_NONE;
        int overflow;
        timestamp = PyLong_AsLongLongAndOverflow(timestamp_object, &overflow);
        if (overflow) Py_RETURN_NONE;
        if (timestamp == -1 && PyErr_Occurred()) return NULL;
    }
    Py_INCREF(entry); /* Python code runs below: the entry must outlive a re-registration */
    if (chosen == -2) chosen = partition_of(topic, entry, key);
    PyObject *future = chosen < 0 ? NULL : new_future(self);
    if (future == NULL) {
        Py_DECREF(entry);
        return NULL;
    }
    /* The queue keeps the future alive whatever the collector finds, so scanning it is wasted
     * work — and futures live long enough (linger, a round trip) to be promoted to the oldest
     * generation, whose growth sets off full collections over every object of the process: a
     * third of the producer's time at full speed. It holds only its loop until it completes;
     * entry_clear tracks it again when the queue or its run lets go of it (SLOT_UNTRACKED). */
    PyObject_GC_UnTrack(future);
    double enqueued = loop_time(self);
    if ((enqueued == -1.0 && PyErr_Occurred()) ||
        queue_record(self, topic, entry, chosen, key, value, timestamp, size, future,
                     SLOT_UNTRACKED, enqueued) < 0) {
        Py_DECREF(entry);
        Py_DECREF(future);
        return NULL;
    }
    Py_DECREF(entry);
    if (track(self, future) < 0) {
        Py_DECREF(future);
        return NULL;
    }
    return future;
}

static PyObject *accumulator_measure(Accumulator *self, PyObject *items) {
    if (!PyList_Check(items)) {
        PyErr_SetString(PyExc_TypeError, "measure() takes a list");
        return NULL;
    }
    long long total = 0;
    Py_ssize_t largest = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "send_batch() takes (key, value) pairs");
            return NULL;
        }
        PyObject *key = PyTuple_GET_ITEM(item, 0), *value = PyTuple_GET_ITEM(item, 1);
        if ((key != Py_None && !PyBytes_CheckExact(key)) ||
            (value != Py_None && !PyBytes_CheckExact(value))) {
            PyErr_SetString(PyExc_TypeError,
                            "send_batch() takes (key, value) pairs of bytes or None");
            return NULL;
        }
        Py_ssize_t size = RECORD_OVERHEAD_BOUND;
        if (key != Py_None) size += PyBytes_GET_SIZE(key);
        if (value != Py_None) size += PyBytes_GET_SIZE(value);
        total += size;
        if (size > largest) largest = size;
    }
    return Py_BuildValue("(Ln)", total, largest);
}

static PyObject *accumulator_append_group(Accumulator *self, PyObject *const *args,
                                          Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "append_group(topic, partition, items, timestamp_ms, group)");
        return NULL;
    }
    PyObject *topic = args[0], *partition = args[1], *items = args[2], *group = args[4];
    PyObject *entry = topic_entry(self, topic);
    if (entry == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, topic);
        return NULL;
    }
    if (!PyList_Check(items)) {
        PyErr_SetString(PyExc_TypeError, "append_group() takes a list");
        return NULL;
    }
    long long timestamp = PyLong_AsLongLong(args[3]);
    if (timestamp == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t fixed = -1;
    if (partition != Py_None) {
        fixed = PyLong_AsSsize_t(partition);
        if (fixed == -1 && PyErr_Occurred()) return NULL;
        if (fixed < 0 || fixed >= PyList_GET_SIZE(PyList_GET_ITEM(entry, 2))) {
            PyErr_SetString(PyExc_IndexError, "no such partition");
            return NULL;
        }
    }
    double enqueued = loop_time(self); /* one time for the call's records */
    if (enqueued == -1.0 && PyErr_Occurred()) return NULL;
    /* Python code may run below (new_queue, a partitioner, wakeup): hold the entry and the
     * list, and check each item again (a list another thread of Python code could change). */
    Py_INCREF(entry);
    Py_INCREF(items);
    int failed = 0;
    for (Py_ssize_t slot = 0; !failed && slot < PyList_GET_SIZE(items); slot++) {
        PyObject *item = PyList_GET_ITEM(items, slot);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "send_batch() takes (key, value) pairs");
            failed = 1;
            break;
        }
        Py_INCREF(item);
        PyObject *key = PyTuple_GET_ITEM(item, 0), *value = PyTuple_GET_ITEM(item, 1);
        if ((key != Py_None && !PyBytes_CheckExact(key)) ||
            (value != Py_None && !PyBytes_CheckExact(value))) {
            PyErr_SetString(PyExc_TypeError, "send_batch() takes pairs of bytes or None");
            failed = 1;
        } else {
            Py_ssize_t chosen = fixed >= 0 ? fixed : partition_of(topic, entry, key);
            Py_ssize_t size = RECORD_OVERHEAD_BOUND;
            if (key != Py_None) size += PyBytes_GET_SIZE(key);
            if (value != Py_None) size += PyBytes_GET_SIZE(value);
            failed = chosen < 0 || queue_record(self, topic, entry, chosen, key, value, timestamp,
                                                size, group, slot, enqueued) < 0;
        }
        Py_DECREF(item);
    }
    Py_DECREF(items);
    Py_DECREF(entry);
    if (failed) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef accumulator_methods[] = {
    {"start", (PyCFunction)accumulator_start, METH_O, NULL},
    {"register", (PyCFunction)(void (*)(void))accumulator_register, METH_FASTCALL, NULL},
    {"track", (PyCFunction)accumulator_track, METH_O, NULL},
    {"prune", (PyCFunction)accumulator_prune, METH_NOARGS, NULL},
    {"queue_for", (PyCFunction)(void (*)(void))accumulator_queue_for, METH_FASTCALL, NULL},
    {"partition_of", (PyCFunction)(void (*)(void))accumulator_partition_of, METH_FASTCALL, NULL},
    {"append", (PyCFunction)(void (*)(void))accumulator_append, METH_FASTCALL, NULL},
    {"measure", (PyCFunction)accumulator_measure, METH_O, NULL},
    {"append_group", (PyCFunction)(void (*)(void))accumulator_append_group, METH_FASTCALL, NULL},
    {NULL}};

static PyMemberDef accumulator_members[] = {
    {"buffered_bytes", T_LONGLONG, offsetof(Accumulator, buffered_bytes), 0, NULL},
    {"filled", T_BOOL, offsetof(Accumulator, filled), 0, NULL},
    {"sendable", T_BOOL, offsetof(Accumulator, sendable), 0, NULL},
    {"unfinished", T_OBJECT_EX, offsetof(Accumulator, unfinished), 0, NULL},
    {"topics", T_OBJECT, offsetof(Accumulator, topics), READONLY, NULL},
    {"prune_at", T_PYSSIZET, offsetof(Accumulator, prune_at), 0, NULL},
    {"yield_every", T_PYSSIZET, offsetof(Accumulator, yield_every), 0, NULL},
    {"batch_records", T_PYSSIZET, offsetof(Accumulator, batch_records), 0, NULL},
    {"batch_size", T_PYSSIZET, offsetof(Accumulator, batch_size), READONLY, NULL},
    {"buffer_memory", T_PYSSIZET, offsetof(Accumulator, buffer_memory), READONLY, NULL},
    {"max_request_size", T_PYSSIZET, offsetof(Accumulator, max_request_size), READONLY, NULL},
    {NULL}};

static PyGetSetDef accumulator_getset[] = {
    {"direct_futures", (getter)accumulator_direct_futures, NULL,
     "Whether send()'s futures are built without Future's constructor (see new_future).", NULL},
    {NULL}};

static PyTypeObject AccumulatorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "lockgate.client._fastpath.Accumulator",
    .tp_basicsize = sizeof(Accumulator),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "send()'s and send_batch()'s per-record work.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)accumulator_init,
    .tp_traverse = (traverseproc)accumulator_traverse,
    .tp_clear = (inquiry)accumulator_clear,
    .tp_dealloc = (destructor)accumulator_dealloc,
    .tp_methods = accumulator_methods,
    .tp_members = accumulator_members,
    .tp_getset = accumulator_getset,
};

/* ------------------------------------------------------------------------------------------ */

static PyMethodDef module_methods[] = {
    {"murmur2", (PyCFunction)fp_murmur2, METH_O,
     "Kafka's 32-bit murmur2 (Utils.murmur2), as a signed int."},
    {NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "lockgate.client._fastpath",
    "The producer's per-record work, compiled (see lockgate.client.fastpath).", -1,
    module_methods};

PyMODINIT_FUNC PyInit__fastpath(void) {
    if (PyType_Ready(&RecordGroupType) < 0 || PyType_Ready(&RecordRunType) < 0 ||
        PyType_Ready(&RecordQueueType) < 0 || PyType_Ready(&AccumulatorType) < 0)
        return NULL;
    str_done = PyUnicode_InternFromString("done");
    str_set_result = PyUnicode_InternFromString("set_result");
    str_metadata = PyUnicode_InternFromString("metadata");
    str_future_type = PyUnicode_InternFromString("Future");
    empty_tuple = PyTuple_New(0);
    if (!str_done || !str_set_result || !str_metadata || !str_future_type || !empty_tuple)
        return NULL;
    PyObject *asyncio = PyImport_ImportModule("asyncio");
    if (asyncio == NULL) return NULL;
    future_type = PyObject_GetAttr(asyncio, str_future_type);
    if (future_type != NULL) {
        future_done_method = PyObject_GetAttr(future_type, str_done);
        future_set_result_method = PyObject_GetAttr(future_type, str_set_result);
        if (future_done_method == NULL || future_set_result_method == NULL) {
            Py_DECREF(asyncio);
            return NULL;
        }
    }
    PyObject *base_loop = PyObject_GetAttrString(asyncio, "BaseEventLoop");
    Py_DECREF(asyncio);
    if (future_type == NULL || base_loop == NULL) return NULL;
    base_loop_time = PyObject_GetAttrString(base_loop, "time");
    Py_DECREF(base_loop);
    if (base_loop_time == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddStringConstant(m, "IMPLEMENTATION", "compiled") < 0 ||
        PyModule_AddObjectRef(m, "RecordGroup", (PyObject *)&RecordGroupType) < 0 ||
        PyModule_AddObjectRef(m, "RecordRun", (PyObject *)&RecordRunType) < 0 ||
        PyModule_AddObjectRef(m, "RecordQueue", (PyObject *)&RecordQueueType) < 0 ||
        PyModule_AddObjectRef(m, "Accumulator", (PyObject *)&AccumulatorType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
