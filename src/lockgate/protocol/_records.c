/* protocol/_records.c — decoding the records of a v2 batch compiled: the twin of the
 * pure-Python lockgate.protocol._purerecords, with the same function and results
 * (protocol/fastpath.py chooses one; tests/unit/protocol/test_records_fastpath.py checks that
 * both agree, on damaged input too).
 *
 * What it owns: the walk over an (uncompressed) records section — per record its length, the
 * attributes byte, the timestamp and offset deltas, the key and the value (headers are
 * skipped) — and what counts as damage there. The batch header and decompression are the
 * caller's (protocol/records.py).
 *
 * Why C: a coordinator's load walks every record of its partitions (a snapshot of a million
 * live offsets is a million records), and the walk in Python costs a few microseconds per
 * record in varint loops alone.
 *
 * Damage (a ValueError): a varint running past its record or longer than 10 bytes, a record
 * running past the section, a key or value running past its record, an offset or timestamp
 * outside int64, a section outside the buffer. Holds the GIL throughout. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* A zigzag varint (at most 10 bytes, as Kafka's varlong) at *pos, below limit; -1 with
 * ValueError set when damaged. */
static int read_varint(const unsigned char *data, Py_ssize_t *pos, Py_ssize_t limit,
                       int64_t *out) {
    uint64_t raw = 0;
    int shift = 0;
    Py_ssize_t at = *pos;
    while (at < limit) {
        unsigned char byte = data[at++];
        raw |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *pos = at;
            *out = (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
            return 0;
        }
        shift += 7;
        if (shift == 70) {
            PyErr_Format(PyExc_ValueError, "a varint longer than 10 bytes at %zd", at - 10);
            return -1;
        }
    }
    PyErr_Format(PyExc_ValueError, "a varint cut at %zd", at);
    return -1;
}

/* A key or value (None when its length is negative), or NULL with ValueError set. */
static PyObject *read_field(const unsigned char *data, Py_ssize_t *pos, Py_ssize_t limit) {
    int64_t size;
    if (read_varint(data, pos, limit, &size) < 0)
        return NULL;
    if (size < 0)
        Py_RETURN_NONE;
    if (size > limit - *pos) {
        PyErr_Format(PyExc_ValueError, "a field of %lld bytes at %zd runs past its record",
                     (long long)size, *pos);
        return NULL;
    }
    PyObject *field = PyBytes_FromStringAndSize((const char *)data + *pos, (Py_ssize_t)size);
    *pos += (Py_ssize_t)size;
    return field;
}

static PyObject *decode_records(PyObject *self, PyObject *args) {
    Py_buffer buffer;
    Py_ssize_t start, end, count;
    long long base_offset, base_timestamp;
    PyObject *append_time_object;
    if (!PyArg_ParseTuple(args, "y*nnnLLO:decode_records", &buffer, &start, &end, &count,
                          &base_offset, &base_timestamp, &append_time_object))
        return NULL;
    PyObject *records = NULL;
    int fixed_time = append_time_object != Py_None;
    long long append_time = 0;
    if (fixed_time) {
        append_time = PyLong_AsLongLong(append_time_object);
        if (append_time == -1 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
                PyErr_Clear();
                PyErr_SetString(PyExc_ValueError, "an offset or timestamp outside int64");
            }
            goto done;
        }
    }
    if (!(0 <= start && start <= end && end <= buffer.len)) {
        PyErr_Format(PyExc_ValueError, "records section %zd..%zd outside a buffer of %zd", start,
                     end, buffer.len);
        goto done;
    }
    const unsigned char *data = (const unsigned char *)buffer.buf;
    records = PyList_New(0);
    if (records == NULL)
        goto done;
    Py_ssize_t pos = start;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, timestamp_delta, offset_delta;
        if (read_varint(data, &pos, end, &length) < 0)
            goto fail;
        if (length < 0 || length > end - pos) {
            PyErr_Format(PyExc_ValueError, "a record of %lld bytes at %zd runs past the batch",
                         (long long)length, pos);
            goto fail;
        }
        Py_ssize_t record_end = pos + (Py_ssize_t)length;
        pos += 1; /* attributes (unused in v2) */
        if (read_varint(data, &pos, record_end, &timestamp_delta) < 0 ||
            read_varint(data, &pos, record_end, &offset_delta) < 0)
            goto fail;
        PyObject *key = read_field(data, &pos, record_end);
        if (key == NULL)
            goto fail;
        PyObject *value = read_field(data, &pos, record_end);
        if (value == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        long long offset, timestamp = append_time;
        if (__builtin_add_overflow(base_offset, (long long)offset_delta, &offset) ||
            (!fixed_time &&
             __builtin_add_overflow(base_timestamp, (long long)timestamp_delta, &timestamp))) {
            Py_DECREF(key);
            Py_DECREF(value);
            PyErr_Format(PyExc_ValueError, "an offset or timestamp outside int64 at %zd", pos);
            goto fail;
        }
        PyObject *record = PyTuple_New(4);
        PyObject *offset_object = PyLong_FromLongLong(offset);
        PyObject *timestamp_object = PyLong_FromLongLong(timestamp);
        if (record == NULL || offset_object == NULL || timestamp_object == NULL) {
            Py_XDECREF(record);
            Py_XDECREF(offset_object);
            Py_XDECREF(timestamp_object);
            Py_DECREF(key);
            Py_DECREF(value);
            goto fail;
        }
        PyTuple_SET_ITEM(record, 0, offset_object);
        PyTuple_SET_ITEM(record, 1, timestamp_object);
        PyTuple_SET_ITEM(record, 2, key);
        PyTuple_SET_ITEM(record, 3, value);
        int appended = PyList_Append(records, record);
        Py_DECREF(record);
        if (appended < 0)
            goto fail;
        pos = record_end;
    }
    goto done;
fail:
    Py_CLEAR(records);
done:
    PyBuffer_Release(&buffer);
    return records;
}

/* unpack_fields(data, layout): the fields of a Kafka struct of fixed layout ('h', 'i', 'q':
 * big-endian int16, int32, int64; 's': a nullable string, int16 length then UTF-8) from the
 * start of data, as a tuple (a string of length -1 is None); '$' is the number of bytes read
 * so far (what follows them is not read). */
static PyObject *unpack_fields(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "unpack_fields(data, layout) takes 2 arguments");
        return NULL;
    }
    Py_ssize_t layout_size;
    const char *layout = PyUnicode_AsUTF8AndSize(args[1], &layout_size);
    if (layout == NULL)
        return NULL;
    Py_buffer buffer;
    if (PyObject_GetBuffer(args[0], &buffer, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *data = (const unsigned char *)buffer.buf;
    Py_ssize_t end = buffer.len, pos = 0;
    PyObject *fields = PyTuple_New(layout_size);
    if (fields == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < layout_size; i++) {
        if (layout[i] == '$') { /* the bytes read so far */
            PyObject *read = PyLong_FromSsize_t(pos);
            if (read == NULL)
                goto fail;
            PyTuple_SET_ITEM(fields, i, read);
            continue;
        }
        int width;
        switch (layout[i]) {
        case 'h':
        case 's':
            width = 2;
            break;
        case 'i':
            width = 4;
            break;
        case 'q':
            width = 8;
            break;
        default:
            PyErr_Format(PyExc_ValueError, "unknown field code %c", layout[i]);
            goto fail;
        }
        if (width > end - pos) {
            PyErr_Format(PyExc_ValueError, "record cut short: %d bytes wanted at %zd", width, pos);
            goto fail;
        }
        uint64_t raw = 0;
        for (int b = 0; b < width; b++)
            raw = (raw << 8) | data[pos + b];
        pos += width;
        int64_t number = width == 2   ? (int64_t)(int16_t)raw
                         : width == 4 ? (int64_t)(int32_t)raw
                                      : (int64_t)raw;
        PyObject *field;
        if (layout[i] != 's') {
            field = PyLong_FromLongLong((long long)number);
        } else if (number < 0) {
            field = Py_NewRef(Py_None);
        } else if (number > end - pos) {
            PyErr_Format(PyExc_ValueError, "record cut short: %lld bytes wanted at %zd",
                         (long long)number, pos);
            goto fail;
        } else {
            field = PyUnicode_DecodeUTF8((const char *)data + pos, (Py_ssize_t)number, NULL);
            pos += (Py_ssize_t)number;
        }
        if (field == NULL)
            goto fail;
        PyTuple_SET_ITEM(fields, i, field);
    }
    goto done;
fail:
    Py_CLEAR(fields);
done:
    PyBuffer_Release(&buffer);
    return fields;
}

static PyMethodDef methods[] = {
    {"unpack_fields", (PyCFunction)(void (*)(void))unpack_fields, METH_FASTCALL,
     "unpack_fields(data, layout)\n--\n\n"
     "The fields of a Kafka struct of fixed layout ('h', 'i', 'q', 's', '$') at the start of data."},
    {"decode_records", decode_records, METH_VARARGS,
     "decode_records(data, start, end, count, base_offset, base_timestamp, append_time)\n--\n\n"
     "(offset, timestamp, key, value) of the first `count` records in data[start:end]."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "lockgate.protocol._records",
    "Decoding the records of a v2 batch (the twin of lockgate.protocol._purerecords).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__records(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddStringConstant(m, "IMPLEMENTATION", "compiled") < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
