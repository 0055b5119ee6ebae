/* protocol/_records.c — decoding the records of a v2 batch compiled: the twin of the
 * pure-Python lockgate.protocol._purerecords, with the same function and results
 * (protocol/fastpath.py chooses one; tests/unit/protocol/test_records_fastpath.py checks that
 * both agree, on damaged input too).
 *
 * What it owns: the walk over an (uncompressed) records section — per record its length, the
 * attributes byte, the timestamp and offset deltas, the key and the value (headers are
 * skipped) — and what counts as damage there. The batch header and decompression are the
 * caller's (protocol/records.py). encode_records: the records section build_batch writes.
 * unpack_fields: the fields of a record of fixed layout. And
 * the per-batch steps of a coordinator's load: apply_offset_commits (each offset commit checked
 * and moved into its group's records) and put_records (a snapshot image's latest values).
 *
 * Why C: a coordinator's load walks every record of its partitions (a snapshot of a million
 * live offsets is a million records), and the walk in Python costs a few microseconds per
 * record in varint loops alone; checking an offset commit and putting it in its group's dict
 * another microsecond, against about a tenth of that here.
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
    PyObject *records = NULL, *timestamp_object = NULL; /* the last record's timestamp */
    long long shared_timestamp = 0;                       /* its value */
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
        if (timestamp_object == NULL || timestamp != shared_timestamp) {
            /* (records of a batch mostly share their timestamp: one object for a run of them) */
            Py_XSETREF(timestamp_object, PyLong_FromLongLong(timestamp));
            shared_timestamp = timestamp;
        }
        PyObject *record = PyTuple_New(4);
        PyObject *offset_object = PyLong_FromLongLong(offset);
        if (record == NULL || offset_object == NULL || timestamp_object == NULL) {
            Py_XDECREF(record);
            Py_XDECREF(offset_object);
            Py_DECREF(key);
            Py_DECREF(value);
            goto fail;
        }
        PyTuple_SET_ITEM(record, 0, offset_object);
        PyTuple_SET_ITEM(record, 1, Py_NewRef(timestamp_object));
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
    Py_XDECREF(timestamp_object);
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

/* A Kafka string at *pos below end (int16 length, then its bytes): 1 with *text and *size
 * set (*size -1: null, as any negative length), 0 when cut short. */
static int read_string(const unsigned char *data, Py_ssize_t end, Py_ssize_t *pos,
                       const char **text, Py_ssize_t *size) {
    if (end - *pos < 2)
        return 0;
    Py_ssize_t length = (Py_ssize_t)(int16_t)((data[*pos] << 8) | data[*pos + 1]);
    *pos += 2;
    if (length < 0) {
        *text = NULL;
        *size = -1;
        return 1;
    }
    if (length > end - *pos)
        return 0;
    *text = (const char *)data + *pos;
    *size = length;
    *pos += length;
    return 1;
}

/* 1 when text[0:size] is UTF-8 as bytes.decode() has it (ASCII checked here, the rest by
 * Python's decoder), 0 when not, -1 with an exception set on another failure. */
static int sound_utf8(const char *text, Py_ssize_t size) {
    for (Py_ssize_t i = 0; i < size; i++) {
        if (text[i] & 0x80) {
            PyObject *decoded = PyUnicode_DecodeUTF8(text, size, NULL);
            if (decoded != NULL) {
                Py_DECREF(decoded);
                return 1;
            }
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                return -1;
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

/* An offset commit value (None: a tombstone) that decodes: version (int16), offset (int64),
 * from version 3 a leader epoch (int32), metadata (a nullable UTF-8 string), commit timestamp
 * (int64); what follows is not read. 1 sound, 0 damaged, -1 with an exception set. */
static int sound_offset_value(PyObject *value) {
    if (value == Py_None)
        return 1;
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(value);
    Py_ssize_t end = PyBytes_GET_SIZE(value);
    if (end < 2)
        return 0;
    int16_t version = (int16_t)((data[0] << 8) | data[1]);
    Py_ssize_t pos = version >= 3 ? 2 + 8 + 4 : 2 + 8;
    const char *metadata;
    Py_ssize_t size;
    if (pos > end || !read_string(data, end, &pos, &metadata, &size) || end - pos < 8)
        return 0;
    return size > 0 ? sound_utf8(metadata, size) : 1;
}

/* The key and value of a decoded record (borrowed from it), or -1 with TypeError set. */
static int record_fields(PyObject *record, PyObject **key, PyObject **value) {
    if (!PyTuple_Check(record) || PyTuple_GET_SIZE(record) != 4) {
        PyErr_SetString(PyExc_TypeError, "a record is an (offset, timestamp, key, value)");
        return -1;
    }
    *key = PyTuple_GET_ITEM(record, 2);
    *value = PyTuple_GET_ITEM(record, 3);
    return 0;
}

/* One record of apply_offset_commits: 1 applied (or keyless), 0 not applied (the caller's),
 * -1 with an exception set. */
static int apply_offset_commit(PyObject *record, PyObject *groups) {
    PyObject *key, *value;
    if (record_fields(record, &key, &value) < 0)
        return -1;
    if (key == Py_None)
        return 1;
    if (!PyBytes_CheckExact(key) || (value != Py_None && !PyBytes_CheckExact(value)))
        return 0;
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(key);
    Py_ssize_t end = PyBytes_GET_SIZE(key), pos = 2;
    const char *group, *topic;
    Py_ssize_t group_size, topic_size;
    /* lockgate's own form: version 1, two names (neither null), the partition, nothing after */
    if (end < 2 || data[0] != 0 || data[1] != 1 ||
        !read_string(data, end, &pos, &group, &group_size) || group_size < 0 ||
        !read_string(data, end, &pos, &topic, &topic_size) || topic_size < 0 || end - pos != 4)
        return 0;
    int sound = sound_utf8(topic, topic_size);
    if (sound > 0)
        sound = sound_offset_value(value);
    if (sound <= 0)
        return sound;
    PyObject *group_id = PyUnicode_DecodeUTF8(group, group_size, NULL);
    if (group_id == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    PyObject *held = PyDict_GetItemWithError(groups, group_id);
    Py_DECREF(group_id);
    if (held == NULL)
        return PyErr_Occurred() ? -1 : 0; /* a group the caller makes first */
    if (!PyDict_CheckExact(held))
        return 0;
    if (value != Py_None)
        return PyDict_SetItem(held, key, value) < 0 ? -1 : 1;
    if (PyDict_DelItem(held, key) == 0)
        return 1;
    if (!PyErr_ExceptionMatches(PyExc_KeyError))
        return -1;
    PyErr_Clear();
    return 1;
}

/* apply_offset_commits(records, start, groups): see _purerecords.apply_offset_commits. */
static PyObject *apply_offset_commits(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError,
                        "apply_offset_commits(records, start, groups) takes 3 arguments");
        return NULL;
    }
    PyObject *records = args[0], *groups = args[2];
    if (!PyList_Check(records) || !PyDict_Check(groups)) {
        PyErr_SetString(PyExc_TypeError, "apply_offset_commits takes a list and a dict");
        return NULL;
    }
    Py_ssize_t index = PyLong_AsSsize_t(args[1]);
    if (index == -1 && PyErr_Occurred())
        return NULL;
    if (index < 0) {
        PyErr_SetString(PyExc_ValueError, "a negative start");
        return NULL;
    }
    for (; index < PyList_GET_SIZE(records); index++) {
        PyObject *record = PyList_GET_ITEM(records, index);
        Py_INCREF(record); /* (held while its key and value are used) */
        int applied = apply_offset_commit(record, groups);
        Py_DECREF(record);
        if (applied < 0)
            return NULL;
        if (applied == 0)
            break;
    }
    return PyLong_FromSsize_t(index);
}

/* put_records(records, into): see _purerecords.put_records. */
static PyObject *put_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "put_records(records, into) takes 2 arguments");
        return NULL;
    }
    PyObject *records = args[0], *into = args[1];
    if (!PyList_Check(records) || !PyDict_Check(into)) {
        PyErr_SetString(PyExc_TypeError, "put_records takes a list and a dict");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(records); i++) {
        PyObject *record = PyList_GET_ITEM(records, i), *key, *value;
        Py_INCREF(record); /* (a key's hash or equality may run Python code) */
        int failed = record_fields(record, &key, &value) < 0;
        if (failed || key == Py_None) {
        } else if (value != Py_None) {
            failed = PyDict_SetItem(into, key, value) < 0;
        } else if (PyDict_DelItem(into, key) < 0) {
            failed = !PyErr_ExceptionMatches(PyExc_KeyError);
            if (!failed)
                PyErr_Clear();
        }
        Py_DECREF(record);
        if (failed)
            return NULL;
    }
    Py_RETURN_NONE;
}

/* encode_records: the records section of a batch of (key, value) pairs, each record with
 * attributes 0, timestamp delta 0, offset delta its index and no headers (what build_batch
 * writes for markers, coordinator records and snapshot images: a snapshot of a million keys is
 * a million records). A key or value is None or an object with the buffer protocol. */
static unsigned char *put_varint(unsigned char *out, int64_t value) {
    uint64_t zigzag = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (zigzag >= 0x80) {
        *out++ = (unsigned char)((zigzag & 0x7F) | 0x80);
        zigzag >>= 7;
    }
    *out++ = (unsigned char)zigzag;
    return out;
}

static Py_ssize_t varint_size(int64_t value) {
    uint64_t zigzag = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    Py_ssize_t size = 1;
    while (zigzag >= 0x80) {
        zigzag >>= 7;
        size++;
    }
    return size;
}

static Py_ssize_t field_size(Py_buffer *field) {
    return field->obj == NULL ? 1 : varint_size(field->len) + field->len;
}

static unsigned char *put_field(unsigned char *out, Py_buffer *field) {
    if (field->obj == NULL)
        return put_varint(out, -1);
    out = put_varint(out, field->len);
    memcpy(out, field->buf, (size_t)field->len);
    return out + field->len;
}

static PyObject *encode_records(PyObject *self, PyObject *records) {
    PyObject *seq = PySequence_Fast(records, "encode_records takes a sequence of (key, value)");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq), total = 0, held = 0;
    Py_buffer *fields = PyMem_Calloc((size_t)(count > 0 ? count : 1) * 2, sizeof(Py_buffer));
    PyObject *result = NULL;
    if (fields == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "encode_records takes (key, value) tuples");
            goto done;
        }
        for (int f = 0; f < 2; f++) {
            PyObject *item = PyTuple_GET_ITEM(pair, f);
            held++;
            if (item != Py_None && PyObject_GetBuffer(item, &fields[held - 1], PyBUF_SIMPLE) < 0)
                goto done;
        }
        Py_ssize_t body = 3 + varint_size(i) + field_size(&fields[2 * i])
                          + field_size(&fields[2 * i + 1]);
        total += varint_size(body) + body;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL)
        goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t body = 3 + varint_size(i) + field_size(&fields[2 * i])
                          + field_size(&fields[2 * i + 1]);
        out = put_varint(out, body);
        *out++ = 0; /* attributes */
        *out++ = 0; /* timestamp delta */
        out = put_varint(out, i);
        out = put_field(out, &fields[2 * i]);
        out = put_field(out, &fields[2 * i + 1]);
        *out++ = 0; /* no headers */
    }
done:
    for (Py_ssize_t i = 0; fields != NULL && i < held; i++)
        if (fields[i].obj != NULL) /* (None, or a buffer not taken, left it NULL) */
            PyBuffer_Release(&fields[i]);
    PyMem_Free(fields);
    Py_DECREF(seq);
    return result;
}

static PyMethodDef methods[] = {
    {"unpack_fields", (PyCFunction)(void (*)(void))unpack_fields, METH_FASTCALL,
     "unpack_fields(data, layout)\n--\n\n"
     "The fields of a Kafka struct of fixed layout ('h', 'i', 'q', 's', '$') at the start of data."},
    {"decode_records", decode_records, METH_VARARGS,
     "decode_records(data, start, end, count, base_offset, base_timestamp, append_time)\n--\n\n"
     "(offset, timestamp, key, value) of the first `count` records in data[start:end]."},
    {"apply_offset_commits", (PyCFunction)(void (*)(void))apply_offset_commits, METH_FASTCALL,
     "apply_offset_commits(records, start, groups)\n--\n\n"
     "Applies the run of sound offset commits from records[start] to their groups' records; "
     "the index of the first record not applied."},
    {"encode_records", encode_records, METH_O,
     "encode_records(records)\n--\n\n"
     "The records section of a batch of (key, value) pairs: offset deltas 0, 1, ..., "
     "timestamp deltas 0, no headers."},
    {"put_records", (PyCFunction)(void (*)(void))put_records, METH_FASTCALL,
     "put_records(records, into)\n--\n\n"
     "Each keyed record's value under its key in `into` (a null value removes the key)."},
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
